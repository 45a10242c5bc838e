"""`bailing-admin demo`: the seeding makes every situation the console is for, through the hub's
own APIs, and a second run adds nothing; the console waits for the seeding; what the demo prints
(console sign-ins, business users, the agent login command) works as printed; a taken port is
refused naming the option that changes it."""
from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
import requests

from admin_app.agent_sdk import AgentClient
from admin_app.cli import main
from admin_app.config_apply import apply as apply_config
from admin_app.demo import command
from admin_app.demo.approver import ConsentPage
from admin_app.demo.command import run_demo
from admin_app.demo.config import demo_config
from admin_app.demo.seed import LONG_ARCHIVE_EVENTS, demo_invocation_id
from tests.conftest import serve

COUNTED = ("bz_agent_sessions", "bz_runs", "bz_messages", "bz_tool_invocations", "bz_tool_approvals",
           "bz_tool_journal", "bz_agent_conversation_archives", "bz_agent_conversation_members",
           "bz_agent_conversation_events", "bz_admins", "bz_admin_tokens", "bz_knowledge_documents",
           "bz_agent_authorizations", "bz_client_apps", "bz_routes", "bz_tool_providers",
           "bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements", "bz_agent_task_invocations",
           "bz_agent_task_runs", "bz_agent_task_events")


def look(hub_url: str) -> dict:
    """What a browser and a probe see of the hub right now."""
    get = lambda path, **kw: requests.get(hub_url + path, timeout=30, allow_redirects=False, **kw)  # noqa: E731
    return {"console": get("/console/login"), "ready": get("/health/ready"), "live": get("/health/live"),
            "api": get("/agent-api/v1/workspaces")}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, databases, migrated_template):
    """The demo, prepared and seeded once for the module, and kept serving (hub and business system)."""
    from admin_app import create_app

    url = databases.create(template=migrated_template)
    app = create_app({"database_url": url, "data_dir": tmp_path_factory.mktemp("demo")})
    demo = command.start(app, "127.0.0.1", 0, reset=False, business_port=0, echo=lambda message: None)
    seen = {"prepared": look(demo.hub_url)}
    advance = demo.progress.advance

    def watched(steps: int) -> None:  # a look at the hub from inside the seeding, once
        advance(steps)
        if "seeding" not in seen:
            seen["seeding"] = look(demo.hub_url)

    demo.progress.advance = watched
    first = demo.seed(show_progress=False)
    del demo.progress.advance
    seen["seeded"] = look(demo.hub_url)
    yield SimpleNamespace(app=app, url=url, summary=first, demo=demo, seen=seen)
    demo.stop()
    app.extensions["bailing"].db.dispose()


