"""Issue 16, item 3: admin credentials can be taken away. In the CLI (`bailing-admin admins ...`)
and in the console page of the `admin` role: list, create, disable and enable, change role, reset
password, own password change, API tokens with an expiry and a last use that can be listed and
revoked, sessions ended; every change recorded with who made it. A revoked or expired token, or
a disabled admin's, is 401 on every /admin/api route; a disabled admin cannot sign in."""
from __future__ import annotations

import getpass
import re
from datetime import UTC, datetime, timedelta

import pytest
import requests

from tests.helpers import NEW_PASSWORD, PASSWORD, bearer, cli_ok, cli_refused, make_admin, row_count
from tests.test_console_server import Browser, flashes, location, signed_in

OPERATOR = f"cli:{getpass.getuser()}"  # how a change made at the command line is signed
SIGN_IN = "/console/login"


def events(sql) -> list[tuple]:
    return sql("SELECT actor, action, target FROM bz_admin_events ORDER BY id")


def admin_state(sql):
    return sql("SELECT username, role, disabled, password_hash, updated_at FROM bz_admins ORDER BY id")


def tokens_state(sql):
    return sql("SELECT id, expires_at, last_used_at, revoked_at FROM bz_admin_tokens ORDER BY id")


def admin_api_routes(app) -> list[str]:
    """Every GET route of /admin/api that needs a bearer, with its parameters filled in."""
    paths = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/admin/api") or "GET" not in rule.methods or rule.endpoint.startswith("openapi"):
            continue
        path = rule.rule
        for name in rule.arguments:
            path = re.sub(rf"<(?:[a-z]+:)?{name}>", "00000000-0000-4000-8000-000000000000", path)
        paths.append(path)
    assert "/admin/api/me" in paths and len(paths) >= 8
    return paths


def refused_everywhere(app, server, token: str) -> None:
    for path in admin_api_routes(app):
        response = server.get(path, headers=bearer(token))
        assert response.status_code == 401, (path, response.status_code)
        assert response.json()["error"] == "unauthorized"
    decide = server.post("/admin/api/tool-approvals/00000000-0000-4000-8000-000000000000/approve",
                         headers=bearer(token), json={})
    assert decide.status_code == 401


@pytest.fixture
def alice_token(cli):
    make_admin(cli, "alice", "admin")
    return cli_ok(cli("admins", "token", "alice"))


# ================================================================ CLI

def test_list_shows_every_admin_with_state_sessions_and_tokens(cli, server):
    make_admin(cli, "alice", "admin")
    make_admin(cli, "bob", "support")
    cli_ok(cli("admins", "token", "alice"))
    signed_in(server.url, "bob")
    out = cli_ok(cli("admins", "list"))
    assert [(a["username"], a["role"], a["disabled"], a["open_sessions"], a["live_tokens"])
            for a in out["admins"]] == [("alice", "admin", False, 0, 1), ("bob", "support", False, 1, 0)]
    for admin in out["admins"]:
        assert admin["created_at"].endswith("Z") and admin["updated_at"].endswith("Z")


def test_a_token_expires_after_90_days_by_default_or_after_days(cli, sql):
    make_admin(cli, "alice", "admin")
    default = cli_ok(cli("admins", "token", "alice"))
    short = cli_ok(cli("admins", "token", "alice", "--days", "7"))
    for out, days in ((default, 90), (short, 7)):
        created = datetime.fromisoformat(out["created_at"].replace("Z", "+00:00"))
        expires = datetime.fromisoformat(out["expires_at"].replace("Z", "+00:00"))
        assert expires - created == timedelta(days=days)
        stored = sql("SELECT expires_at FROM bz_admin_tokens WHERE id = %s", (out["token_id"],))[0][0]
        assert abs(stored - expires) < timedelta(milliseconds=1)
    assert events(sql)[-2:] == [(OPERATOR, "token_issued", "alice")] * 2


