"""The evidence log's storage: appending a leaf in the caller's transaction, and reading proofs
from the subtree hashes kept as leaves arrive.

Contiguity: a leaf's index is its position in the Merkle tree, so a gap or a duplicate would
break every proof after it. Appends therefore take a transaction-scoped advisory lock and the
index max(idx) + 1, in the caller's transaction: the lock is held until that transaction ends,
so the next appender (READ COMMITTED: each statement sees what committed before it) reads the
committed maximum, and a rolled-back append releases its index to the next one. A sequence would
be faster but leaves a gap on every rollback; a one-row counter serializes exactly as the lock
does but rewrites one hot row per append. The cost is that appends queue behind each other's
transactions: producers append as late in their transaction as they can, the hot ones in their
COMMIT's round trip (`append_at_commit`). The append itself is one SQL function
(bz_evidence_append, sql/084), so it can be sent unread in that round trip."""
from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT, BYTEA, SMALLINT, TEXT
from sqlalchemy.orm import Session

from ..canonical import canonical_json, iso
from ..db import at_commit
from . import merkle

# pg_advisory_xact_lock keys of this log ("evid" and "evih" as 32-bit numbers).
APPEND_LOCK = 0x65766964
HEAD_LOCK = 0x65766968
KIND_MAX = 64
REF_MAX = 256

# The databases (by their URL) known to have the log: a migration is never undone, so "yes" is
# kept; "not yet" is asked again, since the schema may be upgraded under a running process.
_installed: set[str] = set()


def installed(db: Session) -> bool:
    """Whether migrations 082 and 084 are applied: until they are, producers append nothing
    rather than fail."""
    where = str(db.get_bind().engine.url)
    if where not in _installed and db.scalar(text(
            "SELECT to_regprocedure('bz_evidence_append(text[], text[], bytea[])') IS NOT NULL")):
        _installed.add(where)
    return where in _installed


def leaf_data(kind: str, record: dict[str, Any]) -> bytes:
    """The bytes a producer's leaf commits to: the canonical JSON (sorted keys, no spaces, UTF-8)
    of {"kind": kind, **record}, so anyone holding the record can recompute its leaf hash."""
    return canonical_json({"kind": kind, **record}).encode("utf-8")


def append_leaf(db: Session, kind: str, ref: str, leaf_data: bytes) -> int | None:
    """Append SHA-256(0x00 || leaf_data) as the next leaf, in the caller's transaction (it
    commits or rolls back with the row it covers), with the complete subtrees it finishes.
    Returns the leaf's index; None when the log is not installed."""
    return append_leaves(db, [(kind, ref, leaf_data)])


def append_leaves(db: Session, leaves: list[tuple[str, str, bytes]]) -> int | None:
    """Append (kind, ref, leaf data) as consecutive leaves now, in the caller's transaction;
    the first one's index (None when there are none or the log is not installed)."""
    args = _arguments(leaves)
    if args is None or not installed(db):
        return None
    return db.scalar(text("SELECT bz_evidence_append(:kinds, :refs, :hashes)").bindparams(*_ARRAYS), args)


def append_at_commit(db: Session, leaves: list[tuple[str, str, bytes]]) -> None:
    """The same, sent in the round trip of the transaction's COMMIT (db.at_commit), so the log's
    lock is held only for that round trip: a producer on a hot path appends this way."""
    args = _arguments(leaves)
    if args is not None and installed(db):
        # Binary parameters (%b): psycopg writes the text form of a text[] or bytea[] element by
        # element in Python, ~0.5 ms of a 50-event append; the binary form is written in C.
        at_commit(db, ("SELECT bz_evidence_append(%(kinds)b, %(refs)b, %(hashes)b)", args))


_ARRAYS = (bindparam("kinds", type_=ARRAY(TEXT)), bindparam("refs", type_=ARRAY(TEXT)),
           bindparam("hashes", type_=ARRAY(BYTEA)))


def _arguments(leaves: list[tuple[str, str, bytes]]) -> dict[str, list] | None:
    for kind, ref, _ in leaves:
        if not kind or len(kind) > KIND_MAX or len(ref) > REF_MAX:
            raise ValueError(f"kind must be 1-{KIND_MAX} characters and ref at most {REF_MAX}")
    if not leaves:
        return None
    return {"kinds": [k for k, _, _ in leaves], "refs": [r for _, r, _ in leaves],
            "hashes": [merkle.leaf_hash(bytes(d)) for _, _, d in leaves]}