@pytest.fixture
def admin_api(seeded):
    live = serve(seeded.app)
    token = json.loads(seeded.app.test_cli_runner().invoke(main, ["admins", "token", "demo-admin"]).stdout)["token"]

    def get(path: str) -> dict:
        response = live.get(path, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        return response.json()

    yield get
    live.stop()


def test_the_demo_makes_every_situation(seeded, admin_api):
    summary = seeded.summary
    archives = {a["conversation_id"]: a for a in admin_api("/admin/api/conversation-audits?limit=100")["items"]}
    assert len(archives) == 3
    long = archives[summary["long_archive"]]
    assert long["last_sequence"] == LONG_ARCHIVE_EVENTS and long["turn_count"] == LONG_ARCHIVE_EVENTS // 4
    # A v2 archive, its binding per member: the README's tour names only the credit review as v1.
    long_members = admin_api(f"/admin/api/conversation-audits/{summary['long_archive']}?limit=1")["members"]
    assert [(m["client_app_id"], m["route_key"]) for m in long_members] == [("crm-demo", "customers")]

    v1 = admin_api(f"/admin/api/conversation-audits/{summary['v1_archive']}")
    assert len(v1["members"]) == 2 and all(m["confirmed"] for m in v1["members"])
    assert all("client_app_id" not in m for m in v1["members"])  # a legacy v1 archive
    assert any(e["kind"] == "run_link" for e in v1["events"])

    v2 = admin_api(f"/admin/api/conversation-audits/{summary['v2_archive']}")
    assert v2["conversation"]["client_app_id"] == "erp-demo"  # the writer's binding
    assert {m["client_app_id"] for m in v2["members"]} == {"crm-demo", "erp-demo"}

    pending = admin_api("/admin/api/tool-approvals?status=pending")["items"]
    assert len(pending) >= 3
    assert max(a["snapshot_bytes"] for a in pending) >= 900 * 1024
    decided = [a for a in admin_api("/admin/api/tool-approvals?status=all&limit=100")["items"]
               if a["status"] != "pending"]
    assert {a["status"] for a in decided} == {"approved", "denied"}
    assert all(a["decided_by"] == "demo-admin" and a["decision_reason"] for a in decided)


def test_the_demo_covers_every_invocation_outcome(seeded):
    with psycopg.connect(seeded.url) as conn:
        statuses = dict(conn.execute("SELECT invocation_id, status FROM bz_tool_invocations").fetchall())
    assert statuses[demo_invocation_id("demo-read-acme")] == "executed"
    assert statuses[demo_invocation_id("demo-raise-acme")] == "executed"  # an approved write
    assert statuses[demo_invocation_id("demo-raise-northwind")] == "denied"
    assert statuses[demo_invocation_id("demo-read-contoso")] == "reconciliation_required"
    assert statuses[demo_invocation_id("demo-import-week-48")] == "awaiting_approval"


def test_the_demo_shows_task_control(seeded, admin_api):
    """Three tasks made and worked through the admin and agent APIs: one near its write budget
    (4 of 5 spent by real calls), one paused after some work, one cancelled."""
    tasks = seeded.summary["tasks"]
    listed = {t["task_id"]: t for t in admin_api("/admin/api/agent-tasks")["items"]}
    assert set(listed) == set(tasks.values())

    near = admin_api(f"/admin/api/agent-tasks/{tasks['near_budget']}")
    task = near["task"]
    assert (task["state"], task["revision"]) == ("active", 1)
    assert task["policy"]["max_write_calls"] == 5 and task["policy"]["expires_at"] is not None
    assert task["counters"] == {"write_reserved": 0, "write_consumed": 4, "active_permits": 0}
    note = ("customer_note_add", "consumed", "confirmed_dispatched")
    assert sorted((i["tool"], i["budget_state"], i["outcome"]) for i in near["invocations"]) == [
        ("customer_get", None, "confirmed_dispatched"), note, note, note, note]

    paused = admin_api(f"/admin/api/agent-tasks/{tasks['paused']}")
    assert (paused["task"]["state"], paused["task"]["revision"]) == ("paused", 2)
    assert paused["task"]["counters"] == {"write_reserved": 0, "write_consumed": 1, "active_permits": 0}
    assert len(paused["invocations"]) == 2

    cancelled = admin_api(f"/admin/api/agent-tasks/{tasks['cancelled']}")
    assert (cancelled["task"]["state"], cancelled["task"]["revision"]) == ("cancelled", 2)
    assert cancelled["task"]["policy"]["max_write_calls"] == 0
    assert {m["workspace"] for m in cancelled["task"]["members"]} == {"customers", "orders"}

    with psycopg.connect(seeded.url) as conn:
        events = conn.execute("SELECT task_id::text, event, actor FROM bz_agent_task_events "
                              "WHERE event IN ('created', 'pause', 'cancel') ORDER BY task_id, sequence").fetchall()
        bound = conn.execute("SELECT count(*) FROM bz_agent_task_runs").fetchone()[0]
        statuses = dict(conn.execute("SELECT invocation_id, status FROM bz_tool_invocations").fetchall())
    assert {(t, e) for t, e, _ in events} == {(t, "created") for t in tasks.values()} | {
        (tasks["paused"], "pause"), (tasks["cancelled"], "cancel")}
    assert {a for _, _, a in events} == {"demo-admin"}
    assert bound == 3
    assert statuses[demo_invocation_id("demo-task-acme-note-4")] == "executed"
    assert statuses[demo_invocation_id("demo-task-stock-adjust")] == "executed"


def test_the_console_says_the_demo_is_being_prepared_until_it_is_seeded(seeded):
    total = LONG_ARCHIVE_EVENTS + 30
    for moment in ("prepared", "seeding"):
        page = seeded.seen[moment]["console"]
        assert page.status_code == 503, moment
        assert page.headers["Retry-After"] == "5" and page.headers["Cache-Control"] == "no-store"
        assert '<meta http-equiv="refresh" content="5">' in page.text
        assert "The demo is still being prepared" in page.text and 'name="password"' not in page.text
        ready = seeded.seen[moment]["ready"]
        assert ready.status_code == 503 and ready.json()["reason"] == "demo_seeding"
        # The APIs keep serving (the seeder uses them): an agent call without a bearer is only unauthorized.
        assert seeded.seen[moment]["api"].status_code == 401
        assert seeded.seen[moment]["live"].status_code == 200
    assert "Applying the schema" in seeded.seen["prepared"]["console"].text
    assert ready.json()["total"] == total and f"of {total:,}</strong>" in seeded.seen["seeding"]["console"].text

    after = seeded.seen["seeded"]
    assert after["console"].status_code == 200 and 'name="password"' in after["console"].text
    assert "Retry-After" not in after["console"].headers
    assert after["ready"].status_code == 200 and after["ready"].json()["status"] == "ready"


def test_a_hub_not_started_by_the_demo_has_no_gate(seeded, tmp_path):
    from admin_app import create_app

    app = create_app({"database_url": seeded.url, "data_dir": tmp_path})
    assert "bailing_demo_gate" not in app.extensions
    assert "_demo_gate" not in [f.__name__ for f in app.before_request_funcs.get(None, [])]
    assert "_demo_gate" in [f.__name__ for f in seeded.app.before_request_funcs.get(None, [])]
    app.extensions["bailing"].db.dispose()


def test_the_summary_lists_the_business_users_and_the_agent_login(seeded):
    summary, demo = seeded.summary, seeded.demo
    users = {u["username"]: u for u in summary["business_users"]}
    assert set(users) == {"alice", "bob"}
    assert users["alice"]["tenant"] == "tenant-7" and users["bob"]["tenant"] == "tenant-9"
    assert (users["alice"]["acts_as"], users["bob"]["acts_as"]) == ("tenant-7:alice", "tenant-9:bob")
    assert all(u["password"] and "crm-demo" in u["may"] and "erp-demo" in u["may"] for u in users.values())
    assert summary["agent_login"] == (f"bailing-admin agent login --hub {demo.hub_url} --client crm-demo "
                                      "--route customers --device-label 'My laptop'")
    assert summary["business_system"] == demo.business_url and summary["console"] == demo.hub_url + "/console/"


def test_the_guide_printed_at_the_end_names_every_sign_in(seeded, capsys):
    command.print_guide(seeded.summary)
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    for username, password in seeded.summary["sign_ins"].items():
        assert any(line.split()[:2] == [username, password] for line in lines), username
    for user in seeded.summary["business_users"]:
        assert any(line.split()[:3] == [user["username"], user["password"], user["tenant"]] for line in lines)
    assert "  " + seeded.summary["agent_login"] in lines
    assert seeded.demo.business_url in printed and "--business-port" in printed


def test_the_printed_agent_login_works_against_the_demo(seeded, tmp_path):
    """The developer types the printed command; the address it prints is the demo's own consent
    page, where a printed business user signs in and allows; the stored session then works."""
    args = shlex.split(seeded.summary["agent_login"])
    assert args[:3] == ["bailing-admin", "agent", "login"]
    store = tmp_path / "agent-session.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    env["BAILING_DATA_DIR"] = str(tmp_path / "var")
    process = subprocess.Popen([sys.executable, "-m", "admin_app.cli", *args[1:], "--no-browser",
                                "--store", str(store)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = None
        for line in process.stderr:
            if line.startswith("  http"):
                address = line.strip()
                break
        assert address is not None, process.stderr.read()
        user = seeded.summary["business_users"][0]
        consent = ConsentPage(user["username"], user["password"])
        consent(address)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert consent.pages[0].url.startswith(seeded.demo.business_url + "/consent/crm/authorize")
    assert 'data-device>My laptop<' in consent.pages[1].text  # the consent page showed the request
    result = json.loads(out)
    assert result["allowed_routes"] == ["customers"] and result["stored_in"] == str(store)
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    agent = AgentClient(store)
    assert [w.route for w in agent.workspaces()] == ["customers"]
    turn = agent.turn("customers", client_conversation_id="guide-1", client_turn_id="t1",
                      user_message_id="guide-1-u1", user_input="Find the customer Ada")
    assert turn.run_id


@pytest.mark.parametrize("option", ["--port", "--business-port"])
def test_a_taken_port_is_refused_naming_its_option(option, databases, tmp_path):
    from admin_app import create_app

    url = databases.create()  # empty: nothing may be migrated or written
    app = create_app({"database_url": url, "data_dir": tmp_path / "var"})
    try:
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = taken.getsockname()[1]
            ports = {"--port": "0", "--business-port": "0", option: str(port)}
            args = [arg for pair in ports.items() for arg in pair]
            result = app.test_cli_runner().invoke(main, ["demo", "--seed-only", *args])
    finally:
        app.extensions["bailing"].db.dispose()
    assert result.exit_code == 1, (result.stdout, result.stderr)
    # Progress notes come first on stderr; the refusal is the JSON error after them.
    error = json.loads(result.stderr[result.stderr.index("{\n"):])
    assert (error["error"], error["option"], error["port"]) == ("port_in_use", option, port)
    assert f"{option} 0" in error["message"] and str(port) in error["message"]
    assert result.stdout == ""
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    assert not (tmp_path / "var" / "demo-state.json").exists()
    assert not (tmp_path / "var" / "demo-agents").exists()


def test_running_the_demo_again_adds_nothing(seeded):
    def snapshot():
        with psycopg.connect(seeded.url) as conn:
            return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED}

    before = snapshot()
    try:
        second = run_demo(seeded.app, "127.0.0.1", 0, reset=False, serve=False, business_port=0)
    finally:
        # The second run pointed the consent pages at its own, now stopped, business system.
        with seeded.app.extensions["bailing"].db.session() as db:
            apply_config(db, demo_config(seeded.demo.business_url), Path("."))
    assert snapshot() == before
    assert second["long_archive"] == seeded.summary["long_archive"]
    assert second["tasks"] == seeded.summary["tasks"]
    assert second["business_users"] == seeded.summary["business_users"]
    assert second["agent_login"].startswith(f"bailing-admin agent login --hub {second['hub']} ")
