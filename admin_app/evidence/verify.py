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


# Leaves read per query: a power of two, so that each full chunk is a complete subtree whose hash
# is kept (levels at and above CHUNK_LEVEL) while streaming; below it, a chunk is read again only
# when a descent reaches it. Memory: about 2 * size / CHUNK hashes, whatever the log's size.
CHUNK_LEVEL = 12
CHUNK = 1 << CHUNK_LEVEL


class _LeafSubtrees:
    """Subtrees of the stored leaf rows (merkle.Subtrees): the high levels from `high`, filled by
    `check` as it streams; the low ones from the chunk that holds them, read on demand."""

    def __init__(self, db: Session) -> None:
        self.db = db
        self.high: dict[tuple[int, int], bytes] = {}
        self._chunk: tuple[int, ListSubtrees] | None = None

    def add_chunk(self, number: int, hashes: list[bytes]) -> None:
        level, index = CHUNK_LEVEL, number
        self.high[(level, index)] = ListSubtrees(hashes)(CHUNK_LEVEL, 0)
        while index & 1:
            self.high[(level + 1, index >> 1)] = merkle.node_hash(self.high[(level, index - 1)],
                                                                  self.high[(level, index)])
            level, index = level + 1, index >> 1

    def __call__(self, level: int, index: int) -> bytes:
        if level >= CHUNK_LEVEL:
            return self.high[(level, index)]
        start = (index << level) >> CHUNK_LEVEL << CHUNK_LEVEL
        if self._chunk is None or self._chunk[0] != start:
            self._chunk = (start, ListSubtrees([h for _, h in log.leaf_hashes(self.db, start, CHUNK)]))
        return self._chunk[1](level, index - (start >> level))


def _descend(db: Session, leaves: _LeafSubtrees, lo: int, hi: int, trusted: bytes) -> tuple[int, str]:
    """The first leaf in [lo, hi) whose row differs from what the trusted hash commits to: the
    stored subtree hashes of each half are read (O(log n) rows a step), accepted only when they
    hash to the already-trusted parent."""
    while hi - lo > 1:
        k = merkle.split(hi - lo)
        try:
            left, right = log.stored(db, lambda s, lo=lo, k=k, hi=hi: (merkle.range_hash(s, lo, lo + k),
                                                                       merkle.range_hash(s, lo + k, hi)))
        except LookupError:
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
    "problem"}. The leaf rows are read in chunks of CHUNK, in index order, once (a descent after
    a mismatch reads about as many again)."""
    report: dict[str, Any] = {"ok": True, "tree_size": None, "leaves": 0, "first_bad_leaf": None,
                              "problem": None}

    def bad(index: int | None, problem: str) -> dict[str, Any]:
        report.update(ok=False, first_bad_leaf=index, problem=problem)
        return report

    head = heads.latest_head(db)
    size, root, head_error = None, None, None
    if head is not None:
        try:
            size, root = heads.verify_head(head, heads.stored_public_keys(db))
        except HeadError as err:
            head_error = f"the latest head does not verify: {err}"
    leaves = _LeafSubtrees(db)
    position = 0
    while True:
        rows = log.leaf_hashes(db, position, CHUNK)
        for offset, (index, _) in enumerate(rows):
            if index != position + offset:
                report["leaves"] = position + offset
                return bad(position + offset, f"leaf {position + offset} is missing (the next row is leaf {index})")
        if size is not None and len(rows) == CHUNK and position + CHUNK <= size:
            leaves.add_chunk(position >> CHUNK_LEVEL, [h for _, h in rows])
        position += len(rows)
        if len(rows) < CHUNK:
            break
    report["leaves"] = position
    if head is None:
        report["problem"] = "no signed head yet: only the leaves' order was checked"
        return report
    if head_error is not None or size is None or root is None:
        return bad(None, head_error or "the latest head does not verify")
    report["tree_size"] = size
    if position < size:
        return bad(position, f"leaf {position} is missing: the log holds {position} leaves, "
                             f"the signed head {size}")
    if merkle.range_hash(leaves, 0, size) == root:
        return report
    if size == 0:
        return bad(None, "the signed head of the empty tree has a wrong root")
    index, problem = _descend(db, leaves, 0, size, root)
    return bad(index, problem)
