"""Issue 33, "verify anywhere": a transcript export carries its leaves, a compact proof and a
signed head, and `bailing-admin audit verify` checks it offline with only the public key, naming
the first leaf that does not verify: after a message changed, an event deleted, two reordered, a
tail cut off or a read deleted directly in SQL, after the file itself was edited, and never after a
lawful redaction."""
from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from admin_app.conversation_audit import redaction
from admin_app.evidence import leaves, merkle
from admin_app.evidence.merkle import ProofError
from tests.conftest import run_cli_process
from tests.helpers import admin_token, bearer
from tests.test_console_transcript import Reader

MESSAGES = ("user_message", "assistant_message")


class Auditor:
    """A support reader in the console, the public key from the admin API in a file, and
    `audit verify` run in-process on each export."""

    def __init__(self, hub, cli, tmp_path):
        self.hub, self.cli, self.tmp_path = hub, cli, tmp_path
        self.reader = Reader(hub.server.url, hub.admin("support"))
        self.token = bearer(admin_token(cli, "aud", "auditor"))

    def key_file(self) -> str:
        keys = self.hub.server.get("/admin/api/evidence/keys", headers=self.token).json()
        path = self.tmp_path / "evidence.pub"
        path.write_text("".join(k["public_key"] + "\n" for k in keys if k["retired_at"] is None))
        return str(path)

    def export(self, archive_id: str) -> dict[str, Any]:
        response = self.reader.get(f"/console/conversations/{archive_id}/export.json")
        assert response.status_code == 200, response.text
        return response.json()

    def verify(self, export: dict[str, Any], *keys: str) -> tuple[int, Any]:
        path = self.tmp_path / f"export-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(export, ensure_ascii=False))
        args = ["audit", "verify", str(path)]
        for key in keys or (self.key_file(),):
            args += ["--public-key", key]
        code, out, _ = self.cli(*args)
        return code, out


@pytest.fixture
def auditor(hub, cli, tmp_path) -> Auditor:
    return Auditor(hub, cli, tmp_path)


def leaf_of(sql, ref: str) -> int:
    return sql("SELECT idx FROM bz_evidence_leaves WHERE ref = %s", (ref,))[0][0]


def small_archive(hub, name: str) -> str:
    """Two completed turns: sequences 1-4 and 5-8 (messages at 2, 3, 6 and 7)."""
    archive_id = hub.archive(name)
    events = hub.exchange(archive_id, 1, "turn-1", f"{name}: first question", "first answer")
    events += hub.exchange(archive_id, 5, "turn-2", f"{name}: second question", "second answer")
    hub.append(archive_id, events)
    return archive_id


