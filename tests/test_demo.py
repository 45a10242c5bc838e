"""`bailing-admin demo`: the seeding makes every situation the console is for, through the hub's
own APIs, and a second run adds nothing."""
from __future__ import annotations

import json

import pytest

from admin_app.cli import main
from admin_app.demo.command import run_demo
from admin_app.demo.seed import LONG_ARCHIVE_EVENTS, demo_invocation_id
from tests.conftest import serve

COUNTED = ("bz_agent_sessions", "bz_runs", "bz_messages", "bz_tool_invocations", "bz_tool_approvals",
           "bz_tool_journal", "bz_agent_conversation_archives", "bz_agent_conversation_members",
           "bz_agent_conversation_events", "bz_admins", "bz_admin_tokens", "bz_knowledge_documents",
           "bz_agent_authorizations", "bz_client_apps", "bz_routes", "bz_tool_providers")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, databases, migrated_template):
    from admin_app import create_app

    url = databases.create(template=migrated_template)
    app = create_app({"database_url": url, "data_dir": tmp_path_factory.mktemp("demo")})
    first = run_demo(app, "127.0.0.1", 0, reset=False, serve=False, business_port=0)
    yield app, url, first
    app.extensions["bailing"].db.dispose()


@pytest.fixture
def admin_api(seeded):
    app, _, summary = seeded
    live = serve(app)
    token = json.loads(app.test_cli_runner().invoke(main, ["admins", "token", "demo-admin"]).stdout)["token"]

    def get(path: str) -> dict:
        response = live.get(path, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        return response.json()

    yield get
    live.stop()


def test_the_demo_makes_every_situation(seeded, admin_api):
    _, _, summary = seeded
    archives = {a["conversation_id"]: a for a in admin_api("/admin/api/conversation-audits?limit=100")["items"]}
    assert len(archives) == 3
    long = archives[summary["long_archive"]]
    assert long["last_sequence"] == LONG_ARCHIVE_EVENTS and long["turn_count"] == LONG_ARCHIVE_EVENTS // 4

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
    import psycopg

    _, url, _ = seeded
    with psycopg.connect(url) as conn:
        statuses = dict(conn.execute("SELECT invocation_id, status FROM bz_tool_invocations").fetchall())
    assert statuses[demo_invocation_id("demo-read-acme")] == "executed"
    assert statuses[demo_invocation_id("demo-raise-acme")] == "executed"  # an approved write
    assert statuses[demo_invocation_id("demo-raise-northwind")] == "denied"
    assert statuses[demo_invocation_id("demo-read-contoso")] == "reconciliation_required"
    assert statuses[demo_invocation_id("demo-import-week-48")] == "awaiting_approval"


def test_running_the_demo_again_adds_nothing(seeded):
    import psycopg

    app, url, _ = seeded

    def snapshot():
        with psycopg.connect(url) as conn:
            return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED}

    before = snapshot()
    second = run_demo(app, "127.0.0.1", 0, reset=False, serve=False, business_port=0)
    assert snapshot() == before
    assert second["long_archive"] == seeded[2]["long_archive"]