def _nodes(db: Session, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    if not keys:
        return {}
    rows = db.execute(text("SELECT n.level, n.idx, n.hash FROM bz_evidence_nodes n "
                           "JOIN unnest(:levels, :idxs) AS k(level, idx) ON n.level = k.level AND n.idx = k.idx")
                      .bindparams(bindparam("levels", type_=ARRAY(SMALLINT)), bindparam("idxs", type_=ARRAY(BIGINT))),
                      {"levels": [k[0] for k in keys], "idxs": [k[1] for k in keys]}).all()
    return {(level, idx): bytes(h) for level, idx, h in rows}


def stored(db: Session, make):
    """Run `make(subtrees)` (a merkle function of the tree) over the stored nodes, fetched in one
    query. A missing node is the storage damaged: LookupError."""
    nodes = _nodes(db, merkle.needed_subtrees(make))

    def subtree(level: int, index: int) -> bytes:
        try:
            return nodes[(level, index)]
        except KeyError:
            raise LookupError(f"the stored subtree ({level}, {index}) is missing") from None

    return make(subtree)


def size(db: Session) -> int:
    """Leaves committed so far (the contiguous indexes 0 .. size - 1)."""
    return int(db.scalar(text("SELECT coalesce(max(idx) + 1, 0) FROM bz_evidence_leaves")))


def root_at(db: Session, tree_size: int) -> bytes:
    return stored(db, lambda s: merkle.range_hash(s, 0, tree_size))


def leaf(db: Session, index: int) -> dict[str, Any] | None:
    row = db.execute(text("SELECT idx, kind, ref, leaf_hash, created_at FROM bz_evidence_leaves WHERE idx = :i"),
                     {"i": index}).first()
    if row is None:
        return None
    return {"index": row.idx, "kind": row.kind, "ref": row.ref, "leaf_hash": bytes(row.leaf_hash),
            "created_at": iso(row.created_at)}


def inclusion(db: Session, index: int, tree_size: int) -> list[bytes]:
    return stored(db, lambda s: merkle.inclusion_proof(s, index, tree_size))


def consistency(db: Session, first: int, second: int) -> list[bytes]:
    return stored(db, lambda s: merkle.consistency_proof(s, first, second))


def leaves_by_prefix(db: Session, prefixes: list[str], below: int | None = None) -> list[tuple[int, str, str, bytes]]:
    """(idx, kind, ref, leaf_hash) of the leaves whose ref starts with one of `prefixes` (and whose
    index is below `below`), in index order: one record's leaves found from the log itself, so a
    leaf whose row is gone is found too. Each prefix is a range on the ref index (text_pattern_ops
    orders by bytes: the range [p, p with its last character raised) is exactly the prefix)."""
    if not prefixes:
        return []
    ranges = " OR ".join(f"(ref ~>=~ :lo{i} AND ref ~<~ :hi{i})" for i in range(len(prefixes)))
    params: dict[str, Any] = {"below": below}
    for i, prefix in enumerate(prefixes):
        params[f"lo{i}"], params[f"hi{i}"] = prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)
    rows = db.execute(text(f"SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves WHERE ({ranges}) "  # noqa: S608 - numbered placeholders only
                           "AND (CAST(:below AS bigint) IS NULL OR idx < :below) ORDER BY idx"), params)
    return [(i, k, r, bytes(h)) for i, k, r, h in rows]


def leaf_hashes(db: Session, first: int, limit: int) -> list[tuple[int, bytes]]:
    """(idx, leaf_hash) of up to `limit` rows from index `first` on, in index order, as stored
    (`check` reads the log so, a chunk at a time)."""
    rows = db.execute(text("SELECT idx, leaf_hash FROM bz_evidence_leaves WHERE idx >= :first ORDER BY idx LIMIT :n"),
                      {"first": first, "n": limit})
    return [(i, bytes(h)) for i, h in rows]


def leaf_rows(db: Session, first: int, limit: int, end: int | None = None) -> list[tuple[int, str, str, bytes]]:
    """(idx, kind, ref, leaf_hash) of up to `limit` rows from index `first` on (below `end` if
    given), in index order: the verifier's chunks (keyset on the index)."""
    rows = db.execute(text("SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves WHERE idx >= :first "
                           "AND (CAST(:end AS bigint) IS NULL OR idx < :end) ORDER BY idx LIMIT :n"),
                      {"first": first, "end": end, "n": limit})
    return [(i, k, r, bytes(h)) for i, k, r, h in rows]
