"""RFC 6962 § 2.1 Merkle trees (the hashing Certificate Transparency and Sigstore use, so their
published test vectors apply): leaf and node hashes, the tree hash of n leaves, inclusion and
consistency proofs, and their verification as RFC 9162 § 2.1.3.2 and § 2.1.4.2 write it.

Pure functions. A tree is reached through `Subtrees`: the hash of the complete, aligned subtree
at (level, index), which covers leaves [index * 2**level, (index + 1) * 2**level). A list of leaf
hashes gives one (`ListSubtrees`); the log's storage gives another, from the node hashes it
keeps as leaves arrive, so a proof reads O(log n) rows, never every leaf."""
from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

# (level, index) -> the hash of that complete subtree.
Subtrees = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not verify, or a request that has none; the message says which."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """The largest power of two smaller than n (n > 1): where RFC 6962 splits D[n]."""
    return 1 << ((n - 1).bit_length() - 1)


def range_hash(subtrees: Subtrees, lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for a range the RFC's recursion reaches: lo is a multiple of the largest
    power of two not above hi - lo, so the left part is always a complete aligned subtree."""
    n = hi - lo
    if n <= 0:
        return EMPTY_ROOT
    if n & (n - 1) == 0:
        level = n.bit_length() - 1
        return subtrees(level, lo >> level)
    k = split(n)
    return node_hash(range_hash(subtrees, lo, lo + k), range_hash(subtrees, lo + k, hi))


