"""Issue 16 item 5: every read of a transcript, snapshot, export or run trace through /admin/api
is in the access log, like the console's, with the admin and the token (its id) that read it.
The record commits with the read: an answered read is recorded, a refused one leaves nothing.

Everything goes over real HTTP to a live server on a real PostgreSQL; SQL only checks what was
(not) written."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from tests.test_audit_admin_and_limits import appended, create_v1, ev, said
from tests.test_console_server import signed_in
from tests.test_tool_invocations import CUSTOMER, ROUTE, Admin, Agent, awaiting, job_id_of

ROW = "admin_id, username, action, target, channel, admin_token_id"


@dataclass
class World:
    archive: str
    run: str
    thread: int
    job: str
    approval: dict
    root: Admin
    root_id: int
    token_id: int


def token_id_of(sql, username: str) -> int:
    [(token_id,)] = sql("SELECT t.id FROM bz_admin_tokens t JOIN bz_admins a ON a.id = t.admin_id "
                        "WHERE a.username = %s", (username,))
    return token_id


@pytest.fixture
def world(server, governed, business, cli, sql) -> World:
    agent = Agent(server, governed)
    archive = create_v1(server, governed, route=ROUTE)
    appended(server, governed, archive, [ev(1, "turn_start"), said(2, text="MSG-ONE"), said(3, text="MSG-TWO")])
    turn = server.post(f"/agent-api/v1/workspaces/{ROUTE}/turns", headers=agent.headers, json={
        "client_conversation_id": "conv-1", "client_turn_id": "turn-1", "user_message_id": "msg-1",
        "user_input": "What is the credit limit of our Berlin customer?"})
    assert turn.status_code == 200, turn.text
    run = turn.json()["run_id"]
    [(thread,)] = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))
    assert agent.invoke("customer_get", CUSTOMER, "inv-traced", run_id=run)["status"] == "executed"
    awaiting(agent)
    root = Admin(server, cli, "root", "admin")
    [approval] = root.approvals("pending")
    [(root_id,)] = sql("SELECT id FROM bz_admins WHERE username = 'root'")
    assert sql("SELECT count(*) FROM bz_access_log") == [(0,)]  # listing approvals reads no snapshot
    return World(archive, run, thread, job_id_of(sql, "inv-traced"), approval, root, root_id,
                 token_id_of(sql, "root"))


# Each read: its path, the action recorded, and the target (the canonical id of what was read).
READS = {
    "transcript": (lambda w: f"/conversation-audits/{w.archive}", "transcript_view", lambda w: w.archive),
    "transcript page": (lambda w: f"/conversation-audits/{w.archive}?after_sequence=1&limit=1",
                        "transcript_view", lambda w: w.archive),
    "run trace": (lambda w: f"/agent-runs/{w.run}", "run_trace_view", lambda w: w.run),
    "run trace, upper case": (lambda w: f"/agent-runs/{w.run.upper()}", "run_trace_view", lambda w: w.run),
    "thread run trace": (lambda w: f"/threads/{w.thread}/agent-runs/{w.run}/trace", "run_trace_view",
                         lambda w: w.run),
    "tool job": (lambda w: f"/tool-jobs/{w.job}", "job_trace_view", lambda w: w.job),
    "job run trace": (lambda w: f"/runs/{w.job}/trace", "job_trace_view", lambda w: w.job),
    "snapshot": (lambda w: f"/tool-approvals/{w.approval['id']}/snapshot", "snapshot_view",
                 lambda w: w.approval["id"]),
    "snapshot by number": (lambda w: f"/tool-approvals/{w.approval['approval_id']}/snapshot",
                           "snapshot_view", lambda w: w.approval["id"]),
    "snapshot download": (lambda w: f"/tool-approvals/{w.approval['id']}/snapshot?download=1",
                          "snapshot_download", lambda w: w.approval["id"]),
}


@pytest.mark.parametrize("read", READS)
def test_an_api_read_is_recorded_with_its_admin_and_token(world, sql, read):
    path, action, target = READS[read]
    response = world.root.get(path(world))
    assert response.status_code == 200, response.text[:500]
    assert sql(f"SELECT {ROW} FROM bz_access_log") == [
        (world.root_id, "root", action, target(world), "api", world.token_id)]


def test_each_read_is_a_row_of_its_own_and_names_the_token_used(world, server, cli, sql):
    second = cli("admins", "token", "root")[1]["token"]
    second_id = sql("SELECT max(id) FROM bz_admin_tokens")[0][0]
    assert second_id != world.token_id
    assert world.root.get(f"/agent-runs/{world.run}").status_code == 200
    response = server.get(f"/admin/api/agent-runs/{world.run}", headers={"Authorization": f"Bearer {second}"})
    assert response.status_code == 200, response.text
    assert sql("SELECT admin_token_id, target FROM bz_access_log ORDER BY id") == [
        (world.token_id, world.run), (second_id, world.run)]


def unknown(w: World) -> dict:
    other = str(uuid.uuid4())
    return {"transcript": f"/conversation-audits/{other}", "run trace": f"/agent-runs/{other}",
            "thread run trace": f"/threads/{w.thread + 1}/agent-runs/{w.run}/trace",
            "tool job": f"/tool-jobs/{other}", "job run trace": f"/runs/{other}/trace",
            "snapshot": f"/tool-approvals/{other}/snapshot"}


@pytest.mark.parametrize("read", ["transcript", "run trace", "thread run trace", "tool job", "job run trace",
                                  "snapshot"])
def test_a_read_of_something_unknown_is_404_and_records_nothing(world, sql, read):
    response = world.root.get(unknown(world)[read])
    assert response.status_code == 404, response.text
    assert sql("SELECT count(*) FROM bz_access_log") == [(0,)]


@pytest.mark.parametrize("role, read", [
    ("approver", "transcript"), ("approver", "run trace"), ("approver", "thread run trace"),
    ("approver", "tool job"), ("approver", "job run trace"),
    ("support", "snapshot"), ("support", "snapshot download"),
])
def test_a_read_without_the_permission_is_403_and_records_nothing(world, server, cli, sql, role, read):
    reader = Admin(server, cli, f"reader-{role}", role)
    path, _, _ = READS[read]
    response = reader.get(path(world))
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "forbidden"
    assert sql("SELECT count(*) FROM bz_access_log") == [(0,)]


@pytest.mark.parametrize("read", ["transcript", "run trace", "tool job", "snapshot"])
def test_a_read_with_a_revoked_or_missing_token_is_401_and_records_nothing(world, server, cli, sql, read):
    path, _, _ = READS[read]
    assert server.get("/admin/api" + path(world)).status_code == 401
    code, _, err = cli("admins", "tokens", "revoke", "root", "--all")
    assert code == 0, err
    assert world.root.get(path(world)).status_code == 401
    assert sql("SELECT count(*) FROM bz_access_log") == [(0,)]


def test_a_read_whose_record_cannot_commit_is_not_answered(world, sql):
    """The record is committed before the answer leaves: when the commit fails (here a deferred
    trigger refuses it at COMMIT), the reader gets an error, not the transcript."""
    sql("CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$")
    sql("CREATE CONSTRAINT TRIGGER refuse_reads AFTER INSERT ON bz_access_log "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()")
    response = world.root.get(f"/conversation-audits/{world.archive}")
    assert response.status_code >= 500
    assert "MSG-ONE" not in response.text and "MSG-TWO" not in response.text
    assert sql("SELECT count(*) FROM bz_access_log") == [(0,)]


def test_console_and_api_reads_share_the_log_and_its_page(world, server, sql):
    browser = signed_in(server.url, "root")
    assert browser.get(f"/console/runs/{world.run}").status_code == 200
    assert world.root.get(f"/agent-runs/{world.run}").status_code == 200
    assert sql(f"SELECT {ROW} FROM bz_access_log ORDER BY id") == [
        (world.root_id, "root", "run_trace_view", world.run, "console", None),
        (world.root_id, "root", "run_trace_view", world.run, "api", world.token_id)]
    page = browser.get("/console/access-log")
    assert page.status_code == 200
    assert f"API token #{world.token_id}" in page.text and '<td data-label="Through">console</td>' in page.text


def test_the_log_refuses_a_row_whose_channel_and_token_disagree(world, sql):
    """The schema itself keeps the rule: an API row names a token, a console row none."""
    import psycopg

    for channel, token in (("api", None), ("console", world.token_id)):
        with pytest.raises(psycopg.errors.CheckViolation):
            sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel, admin_token_id) "
                "VALUES (%s, 'root', 'run_trace_view', 'x', %s, %s)", (world.root_id, channel, token))
