"""The evidence log (issue 33, first slice): leaves appended in the caller's transaction and
contiguous under concurrency, signed tree heads and key rotation, the admin API's answers and
refusals, `evidence check` naming the first leaf changed, deleted, reordered or cut off in SQL,
and `evidence verify-proof` checking a bundle offline with only the public key."""
from __future__ import annotations

import base64
import json
import os
import stat
import threading
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from admin_app.evidence import heads, log, merkle
from admin_app.evidence.heads import b64, key_id_of, public_bytes
from admin_app.evidence.worker import HeadWorker, seconds_from
from tests.helpers import admin_token, assert_error, assert_ok, bearer, cli_ok, cli_refused, row_counts

API = "/admin/api/evidence"
TABLES = ("bz_evidence_leaves", "bz_evidence_nodes", "bz_evidence_heads", "bz_evidence_keys")


def data(i: int) -> bytes:
    return f"test leaf {i}".encode()


def append(app, count: int, start: int = 0) -> list[int | None]:
    database = app.extensions["bailing"].db
    with database.session() as db:
        return [log.append_leaf(db, "test", f"t{i}", data(i)) for i in range(start, start + count)]


def leaf_rows(sql) -> list[tuple]:
    return sql("SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves ORDER BY idx")


@pytest.fixture
def world(server, cli, sql):
    """Two admins with tokens, then an empty log: their accounts' events are leaves too (the
    producers' own tests cover those), and these tests count leaves from 0."""
    tokens = {"admin": bearer(admin_token(cli, "ada", "admin")),
              "auditor": bearer(admin_token(cli, "aud", "auditor")), "hub": server}
    sql("TRUNCATE bz_evidence_leaves, bz_evidence_nodes")
    return tokens


# ---------------------------------------------------------------- appending

def _append_then_fail(database) -> None:
    with database.session() as db:
        assert log.append_leaf(db, "test", "gone", b"rolled back") == 2
        raise RuntimeError("the covered row's transaction fails")


def test_a_leaf_commits_with_its_transaction_and_a_rollback_leaves_no_gap(app, sql):
    assert append(app, 2) == [0, 1]
    database = app.extensions["bailing"].db
    with pytest.raises(RuntimeError, match="fails"):
        _append_then_fail(database)
    assert append(app, 1, start=2) == [2]
    assert [r[:3] for r in leaf_rows(sql)] == [(0, "test", "t0"), (1, "test", "t1"), (2, "test", "t2")]
    assert [bytes(r[3]) for r in leaf_rows(sql)] == [merkle.leaf_hash(data(i)) for i in range(3)]
    # Leaves 0-2 close the subtree (1, 0) only; level 0 repeats the leaves.
    assert sql("SELECT level, idx FROM bz_evidence_nodes ORDER BY level, idx") == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_an_append_refuses_a_kind_or_ref_out_of_bounds(app, sql):
    database = app.extensions["bailing"].db
    for kind, ref in (("", "r"), ("k" * (log.KIND_MAX + 1), "r"), ("test", "r" * (log.REF_MAX + 1))):
        with pytest.raises(ValueError, match="kind must be"), database.session() as db:
            log.append_leaf(db, kind, ref, b"x")
    assert row_counts(sql, *TABLES) == dict.fromkeys(TABLES, 0)


def test_concurrent_appends_stay_contiguous_and_the_stored_tree_is_the_leaves_tree(app, sql):
    database = app.extensions["bailing"].db
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(6):
                try:
                    with database.session() as db:
                        log.append_leaf(db, "test", f"w{n}-{i}", f"{n}/{i}".encode())
                        if i % 3 == 2:
                            raise LookupError("rolled back")
                except LookupError:
                    pass
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = leaf_rows(sql)
    assert [r[0] for r in rows] == list(range(16))  # 4 threads x 4 committed appends
    leaf_hashes = [bytes(r[3]) for r in rows]
    with database.session() as db:
        for size in (1, 5, 8, 13, 16):
            assert log.root_at(db, size) == merkle.tree_hash(leaf_hashes[:size])


