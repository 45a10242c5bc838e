"""Hub pause (BUSINESS_SIDE.md § E): Core's POST /admin/pause and /admin/resume, the same change
from `bailing-admin pause|resume` and the console, what it refuses while paused (turns, governed
calls and their resumes, with 503 `hub_paused` before the body is read and nothing written or
sent), what it lets through (reads, completion, approval decisions, the admin side), and the
state as every process of the hub sees it: a second app on the same database, /health, the
`bailinghub_runtime_paused` metric, GET /admin/api/status and the console's banner."""
from __future__ import annotations

import hashlib
import json
import re

import pytest

from admin_app import create_app, limits
from tests.conftest import serve
from tests.helpers import admin_token, assert_error, bearer, cli_ok, cli_refused, make_admin, row_counts
from tests.test_console_server import flashes, location, signed_in

PAUSE, RESUME, STATUS = "/admin/pause", "/admin/resume", "/admin/api/status"
ROUTE = "desk"
TURNS = f"/agent-api/v1/workspaces/{ROUTE}/turns"
INVOCATIONS = "/agent-api/v1/tool-invocations"
PAUSED_BODY = {"error": "hub_paused", "status": "paused"}
NOT_PERMITTED = {"error": "当前角色无此权限"}
# What a refused request must leave as it was.
TABLES = ("bz_runs", "bz_messages", "bz_threads", "bz_tool_invocations", "bz_tool_approvals", "bz_tool_journal",
          "bz_admin_events")


