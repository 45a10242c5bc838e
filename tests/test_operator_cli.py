"""Operator commands: client tokens, agent sessions, admins and their API tokens. Secrets are
printed once and stored only as hashes; every refusal exits 1 with a JSON error and writes nothing."""
from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from argon2 import PasswordHasher

from tests.conftest import run_cli_process
from tests.helpers import PASSWORD, cli_ok, cli_refused, row_count


# ---------------------------------------------------------------- helpers

def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def problem_paths(err: dict) -> list[str]:
    return [problem["path"] for problem in err.get("problems", [])]


def table_text(sql, table: str) -> str:
    """Every row of a table rendered as text, to prove a secret is stored nowhere in it."""
    return "\n".join(row[0] for row in sql(f"SELECT t::text FROM {table} AS t"))


def moment(value: str) -> datetime:
    assert value.endswith("Z"), value
    return datetime.fromisoformat(value)


def seconds_from_now(value: str) -> float:
    return (moment(value) - datetime.now(UTC)).total_seconds()


def client_token_hash(sql, app_id: str = "crm-demo") -> str | None:
    return sql("SELECT client_token_hash FROM bz_client_apps WHERE app_id = %s", (app_id,))[0][0]


# ---------------------------------------------------------------- clients token

def test_client_token_is_printed_once_and_stored_as_its_hash(cli, sql, configured):
    out = cli_ok(cli("clients", "token", "crm-demo"))

    token = out["client_token"]
    assert token.startswith("bzct_")
    assert len(token) > 40
    assert (out["app_id"], out["rotated"]) == ("crm-demo", False)
    assert seconds_from_now(out["issued_at"]) == pytest.approx(0, abs=10)
    assert client_token_hash(sql) == sha256(token)
    assert token not in table_text(sql, "bz_client_apps")


def test_second_client_token_rotates_the_first(cli, sql, configured):
    first = cli_ok(cli("clients", "token", "crm-demo"))["client_token"]
    second = cli_ok(cli("clients", "token", "crm-demo"))

    assert second["rotated"] is True
    assert second["client_token"] != first
    assert client_token_hash(sql) == sha256(second["client_token"])
    assert sha256(first) not in table_text(sql, "bz_client_apps")


def test_client_token_for_an_unknown_app_is_refused(cli, sql, configured):
    cli_refused(cli("clients", "token", "ghost-app"), "client_not_found")
    assert client_token_hash(sql) is None


def test_the_console_script_runs_as_a_separate_process(sql, db_url, configured, tmp_path):
    done = run_cli_process(["clients", "token", "crm-demo"], db_url, data_dir=tmp_path / "var")
    assert done.returncode == 0, done.stderr
    token = json.loads(done.stdout)["client_token"]
    assert token.startswith("bzct_")
    assert client_token_hash(sql) == sha256(token)

    missing = run_cli_process(["clients", "token", "ghost-app"], db_url, data_dir=tmp_path / "var")
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert json.loads(missing.stderr)["error"] == "client_not_found"


# ---------------------------------------------------------------- sessions issue

PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
GOOD_ISSUE = {"--client": "crm-demo", "--routes": "customers", "--principal": json.dumps(PRINCIPAL),
              "--on-behalf-of": "tenant-7:user-42"}


def issue(cli, changes: dict | None = None):
    options = {**GOOD_ISSUE, **(changes or {})}
    return cli("sessions", "issue", *[part for option in options.items() for part in option])


def session_row(sql, session_id: str) -> dict:
    rows = sql("SELECT to_jsonb(s) FROM bz_agent_sessions AS s WHERE id = %s", (session_id,))
    assert len(rows) == 1
    return rows[0][0]