# ---------------------------------------------------------------- heads and keys

def test_heads_are_signed_verifiable_and_rotation_keeps_old_heads_verifiable(app, cli, sql, tmp_path):
    append(app, 3)
    first = cli_ok(cli("evidence", "head"))
    assert (first["format"], first["tree_size"]) == ("bailing-evidence-head/v1", 3)
    assert cli_ok(cli("evidence", "head")) == first  # nothing new: the same head
    key_file = tmp_path / "var" / heads.KEY_FILE
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    database = app.extensions["bailing"].db
    with database.session() as db:
        keys = heads.stored_public_keys(db)
        assert heads.verify_head(first, keys) == (3, merkle.tree_hash([merkle.leaf_hash(data(i)) for i in range(3)]))
    rotated = cli_ok(cli("evidence", "rotate-key"))
    assert rotated["retired"] == first["key_id"] != rotated["key_id"]
    append(app, 2, start=3)
    second = cli_ok(cli("evidence", "head"))
    assert (second["tree_size"], second["key_id"]) == (5, rotated["key_id"])
    with database.session() as db:
        keys = heads.stored_public_keys(db)
        assert heads.verify_head(first, keys)[0] == 3 and heads.verify_head(second, keys)[0] == 5
        assert heads.head_at(db, 3) == first
    assert sql("SELECT key_id, retired_at IS NULL FROM bz_evidence_keys ORDER BY created_at") == [
        (first["key_id"], False), (rotated["key_id"], True)]
    forged = {**first, "tree_size": 2}
    with pytest.raises(heads.HeadError, match="does not verify"):
        heads.verify_head(forged, keys)


def test_the_key_from_the_environment_signs_and_cannot_be_rotated_here(app, cli, sql, monkeypatch):
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    monkeypatch.setenv(heads.ENV, base64.b64encode(seed).decode())
    head = cli_ok(cli("evidence", "head"))
    assert head["key_id"] == key_id_of(public_bytes(private))
    before = row_counts(sql, *TABLES)
    err = cli_refused(cli("evidence", "rotate-key"), "invalid_request")
    assert heads.ENV in err["message"]
    assert row_counts(sql, *TABLES) == before
    monkeypatch.setenv(heads.ENV, "bm90IGEga2V5")  # base64, but not 32 bytes
    append(app, 1)
    before = row_counts(sql, *TABLES)
    cli_refused(cli("evidence", "head"), "invalid_request")
    assert row_counts(sql, *TABLES) == before


def test_the_background_worker_signs_a_head_when_leaves_arrived(app, sql, tmp_path):
    assert (seconds_from(None), seconds_from("0"), seconds_from("2.5")) == (300.0, 0.0, 2.5)
    worker = HeadWorker(app.extensions["bailing"].db, tmp_path / "var", seconds=0.05)
    append(app, 2)
    worker.ensure_started()
    try:
        deadline = time.monotonic() + 10
        while not sql("SELECT tree_size FROM bz_evidence_heads") and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # more passes: nothing new, no new head
    finally:
        worker.stop(5)
    assert sql("SELECT tree_size FROM bz_evidence_heads") == [(2,)]


# ---------------------------------------------------------------- the admin API