def test_an_export_carries_its_proofs_and_verifies_offline_with_only_the_public_key(hub, auditor, sql, tmp_path):
    archive_id, run_id = hub.traced_conversation()
    assert auditor.reader.get(f"/console/conversations/{archive_id}").status_code == 200
    export = auditor.export(archive_id)

    # The Core export's keys are all there, and the evidence beside them.
    assert export["schema"] == "bailing.agent-conversation-audit-export.v1"
    assert [e["sequence"] for e in export["events"]] == list(range(1, 10))
    evidence = export["evidence"]
    assert evidence["schema"] == "bailing.evidence.transcript.v1" and evidence["archive_id"] == archive_id
    assert evidence["last_sequence"] == 9 and evidence["head"]["tree_size"] > evidence["leaves"][-1]["index"]
    stated = {leaf["ref"]: leaf["index"] for leaf in evidence["leaves"]}
    for event in export["events"]:
        ref = leaves.event_ref(archive_id, event["sequence"])
        assert event["evidence"]["leaf_index"] == stated[ref] == leaf_of(sql, ref)
        assert (len(event["evidence"]["salt"]) == 32) if event["kind"] in MESSAGES else "salt" not in event["evidence"]
    link = next(e for e in export["events"] if e["kind"] == "run_link")
    assert link["run_id"] == run_id
    # The reads of this transcript: the page opened, then this export (recorded before its evidence).
    assert [(r["action"], r["first_sequence"], r["last_sequence"]) for r in evidence["reads"]] == [
        ("transcript_view", 1, 9), ("transcript_export", 1, 9)]
    assert all(stated[leaves.access_ref(r["id"], archive_id)] == r["leaf_index"] for r in evidence["reads"])
    # The proof is compact: fewer subtrees than the log has leaves outside this transcript.
    assert len(evidence["proof"]) < evidence["head"]["tree_size"] - len(stated)

    key_file = auditor.key_file()
    code, out = auditor.verify(export)
    assert (code, out["ok"]) == (0, True), out
    assert out["verified"].startswith(f"{len(stated)} leaves of transcript {archive_id} (9 events")

    # On another machine: its own process, no database, no data folder of the hub.
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    done = run_cli_process(["audit", "verify", str(path), "--public-key", key_file], None,
                           data_dir=tmp_path / "elsewhere")
    assert (done.returncode, json.loads(done.stdout)["ok"]) == (0, True), done.stderr
    assert not (tmp_path / "elsewhere").exists()

    # Another key: the head's signature is what fails first.
    other = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVoxMjM0NTY="
    code, out = auditor.verify(export, other)
    assert code == 1 and out["first_bad_leaf"] is None
    assert out["problem"].startswith("the signed head does not verify: no public key given")
    # The file edited: a message's text, a read's time, a stated leaf's hash.
    edited = json.loads(json.dumps(export))
    edited["events"][6]["content"] = "ACME may go to 50,000."
    ref = leaves.event_ref(archive_id, 7)
    assert auditor.verify(edited)[1] == {"ok": False, "first_bad_leaf": stated[ref], "ref": ref,
                                         "problem": "the event does not match its leaf"}
    edited = json.loads(json.dumps(export))
    edited["evidence"]["reads"][0]["at"] = "2026-01-01T00:00:00.000000+00:00"
    read_ref = leaves.access_ref(export["evidence"]["reads"][0]["id"], archive_id)
    assert auditor.verify(edited)[1] == {"ok": False, "first_bad_leaf": stated[read_ref], "ref": read_ref,
                                         "problem": "the read does not match its leaf"}
    edited = json.loads(json.dumps(export))
    edited["evidence"]["leaves"][0]["leaf_hash"] = edited["evidence"]["leaves"][1]["leaf_hash"]
    code, out = auditor.verify(edited)
    assert code == 1 and "do not lead to the signed root" in out["problem"]
    edited = json.loads(json.dumps(export))
    del edited["events"][4]
    ref = leaves.event_ref(archive_id, 5)
    assert auditor.verify(edited)[1] == {"ok": False, "first_bad_leaf": stated[ref], "ref": ref,
                                         "problem": "the event is missing"}


def test_audit_verify_refuses_a_file_or_key_it_cannot_read(cli, tmp_path):
    key = tmp_path / "key.pub"
    key.write_text("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVoxMjM0NTY=\n")
    (tmp_path / "bad.json").write_text("{not json")
    for file, given, problem in (("none.json", str(key), "cannot be read"), ("bad.json", str(key), "not a JSON file"),
                                 ("bad.json", "c2hvcnQ=", "not the base64 of a 32-byte")):
        code, out, err = cli("audit", "verify", str(tmp_path / file), "--public-key", given)
        assert (code, out, err["error"]) == (2, "", "invalid_request") and problem in err["message"], err
    (tmp_path / "plain.json").write_text(json.dumps({"schema": "bailing.agent-conversation-audit-export.v1"}))
    code, out, _ = cli("audit", "verify", str(tmp_path / "plain.json"), "--public-key", str(key))
    assert code == 1 and out["ok"] is False and "no \"evidence\" object" in out["problem"]


def _tamper_and_check(auditor, sql, archive_id: str, statements: list[str], ref: str, problem: str) -> None:
    for statement in statements:
        sql(statement, {"a": archive_id})
    code, out = auditor.verify(auditor.export(archive_id))
    assert (code, out) == (1, {"ok": False, "first_bad_leaf": leaf_of(sql, ref), "ref": ref, "problem": problem})


