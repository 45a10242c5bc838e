"""Verifying the log: a proof bundle offline with only the public key(s), and every stored leaf
against the latest signed head (`bailing-admin evidence check`), naming the first bad leaf.

The check trusts the head (its signature verifies) and nothing else in the database: it
recomputes the root from the leaf rows; on a mismatch it descends from the signed root through
the stored subtree hashes, each pair accepted only when it hashes to its already-accepted
parent, into the first half whose leaves no longer hash to it, down to one leaf."""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from . import heads, log, merkle
from .heads import HeadError, unb64
from .merkle import ListSubtrees, ProofError


class BundleError(ValueError):
    """The bundle does not verify; the message names what failed."""


def _hashes(values: object, what: str) -> list[bytes]:
    if not isinstance(values, list):
        raise BundleError(f"{what} is not a list")
    return [unb64(v, f"{what}[{i}]", merkle.HASH_SIZE) for i, v in enumerate(values)]


def _keys_by_id(public_keys: list[bytes]) -> dict[str, bytes]:
    return {heads.key_id_of(k): k for k in public_keys}


def verify_bundle(bundle: object, public_keys: list[bytes]) -> str:
    """Check an inclusion bundle {head, leaf_index, tree_size, leaf_hash, proof} or a
    consistency bundle {first_head, second_head, first, second, proof}, as the admin API answers
    them; returns what was shown, raises BundleError naming what failed."""
    keys = _keys_by_id(public_keys)
    try:
        if not isinstance(bundle, dict):
            raise BundleError("the bundle is not a JSON object")
        if "leaf_hash" in bundle:
            head = bundle.get("head")
            if head is None:
                raise BundleError("the bundle carries no signed head")
            size, root = heads.verify_head(head, keys)
            index = bundle.get("leaf_index")
            if bundle.get("tree_size") != size or not isinstance(index, int) or isinstance(index, bool):
                raise BundleError("the bundle's tree_size or leaf_index does not match its head")
            leaf = unb64(bundle.get("leaf_hash"), "leaf_hash", merkle.HASH_SIZE)
            merkle.verify_inclusion(index, size, leaf, _hashes(bundle.get("proof"), "proof"), root)
            return f"leaf {index} is in the signed tree of size {size}"
        if "first_head" in bundle:
            if bundle.get("first_head") is None or bundle.get("second_head") is None:
                raise BundleError("the bundle lacks a signed head for each size")
            first, first_root = heads.verify_head(bundle["first_head"], keys)
            second, second_root = heads.verify_head(bundle["second_head"], keys)
            if (bundle.get("first"), bundle.get("second")) != (first, second):
                raise BundleError("the bundle's sizes do not match its heads")
            merkle.verify_consistency(first, second, first_root, second_root,
                                      _hashes(bundle.get("proof"), "proof"))
            return f"the signed tree of size {first} is a prefix of the signed tree of size {second}"
        raise BundleError("the bundle is neither an inclusion nor a consistency proof")
    except (HeadError, ProofError) as err:
        raise BundleError(str(err)) from None


def _descend(leaves: ListSubtrees, nodes: dict[tuple[int, int], bytes], lo: int, hi: int,
             trusted: bytes) -> tuple[int, str]:
    """The first leaf in [lo, hi) whose row differs from what the trusted hash commits to."""

    def stored(level: int, index: int) -> bytes:
        return nodes[(level, index)]

    while hi - lo > 1:
        k = merkle.split(hi - lo)
        try:
            left = merkle.range_hash(stored, lo, lo + k)
            right = merkle.range_hash(stored, lo + k, hi)
        except KeyError:
            return lo, f"a leaf in {lo}..{hi - 1} does not verify (the stored subtree hashes are incomplete)"
        if merkle.node_hash(left, right) != trusted:
            return lo, f"a leaf in {lo}..{hi - 1} does not verify (the stored subtree hashes were changed too)"
        if merkle.range_hash(leaves, lo, lo + k) != left:
            hi, trusted = lo + k, left
        else:
            lo, trusted = lo + k, right
    return lo, f"leaf {lo}'s hash is not the one the signed head commits to"


def check(db: Session) -> dict[str, Any]:
    """Every stored leaf against the latest head: {"ok", "tree_size", "leaves", "first_bad_leaf",
    "problem"}."""
    rows = log.all_leaf_hashes(db)
    report: dict[str, Any] = {"ok": True, "tree_size": None, "leaves": len(rows), "first_bad_leaf": None,
                              "problem": None}

    def bad(index: int | None, problem: str) -> dict[str, Any]:
        report.update(ok=False, first_bad_leaf=index, problem=problem)
        return report

    head = heads.latest_head(db)
    for position, (index, _) in enumerate(rows):
        if index != position:
            return bad(position, f"leaf {position} is missing (the next row is leaf {index})")
    if head is None:
        report["problem"] = "no signed head yet: only the leaves' order was checked"
        return report
    try:
        size, root = heads.verify_head(head, heads.stored_public_keys(db))
    except HeadError as err:
        return bad(None, f"the latest head does not verify: {err}")
    report["tree_size"] = size
    if len(rows) < size:
        return bad(len(rows), f"leaf {len(rows)} is missing: the log holds {len(rows)} leaves, "
                              f"the signed head {size}")
    leaves = ListSubtrees([h for _, h in rows[:size]])
    if leaves.root(size) == root:
        return report
    if size == 0:
        return bad(None, "the signed head of the empty tree has a wrong root")
    index, problem = _descend(leaves, log.all_nodes(db), 0, size, root)
    return bad(index, problem)