def test_the_api_answers_heads_keys_leaves_and_proofs_that_verify(app, world, sql):
    hub, admin, auditor = world["hub"], world["admin"], world["auditor"]
    append(app, 7)
    head = assert_ok(hub.post(f"{API}/heads", headers=admin))
    assert head["tree_size"] == 7
    assert assert_ok(hub.get(f"{API}/heads/latest", headers=auditor)) == head
    assert assert_ok(hub.get(f"{API}/heads/7", headers=auditor)) == head
    keys = assert_ok(hub.get(f"{API}/keys", headers=auditor))
    assert [(k["key_id"], k["algorithm"], k["retired_at"]) for k in keys] == [(head["key_id"], "ed25519", None)]
    public = {k["key_id"]: base64.b64decode(k["public_key"]) for k in keys}
    size, root = heads.verify_head(head, public)
    leaf = assert_ok(hub.get(f"{API}/leaves/4", headers=auditor))
    assert (leaf["index"], leaf["kind"], leaf["ref"], leaf["leaf_hash"]) == (4, "test", "t4",
                                                                           b64(merkle.leaf_hash(data(4))))
    proof = assert_ok(hub.get(f"{API}/proof/inclusion", params={"leaf": 4}, headers=auditor))
    assert (proof["leaf_index"], proof["tree_size"], proof["head"]) == (4, 7, head)
    merkle.verify_inclusion(4, size, base64.b64decode(proof["leaf_hash"]),
                            [base64.b64decode(p) for p in proof["proof"]], root)
    append(app, 5, start=7)
    later = assert_ok(hub.post(f"{API}/heads", headers=admin))
    cons = assert_ok(hub.get(f"{API}/proof/consistency", params={"first": 7, "second": 12},
                                  headers=auditor))
    assert (cons["first_head"], cons["second_head"]) == (head, later)
    merkle.verify_consistency(7, 12, root, base64.b64decode(later["root_hash"]),
                              [base64.b64decode(p) for p in cons["proof"]])
    unsigned = assert_ok(hub.get(f"{API}/proof/inclusion", params={"leaf": 0, "tree_size": 3},
                                      headers=auditor))
    assert unsigned["head"] is None and len(unsigned["proof"]) == 2


def test_the_api_refusals_write_nothing(app, world, sql):
    hub, auditor = world["hub"], world["auditor"]
    assert_error(hub.get(f"{API}/heads/latest", headers=auditor), 404, "evidence_not_found")
    assert_error(hub.get(f"{API}/proof/inclusion", params={"leaf": 0}, headers=auditor), 404,
                 "evidence_not_found")
    append(app, 3)
    before = row_counts(sql, *TABLES)
    assert_error(hub.post(f"{API}/heads"), 401, "unauthorized")
    assert_error(hub.post(f"{API}/heads", headers=auditor), 403, "forbidden")
    assert_error(hub.get(f"{API}/keys"), 401, "unauthorized")
    for path, params in [("/leaves/x", {}), ("/leaves/-1", {}), ("/heads/1.0", {}),
                         ("/heads/99999999999999999", {}),
                         ("/proof/inclusion", {}), ("/proof/inclusion", {"leaf": "a"}),
                         ("/proof/inclusion", {"leaf": ["0", "1"]}),
                         ("/proof/inclusion", {"leaf": 3, "tree_size": 3}),
                         ("/proof/consistency", {"first": 1}),
                         ("/proof/consistency", {"first": 3, "second": 2})]:
        body = assert_error(hub.get(f"{API}{path}", params=params, headers=auditor), 400,
                            "invalid_request")
        assert body["problems"], (path, params)
    for path, params in [("/leaves/3", {}), ("/heads/3", {}),
                         ("/proof/inclusion", {"leaf": 0, "tree_size": 4}),
                         ("/proof/consistency", {"first": 1, "second": 4})]:
        assert_error(hub.get(f"{API}{path}", params=params, headers=auditor), 404, "evidence_not_found")
    assert row_counts(sql, *TABLES) == before


def test_no_head_is_signed_over_a_log_changed_or_shortened_behind_the_latest_head(app, world, sql):
    hub, admin = world["hub"], world["admin"]
    append(app, 5)
    assert assert_ok(hub.post(f"{API}/heads", headers=admin))["tree_size"] == 5
    append(app, 2, start=5)
    node = sql("SELECT hash FROM bz_evidence_nodes WHERE level = 0 AND idx = 4")[0][0]
    sql("UPDATE bz_evidence_nodes SET hash = %s WHERE level = 0 AND idx = 4", (b"\x01" * 32,))
    before = row_counts(sql, *TABLES)
    body = assert_error(hub.post(f"{API}/heads", headers=admin), 409, "evidence_inconsistent")
    assert "size 5" in body["message"]
    assert row_counts(sql, *TABLES) == before
    sql("UPDATE bz_evidence_nodes SET hash = %s WHERE level = 0 AND idx = 4", (node,))
    assert assert_ok(hub.post(f"{API}/heads", headers=admin))["tree_size"] == 7
    sql("DELETE FROM bz_evidence_leaves WHERE idx >= 6")  # the tail after the latest head
    assert_error(hub.post(f"{API}/heads", headers=admin), 409, "evidence_inconsistent")
    assert sql("SELECT max(tree_size) FROM bz_evidence_heads") == [(7,)]


