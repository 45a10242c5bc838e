"""RFC 6962 Merkle hashing and proofs (admin_app/evidence/merkle.py) against the published test
vectors, then properties over random trees: every inclusion and consistency proof verifies, and
a flipped byte anywhere (leaf, root, proof item), a wrong index or size, fails."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admin_app.evidence import merkle
from admin_app.evidence.merkle import ListSubtrees, ProofError

pytestmark = pytest.mark.any_server


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# The vectors of transparency-dev/merkle, proof/verify_test.go (the same as google/trillian's
# merkle/log_verifier_test.go and certificate-transparency-go's merkletree tests): eight leaves,
# the roots of the trees of 1..8 of them, and inclusion and consistency proofs. The inclusion
# vectors there number leaves from 1; here they are 0-based indexes.
LEAVES = [h(""), h("00"), h("10"), h("2021"), h("3031"), h("40414243"), h("5051525354555657"),
          h("606162636465666768696a6b6c6d6e6f")]
ROOTS = [h(x) for x in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]
INCLUSION = [  # (0-based leaf index, tree size, proof)
    (0, 1, []),
    (0, 8, [h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")]),
    (5, 8, [h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")]),
    (2, 3, [h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (1, 5, [h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")]),
]
CONSISTENCY = [  # (first size, second size, proof)
    (1, 1, []),
    (1, 8, [h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")]),
    (6, 8, [h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")]),
    (2, 5, [h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b")]),
    (6, 7, [h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7")]),
]
TREE = ListSubtrees([merkle.leaf_hash(d) for d in LEAVES])


def test_the_empty_tree_and_the_hash_prefixes():
    assert merkle.EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert merkle.tree_hash([]) == merkle.EMPTY_ROOT
    assert merkle.leaf_hash(b"") == ROOTS[0]  # a one-leaf tree's root is its leaf hash
    assert merkle.node_hash(ROOTS[0], merkle.leaf_hash(b"\x00")) == ROOTS[1]


@pytest.mark.parametrize("size", range(1, 9))
def test_the_roots_of_the_published_vectors(size):
    assert merkle.tree_hash([merkle.leaf_hash(d) for d in LEAVES[:size]]) == ROOTS[size - 1]
    assert TREE.root(size) == ROOTS[size - 1]


@pytest.mark.parametrize("index, size, proof", INCLUSION)
def test_the_published_inclusion_proofs_are_made_and_verify(index, size, proof):
    assert merkle.inclusion_proof(TREE, index, size) == proof
    merkle.verify_inclusion(index, size, merkle.leaf_hash(LEAVES[index]), proof, ROOTS[size - 1])


@pytest.mark.parametrize("first, second, proof", CONSISTENCY)
def test_the_published_consistency_proofs_are_made_and_verify(first, second, proof):
    assert merkle.consistency_proof(TREE, first, second) == proof
    merkle.verify_consistency(first, second, ROOTS[first - 1], ROOTS[second - 1], proof)


def _inclusion_probes(index, size, leaf, proof, root):
    """The corruptions transparency-dev/merkle's verifierCheck tries; each must fail."""
    some = h("abacaba000000000000000000000000000000000000000000060061e00123456")
    probes = [(index - 1, size, leaf, proof, root), (index + 1, size, leaf, proof, root),
              (index ^ 2, size, leaf, proof, root), (index, size * 2, leaf, proof, root),
              (index, size // 2, leaf, proof, root), (index, size, b"WrongLeaf", proof, root),
              (index, size, leaf, proof, merkle.EMPTY_ROOT), (index, size, leaf, proof, some),
              (index, size, leaf, [*proof, b""], root), (index, size, leaf, [*proof, root], root),
              (index, size, leaf, [b"", *proof], root), (index, size, leaf, [root, *proof], root)]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 8]) + wrong[i][1:]
        probes.append((index, size, leaf, wrong, root))
    if proof:
        probes.append((index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append((index, size, leaf, [proof[0], some, *proof[1:]], root))
    return probes


@pytest.mark.parametrize("index, size, proof", [v for v in INCLUSION if v[2]])
def test_corrupted_inclusion_proofs_fail(index, size, proof):
    leaf = merkle.leaf_hash(LEAVES[index])
    for probe in _inclusion_probes(index, size, leaf, proof, ROOTS[size - 1]):
        with pytest.raises(ProofError):
            merkle.verify_inclusion(*probe)


@pytest.mark.parametrize("first, second, proof", [v for v in CONSISTENCY if v[2]])
def test_corrupted_consistency_proofs_fail(first, second, proof):
    r1, r2 = ROOTS[first - 1], ROOTS[second - 1]
    probes = [(first - 1, second, r1, r2, proof), (first + 1, second, r1, r2, proof),
              (first ^ 2, second, r1, r2, proof), (first, second * 2, r1, r2, proof),
              (first, second // 2, r1, r2, proof), (first, second, r2, r1, proof),
              (first, second, r1, r2, []), (first, second, r1, r2, [*proof, r1]),
              (first, second, r1, r2, [*proof, r2]), (first, second, r1, r2, [r1, *proof]),
              (first, second, r1, r2, [r2, *proof]), (first, second, r1, r2, [proof[0], *proof]),
              (first, second, r1, r2, proof[:-1])]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 16]) + wrong[i][1:]
        probes.append((first, second, r1, r2, wrong))
    for probe in probes:
        with pytest.raises(ProofError):
            merkle.verify_consistency(*probe)


def test_edge_sizes_of_consistency():
    r = ROOTS[0]
    merkle.verify_consistency(0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [])
    merkle.verify_consistency(0, 1, merkle.EMPTY_ROOT, r, [])
    merkle.verify_consistency(1, 1, r, r, [])
    for probe in [(1, 0, r, r, []), (2, 1, r, r, []), (1, 1, r, ROOTS[1], []), (1, 2, r, ROOTS[1], []),
                  (0, 0, merkle.EMPTY_ROOT, merkle.EMPTY_ROOT, [merkle.EMPTY_ROOT]),
                  (1, 1, r, r, [merkle.EMPTY_ROOT])]:
        with pytest.raises(ProofError):
            merkle.verify_consistency(*probe)
    with pytest.raises(ProofError):
        merkle.consistency_proof(TREE, 3, 2)
    with pytest.raises(ProofError):
        merkle.inclusion_proof(TREE, 8, 8)


def _flip(value: bytes, at: int) -> bytes:
    at %= len(value)
    return value[:at] + bytes([value[at] ^ 1]) + value[at + 1:]


trees = st.lists(st.binary(max_size=8), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(trees, st.data())
def test_every_inclusion_proof_verifies_and_a_flipped_byte_fails(data, draw):
    tree = ListSubtrees([merkle.leaf_hash(d) for d in data])
    size = draw.draw(st.integers(1, len(data)), label="size")
    index = draw.draw(st.integers(0, size - 1), label="index")
    root, leaf = tree.root(size), merkle.leaf_hash(data[index])
    proof = merkle.inclusion_proof(tree, index, size)
    merkle.verify_inclusion(index, size, leaf, proof, root)
    at = draw.draw(st.integers(0, 31), label="byte")
    with pytest.raises(ProofError):
        merkle.verify_inclusion(index, size, _flip(leaf, at), proof, root)
    with pytest.raises(ProofError):
        merkle.verify_inclusion(index, size, leaf, proof, _flip(root, at))
    if proof:
        item = draw.draw(st.integers(0, len(proof) - 1), label="item")
        with pytest.raises(ProofError):
            merkle.verify_inclusion(index, size, leaf, [*proof[:item], _flip(proof[item], at),
                                                        *proof[item + 1:]], root)
    for other in {index - 1, index + 1} & set(range(size)):
        if merkle.leaf_hash(data[other]) != leaf:
            with pytest.raises(ProofError):
                merkle.verify_inclusion(other, size, leaf, proof, root)


@settings(max_examples=60, deadline=None)
@given(trees, st.data())
def test_every_consistency_proof_verifies_and_a_flipped_byte_fails(data, draw):
    tree = ListSubtrees([merkle.leaf_hash(d) for d in data])
    second = draw.draw(st.integers(1, len(data)), label="second")
    first = draw.draw(st.integers(0, second), label="first")
    r1, r2 = tree.root(first), tree.root(second)
    proof = merkle.consistency_proof(tree, first, second)
    merkle.verify_consistency(first, second, r1, r2, proof)
    at = draw.draw(st.integers(0, 31), label="byte")
    if 0 < first < second:
        with pytest.raises(ProofError):
            merkle.verify_consistency(first, second, _flip(r1, at), r2, proof)
        with pytest.raises(ProofError):
            merkle.verify_consistency(first, second, r1, _flip(r2, at), proof)
        item = draw.draw(st.integers(0, len(proof) - 1), label="item")
        with pytest.raises(ProofError):
            merkle.verify_consistency(first, second, r1, r2,
                                      [*proof[:item], _flip(proof[item], at), *proof[item + 1:]])


def test_every_leaf_of_every_size_up_to_33():
    data = [bytes([i]) for i in range(33)]
    tree = ListSubtrees([merkle.leaf_hash(d) for d in data])
    for size in range(1, 34):
        root = tree.root(size)
        assert root == merkle.tree_hash([merkle.leaf_hash(d) for d in data[:size]])
        for index in range(size):
            merkle.verify_inclusion(index, size, merkle.leaf_hash(data[index]),
                                    merkle.inclusion_proof(tree, index, size), root)
        for first in range(size + 1):
            merkle.verify_consistency(first, size, tree.root(first), root,
                                      merkle.consistency_proof(tree, first, size))


def test_needed_subtrees_names_what_a_proof_reads():
    wanted = merkle.needed_subtrees(lambda s: merkle.inclusion_proof(s, 5, 8))
    assert sorted(wanted) == [(0, 4), (1, 3), (2, 0)]