@pytest.mark.parametrize("days", ["0", "-1", "3651"])
def test_a_token_with_an_impossible_lifetime_is_refused(cli, sql, days):
    make_admin(cli, "alice", "admin")
    before = row_count(sql, "bz_admin_events")
    cli_refused(cli("admins", "token", "alice", "--days", days), "invalid_request")
    assert row_count(sql, "bz_admin_tokens") == 0 and row_count(sql, "bz_admin_events") == before


def test_a_live_token_works_and_its_last_use_is_kept(app, server, cli, sql, alice_token):
    assert sql("SELECT last_used_at FROM bz_admin_tokens") == [(None,)]
    response = server.get("/admin/api/me", headers=bearer(alice_token["token"]))
    assert response.status_code == 200
    used = cli_ok(cli("admins", "tokens", "list", "alice"))["tokens"]
    assert [(t["token_id"], t["status"], t["revoked_at"]) for t in used] == [(alice_token["token_id"], "live", None)]
    last = datetime.fromisoformat(used[0]["last_used_at"].replace("Z", "+00:00"))
    assert datetime.now(UTC) - last < timedelta(minutes=1)
    assert "token" not in used[0] and alice_token["token"] not in str(used)


def test_an_expired_token_is_401_on_every_admin_route(app, server, cli, sql, alice_token):
    assert server.get("/admin/api/me", headers=bearer(alice_token["token"])).status_code == 200
    sql("UPDATE bz_admin_tokens SET expires_at = now() - interval '1 second'")
    refused_everywhere(app, server, alice_token["token"])
    assert cli_ok(cli("admins", "tokens", "list", "alice"))["tokens"][0]["status"] == "expired"


def test_a_revoked_token_is_401_on_every_admin_route_and_others_keep_working(app, server, cli, sql, alice_token):
    other = cli_ok(cli("admins", "token", "alice"))
    out = cli_ok(cli("admins", "tokens", "revoke", "alice", "--id", str(alice_token["token_id"])))
    assert out == {"username": "alice", "revoked": [alice_token["token_id"]]}
    refused_everywhere(app, server, alice_token["token"])
    assert server.get("/admin/api/me", headers=bearer(other["token"])).status_code == 200
    assert sql("SELECT actor, action, target, detail->>'token_id' FROM bz_admin_events "
               "WHERE action = 'token_revoked'") == [
        (OPERATOR, "token_revoked", "alice", str(alice_token["token_id"]))]

    cli_ok(cli("admins", "tokens", "revoke", "alice", "--all"))
    refused_everywhere(app, server, other["token"])
    assert [t["status"] for t in cli_ok(cli("admins", "tokens", "list", "alice"))["tokens"]] == ["revoked", "revoked"]


@pytest.mark.parametrize("args, error", [
    (("--id", "999999"), "token_not_found"),
    ((), "invalid_request"),
    (("--id", "1", "--all"), "invalid_request"),
], ids=["unknown-id", "neither", "both"])
def test_token_revocation_refusals_change_nothing(cli, sql, alice_token, args, error):
    before = (tokens_state(sql), row_count(sql, "bz_admin_events"))
    cli_refused(cli("admins", "tokens", "revoke", "alice", *args), error)
    assert (tokens_state(sql), row_count(sql, "bz_admin_events")) == before


def test_anothers_token_id_cannot_be_revoked_through_an_admin(cli, sql, alice_token):
    make_admin(cli, "bob", "support")
    before = tokens_state(sql)
    cli_refused(cli("admins", "tokens", "revoke", "bob", "--id", str(alice_token["token_id"])), "token_not_found")
    assert tokens_state(sql) == before