def tree_hash(hashes: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes, computed bottom-up in O(n) (no stored nodes)."""
    if not hashes:
        return EMPTY_ROOT
    return ListSubtrees(hashes).root(len(hashes))


class ListSubtrees:
    """Subtrees of an in-memory list of leaf hashes, every complete level computed once."""

    def __init__(self, hashes: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(hashes)]
        while len(self.levels[-1]) > 1:
            below = self.levels[-1]
            self.levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])

    def __call__(self, level: int, index: int) -> bytes:
        return self.levels[level][index]

    def root(self, size: int) -> bytes:
        return range_hash(self, 0, size)


def inclusion_proof(subtrees: Subtrees, index: int, size: int) -> list[bytes]:
    """PATH(m, D[n]) of RFC 6962 § 2.1.1: the sibling hashes from the leaf up to the root."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = split(hi - lo)
        if index < lo + k:
            path.append(range_hash(subtrees, lo + k, hi))
            hi = lo + k
        else:
            path.append(range_hash(subtrees, lo, lo + k))
            lo = lo + k
    path.reverse()
    return path


def consistency_proof(subtrees: Subtrees, first: int, second: int) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 6962 § 2.1.2 (SUBPROOF with b = true); empty for m = 0 or m = n."""
    if not 0 <= first <= second:
        raise ProofError(f"a tree of {first} leaves is not a prefix of one of {second}")
    if first in (0, second):
        return []
    proof: list[bytes] = []
    m, lo, hi, whole = first, 0, second, True
    # Iterative SUBPROOF(m, D[lo:hi], whole): proof items are gathered leaf-side last, so the
    # recursion's "SUBPROOF : MTH(...)" order is kept by inserting the later items at the end.
    tail: list[bytes] = []
    while True:
        n = hi - lo
        if m == n:
            if not whole:
                proof.append(range_hash(subtrees, lo, hi))
            break
        k = split(n)
        if m <= k:
            tail.append(range_hash(subtrees, lo + k, hi))
            hi = lo + k
        else:
            tail.append(range_hash(subtrees, lo, lo + k))
            m, lo, whole = m - k, lo + k, False
    return proof + tail[::-1]


def _check_hash(value: bytes, what: str) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} is not a {HASH_SIZE}-byte hash")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """RFC 9162 § 2.1.3.2 steps 1-4, returning the root the proof leads to."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of {size} leaves")
    _check_hash(leaf, "the leaf hash")
    fn, sn, r = index, size - 1, bytes(leaf)
    for i, p in enumerate(proof):
        _check_hash(p, f"proof item {i}")
        if sn == 0:
            raise ProofError("the proof is longer than the tree is high")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the proof is shorter than the tree is high")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    """Raise ProofError unless `proof` shows leaf hash `leaf` at `index` of the tree `root`."""
    _check_hash(root, "the root hash")
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"the inclusion proof of leaf {index} does not lead to the root of size {size}")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """RFC 9162 § 2.1.4.2: raise ProofError unless the tree `first_root` of `first` leaves is a
    prefix of the tree `second_root` of `second` leaves."""
    _check_hash(first_root, "the first root")
    _check_hash(second_root, "the second root")
    for i, p in enumerate(proof):
        _check_hash(p, f"proof item {i}")
    if not 0 <= first <= second:
        raise ProofError(f"a tree of {first} leaves cannot precede one of {second}")
    if first == second:
        if proof:
            raise ProofError("equal sizes take an empty proof")
        if first_root != second_root:
            raise ProofError("equal sizes with different roots")
        return
    if first == 0:
        if proof:
            raise ProofError("an empty first tree takes an empty proof")
        return
    if not proof:
        raise ProofError("the consistency proof is empty")
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, bytes(first_root))
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the proof is longer than the tree is high")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the proof is shorter than the tree is high")
    if fr != first_root:
        raise ProofError(f"the consistency proof does not lead to the root of size {first}")
    if sr != second_root:
        raise ProofError(f"the consistency proof does not lead to the root of size {second}")


def needed_subtrees(make: Callable[[Subtrees], object]) -> list[tuple[int, int]]:
    """The (level, index) pairs `make` reads (hash values never change which it reads): run it
    once against a recorder, so storage can fetch them all in one query."""
    seen: list[tuple[int, int]] = []

    def record(level: int, index: int) -> bytes:
        seen.append((level, index))
        return EMPTY_ROOT

    make(record)
    return list(dict.fromkeys(seen))


def multi_proof_subtrees(indexes: Sequence[int], size: int) -> list[tuple[int, int]]:
    """The complete subtrees (level, index) that, with the leaf hashes at `indexes` (ascending,
    distinct, below `size`), recompute the root of `size` leaves: where a part of the tree holds
    none of those leaves, the subtrees range_hash reads for it; elsewhere the part is split as
    range_hash splits it. The compact proof of many leaves at once (each shared node once)."""
    out: list[tuple[int, int]] = []

    def record(level: int, index: int) -> bytes:
        out.append((level, index))
        return EMPTY_ROOT

    def cover(lo: int, hi: int, first: int, last: int) -> None:  # indexes[first:last] lie in [lo, hi)
        if first == last:
            range_hash(record, lo, hi)
        elif hi - lo > 1:
            k = split(hi - lo)
            middle = bisect.bisect_left(indexes, lo + k, first, last)
            cover(lo, lo + k, first, middle)
            cover(lo + k, hi, middle, last)

    if size:
        cover(0, size, 0, len(indexes))
    return out


def root_from_multi_proof(size: int, leaves: dict[int, bytes], nodes: dict[tuple[int, int], bytes]) -> bytes:
    """The root of `size` leaves from some leaf hashes (index -> hash) and the subtrees of their
    multi_proof_subtrees; ProofError when a part of the tree is covered by neither, or when a
    given subtree would hide a given leaf (it could stand for any leaf hash)."""
    if size and leaves and max(leaves) >= size:
        raise ProofError(f"leaf {max(leaves)} is not in a tree of {size} leaves")
    stated = sorted(leaves)
    for level, index in nodes:
        lo = index << level
        at = bisect.bisect_left(stated, lo)
        if at < len(stated) and stated[at] < lo + (1 << level):
            raise ProofError(f"the proof's subtree ({level}, {index}) covers stated leaf {stated[at]}")

    def subtree(level: int, index: int) -> bytes:
        found = nodes.get((level, index))
        if found is not None:
            return found
        if level == 0:
            found = leaves.get(index)
            if found is None:
                raise ProofError(f"the proof does not cover leaf {index}")
            return found
        return node_hash(subtree(level - 1, 2 * index), subtree(level - 1, 2 * index + 1))

    return range_hash(subtree, 0, size)