def iid(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def pause_row(sql) -> tuple:
    return sql("SELECT paused, reason, actor, changed_at FROM bz_hub_pause")[0]


def trail(sql) -> list[tuple]:
    return sql("SELECT actor, action, target, detail->>'reason', detail->>'channel', (detail->>'changed')::boolean "
               "FROM bz_admin_events WHERE action IN ('hub_paused', 'hub_resumed') ORDER BY id")


def core_answer(response, status: int, body: dict) -> None:
    assert response.status_code == status, response.text
    assert response.json() == body
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    assert response.headers["Cache-Control"] == "no-store"


def assert_paused(response) -> None:
    body = assert_error(response, 503, "hub_paused")
    assert {k: body[k] for k in PAUSED_BODY} == PAUSED_BODY


class Agent:
    """The `governed` session on route `desk`."""

    def __init__(self, server, session: dict):
        self.server, self.headers = server, bearer(session["access_token"])

    def turn_raw(self, n: int, **kwargs):
        kwargs.setdefault("json", {"client_conversation_id": "conv-1", "client_turn_id": f"turn-{n}",
                                   "user_message_id": f"msg-{n}", "user_input": "Look up ACME"})
        return self.server.post(TURNS, headers=self.headers, **kwargs)

    def revision(self) -> str:
        response = self.server.get(f"/agent-api/v1/tools?route={ROUTE}", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()["capability_revision"]

    def invoke_raw(self, label: str, tool: str = "customer_get", arguments: dict | None = None):
        body = {"invocation_id": iid(label), "route": ROUTE, "capability_revision": self.revision(),
                "tool": tool, "arguments": arguments or {"customer_id": "C-100234"}}
        return self.server.post(INVOCATIONS, json=body, headers=self.headers)

    def resume_raw(self, label: str, **kwargs):
        return self.server.post(f"{INVOCATIONS}/{iid(label)}/resume", headers=self.headers, **kwargs)


@pytest.fixture
def boss(cli) -> str:
    return admin_token(cli, "boss", "admin")


# ================================================================ POST /admin/pause and /resume

def test_an_admin_pauses_and_resumes_idempotently_and_each_call_is_recorded(server, boss, sql):
    core_answer(server.post(PAUSE, headers=bearer(boss), json={"reason": "Payroll migration"}), 200,
                {"paused": True})
    paused = pause_row(sql)
    assert paused[:3] == (True, "Payroll migration", "boss")
    # As Core's clients send it: no body at all. Still paused, since the first pause.
    core_answer(server.post(PAUSE, headers=bearer(boss)), 200, {"paused": True})
    assert pause_row(sql) == paused
    status = server.get(STATUS, headers=bearer(boss))
    assert status.status_code == 200 and status.headers["Cache-Control"] == "no-store"
    assert status.json()["paused"] is True
    assert status.json()["pause"]["reason"] == "Payroll migration"
    assert status.json()["pause"]["changed_by"] == "boss"

    core_answer(server.post(RESUME, headers=bearer(boss), data=b"{}"), 200, {"paused": False})
    core_answer(server.post(RESUME, headers=bearer(boss)), 200, {"paused": False})
    assert pause_row(sql)[:3] == (False, None, "boss")
    assert server.get(STATUS, headers=bearer(boss)).json()["paused"] is False
    assert trail(sql) == [("boss", "hub_paused", "hub", "Payroll migration", "api", True),
                          ("boss", "hub_paused", "hub", None, "api", False),
                          ("boss", "hub_resumed", "hub", None, "api", True),
                          ("boss", "hub_resumed", "hub", None, "api", False)]


@pytest.mark.parametrize("role", ["auditor", "approver", "support"])
def test_other_roles_are_403_as_core_answers_and_nothing_is_recorded(server, cli, sql, role):
    token = admin_token(cli, "carl", role)
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    for path in (PAUSE, RESUME):
        core_answer(server.post(path, headers=bearer(token), json={"reason": "no"}), 403, NOT_PERMITTED)
    assert server.get(STATUS, headers=bearer(token)).json()["paused"] is False  # reading is any admin's
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


def test_strangers_are_401_and_other_methods_404(server, boss, sql):
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    for path in (PAUSE, RESUME):
        core_answer(server.post(path), 401, {"error": "unauthorized"})
        core_answer(server.post(path, headers=bearer("bha_" + "x" * 43)), 401, {"error": "unauthorized"})
        core_answer(server.post(path, headers={"Authorization": "Basic Ym9zczpw"}), 401, {"error": "unauthorized"})
        for method in ("GET", "PUT", "PATCH", "DELETE"):
            core_answer(server.request(method, path, headers=bearer(boss)), 404, {"error": "not found"})
    assert server.get(STATUS).status_code == 401
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


@pytest.mark.parametrize("body, status, code", [
    ({"reason": "x" * (limits.PAUSE_REASON_MAX + 1)}, 400, "invalid_request"),
    ({"reason": "two\nlines"}, 400, "invalid_request"),
    ({"reason": "   "}, 400, "invalid_request"),
    ({"reason": 7}, 400, "invalid_request"),
    ({"why": "unknown field"}, 400, "invalid_request"),
    ([1], 400, "invalid_request"),
    ({"reason": "r" * limits.PAUSE_BODY_MAX_BYTES}, 413, "request_too_large"),
])
def test_a_bad_reason_is_refused_and_changes_nothing(server, boss, sql, body, status, code):
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    assert_error(server.post(PAUSE, headers=bearer(boss), data=json.dumps(body)), status, code)
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


def test_a_reason_of_the_maximum_length_is_taken(server, boss, sql):
    reason = "é" * limits.PAUSE_REASON_MAX
    core_answer(server.post(PAUSE, headers=bearer(boss), json={"reason": reason}), 200, {"paused": True})
    assert pause_row(sql)[1] == reason


# ================================================================ what a pause refuses, and what not

def test_while_paused_turns_calls_and_resumes_are_refused_and_nothing_is_written_or_sent(
        server, cli, governed, business, sql, boss):
    agent = Agent(server, governed)
    # Before the pause: a turn (its run to complete later), a read whose result is stored, and a
    # write waiting for approval.
    turn = agent.turn_raw(1)
    assert turn.status_code == 200, turn.text
    run_id = turn.json()["run_id"]
    read = agent.invoke_raw("read")
    assert read.status_code == 200 and read.json()["status"] == "executed", read.text
    write = agent.invoke_raw("write", "customer_update_credit_limit",
                             {"customer_id": "C-100234", "credit_limit": 50000})
    assert write.json()["status"] == "awaiting_approval", write.text
    executions = business.executions()

    cli_ok(cli("pause", "--reason", "Incident 42"))
    before = row_counts(sql, *TABLES)
    assert_paused(agent.turn_raw(2))
    assert_paused(agent.invoke_raw("new-read"))
    assert_paused(agent.resume_raw("read"))  # even with its stable result stored
    assert_paused(agent.resume_raw("write"))
    # Checked before the body is read: a body that would be refused (too large, not JSON) is not.
    assert_paused(agent.turn_raw(3, data=b"x" * (limits.RUNTIME_BODY_MAX_BYTES + 1)))
    assert_paused(agent.resume_raw("read", data=b"not json"))
    assert_paused(server.post(INVOCATIONS, headers=agent.headers, data=b"{"))
    # Authentication still comes first.
    assert_error(server.post(TURNS, json={}), 401, "unauthorized")
    assert_error(server.post(f"{INVOCATIONS}/{iid('read')}/resume"), 401, "unauthorized")
    assert row_counts(sql, *TABLES) == before
    assert business.executions() == executions

    # Not refused: reads, the receipt, completion of a run, an approval decision, the admin side.
    assert server.get("/agent-api/v1/workspaces", headers=agent.headers).status_code == 200
    assert server.get(f"{INVOCATIONS}/{iid('read')}/receipt", headers=agent.headers).status_code == 200
    done = server.post(f"/agent-api/v1/runs/{run_id}/complete", headers=agent.headers,
                       json={"assistant_message_id": "asst-1", "status": "completed", "content": "Done."})
    assert done.status_code == 200, done.text
    approver = bearer(admin_token(cli, "ann", "approver"))
    pending = server.get("/admin/api/tool-approvals", headers=approver).json()["items"]
    assert len(pending) == 1
    decided = server.post(f"/admin/api/tool-approvals/{pending[0]['id']}/approve", headers=approver,
                          json={"args_hash": pending[0]["args_hash"]})
    assert decided.status_code == 200, decided.text
    assert business.executions() == executions  # approving sends nothing: the agent's resume does

    cli_ok(cli("resume"))
    assert agent.turn_raw(2).status_code == 200
    assert agent.invoke_raw("new-read").json()["status"] == "executed"
    assert agent.resume_raw("write").json()["status"] == "executed"
    assert len(business.executions()) == len(executions) + 2


def test_a_second_app_on_the_same_database_sees_the_pause_at_once(server, db_url, tmp_path, boss, issue_session):
    session = issue_session()
    other_app = create_app({"database_url": db_url, "data_dir": tmp_path / "other"})
    other = serve(other_app)
    try:
        turn = {"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m",
                "user_input": "Hello"}
        path = "/agent-api/v1/workspaces/customers/turns"
        core_answer(server.post(PAUSE, headers=bearer(boss), json={"reason": "Maintenance"}), 200, {"paused": True})
        assert_paused(other.post(path, json=turn, headers=bearer(session["access_token"])))
        assert other.get("/health").json()["paused"] is True
        assert other.get(STATUS, headers=bearer(boss)).json()["pause"]["reason"] == "Maintenance"
        core_answer(other.post(RESUME, headers=bearer(boss)), 200, {"paused": False})
        assert server.get("/health").json()["paused"] is False
        assert server.post(path, json=turn, headers=bearer(session["access_token"])).status_code == 200
    finally:
        other.stop()
        other_app.extensions["bailing"].db.dispose()


def _gauge(server) -> float:
    response = server.get("/metrics")
    assert response.status_code == 200
    found = re.search(r"^bailinghub_runtime_paused (\S+)$", response.text, re.M)
    assert found, response.text[:2000]
    return float(found.group(1))


def test_health_and_the_metric_follow_the_pause(server, boss):
    assert server.get("/health").json()["paused"] is False
    assert _gauge(server) == 0
    server.post(PAUSE, headers=bearer(boss))
    health = server.get("/health")
    assert health.status_code == 200 and health.json()["paused"] is True and health.json()["status"] == "ok"
    assert _gauge(server) == 1
    server.post(RESUME, headers=bearer(boss))
    assert server.get("/health").json()["paused"] is False
    assert _gauge(server) == 0


# ================================================================ bailing-admin pause | resume

def test_the_commands_pause_and_resume_and_are_recorded_as_the_operator(cli, sql):
    out = cli_ok(cli("pause", "--reason", "Nightly restore"))
    assert (out["paused"], out["reason"], out["changed"]) == (True, "Nightly restore", True)
    assert out["changed_by"].startswith("cli:")
    assert cli_ok(cli("pause", "--reason", "again"))["changed"] is False
    assert pause_row(sql)[1] == "Nightly restore"
    out = cli_ok(cli("resume", "--reason", "Restored"))
    assert (out["paused"], out["changed"]) == (False, True)
    assert [(a, r, c, ch) for _, a, _, r, c, ch in trail(sql)] == [
        ("hub_paused", "Nightly restore", "cli", True), ("hub_paused", "again", "cli", False),
        ("hub_resumed", "Restored", "cli", True)]


def test_the_pause_command_needs_a_good_reason_and_changes_nothing_without(cli, sql):
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    code, _, _ = cli("pause")
    assert code == 2  # click: --reason is required
    cli_refused(cli("pause", "--reason", "x" * (limits.PAUSE_REASON_MAX + 1)), "invalid_request")
    cli_refused(cli("pause", "--reason", " "), "invalid_request")
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


# ================================================================ the console

REASON = '<script>alert("x")</script> & disk swap'


def test_an_admin_pauses_in_the_console_and_every_page_shows_who_when_and_why(server, cli, sql):
    make_admin(cli, "boss", "admin")
    make_admin(cli, "aud", "auditor")
    boss = signed_in(server.url, "boss")
    page = boss.get("/console/pause")
    assert page.status_code == 200 and 'href="/console/pause"' in page.text
    assert 'id="hub-paused"' not in page.text

    response = boss.post("/console/pause", data={"csrf_token": boss.token(), "reason": REASON})
    assert response.status_code == 303
    assert flashes(boss.get(location(response)).text) == ["The hub is paused."]
    assert pause_row(sql)[:3] == (True, REASON, "boss")
    assert trail(sql) == [("boss", "hub_paused", "hub", REASON, "console", True)]

    auditor = signed_in(server.url, "aud")
    for browser, path in ((boss, "/console/admins/"), (auditor, "/console/conversations/")):
        html = browser.get(path).text
        banner = re.search(r'<div class="hub-paused" role="alert" id="hub-paused">(.*?)</div>', html, re.S)
        assert banner, path
        assert "by boss" in banner.group(1)
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; disk swap" in banner.group(1)
        assert "<script>alert" not in html
        assert "<time datetime=" in banner.group(1)
    assert 'href="/console/pause"' not in auditor.get("/console/conversations/").text

    response = boss.post("/console/resume", data={"csrf_token": boss.token(), "reason": ""})
    assert flashes(boss.get(location(response)).text) == ["The hub is running again."]
    assert 'id="hub-paused"' not in boss.get("/console/admins/").text
    assert pause_row(sql)[0] is False


@pytest.mark.parametrize("role", ["auditor", "approver", "support"])
def test_other_roles_get_no_control_in_the_console(server, cli, sql, role):
    make_admin(cli, "carl", role)
    browser = signed_in(server.url, "carl")
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    assert browser.get("/console/pause").status_code == 403
    token = browser.token()
    for path in ("/console/pause", "/console/resume"):
        assert browser.post(path, data={"csrf_token": token, "reason": "mine"}).status_code == 403
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


def test_console_refusals_change_nothing(server, cli, sql):
    make_admin(cli, "boss", "admin")
    boss = signed_in(server.url, "boss")
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    assert boss.post("/console/pause", data={"reason": "no token"}).status_code == 400  # CSRF
    for reason, message in (("", "A pause needs a reason."),
                            ("x" * (limits.PAUSE_REASON_MAX + 1), "reason: must be at most 500 characters")):
        response = boss.post("/console/pause", data={"csrf_token": boss.token(), "reason": reason})
        assert flashes(boss.get(location(response)).text) == [message]
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before


def test_a_console_session_may_call_the_core_endpoint_from_its_own_origin_only(server, cli, sql):
    make_admin(cli, "boss", "admin")
    boss = signed_in(server.url, "boss")
    before = (pause_row(sql), row_counts(sql, "bz_admin_events"))
    core_answer(boss.post(PAUSE, headers={"Origin": "https://evil.example"}), 403, {"error": "跨站请求被拒绝"})
    core_answer(boss.post(PAUSE), 403, {"error": "跨站请求被拒绝"})  # neither Origin nor Referer
    core_answer(boss.post(PAUSE, headers={"Origin": server.url, "Sec-Fetch-Site": "cross-site"}), 403,
                {"error": "跨站请求被拒绝"})
    assert (pause_row(sql), row_counts(sql, "bz_admin_events")) == before
    core_answer(boss.post(PAUSE, headers={"Origin": server.url}), 200, {"paused": True})
    core_answer(boss.post(RESUME, headers={"Referer": server.url + "/console/pause"}), 200, {"paused": False})
    assert [(a, c) for _, a, _, _, c, _ in trail(sql)] == [("hub_paused", "console"), ("hub_resumed", "console")]