def test_disable_refuses_sign_in_and_tokens_and_ends_sessions_and_enable_restores(app, server, cli, sql, alice_token):
    browser = signed_in(server.url, "alice")
    out = cli_ok(cli("admins", "disable", "alice"))
    assert out == {"username": "alice", "role": "admin", "disabled": True}

    assert location(browser.get("/console/conversations/")).startswith(SIGN_IN)
    assert sql("SELECT end_reason FROM bz_console_sessions") == [("admin_disabled",)]
    assert Browser(server.url).login("alice").status_code == 401
    refused_everywhere(app, server, alice_token["token"])
    cli_refused(cli("admins", "token", "alice"), "admin_disabled")

    cli_ok(cli("admins", "enable", "alice"))
    assert Browser(server.url).login("alice").status_code == 303
    assert server.get("/admin/api/me", headers=bearer(alice_token["token"])).status_code == 200
    assert events(sql)[-2:] == [(OPERATOR, "admin_disabled", "alice"), (OPERATOR, "admin_enabled", "alice")]


def test_set_role_changes_what_the_admin_may_do(server, cli, sql, alice_token):
    out = cli_ok(cli("admins", "set-role", "alice", "support"))
    assert out == {"username": "alice", "role": "support", "permissions": ["runs:read"]}
    response = server.get("/admin/api/tool-approvals", headers=bearer(alice_token["token"]))
    assert response.status_code == 403
    assert sql("SELECT detail->>'before', detail->>'after' FROM bz_admin_events WHERE action = 'role_changed'") == [
        ("admin", "support")]


@pytest.mark.parametrize("args, error", [
    (("set-role", "alice", "root"), "invalid_request"),
    (("set-role", "nobody", "admin"), "admin_not_found"),
    (("disable", "nobody"), "admin_not_found"),
    (("enable", "nobody"), "admin_not_found"),
    (("sessions", "end", "nobody"), "admin_not_found"),
    (("tokens", "list", "nobody"), "admin_not_found"),
    (("tokens", "revoke", "nobody", "--all"), "admin_not_found"),
], ids=["bad-role", "role-unknown", "disable-unknown", "enable-unknown", "end-unknown", "list-unknown",
        "revoke-unknown"])
def test_lifecycle_refusals_change_nothing(cli, sql, alice_token, args, error):
    before = (admin_state(sql), tokens_state(sql), row_count(sql, "bz_admin_events"))
    cli_refused(cli("admins", *args), error)
    assert (admin_state(sql), tokens_state(sql), row_count(sql, "bz_admin_events")) == before


def test_reset_password_ends_every_session_and_only_the_new_password_works(server, cli, sql):
    make_admin(cli, "alice", "auditor")
    browser = signed_in(server.url, "alice")
    out = cli_ok(cli("admins", "reset-password", "alice", "--password-stdin", input=NEW_PASSWORD + "\n"))
    assert out == {"username": "alice", "sessions_ended": 1}
    assert location(browser.get("/console/conversations/")).startswith(SIGN_IN)
    assert Browser(server.url).login("alice").status_code == 401
    assert Browser(server.url).login("alice", NEW_PASSWORD).status_code == 303
    assert NEW_PASSWORD not in str(sql("SELECT * FROM bz_admins")) + str(sql("SELECT * FROM bz_admin_events"))


def test_reset_password_refuses_a_short_one_and_changes_nothing(cli, sql):
    make_admin(cli, "alice", "auditor")
    before = (admin_state(sql), row_count(sql, "bz_admin_events"))
    cli_refused(cli("admins", "reset-password", "alice", "--password-stdin", input="short\n"), "invalid_request")
    assert (admin_state(sql), row_count(sql, "bz_admin_events")) == before


def test_sessions_end_signs_the_admin_out_everywhere(server, cli, sql):
    make_admin(cli, "alice", "auditor")
    first, second = signed_in(server.url, "alice"), signed_in(server.url, "alice")
    assert cli_ok(cli("admins", "sessions", "end", "alice")) == {"username": "alice", "sessions_ended": 2}
    for browser in (first, second):
        assert location(browser.get("/console/conversations/")).startswith(SIGN_IN)
    assert events(sql)[-1] == (OPERATOR, "sessions_ended", "alice")


