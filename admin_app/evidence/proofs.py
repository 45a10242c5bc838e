"""What the admin API answers: heads, keys, leaves and proofs as JSON (hashes in standard
base64). An inclusion or consistency answer carries the signed head(s) of its tree size(s) when
there are any, so it is itself the bundle `bailing-admin evidence verify-proof` checks offline."""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ..errors import ApiError, invalid_field
from . import heads, log
from .heads import b64


def _head_or_404(head: dict[str, Any] | None, what: str) -> dict[str, Any]:
    if head is None:
        raise ApiError("evidence_not_found", what)
    return head


def latest_head(db: Session) -> dict[str, Any]:
    return _head_or_404(heads.latest_head(db), "No tree head has been signed yet.")


def head_at(db: Session, tree_size: int) -> dict[str, Any]:
    return _head_or_404(heads.head_at(db, tree_size), f"No signed tree head of size {tree_size}.")


def leaf(db: Session, index: int) -> dict[str, Any]:
    found = log.leaf(db, index)
    if found is None:
        raise ApiError("evidence_not_found", f"No leaf {index} in the log.")
    return {**found, "leaf_hash": b64(found["leaf_hash"])}


def _size_within(db: Session, tree_size: int, name: str) -> None:
    current = log.size(db)
    if tree_size > current:
        raise ApiError("evidence_not_found", f"{name}: the log holds {current} leaves, not {tree_size}.")


def inclusion(db: Session, index: int, tree_size: int | None) -> dict[str, Any]:
    """The proof of leaf `index` in the tree of `tree_size` leaves (the latest head's by default)."""
    if tree_size is None:
        tree_size = latest_head(db)["tree_size"]
    if index >= tree_size:
        raise invalid_field("leaf", f"leaf {index} is not in a tree of {tree_size} leaves")
    _size_within(db, tree_size, "tree_size")
    found = log.leaf(db, index)
    if found is None:
        raise ApiError("evidence_not_found", f"No leaf {index} in the log.")
    return {"leaf_index": index, "tree_size": tree_size, "leaf_hash": b64(found["leaf_hash"]),
            "root_hash": b64(log.root_at(db, tree_size)),
            "proof": [b64(p) for p in log.inclusion(db, index, tree_size)],
            "head": heads.head_at(db, tree_size)}


def consistency(db: Session, first: int, second: int) -> dict[str, Any]:
    if first > second:
        raise invalid_field("first", f"a tree of {first} leaves cannot precede one of {second}")
    _size_within(db, second, "second")
    return {"first": first, "second": second,
            "first_root_hash": b64(log.root_at(db, first)), "second_root_hash": b64(log.root_at(db, second)),
            "proof": [b64(p) for p in log.consistency(db, first, second)],
            "first_head": heads.head_at(db, first), "second_head": heads.head_at(db, second)}


def keys(db: Session) -> list[dict[str, Any]]:
    return heads.keys(db)