# ---------------------------------------------------------------- tampering and `evidence check`

def _restore(sql, rows) -> None:
    sql("DELETE FROM bz_evidence_leaves")
    for idx, kind, ref, leaf_hash in rows:
        sql("INSERT INTO bz_evidence_leaves (idx, kind, ref, leaf_hash) VALUES (%s, %s, %s, %s)",
            (idx, kind, ref, leaf_hash))


def _check(cli) -> tuple[int, dict]:
    code, out, _ = cli("evidence", "check")
    return code, out


def test_evidence_check_names_the_first_leaf_changed_deleted_reordered_or_cut_off(app, cli, sql):
    append(app, 11)
    cli_ok(cli("evidence", "head"))
    rows = leaf_rows(sql)
    code, report = _check(cli)
    assert (code, report["ok"], report["tree_size"], report["leaves"], report["first_bad_leaf"]) == \
        (0, True, 11, 11, None)
    cases = [
        ("UPDATE bz_evidence_leaves SET leaf_hash = sha256('forged') WHERE idx = 6", 6, "leaf 6's hash"),
        ("DELETE FROM bz_evidence_leaves WHERE idx = 4", 4, "leaf 4 is missing"),
        (("UPDATE bz_evidence_leaves SET idx = 1000 WHERE idx = 2; UPDATE bz_evidence_leaves SET idx = 2 "
          "WHERE idx = 9; UPDATE bz_evidence_leaves SET idx = 9 WHERE idx = 1000"), 2, "leaf 2's hash"),
        ("DELETE FROM bz_evidence_leaves WHERE idx >= 8", 8, "leaf 8 is missing"),
        ("UPDATE bz_evidence_leaves SET leaf_hash = sha256('x') WHERE idx = 10", 10, "leaf 10's hash"),
    ]
    for statements, first_bad, problem in cases:
        for statement in statements.split("; "):
            sql(statement)
        code, report = _check(cli)
        assert (code, report["ok"], report["first_bad_leaf"]) == (1, False, first_bad), statements
        assert problem in report["problem"], report
        _restore(sql, rows)
    assert _check(cli)[0] == 0
    # A leaf and its stored copy changed together: the stored subtree hashes no longer hash to
    # the signed root, and the check names the first leaf of the range it cannot vouch for.
    sql("UPDATE bz_evidence_leaves SET leaf_hash = sha256('x') WHERE idx = 5")
    sql("UPDATE bz_evidence_nodes SET hash = sha256('x') WHERE level = 0 AND idx = 5")
    code, report = _check(cli)
    assert (code, report["first_bad_leaf"]) == (1, 4) and "4..5" in report["problem"], report


# ---------------------------------------------------------------- offline verification

