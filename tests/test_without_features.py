"""A hub without the conversation audit, or without cross-binding, as a set-up of its own:
`db upgrade --without FEATURE` (and `init --without`) applies every other migration and remembers
the choice; the hub's admins, console, runtime and tools work; the archive endpoints answer as
the specification's degraded modes say; `db upgrade --with FEATURE` installs it later, giving the
schema of a hub that always had it. Real PostgreSQL, real HTTP, the real command line."""
from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from sqlalchemy.engine import make_url

from admin_app import create_app, migrations
from tests.conftest import EXAMPLES, SQL_DIR, cli_runner, run_cli_process, serve
from tests.helpers import admin_token, assert_error, assert_ok, bearer, cli_ok, cli_refused, make_admin, \
    session_bearer
from tests.test_audit_agent import AUDITS, completed_turn, crm, erp, hub_doc, v1, v2
from tests.test_console_server import Browser, signed_in
from tests.test_runtime_turns import complete, completion_body, exchange, turn, turn_body
from tests.test_tool_invocations import CUSTOMER, Agent

AUDIT = "conversation-audit"
CROSS = "cross-binding"
ADMIN = "/admin/api/conversation-audits"
CAPABILITIES = f"{AUDITS}/capabilities"
AUDIT_FILES = ["057_agent_conversation_audit.sql", "058_agent_conversation_member_bindings.sql",
               "065_console_search.sql", "070_scale_indexes.sql", "085_evidence_messages.sql"]
BINDING_FILE = "058_agent_conversation_member_bindings.sql"
EVERY_FILE = sorted(p.name for p in SQL_DIR.glob("*.sql"))
ARCHIVE_TABLES = ("bz_agent_conversation_archives", "bz_agent_conversation_members",
                  "bz_agent_conversation_events")
# Indexes of tables every hub has that 070 built: a hub without the audit has them too.
SHARED_INDEXES = {"bz_messages_run", "bz_tool_approvals_settled", "bz_tool_approvals_decided",
                  "bz_access_log_target_user_at"}


def rows(url: str, query: str, params=None) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def schema_of(url: str) -> dict:
    """The schema as the hub uses it: columns, indexes, constraints and extensions (the ledger's
    rows and the record of features left out aside)."""
    return {
        "columns": rows(url, """
            SELECT table_name, column_name, data_type, is_nullable, column_default
              FROM information_schema.columns
             WHERE table_schema = 'public' AND table_name <> 'bz_schema_without' ORDER BY 1, 2"""),
        "indexes": rows(url, """
            SELECT tablename, indexname, indexdef FROM pg_indexes
             WHERE schemaname = 'public' AND tablename <> 'bz_schema_without' ORDER BY 1, 2"""),
        "constraints": rows(url, """
            SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
              FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
             WHERE n.nspname = 'public' AND c.conrelid <> coalesce(to_regclass('bz_schema_without'), 0)
             ORDER BY 1, 2"""),
        "extensions": rows(url, "SELECT extname FROM pg_extension ORDER BY 1"),
    }


