"""`bailing-admin init` (issue 17, first run): a fresh database to a hub whose first admin signs in,
through the real command line; running it again is safe; a refused input leaves the database
exactly as it was, not even migrated."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
from psycopg import sql as pgsql

from admin_app import create_app
from tests.conftest import EXAMPLES, SQL_DIR, cli_runner, run_cli_process, serve
from tests.test_console_server import Browser

EVERY_MIGRATION = sorted(p.name for p in SQL_DIR.glob("*.sql"))
STRONG = "a first admin's long password"


def fingerprint(url: str) -> dict:
    """Every relation of the schema, and every table's row count and content digest."""
    with psycopg.connect(url, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' ORDER BY c.relname").fetchall()
        tables = [name for name, kind in relations if kind == "r"]
        rows = {}
        for name in tables:
            rows[name] = conn.execute(pgsql.SQL(
                "SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {} t"
            ).format(pgsql.Identifier(name))).fetchone()
    return {"relations": relations, "rows": rows}


def query(url: str, text: str, params=None) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(text, params).fetchall()


@pytest.fixture
def fresh_app(empty_db, tmp_path):
    application = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    yield application
    application.extensions["bailing"].db.dispose()


@pytest.fixture
def run(fresh_app):
    """bailing-admin in-process against the fresh database: (exit code, stdout, stderr), JSON parsed."""
    return cli_runner(fresh_app)


def signs_in(app, username: str, password: str) -> bool:
    live = serve(app)
    try:
        response = Browser(live.url).login(username, password)
        return response.status_code == 303
    finally:
        live.stop()


def test_init_migrates_creates_the_admin_whose_generated_password_signs_in(empty_db, fresh_app, tmp_path):
    done = run_cli_process(["init", "--admin", "alice"], empty_db, data_dir=tmp_path / "var")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["applied"] == EVERY_MIGRATION
    assert out["database"] == "external" and out["config"] is None
    admin = out["admin"]
    assert admin["username"] == "alice" and admin["role"] == "admin"
    assert "admins:manage" in admin["permissions"]
    password = admin["password"]
    assert len(password) >= 32
    # Only an argon2 hash is kept, never the password.
    stored = query(empty_db, "SELECT role, password_hash FROM bz_admins WHERE username = 'alice'")
    assert stored[0][0] == "admin" and stored[0][1].startswith("$argon2") and password not in stored[0][1]
    assert any("gunicorn" in step for step in out["next"])
    assert any("/console/login" in step and "alice" in step for step in out["next"])
    assert any("config apply" in step for step in out["next"])  # nothing configured yet
    assert signs_in(fresh_app, "alice", password)
    assert not signs_in(fresh_app, "alice", password + "x")


def test_running_init_again_migrates_and_leaves_admins_alone(empty_db, run):
    code, _first, err = run("init", "--admin", "alice", "--password-stdin", input=STRONG + "\n")
    assert code == 0, err
    admins_before = query(empty_db, "SELECT id, username, role, password_hash, updated_at FROM bz_admins")
    code, again, err = run("init", "--admin", "bob")
    assert code == 0, err
    assert again["applied"] == [] and again["admin"] is None
    assert any("already has 1 admin" in step and "alice" in step for step in again["next"])
    assert query(empty_db, "SELECT id, username, role, password_hash, updated_at FROM bz_admins") == admins_before
    # The same name again is not a clash either: it is the hub's admin.
    code, again, err = run("init", "--admin", "alice", "--password-stdin", input="another long password\n")
    assert code == 0, err
    assert again["admin"] is None
    assert query(empty_db, "SELECT id, username, role, password_hash, updated_at FROM bz_admins") == admins_before


def test_a_password_from_stdin_is_the_one_that_signs_in_and_is_not_printed(empty_db, fresh_app, tmp_path):
    done = run_cli_process(["init", "--admin", "alice", "--password-stdin"], empty_db,
                           data_dir=tmp_path / "var", input=STRONG + "\n")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["admin"]["username"] == "alice" and "password" not in out["admin"]
    assert STRONG not in done.stdout + done.stderr
    assert signs_in(fresh_app, "alice", STRONG)


def test_init_applies_a_configuration_file(empty_db, run):
    code, out, err = run("init", "--admin", "alice", "--password-stdin",
                         "--config", str(EXAMPLES / "hub.json"), input=STRONG + "\n")
    assert code == 0, err
    assert out["config"]["created"] == {"tool_providers": ["demo-crm"], "routes": ["customers"],
                                        "client_apps": ["crm-demo"]}
    assert query(empty_db, "SELECT app_id, allowed_routes FROM bz_client_apps") == [("crm-demo", ["customers"])]
    assert query(empty_db, "SELECT name FROM bz_tool_providers") == [("demo-crm",)]
    assert any(step.endswith("bailing-admin clients token crm-demo") for step in out["next"])
    # Again: unchanged; once the app holds a token, init no longer suggests issuing (rotating) it.
    code, _, err = run("clients", "token", "crm-demo")
    assert code == 0, err
    code, again, err = run("init", "--admin", "alice", "--config", str(EXAMPLES / "hub.json"))
    assert code == 0, err
    assert again["config"]["unchanged"]["client_apps"] == ["crm-demo"]
    assert not any("clients token" in step for step in again["next"])


@pytest.mark.parametrize("password", ["", "short", "x" * 1025], ids=["empty", "short", "too-long"])
def test_a_refused_password_changes_nothing_not_even_the_schema(empty_db, run, password):
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "alice", "--password-stdin", input=password + "\n")
    assert code == 1 and out == ""
    assert err["error"] == "invalid_request" and "password must be" in err["message"]
    assert fingerprint(empty_db) == before


