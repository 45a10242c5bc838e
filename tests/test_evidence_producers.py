"""Every record the hub keeps is a leaf of the evidence log, written in the record's own
transaction (issue 33): conversation events (a message through its salted commitment), access-log
rows, approval decisions and admin events. Each leaf is recomputed from the row as stored; a
redaction removes a message's text and salt and every leaf still verifies."""
from __future__ import annotations

import uuid

import requests

from admin_app.conversation_audit.redaction import redact
from admin_app.evidence import leaves, merkle
from admin_app.integrity.covered import mismatches
from tests.helpers import PASSWORD, admin_token, bearer


def leaf_rows(sql, kind: str | None = None) -> list[tuple]:
    where = "WHERE kind = %s" if kind else ""
    return [(i, k, r, bytes(h)) for i, k, r, h in
            sql(f"SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves {where} ORDER BY idx",
                (kind,) if kind else None)]


def check(app, rows) -> list[tuple]:
    with app.extensions["bailing"].db.session() as db:
        return mismatches(db, rows)


def test_events_are_leaves_committing_to_salted_text_and_verify_as_stored(hub, app, sql):
    archive_id = hub.archive("conv-evidence")
    events = hub.exchange(archive_id, 1, "t1", "What is 2+2?", "4")
    hub.append(archive_id, events)
    rows = leaf_rows(sql, leaves.EVENT)
    assert [r[2] for r in rows] == [leaves.event_ref(archive_id, n) for n in range(1, 5)]
    assert [r[0] for r in rows] == list(range(rows[0][0], rows[0][0] + 4))  # contiguous, one batch
    salts = sql("SELECT sequence, content_salt, content FROM bz_agent_conversation_events "
                "WHERE archive_id = %s ORDER BY sequence", (archive_id,))
    assert [(s, c) for s, salt, c in salts if salt is not None] == [(2, "What is 2+2?"), (3, "4")]
    assert all(len(bytes(salt)) == 16 for _, salt, _ in salts if salt is not None)
    # The leaf of message 2 holds SHA-256(salt || text), never the text.
    salt = bytes(salts[1][1])
    expected = leaves.event_data(archive_id, {**events[1], "sequence": 2}, leaves.commitment(salt, "What is 2+2?"))
    assert merkle.leaf_hash(expected) == rows[1][3]
    assert b"2+2" not in expected
    assert check(app, leaf_rows(sql)) == []
    # A retry of the same batch adds nothing, to the archive or to the log.
    hub.append(archive_id, events)
    assert leaf_rows(sql, leaves.EVENT) == rows


def test_a_refused_batch_appends_no_leaf(hub, sql):
    archive_id = hub.archive("conv-refused")
    hub.append(archive_id, hub.exchange(archive_id, 1, "t1", "q", "a"))
    before = leaf_rows(sql)
    bad = hub.exchange(archive_id, 9, "t2", "q", "a")  # a gap: 409
    response = hub.server.post(f"/agent-api/v1/conversation-audits/{archive_id}/events", headers=hub.headers(),
                               json={"events": bad})
    assert response.status_code == 409, response.text
    assert leaf_rows(sql) == before


def test_tampering_with_an_event_is_named_by_its_leaf(hub, app, sql):
    archive_id = hub.archive("conv-tamper")
    hub.append(archive_id, hub.exchange(archive_id, 1, "t1", "first question", "first answer")
               + hub.exchange(archive_id, 5, "t2", "second question", "second answer"))
    rows = leaf_rows(sql, leaves.EVENT)
    sql("UPDATE bz_agent_conversation_events SET content = 'forged' WHERE archive_id = %s AND sequence = 7",
        (archive_id,))
    assert check(app, rows) == [(rows[6][0], rows[6][2], "the row no longer matches its leaf")]
    sql("DELETE FROM bz_agent_conversation_events WHERE archive_id = %s AND sequence = 3", (archive_id,))
    assert [b[0] for b in check(app, rows)] == [rows[2][0], rows[6][0]]
    assert check(app, rows)[0][2] == "the row is gone"