def relations(url: str) -> list:
    return rows(url, "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                     "WHERE n.nspname = 'public' ORDER BY 1")


def left_out_recorded(url: str) -> list[str]:
    if not rows(url, "SELECT to_regclass('bz_schema_without') IS NOT NULL")[0][0]:
        return []
    return [r[0] for r in rows(url, "SELECT feature FROM bz_schema_without ORDER BY 1")]


def ledger(url: str) -> list[str]:
    return [r[0] for r in rows(url, "SELECT filename FROM bz_schema_migrations ORDER BY 1")]


def cli_json(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def refused(result, code: str) -> dict:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    error = json.loads(result.stderr)
    assert error["error"] == code and error["message"], error
    return error


def template_without(databases, *features: str) -> str:
    url = databases.create()
    migrations.upgrade(url, SQL_DIR, without=features)
    return make_url(url).database


@pytest.fixture(scope="module")
def without_audit_template(databases) -> str:
    return template_without(databases, AUDIT)


@pytest.fixture(scope="module")
def without_cross_template(databases) -> str:
    return template_without(databases, CROSS)


@pytest.fixture
def db_url(databases, without_audit_template):
    """The suite's `app`, `cli`, `server` and the fixtures built on them run, in this file, on a
    hub upgraded without the conversation audit."""
    url = databases.copy(without_audit_template)
    yield url
    databases.release(url)


@pytest.fixture
def full_db(databases, migrated_template):
    url = databases.copy(migrated_template)
    yield url
    databases.release(url)


# ============================================================== the runner


def test_upgrade_without_the_audit_applies_every_other_file_and_remembers(empty_db):
    applied = migrations.upgrade(empty_db, SQL_DIR, without=[AUDIT])
    assert applied == [name for name in EVERY_FILE if name not in AUDIT_FILES]
    assert ledger(empty_db) == applied
    assert left_out_recorded(empty_db) == [AUDIT]
    for table in ARCHIVE_TABLES:
        assert rows(empty_db, "SELECT to_regclass(%s)", (table,)) == [(None,)]
    indexes = {r[0] for r in rows(empty_db, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    assert indexes >= SHARED_INDEXES

    state = migrations.status(empty_db, SQL_DIR)
    assert state.pending == [] and state.problems == []
    assert [m.filename for m in state.left_out] == AUDIT_FILES
    assert state.features == {AUDIT: "not installed", CROSS: "not installed"}
    # A plain upgrade later (a new release) keeps the choice.
    assert migrations.upgrade(empty_db, SQL_DIR) == []
    assert ledger(empty_db) == applied


def test_the_cli_reports_features_and_readiness_does_not_wait_for_a_left_out_one(empty_db, tmp_path):
    out = cli_json(run_cli_process(["db", "upgrade", "--without", AUDIT], empty_db))
    assert AUDIT_FILES[0] not in out["applied"] and out["pending"] == []
    assert out["features"] == {AUDIT: "not installed", CROSS: "not installed"}
    status = cli_json(run_cli_process(["db", "status"], empty_db))
    assert status["pending"] == [] and status["left_out"] == AUDIT_FILES and status["problems"] == []
    assert status["features"] == {AUDIT: "not installed", CROSS: "not installed"}

    application = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    live = serve(application)
    try:
        ready = live.get("/health/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready"
    finally:
        live.stop()
        application.extensions["bailing"].db.dispose()


def test_the_audit_installed_later_gives_the_schema_of_a_hub_that_always_had_it(db_url, full_db):
    before = schema_of(db_url)
    assert before != schema_of(full_db)
    out = cli_json(run_cli_process(["db", "upgrade", "--with", AUDIT], db_url))
    # In number order, after files numbered above them.
    assert out["applied"] == AUDIT_FILES
    assert out["features"] == {AUDIT: "installed", CROSS: "installed"}
    assert left_out_recorded(db_url) == []
    assert schema_of(db_url) == schema_of(full_db)
    assert ledger(db_url) == ledger(full_db) == EVERY_FILE
    assert cli_json(run_cli_process(["db", "upgrade"], db_url))["applied"] == []


def test_without_cross_binding_only_058_is_left_out_and_one_command_adds_it(databases, without_cross_template,
                                                                             full_db):
    url = databases.copy(without_cross_template)
    try:
        state = migrations.status(url, SQL_DIR)
        assert [m.filename for m in state.left_out] == [BINDING_FILE] and state.pending == []
        assert state.features == {AUDIT: "installed", CROSS: "not installed"}
        assert migrations.upgrade(url, SQL_DIR) == []
        assert migrations.upgrade(url, SQL_DIR, with_=[CROSS]) == [BINDING_FILE]
        assert schema_of(url) == schema_of(full_db)
        assert migrations.status(url, SQL_DIR).features == {AUDIT: "installed", CROSS: "installed"}
    finally:
        databases.release(url)


def test_cross_binding_asked_for_brings_the_audit_it_builds_on(db_url):
    assert migrations.upgrade(db_url, SQL_DIR, with_=[CROSS]) == AUDIT_FILES
    assert left_out_recorded(db_url) == []


def test_the_audit_without_cross_binding_can_be_installed_together(db_url):
    applied = migrations.upgrade(db_url, SQL_DIR, with_=[AUDIT], without=[CROSS])
    assert applied == [name for name in AUDIT_FILES if name != BINDING_FILE]
    assert left_out_recorded(db_url) == [CROSS]
    assert migrations.status(db_url, SQL_DIR).features == {AUDIT: "installed", CROSS: "not installed"}


def test_to_still_stops_where_it_says(empty_db):
    applied = migrations.upgrade(empty_db, SQL_DIR, to=57)
    assert applied[-1] == AUDIT_FILES[0] and all(int(name[:3]) <= 57 for name in applied)
    assert left_out_recorded(empty_db) == []


# ============================================================== refusals


@pytest.mark.parametrize("args, said", [
    (["db", "upgrade", "--without", "conversation_audit"], "unknown feature conversation_audit"),
    (["db", "upgrade", "--with", "search"], "unknown feature search"),
    (["db", "upgrade", "--without", AUDIT, "--with", AUDIT], "cannot be both left out and installed"),
    # cross-binding builds on the audit
    (["db", "upgrade", "--without", AUDIT, "--with", CROSS], "cannot be both left out and installed"),
    (["init", "--admin", "alice", "--without", "audit"], "unknown feature audit"),
])
def test_a_wrong_feature_choice_is_refused_and_writes_nothing(empty_db, tmp_path, args, said):
    error = refused(run_cli_process(args, empty_db, data_dir=tmp_path / "var"), "invalid_request")
    assert said in error["message"]
    assert relations(empty_db) == []


@pytest.mark.parametrize("feature", [AUDIT, CROSS])
def test_an_installed_feature_is_never_left_out(full_db, tmp_path, feature):
    before = schema_of(full_db)
    error = refused(run_cli_process(["db", "upgrade", "--without", feature], full_db), "feature_installed")
    assert feature in error["message"] and ".sql applied" in error["message"]
    refused(run_cli_process(["init", "--admin", "alice", "--without", feature], full_db,
                            data_dir=tmp_path / "var"), "feature_installed")
    assert schema_of(full_db) == before
    assert left_out_recorded(full_db) == []
    assert rows(full_db, "SELECT count(*) FROM bz_admins") == [(0,)]


def test_the_audit_is_not_left_out_once_its_first_file_is_applied(empty_db):
    migrations.upgrade(empty_db, SQL_DIR, to=57)
    applied = ledger(empty_db)
    with pytest.raises(migrations.FeatureInstalled, match=r"057_agent_conversation_audit\.sql applied"):
        migrations.upgrade(empty_db, SQL_DIR, without=[AUDIT])
    assert ledger(empty_db) == applied and left_out_recorded(empty_db) == []


def test_partitioning_events_is_refused_without_the_audit(db_url):
    before = schema_of(db_url)
    result = run_cli_process(["db", "partition-events", "--partitions", "4"], db_url)
    error = refused(result, "migration_error")
    assert "--with conversation-audit" in error["message"]
    assert schema_of(db_url) == before


# ============================================================== the hub without the audit


def test_init_without_the_audit_makes_a_hub_whose_admin_signs_in(empty_db, tmp_path):
    out = cli_json(run_cli_process(["init", "--admin", "alice", "--without", AUDIT], empty_db,
                                   data_dir=tmp_path / "var"))
    assert out["applied"] == [name for name in EVERY_FILE if name not in AUDIT_FILES]
    assert out["admin"]["username"] == "alice"
    assert left_out_recorded(empty_db) == [AUDIT]
    application = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    live = serve(application)
    try:
        browser = Browser(live.url)
        assert browser.login("alice", out["admin"]["password"]).status_code == 303
        home = browser.get("/console/")
        assert home.status_code == 302 and home.headers["Location"].endswith("/console/runs/")
        assert browser.get("/console/runs/").status_code == 200
        assert live.get("/health/ready").status_code == 200
    finally:
        live.stop()
        application.extensions["bailing"].db.dispose()
    # Run again: nothing more to apply, the admin left alone, the choice kept.
    again = cli_json(run_cli_process(["init", "--admin", "alice"], empty_db, data_dir=tmp_path / "var"))
    assert again["applied"] == [] and again["admin"] is None
    assert left_out_recorded(empty_db) == [AUDIT]


def test_the_console_works_and_says_the_audit_is_not_installed(server, cli, configured, issue_session):
    make_admin(cli, "ada", "admin")
    session = issue_session()
    run_id = exchange(server, session, 1, "Find the customer named Ada", "Found her.")["run_id"]
    browser = signed_in(server.url, "ada")
    for path in ("/console/runs/", f"/console/runs/{run_id}", "/console/approvals/", "/console/access-log",
                 "/console/admins/", "/console/tasks/", "/console/account"):
        page = browser.get(path)
        assert page.status_code == 200, (path, page.text[:500])
    assert "Found her." in browser.get(f"/console/runs/{run_id}").text
    for path in ("/console/conversations/", f"/console/conversations/{uuid.uuid4()}"):
        page = browser.get(path)
        assert page.status_code == 503, path
        assert "Conversation audit is not installed" in page.text
        assert "bailing-admin db upgrade --with conversation-audit" in page.text
    # Without conversations, each role still lands where its work is (issue 34 §3).
    for role, home in (("admin", "/console/runs/"), ("auditor", "/console/access-log"),
                       ("support", "/console/runs/"), ("approver", "/console/approvals/")):
        landed = signed_in(server.url, make_admin(cli, f"{role}-home", role)).get("/console/")
        assert landed.status_code == 302 and landed.headers["Location"].endswith(home), role


def test_the_runtime_and_the_tools_work_without_the_audit(server, cli, governed, business, sql):
    context = turn(server, governed, turn_body(1), route="desk")
    assert_ok(complete(server, governed, context["run_id"], completion_body(1, content="Found her.")))
    agent = Agent(server, governed)
    assert "customer_get" in agent.tool_names()
    result = agent.invoke("customer_get", CUSTOMER, "inv-no-audit")
    assert result["status"] == "executed", result
    assert len(business.executions("customer_get")) == 1

    reader = bearer(admin_token(cli, "sam", "support"))
    run = assert_ok(server.get(f"/admin/api/agent-runs/{context['run_id']}", headers=reader))
    assert run["run"]["status"] == "completed" and "conversation_audit_id" not in run["run"]
    assert [m["content"] for m in run["messages"]][-1] == "Found her."
    job = sql("SELECT id::text FROM bz_tool_invocations")[0][0]
    trace = assert_ok(server.get(f"/admin/api/tool-jobs/{job}", headers=reader))
    assert (trace["job"]["job_id"], trace["job"]["tool"], trace["job"]["status"]) == (job, "customer_get", "executed")


@pytest.fixture
def people(cli, configured, tmp_path, issue_session):
    """CRM sessions a and b, and an ERP session e, on the hub of this file's database."""
    path = tmp_path / "two-apps.json"
    path.write_text(json.dumps(hub_doc()))
    cli_ok(cli("config", "apply", str(path)))
    return issue_session(), issue_session(), issue_session(client="erp-demo", routes="orders")


def test_the_archive_endpoints_answer_as_the_degraded_mode_says_until_one_command_installs_it(
        server, cli, people, db_url):
    a, b, e = people
    reader = bearer(admin_token(cli, "rita", "support"))
    probe = assert_ok(server.get(CAPABILITIES, headers=session_bearer(a)))
    assert probe == {"schema": "bailing.agent-conversation-audit-capabilities.v1",
                     "cross_binding_members": False, "member_bindings": "session-client-route.v1"}
    someone = str(uuid.uuid4())
    for response in (server.post(AUDITS, json=v1(a, b), headers=session_bearer(a)),
                     server.post(AUDITS, json=v2(erp(e), crm(a)), headers=session_bearer(e)),
                     server.post(f"{AUDITS}/{someone}/confirm", json={}, headers=session_bearer(b)),
                     server.post(f"{AUDITS}/{someone}/events", json={"events": completed_turn(1)},
                                 headers=session_bearer(a)),
                     server.get(ADMIN, headers=reader),
                     server.get(f"{ADMIN}/{someone}", headers=reader)):
        assert_error(response, 503, "conversation_audit_unavailable")
    assert not [name for (name,) in relations(db_url) if name.startswith("bz_agent_conversation")]

    # One command, while the hub runs: the running hub sees the audit at once.
    out = cli_ok(cli("db", "upgrade", "--with", AUDIT))
    assert out["applied"] == AUDIT_FILES
    assert assert_ok(server.get(CAPABILITIES, headers=session_bearer(a)))["cross_binding_members"] is True
    created = assert_ok(server.post(AUDITS, json=v1(a, b), headers=session_bearer(a)))
    archive = created["conversation"]["conversation_id"]
    assert_ok(server.post(f"{AUDITS}/{archive}/confirm", json={}, headers=session_bearer(b)))
    acked = assert_ok(server.post(f"{AUDITS}/{archive}/events", json={"events": completed_turn(1)},
                                  headers=session_bearer(a)))
    assert acked["conversation_id"] == archive and acked["last_sequence"] == len(completed_turn(1))
    listed = assert_ok(server.get(ADMIN, headers=reader))
    assert [item["conversation_id"] for item in listed["items"]] == [archive]
    browser_admin = make_admin(cli, "ada", "admin")
    page = signed_in(server.url, browser_admin).get("/console/conversations/")
    assert page.status_code == 200 and "not installed" not in page.text


# ============================================================== without cross-binding


def test_without_cross_binding_v1_works_v2_is_503_until_one_command_adds_it(databases, without_cross_template,
                                                                           tmp_path):
    url = databases.copy(without_cross_template)
    application = create_app({"database_url": url, "data_dir": tmp_path / "var"})
    live = serve(application)
    run = cli_runner(application)
    try:
        cli_ok(run("config", "apply", str(EXAMPLES / "hub.json")))
        path = tmp_path / "two-apps.json"
        path.write_text(json.dumps(hub_doc()))
        cli_ok(run("config", "apply", str(path)))

        def issue(client: str = "crm-demo", routes: str = "customers") -> dict:
            return cli_ok(run("sessions", "issue", "--client", client, "--routes", routes,
                              "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                              "--on-behalf-of", "tenant-7:user-42"))

        a, b, e = issue(), issue(), issue("erp-demo", "orders")
        probe = assert_ok(live.get(CAPABILITIES, headers=session_bearer(a)))
        assert probe == {"schema": "bailing.agent-conversation-audit-capabilities.v1",
                         "cross_binding_members": False, "member_bindings": "session-client-route.v1"}
        cross = v2(erp(e), crm(a))
        assert_error(live.post(AUDITS, json=cross, headers=session_bearer(e)), 503,
                     "conversation_audit_cross_binding_unavailable")
        assert rows(url, "SELECT count(*) FROM bz_agent_conversation_archives") == [(0,)]
        legacy = assert_ok(live.post(AUDITS, json=v1(a, b), headers=session_bearer(a)))["conversation"]
        assert legacy["state"] == "enrolling" and legacy["member_count"] == 2

        cli_refused(run("db", "upgrade", "--without", AUDIT), "feature_installed")
        assert cli_ok(run("db", "upgrade", "--with", CROSS))["applied"] == [BINDING_FILE]
        assert assert_ok(live.get(CAPABILITIES, headers=session_bearer(a)))["cross_binding_members"] is True
        created = assert_ok(live.post(AUDITS, json=cross, headers=session_bearer(e)))["conversation"]
        assert (created["client_app_id"], created["route_key"]) == ("erp-demo", "orders")
        assert rows(url, "SELECT count(*) FROM bz_agent_conversation_archives") == [(2,)]
    finally:
        live.stop()
        application.extensions["bailing"].db.dispose()
        databases.release(url)