def test_create_is_recorded(cli, sql):
    make_admin(cli, "alice", "auditor")
    assert sql("SELECT actor, action, target, detail->>'role' FROM bz_admin_events") == [
        (OPERATOR, "admin_created", "alice", "auditor")]


# ================================================================ console page

@pytest.fixture
def boss(server, cli):
    make_admin(cli, "boss", "admin")
    make_admin(cli, "carl", "auditor")
    return signed_in(server.url, "boss")


def act(browser: Browser, path: str, **data):
    response = browser.post(path, data={"csrf_token": browser.token(), **data})
    assert response.status_code == 303, response.text
    return flashes(browser.get(location(response)).text)


@pytest.mark.parametrize("role", ["auditor", "approver", "support"])
def test_only_the_admin_role_gets_the_admins_page(server, cli, sql, role):
    make_admin(cli, "carl", role)
    make_admin(cli, "dora", "support")
    browser = signed_in(server.url, "carl")
    assert browser.get("/console/admins/").status_code == 403
    assert browser.get("/console/admins/dora").status_code == 403
    before = (admin_state(sql), row_count(sql, "bz_console_sessions"), row_count(sql, "bz_admin_events"))
    token = browser.token()
    for action in ("disable", "role", "password", "tokens/revoke", "sessions/end"):
        response = browser.post(f"/console/admins/dora/{action}", data={"csrf_token": token, "role": "admin",
                                                                       "password": NEW_PASSWORD})
        assert response.status_code == 403, action
    assert browser.post("/console/admins/", data={"csrf_token": token, "username": "eve", "role": "admin",
                                                  "password": NEW_PASSWORD}).status_code == 403
    assert (admin_state(sql), row_count(sql, "bz_console_sessions"), row_count(sql, "bz_admin_events")) == before
    assert browser.get("/console/account").status_code == 200  # one's own account is for everyone


def test_the_page_lists_admins_and_creates_one(boss, sql):
    page = boss.get("/console/admins/")
    assert page.status_code == 200
    assert "carl" in page.text and "auditor" in page.text
    assert act(boss, "/console/admins/", username="erin", role="approver", password=NEW_PASSWORD) == ["Admin created."]
    assert sql("SELECT role, disabled FROM bz_admins WHERE username = 'erin'") == [("approver", False)]
    assert events(sql)[-1] == ("boss", "admin_created", "erin")
    assert "admin_created" in boss.get("/console/admins/").text


def test_disable_in_the_console_ends_their_session_and_is_shown(server, boss, sql):
    victim = signed_in(server.url, "carl")
    assert act(boss, "/console/admins/carl/disable") == ["Disabled; their sessions ended."]
    assert location(victim.get("/console/conversations/")).startswith(SIGN_IN)
    assert Browser(server.url).login("carl").status_code == 401
    assert events(sql)[-1] == ("boss", "admin_disabled", "carl")
    page = boss.get("/console/admins/").text
    assert re.search(r"boss</td><td>admin_disabled</td><td>carl", page)
    act(boss, "/console/admins/carl/enable")
    assert Browser(server.url).login("carl").status_code == 303


def test_an_admin_cannot_disable_or_demote_themselves(boss, sql):
    before = (admin_state(sql), row_count(sql, "bz_admin_events"))
    assert act(boss, "/console/admins/boss/disable") == ["You cannot disable your own account."]
    assert act(boss, "/console/admins/boss/role", role="support") == ["You cannot change the role of your own account."]
    assert (admin_state(sql), row_count(sql, "bz_admin_events")) == before
    assert boss.get("/console/admins/").status_code == 200