def test_a_redaction_removes_text_and_salt_and_every_leaf_still_verifies(hub, app, sql):
    archive_id = hub.archive("conv-redact")
    hub.append(archive_id, hub.exchange(archive_id, 1, "t1", "my card is 4111 1111", "noted"))
    with app.extensions["bailing"].db.session() as db:
        done = redact(db, [(uuid.UUID(archive_id), 2), (uuid.UUID(archive_id), 1)], "erasure", "request-1", "ada")
        db.commit()
    assert (done.count, done.archives) == (1, 1)  # 1 is a turn_start: it has no text
    stored = sql("SELECT content, content_salt, body_sha256 FROM bz_agent_conversation_events "
                 "WHERE archive_id = %s AND sequence = 2", (archive_id,))
    assert stored[0][:2] == (None, None)
    redaction = sql("SELECT basis, basis_ref, actor, leaf_idx FROM bz_evidence_redactions WHERE archive_id = %s",
                    (archive_id,))
    assert redaction[0][:3] == ("erasure", "request-1", "ada")
    assert leaf_rows(sql)[-1][2] == leaves.redaction_ref(archive_id, 2) == sql(
        "SELECT ref FROM bz_evidence_leaves WHERE idx = %s", (redaction[0][3],))[0][0]
    assert check(app, leaf_rows(sql)) == []
    # Removing text behind the log's back (no redaction of the hub's) is seen.
    sql("UPDATE bz_agent_conversation_events SET content = NULL WHERE archive_id = %s AND sequence = 3",
        (archive_id,))
    bad = check(app, leaf_rows(sql))
    assert [(ref, why) for _, ref, why in bad] == [(leaves.event_ref(archive_id, 3),
                                                   "the message's text is gone without a redaction")]


def test_reads_decisions_and_admin_events_are_leaves_of_their_own_transactions(hub, app, sql, cli, server):
    approver = bearer(admin_token(cli, "approver-one", "approver"))
    admin_events = leaf_rows(sql, leaves.ADMIN_EVENT)
    assert len(admin_events) >= 2  # the approver's account and its token
    archive_id, _run = hub.traced_conversation()
    reader = requests.Session()
    hub.admin("support", "support-one")
    page = reader.get(server.url + "/console/login", timeout=60).text
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    reader.post(server.url + "/console/login", timeout=60, allow_redirects=False,
                data={"username": "support-one", "password": PASSWORD, "csrf_token": token})
    assert reader.get(f"{server.url}/console/conversations/{archive_id}", timeout=60).status_code == 200
    reads = leaf_rows(sql, leaves.ACCESS)
    ids = sql("SELECT id, target FROM bz_access_log ORDER BY id")
    assert [r[2] for r in reads] == [leaves.access_ref(i, t) for i, t in ids] and reads
    assert reads[-1][2] == f"access:{archive_id}:{ids[-1][0]}"
    listed = server.get("/admin/api/tool-approvals", params={"status": "pending"}, headers=approver).json()
    pending = listed["items"][0]
    decided = server.post(f"/admin/api/tool-approvals/{pending['approval_id']}/approve", headers=approver,
                          json={"args_hash": pending["args_hash"]})
    assert decided.status_code == 200, decided.text
    (approval,), = sql("SELECT id FROM bz_tool_approvals WHERE status = 'approved'")
    decisions = leaf_rows(sql, leaves.DECISION)
    assert [r[2] for r in decisions] == [leaves.decision_ref(approval)]
    assert check(app, leaf_rows(sql)) == []
    sql("UPDATE bz_tool_approvals SET decided_by = 'someone else' WHERE id = %s", (approval,))
    sql("DELETE FROM bz_access_log WHERE id = %s", (ids[-1][0],))
    sql("UPDATE bz_admin_events SET actor = 'nobody' WHERE id = (SELECT min(id) FROM bz_admin_events)")
    bad = {ref: why for _, ref, why in check(app, leaf_rows(sql))}
    assert bad == {leaves.decision_ref(approval): "the row no longer matches its leaf",
                   leaves.access_ref(*ids[-1]): "the row is gone",
                   admin_events[0][2]: "the row no longer matches its leaf"}