def test_verify_proof_checks_a_bundle_offline_and_refuses_a_forged_one(app, world, cli, tmp_path):
    hub, admin, auditor = world["hub"], world["admin"], world["auditor"]
    append(app, 6)
    assert_ok(hub.post(f"{API}/heads", headers=admin))
    old_key = assert_ok(hub.get(f"{API}/keys", headers=auditor))[0]["public_key"]
    cli_ok(cli("evidence", "rotate-key"))
    append(app, 3, start=6)
    assert_ok(hub.post(f"{API}/heads", headers=admin))
    new_key = next(k for k in assert_ok(hub.get(f"{API}/keys", headers=auditor)) if not k["retired_at"])
    key_file = tmp_path / "new.pub"
    key_file.write_text(new_key["public_key"] + "\n")
    inclusion = assert_ok(hub.get(f"{API}/proof/inclusion", params={"leaf": 2, "tree_size": 9},
                                       headers=auditor))
    consistency = assert_ok(hub.get(f"{API}/proof/consistency", params={"first": 6, "second": 9},
                                         headers=auditor))

    def verify(bundle: dict, *keys: str) -> tuple[int, Any]:
        path = tmp_path / "bundle.json"
        path.write_text(json.dumps(bundle))
        args = ["evidence", "verify-proof", str(path)]
        for key in keys:
            args += ["--public-key", key]
        code, out, _ = cli(*args)
        return code, out

    assert verify(inclusion, str(key_file)) == (0, {"ok": True, "verified": "leaf 2 is in the signed tree of size 9"})
    assert verify(consistency, old_key, str(key_file))[0] == 0
    flipped = base64.b64decode(inclusion["leaf_hash"])
    forged = [
        ({**inclusion, "leaf_hash": b64(bytes([flipped[0] ^ 1]) + flipped[1:])}, "inclusion proof of leaf 2"),
        ({**inclusion, "leaf_index": 3}, "inclusion proof of leaf 3"),
        ({**inclusion, "head": {**inclusion["head"], "root_hash": b64(merkle.EMPTY_ROOT)}}, "does not verify"),
        ({**inclusion, "head": None}, "no signed head"),
        ({**inclusion, "proof": inclusion["proof"][:-1]}, "shorter"),
    ]
    for bundle, problem in forged:
        code, out = verify(bundle, str(key_file))
        assert code == 1 and out["ok"] is False and problem in out["problem"], out
    code, out = verify(consistency, str(key_file))  # the first head's key is not given
    assert code == 1 and "no public key given" in out["problem"]
    code, out = verify(inclusion, old_key)
    assert code == 1 and "no public key given" in out["problem"]
    cli_refused(cli("evidence", "verify-proof", str(key_file), "--public-key", old_key), "invalid_request")
    cli_refused(cli("evidence", "verify-proof", str(tmp_path / "bundle.json"), "--public-key", "c2hvcnQ="),
                "invalid_request")


def test_verify_proof_runs_as_its_own_process_with_no_database(tmp_path):
    """On another machine: no BAILING_DATABASE_URL, no data folder of the hub, only the key."""
    from admin_app.evidence.merkle import ListSubtrees
    from tests.conftest import run_cli_process

    private = Ed25519PrivateKey.generate()
    tree = ListSubtrees([merkle.leaf_hash(data(i)) for i in range(5)])
    signed_at = "2026-12-06T07:00:00.000Z"
    head = {"format": heads.FORMAT, "tree_size": 5, "root_hash": b64(tree.root(5)), "signed_at": signed_at,
            "key_id": key_id_of(public_bytes(private)),
            "signature": b64(private.sign(heads.message(5, tree.root(5), signed_at)))}
    bundle = {"leaf_index": 3, "tree_size": 5, "leaf_hash": b64(merkle.leaf_hash(data(3))),
              "proof": [b64(p) for p in merkle.inclusion_proof(tree, 3, 5)], "head": head}
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle))
    key = b64(public_bytes(private))
    done = run_cli_process(["evidence", "verify-proof", str(path), "--public-key", key], None,
                           data_dir=tmp_path / "elsewhere")
    assert (done.returncode, json.loads(done.stdout)) == (0, {"ok": True, "verified": "leaf 3 is in the signed "
                                                                                     "tree of size 5"})
    path.write_text(json.dumps({**bundle, "head": {**head, "signed_at": "2026-12-06T07:00:01.000Z"}}))
    done = run_cli_process(["evidence", "verify-proof", str(path), "--public-key", key], None,
                           data_dir=tmp_path / "elsewhere")
    assert done.returncode == 1 and "signature of the head of size 5" in json.loads(done.stdout)["problem"]
    assert not (tmp_path / "elsewhere").exists()


def test_leaf_data_is_the_canonical_json_of_the_record():
    assert log.leaf_data("config_change", {"id": 7, "by": "ada", "path": "é"}) == \
        '{"by":"ada","id":7,"kind":"config_change","path":"é"}'.encode()
