"""`bailing-admin evidence backfill` (issue 33): the records a hub stored before the evidence log
covered them (no leaf, messages without a salt) each get exactly one leaf, with the producers'
formula; a second run appends nothing; a run stopped half-way resumes; a record already damaged
gets no leaf and is reported."""
from __future__ import annotations

import requests

from admin_app.evidence import leaves
from admin_app.evidence.verify import check
from admin_app.integrity import backfill
from admin_app.integrity.covered import mismatches
from tests.helpers import PASSWORD, admin_token, bearer


def leaf_rows(sql) -> list[tuple]:
    return [(i, k, r, bytes(h)) for i, k, r, h in
            sql("SELECT idx, kind, ref, leaf_hash FROM bz_evidence_leaves ORDER BY idx")]


def expected_refs(sql) -> set[str]:
    """The ref of every record the log covers, from the tables as they stand."""
    refs = {leaves.event_ref(a, s) for a, s in sql("SELECT archive_id, sequence FROM bz_agent_conversation_events")}
    refs |= {leaves.access_ref(i, t) for i, t in sql("SELECT id, target FROM bz_access_log")}
    refs |= {leaves.admin_event_ref(i) for (i,) in sql("SELECT id FROM bz_admin_events")}
    refs |= {leaves.decision_ref(i) for (i,) in sql("SELECT id FROM bz_tool_approvals WHERE decided_at IS NOT NULL")}
    refs |= {f"bz_config_audit:{i}" for (i,) in sql("SELECT id FROM bz_config_audit")}
    return refs


def records(hub, cli, server, sql) -> str:
    """Some of every kind: admin events, a traced conversation, a console read, a decision."""
    approver = bearer(admin_token(cli, "approver-one", "approver"))
    archive_id, _run = hub.traced_conversation()
    hub.admin("support", "support-one")
    reader = requests.Session()
    page = reader.get(server.url + "/console/login", timeout=60).text
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    reader.post(server.url + "/console/login", timeout=60, allow_redirects=False,
                data={"username": "support-one", "password": PASSWORD, "csrf_token": token})
    assert reader.get(f"{server.url}/console/conversations/{archive_id}", timeout=60).status_code == 200
    pending = server.get("/admin/api/tool-approvals", params={"status": "pending"}, headers=approver).json()["items"][0]
    decided = server.post(f"/admin/api/tool-approvals/{pending['approval_id']}/approve", headers=approver,
                          json={"args_hash": pending["args_hash"]})
    assert decided.status_code == 200, decided.text
    return archive_id


def as_before_084(sql) -> None:
    """The log as a hub before 084/085 had it: no leaves, no heads, no message salts."""
    sql("TRUNCATE bz_evidence_leaves, bz_evidence_nodes, bz_evidence_heads")
    sql("UPDATE bz_agent_conversation_events SET content_salt = NULL")


def all_verify(app, sql) -> list:
    with app.extensions["bailing"].db.session() as db:
        return mismatches(db, leaf_rows(sql))


def test_backfill_gives_every_older_record_one_leaf_and_a_second_run_appends_nothing(hub, app, sql, cli, server):
    archive_id = records(hub, cli, server, sql)
    as_before_084(sql)
    # Rows written straight into the tables, as an older hub wrote them: a message, a read.
    sql("INSERT INTO bz_agent_conversation_events (archive_id, sequence, event_id, client_turn_id, kind, content, "
        "body_sha256) VALUES (%s, 10, 'old-1', 'turn-9', 'user_message', 'an older question', repeat('0', 64))",
        (archive_id,))
    sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel) "
        "SELECT id, username, 'transcript_view', %s, 'console' FROM bz_admins LIMIT 1", (archive_id,))
    messages = sql("SELECT count(*) FROM bz_agent_conversation_events WHERE kind LIKE '%%_message'")[0][0]
    wanted = expected_refs(sql)
    assert len(wanted) >= 20 and messages >= 5

    code, out, err = cli("evidence", "backfill", "--batch", "3")  # many batches, each committed
    assert code == 0, (out, err)
    assert out["appended"] == len(wanted)
    assert out["kinds"][leaves.EVENT]["salted"] == messages
    assert all(kind["problems"] == 0 for kind in out["kinds"].values())
    rows = leaf_rows(sql)
    assert [r[0] for r in rows] == list(range(len(wanted)))  # contiguous from 0
    assert sorted(r[2] for r in rows) == sorted(wanted)  # each record exactly once
    assert sql("SELECT count(*) FROM bz_agent_conversation_events WHERE kind LIKE '%%_message' "
               "AND content_salt IS NULL")[0][0] == 0
    assert all_verify(app, sql) == []
    # The events of one archive were appended in sequence order.
    seqs = [int(r[2].rsplit(":", 1)[1]) for r in rows if r[2].startswith(leaves.event_prefix(archive_id))]
    assert seqs == sorted(seqs) and seqs[-1] == 10
    # The tree the backfill built is the one a signed head covers.
    assert cli("evidence", "head")[0] == 0
    with app.extensions["bailing"].db.session() as db:
        report = check(db)
    assert report["ok"], report

    code, again, _ = cli("evidence", "backfill")
    assert code == 0 and again["appended"] == 0
    assert again["kinds"][leaves.EVENT]["rows"] == len([r for r in wanted if r.startswith("event:")])
    assert leaf_rows(sql) == rows


def test_a_stopped_backfill_resumes_and_a_damaged_record_gets_no_leaf(hub, app, sql, cli, server):
    archive_id = records(hub, cli, server, sql)
    as_before_084(sql)
    # One batch of events only, as a run stopped after its first commit.
    counts = backfill.Counts()
    with app.extensions["bailing"].db.session() as db:
        cursor = backfill.batch(db, leaves.EVENT, None, 4, counts)
    assert cursor is not None and counts.appended == 4
    first = leaf_rows(sql)
    # A message whose text went without a redaction: a leaf now would certify the damage.
    sql("UPDATE bz_agent_conversation_events SET content = NULL WHERE archive_id = %s AND sequence = 7",
        (archive_id,))

    code, out, _ = cli("evidence", "backfill", "--batch", "5")
    assert code == 1
    assert out["kinds"][leaves.EVENT]["problems"] == 1
    assert out["kinds"][leaves.EVENT]["first_problems"] == [
        {"ref": leaves.event_ref(archive_id, 7), "problem": "the message's text is gone without a redaction"}]
    rows = leaf_rows(sql)
    assert rows[:len(first)] == first  # the first run's leaves kept, none appended twice
    refs = [r[2] for r in rows]
    assert len(refs) == len(set(refs)) == len(expected_refs(sql)) - 1
    assert leaves.event_ref(archive_id, 7) not in refs
    assert all_verify(app, sql) == []


def test_a_batch_out_of_range_is_refused_and_appends_nothing(hub, cli, sql):
    before = leaf_rows(sql)
    for size in ("0", "50001"):
        code, _out, err = cli("evidence", "backfill", "--batch", size)
        assert code == 2 and "--batch" in str(err)
    assert leaf_rows(sql) == before