def test_each_change_made_in_sql_is_named_at_its_first_bad_leaf(hub, auditor, sql):
    names = ("changed", "deleted", "reordered", "truncated", "unread")
    archives = {name: small_archive(hub, f"conv-{name}") for name in names}
    for archive_id in archives.values():
        assert auditor.reader.get(f"/console/conversations/{archive_id}").status_code == 200
        code, out = auditor.verify(auditor.export(archive_id))
        assert (code, out["ok"]) == (0, True), out
    events = "bz_agent_conversation_events"
    where = "archive_id = %(a)s AND sequence"

    a = archives["changed"]
    _tamper_and_check(auditor, sql, a, [f"UPDATE {events} SET content = 'approved' WHERE {where} = 3",
                                        f"UPDATE {events} SET content = 'approved too' WHERE {where} = 7"],
                      leaves.event_ref(a, 3), "the event does not match its leaf")
    a = archives["deleted"]
    _tamper_and_check(auditor, sql, a, [f"DELETE FROM {events} WHERE {where} = 6"],
                      leaves.event_ref(a, 6), "the event is missing")
    a = archives["reordered"]  # the question and the answer of the first turn swap places
    _tamper_and_check(auditor, sql, a, [f"UPDATE {events} SET sequence = 1000 WHERE {where} = 2",
                                        f"UPDATE {events} SET sequence = 2 WHERE {where} = 3",
                                        f"UPDATE {events} SET sequence = 3 WHERE {where} = 1000"],
                      leaves.event_ref(a, 2), "the event does not match its leaf")
    a = archives["truncated"]
    _tamper_and_check(auditor, sql, a, [f"DELETE FROM {events} WHERE {where} > 6",
                                        "UPDATE bz_agent_conversation_archives SET last_sequence = 6 WHERE id = %(a)s"],
                      leaves.event_ref(a, 7), "the event is missing")
    a = archives["unread"]  # the console page's read of it disappears from the access log
    read = sql("SELECT min(id) FROM bz_access_log WHERE target = %s", (a,))[0][0]
    _tamper_and_check(auditor, sql, a, [f"DELETE FROM bz_access_log WHERE id = {int(read)}"],
                      leaves.access_ref(read, a), "the read is missing")


def test_a_redacted_message_still_verifies_and_shows_its_redaction(app, hub, auditor, sql):
    archive_id = small_archive(hub, "conv-redacted")
    with app.extensions["bailing"].db.session() as db:
        done = redaction.redact(db, [(uuid.UUID(archive_id), 2)], "erasure", "erasure-7", "ada")
    assert done.count == 1
    export = auditor.export(archive_id)
    event = export["events"][1]
    assert event["content"] is None and event["redaction"]["basis"] == "erasure"
    assert {k: event["redaction"][k] for k in ("basis_ref", "actor")} == {"basis_ref": "erasure-7", "actor": "ada"}
    ref = leaves.redaction_ref(archive_id, 2)
    assert event["evidence"]["redaction_leaf_index"] == leaf_of(sql, ref) and "salt" not in event["evidence"]
    code, out = auditor.verify(export)
    assert (code, out["ok"]) == (0, True), out
    # The redaction's record changed afterwards: its own leaf no longer verifies.
    sql("UPDATE bz_evidence_redactions SET basis = 'retention' WHERE archive_id = %s", (archive_id,))
    code, out = auditor.verify(auditor.export(archive_id))
    assert (code, out) == (1, {"ok": False, "first_bad_leaf": leaf_of(sql, ref), "ref": ref,
                               "problem": "the redaction does not match its leaf"})


def test_a_multi_leaf_proof_recomputes_the_root_and_refuses_a_subtree_hiding_a_leaf():
    hashes = [merkle.leaf_hash(str(i).encode()) for i in range(1000)]
    tree = merkle.ListSubtrees(hashes)
    for size, stated in ((1, [0]), (7, [6]), (1000, list(range(100, 150)) + list(range(400, 450)) + [999]),
                         (1000, []), (513, [0, 256, 512])):
        keys = merkle.multi_proof_subtrees(stated, size)
        assert len(keys) == len(set(keys))
        nodes = {key: tree(*key) for key in keys}
        assert merkle.root_from_multi_proof(size, {i: hashes[i] for i in stated}, nodes) == tree.root(size)
    # 50 contiguous leaves of 1,000 take a handful of subtrees, not 50 inclusion paths.
    assert len(merkle.multi_proof_subtrees(list(range(100, 150)), 1000)) == 13
    nodes = {key: tree(*key) for key in merkle.multi_proof_subtrees([5], 8)}
    with pytest.raises(ProofError, match="does not cover leaf 5"):
        merkle.root_from_multi_proof(8, {}, nodes)
    with pytest.raises(ProofError, match=r"subtree \(1, 2\) covers stated leaf 5"):
        merkle.root_from_multi_proof(8, {5: hashes[0]}, {**nodes, (1, 2): tree(1, 2)})