def test_role_change_and_password_reset_in_the_console(server, boss, sql):
    victim = signed_in(server.url, "carl")
    assert act(boss, "/console/admins/carl/role", role="approver") == ["Role changed."]
    assert sql("SELECT role FROM bz_admins WHERE username = 'carl'") == [("approver",)]
    assert act(boss, "/console/admins/carl/password", password=NEW_PASSWORD) == [
        "Password reset; their sessions ended."]
    assert location(victim.get("/console/approvals/")).startswith(SIGN_IN)
    assert Browser(server.url).login("carl", NEW_PASSWORD).status_code == 303
    assert [e[1] for e in events(sql)[-2:]] == ["role_changed", "password_reset"]


def test_console_refusals_change_nothing(boss, sql):
    before = (admin_state(sql), row_count(sql, "bz_admin_events"))
    assert act(boss, "/console/admins/carl/role", role="root") == [
        "role must be one of: admin, auditor, approver, support"]
    assert act(boss, "/console/admins/carl/password", password="short") == [
        "password must be 12 to 1024 characters"]
    assert act(boss, "/console/admins/", username="Bad Name", role="admin", password=NEW_PASSWORD)[0].startswith(
        "username must match")
    assert act(boss, "/console/admins/", username="carl", role="admin", password=NEW_PASSWORD) == [
        "An admin named carl already exists."]
    assert (admin_state(sql), row_count(sql, "bz_admin_events")) == before
    assert boss.get("/console/admins/nobody").status_code == 404


def test_tokens_are_listed_and_revoked_in_the_console(app, server, cli, boss, sql):
    token = cli_ok(cli("admins", "token", "carl"))
    page = boss.get("/console/admins/carl").text
    assert f"<td>{token['token_id']}</td>" in page and "live" in page and token["token"] not in page
    assert act(boss, "/console/admins/carl/tokens/revoke", token_id=str(token["token_id"])) == ["Revoked."]
    refused_everywhere(app, server, token["token"])
    assert events(sql)[-1] == ("boss", "token_revoked", "carl")
    before = tokens_state(sql)
    assert act(boss, "/console/admins/carl/tokens/revoke", token_id="x") == ["No such token."]
    assert tokens_state(sql) == before


def test_ending_sessions_in_the_console(server, boss, sql):
    victim = signed_in(server.url, "carl")
    assert act(boss, "/console/admins/carl/sessions/end") == ["Sessions ended."]
    assert location(victim.get("/console/conversations/")).startswith(SIGN_IN)
    # Ending one's own sessions from the page keeps the one in use.
    other_boss = signed_in(server.url, "boss")
    act(boss, "/console/admins/boss/sessions/end")
    assert boss.get("/console/admins/").status_code == 200
    assert location(other_boss.get("/console/admins/")).startswith(SIGN_IN)


def test_own_password_change_is_recorded_and_shown(boss, sql):
    assert act(boss, "/console/account/password", current_password=PASSWORD, new_password=NEW_PASSWORD,
               confirm_password=NEW_PASSWORD) == ["Password changed; your other sessions ended."]
    assert events(sql)[-1] == ("boss", "password_changed", "boss")
    assert "password_changed" in boss.get("/console/admins/").text
    before = admin_state(sql)
    assert act(boss, "/console/account/password", current_password=NEW_PASSWORD, new_password="x" * 12,
               confirm_password="y" * 12) == ["The two new passwords differ."]
    assert admin_state(sql) == before


def test_the_account_page_lists_own_sessions(server, boss):
    signed_in(server.url, "boss")
    page = boss.get("/console/account").text
    assert page.count("<tr><td><time") == 2 and "this one" in page


def test_signed_out_the_admins_pages_send_to_sign_in(server):
    browser = Browser(server.url)
    for path in ("/console/admins/", "/console/admins/boss", "/console/account"):
        assert location(browser.get(path)).startswith(SIGN_IN)
    assert requests.get(server.url + "/console/admins/", allow_redirects=False, timeout=30).status_code == 302