def test_issue_session_prints_tokens_and_stores_only_hashes(cli, sql, configured):
    out = cli_ok(issue(cli, {"--device-label": "laptop"}))

    assert set(out) == {"session_id", "access_token", "refresh_token", "access_expires_at",
                        "refresh_expires_at"}
    assert out["access_token"].startswith("bha_")
    assert out["refresh_token"].startswith("bhr_")
    row = session_row(sql, out["session_id"])
    assert row["access_token_hash"] == sha256(out["access_token"])
    assert row["refresh_token_hash"] == sha256(out["refresh_token"])
    assert (row["client_app_id"], row["principal"], row["on_behalf_of"], row["allowed_routes"],
            row["device_label"], row["revoked_at"]) == (
        "crm-demo", PRINCIPAL, "tenant-7:user-42", ["customers"], "laptop", None)
    stored = table_text(sql, "bz_agent_sessions")
    assert out["access_token"] not in stored
    assert out["refresh_token"] not in stored
    # defaults: 15 minutes of access inside a 30-day session
    assert seconds_from_now(out["access_expires_at"]) == pytest.approx(15 * 60, abs=10)
    assert seconds_from_now(out["refresh_expires_at"]) == pytest.approx(30 * 24 * 3600, abs=10)


def test_issue_session_honours_access_ttl(cli, sql, configured):
    out = cli_ok(issue(cli, {"--access-ttl": "60"}))

    assert seconds_from_now(out["access_expires_at"]) == pytest.approx(60, abs=5)
    ((stored,),) = sql("SELECT access_expires_at FROM bz_agent_sessions WHERE id = %s", (out["session_id"],))
    assert abs(stored - moment(out["access_expires_at"])) < timedelta(seconds=1)


@pytest.fixture
def spare_route(cli, configured, tmp_path):
    """A real route, billing, that the crm-demo client is not allowed to use."""
    path = tmp_path / "billing.json"
    path.write_text(json.dumps({"routes": [{"route_key": "billing", "name": "Billing"}]}))
    code, _, err = cli("config", "apply", str(path))
    assert code == 0, err
    return "billing"


SESSION_REFUSALS = [
    pytest.param({"--routes": "customers,billing"}, "route_not_allowed", None, id="route-outside-allowlist"),
    pytest.param({"--routes": "auto"}, "invalid_request", "routes[0]", id="route-auto"),
    pytest.param({"--routes": "*"}, "invalid_request", "routes[0]", id="route-star"),
    pytest.param({"--routes": ""}, "invalid_request", "routes[0]", id="routes-empty"),
    pytest.param({"--client": "ghost-app"}, "invalid_client", None, id="unknown-client"),
    pytest.param({"--principal": '{"id": '}, "invalid_request", None, id="principal-not-json"),
    pytest.param({"--principal": '{"id": "user-42", "email": "a@example.com"}'}, "invalid_request",
                 "principal.email", id="principal-unknown-key"),
    pytest.param({"--principal": '{"tenant": "tenant-7"}'}, "invalid_request", "principal.id",
                 id="principal-without-id"),
    pytest.param({"--on-behalf-of": "tenant-7:user-42\nadmin"}, "invalid_request", "on_behalf_of",
                 id="on-behalf-of-newline"),
    pytest.param({"--access-ttl": "0"}, "invalid_request", "access_ttl", id="access-ttl-0"),
]


@pytest.mark.parametrize("changes, error, path", SESSION_REFUSALS)
def test_issue_session_refusals_write_nothing(cli, sql, spare_route, changes, error, path):
    err = cli_refused(issue(cli, changes), error)

    if path is not None:
        assert path in problem_paths(err)
    assert row_count(sql, "bz_agent_sessions") == 0


def test_principal_with_a_nul_character_is_refused(cli, sql, configured):
    cli_refused(issue(cli, {"--principal": '{"id": "user-42", "roles": ["clerk\\u0000"]}'}), "invalid_request")
    assert row_count(sql, "bz_agent_sessions") == 0


def test_issue_session_for_a_disabled_client_is_refused(cli, sql, configured):
    cli_ok(issue(cli))
    sql("UPDATE bz_client_apps SET enabled = false WHERE app_id = 'crm-demo'")

    cli_refused(issue(cli), "invalid_client")
    assert row_count(sql, "bz_agent_sessions") == 1


# ---------------------------------------------------------------- sessions revoke

def revoked_at(sql, session_id: str):
    return sql("SELECT revoked_at FROM bz_agent_sessions WHERE id = %s", (session_id,))[0][0]