def test_a_bad_admin_name_changes_nothing(empty_db, run):
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "Alice Smith", "--password-stdin", input=STRONG + "\n")
    assert code == 1 and out == "" and err["error"] == "invalid_request"
    assert fingerprint(empty_db) == before


def test_an_invalid_configuration_is_reported_by_path_and_changes_nothing(empty_db, run, tmp_path):
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    doc["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    del doc["routes"][0]["name"]
    doc["client_apps"][0]["allowed_routes"] = ["nowhere"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "alice", "--config", str(bad))
    assert code == 1 and out == ""
    assert err["error"] == "invalid_request"
    assert {p["path"] for p in err["problems"]} == {"routes[0].name", "client_apps[0].allowed_routes[0]"}
    assert fingerprint(empty_db) == before  # no migration, no admin, no record


def test_an_unreadable_configuration_changes_nothing(empty_db, run, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"routes": [')
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "alice", "--config", str(broken))
    assert code == 1 and out == "" and err["error"] == "invalid_request"
    assert fingerprint(empty_db) == before


def test_a_name_held_by_another_user_when_there_is_no_admin_is_refused_and_changes_nothing(empty_db, run):
    # A hub at 060 with an auditor but no admin: init would apply 061 on and create the admin.
    code, _, err = run("db", "upgrade", "--to", "060")
    assert code == 0, err
    code, _, err = run("admins", "create", "alice", "--role", "auditor", "--password-stdin",
                       input=STRONG + "\n")
    assert code == 0, err
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "alice")
    assert code == 1 and out == ""
    assert err["error"] == "admin_exists" and "set-role alice admin" in err["message"]
    assert fingerprint(empty_db) == before  # nothing after 060 applied either
    # Another name goes through: the auditor stays as it was.
    code, out, err = run("init", "--admin", "root")
    assert code == 0, err
    after_060 = sorted(f.name for f in SQL_DIR.glob("*.sql") if f.name > "061")
    assert out["applied"] == after_060 and out["admin"]["username"] == "root"
    assert query(empty_db, "SELECT username, role FROM bz_admins ORDER BY username") == [
        ("alice", "auditor"), ("root", "admin")]


def test_an_edited_applied_migration_stops_init_before_anything(empty_db, run, tmp_path):
    code, _, err = run("db", "upgrade", "--to", "006")
    assert code == 0, err
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("UPDATE bz_schema_migrations SET sha256 = repeat('0', 64) "
                     "WHERE filename = '001_core_records.sql'")
    before = fingerprint(empty_db)
    code, out, err = run("init", "--admin", "alice")
    assert code == 1 and out == ""
    assert err["error"] == "migration_error" and "001_core_records.sql" in err["message"]
    assert fingerprint(empty_db) == before


def test_two_inits_at_once_make_one_admin(empty_db, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    env.update(BAILING_DATABASE_URL=empty_db, BAILING_DATA_DIR=str(tmp_path / "var"))
    runs = [subprocess.Popen([sys.executable, "-m", "admin_app.cli", "init", "--admin", name],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in ("alice", "bob")]
    outs = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert sorted(out["admin"] is None for out in outs) == [False, True]
    assert sorted(m for out in outs for m in out["applied"]) == EVERY_MIGRATION
    assert len(query(empty_db, "SELECT username FROM bz_admins")) == 1