def test_revoke_session_sets_revoked_at_once(cli, sql, issue_session):
    session_id = issue_session()["session_id"]
    assert revoked_at(sql, session_id) is None

    first = cli_ok(cli("sessions", "revoke", session_id))
    stamped = revoked_at(sql, session_id)
    assert stamped is not None
    assert (first["session_id"], first["already_revoked"]) == (session_id, False)
    assert seconds_from_now(first["revoked_at"]) == pytest.approx(0, abs=10)

    second = cli_ok(cli("sessions", "revoke", session_id))
    assert second["already_revoked"] is True
    assert second["revoked_at"] == first["revoked_at"]
    assert revoked_at(sql, session_id) == stamped


def test_revoke_touches_only_the_named_session(cli, sql, issue_session):
    kept, gone = issue_session()["session_id"], issue_session()["session_id"]
    cli_ok(cli("sessions", "revoke", gone))
    assert revoked_at(sql, kept) is None


@pytest.mark.parametrize("session_id, error", [
    (str(uuid.uuid4()), "session_not_found"),
    ("not-a-uuid", "invalid_request"),
], ids=["unknown-uuid", "not-a-uuid"])
def test_revoke_unknown_or_malformed_session_is_refused(cli, sql, issue_session, session_id, error):
    existing = issue_session()["session_id"]
    cli_refused(cli("sessions", "revoke", session_id), error)
    assert revoked_at(sql, existing) is None


# ---------------------------------------------------------------- admins

def create_admin(cli, username: str, role: str = "auditor", password: str = PASSWORD):
    return cli("admins", "create", username, "--role", role, "--password-stdin", input=password + "\n")


def admin_row(sql, username: str):
    rows = sql("SELECT id, role, password_hash, disabled FROM bz_admins WHERE username = %s", (username,))
    assert len(rows) == 1
    return rows[0]


def test_create_admin_stores_an_argon2_hash_never_the_password(cli, sql):
    out = cli_ok(create_admin(cli, "alice", "auditor"))

    assert out == {"username": "alice", "role": "auditor", "permissions": ["audit:read", "runs:read"]}
    _, role, password_hash, disabled = admin_row(sql, "alice")
    assert (role, disabled) == ("auditor", False)
    assert password_hash.startswith("$argon2")
    assert PasswordHasher().verify(password_hash, PASSWORD)
    assert PASSWORD not in table_text(sql, "bz_admins")


@pytest.mark.parametrize("username, role, password", [
    ("alice", "root", PASSWORD),
    ("Alice Smith", "admin", PASSWORD),
    ("alice", "admin", "short-pw"),
], ids=["bad-role", "bad-username", "short-password"])
def test_create_admin_refusals_add_no_row(cli, sql, username, role, password):
    cli_refused(create_admin(cli, username, role, password), "invalid_request")
    assert row_count(sql, "bz_admins") == 0


def test_create_duplicate_admin_is_refused(cli, sql):
    cli_ok(create_admin(cli, "alice", "auditor"))
    original = admin_row(sql, "alice")

    cli_refused(create_admin(cli, "alice", "admin", "another long password"), "admin_exists")
    assert row_count(sql, "bz_admins") == 1
    assert admin_row(sql, "alice") == original


def test_admin_token_is_printed_once_and_stored_as_its_hash(cli, sql):
    cli_ok(create_admin(cli, "alice", "approver"))

    out = cli_ok(cli("admins", "token", "alice"))

    token = out["token"]
    assert token.startswith("bzadm_")
    assert (out["username"], out["role"]) == ("alice", "approver")
    admin_id = admin_row(sql, "alice")[0]
    assert sql("SELECT admin_id, token_hash, revoked_at FROM bz_admin_tokens") == [
        (admin_id, sha256(token), None)]
    assert token not in table_text(sql, "bz_admin_tokens")


def test_admin_token_for_an_unknown_admin_is_refused(cli, sql):
    cli_refused(cli("admins", "token", "nobody"), "admin_not_found")
    assert row_count(sql, "bz_admin_tokens") == 0


def test_admin_token_for_a_disabled_admin_is_refused(cli, sql):
    cli_ok(create_admin(cli, "alice", "admin"))
    sql("UPDATE bz_admins SET disabled = true WHERE username = 'alice'")

    cli_refused(cli("admins", "token", "alice"), "admin_disabled")
    assert row_count(sql, "bz_admin_tokens") == 0
