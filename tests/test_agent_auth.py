"""Issue 8, "Must show": Agent Auth v1 over real HTTP.

The hub and the demo business system (with its consent pages) each run on a loopback port, over a
real PostgreSQL. The end-to-end tests drive Debian's Chromium (/usr/bin/chromium, through the
`playwright` package with `executable_path`, never `playwright install`) while
`admin_app.agent_client.login` runs the client side in a thread. Every refusal is checked for its
status and error code, and for leaving no Agent Session behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import secrets
import shutil
import stat
import threading
from datetime import UTC, datetime, timedelta

import pytest
import requests

from admin_app.agent_client import AgentAuthError, AgentSessionFile, login, pkce_pair
from admin_app.demo.business import create_business_app

from .conftest import DEMO_SECRETS, EXAMPLES, LiveServer
from .helpers import assert_error, bearer, query_of

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
CLIENT, OTHER, WIDE = "crm-demo", "erp-demo", "wide-demo"
ROUTE, SECOND = "customers", "billing"
CALLBACK = "http://127.0.0.1:49152/callback"
AUTH = "/agent-auth/v1"
PRINCIPAL = {"id": "alice", "tenant": "tenant-7", "roles": ["manager"], "audience": "internal"}
BOOTSTRAP = f"/agent-api/v1/workspaces/{ROUTE}/bootstrap"
AGENT_TABLES = ("bz_agent_authorizations", "bz_agent_sessions", "bz_agent_refresh_history")


def fake_client_token() -> str:
    return "bzct_" + secrets.token_urlsafe(32)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


# ================================================================ the hub and the business system

class Hub:
    """The hub (`live`) configured over the demo business system (`biz`), with the Client Tokens
    of the test clients and small wrappers for the Agent Auth calls."""

    def __init__(self, live: LiveServer, biz: LiveServer, sql, client_tokens: dict):
        self.live, self.biz, self.sql, self.tokens = live, biz, sql, client_tokens

    # ---- raw calls
    def post(self, path: str, body: dict, token: str | None = None) -> requests.Response:
        return self.live.post(AUTH + path, json=body, headers=bearer(token) if token else {})

    def get(self, path: str, token: str | None = None) -> requests.Response:
        return self.live.get(path, headers=bearer(token) if token else {})

    # ---- the flow
    def create(self, client: str = CLIENT, routes=(ROUTE,), **overrides):
        verifier, challenge = pkce_pair()
        body = {"client_app_id": client, "redirect_uri": CALLBACK, "state": secrets.token_urlsafe(16),
                "requested_routes": list(routes), "device_label": "Test workstation",
                "code_challenge": challenge, "code_challenge_method": "S256", **overrides}
        return self.post("/authorizations", body), verifier, body

    def authorization(self, client: str = CLIENT, routes=(ROUTE,)) -> tuple[str, str, dict]:
        response, verifier, body = self.create(client, routes)
        assert response.status_code == 201, response.text
        return response.json()["authorization_id"], verifier, body

    def approve(self, authorization_id: str, token: str | None = None, routes=(ROUTE,)):
        return self.post(f"/authorizations/{authorization_id}/approve",
                         {"principal": PRINCIPAL, "on_behalf_of": "tenant-7:alice",
                          "allowed_routes": list(routes)}, token or self.tokens[CLIENT])

    def deny(self, authorization_id: str, token: str | None = None):
        return self.post(f"/authorizations/{authorization_id}/deny", {}, token or self.tokens[CLIENT])

    def context(self, authorization_id: str, token: str | None = None):
        return self.get(f"{AUTH}/authorizations/{authorization_id}", token or self.tokens[CLIENT])

    def code(self, client: str = CLIENT) -> dict:
        """An approved authorization: its one-time code and what the exchange needs."""
        authorization_id, verifier, body = self.authorization(client)
        approved = self.approve(authorization_id, self.tokens[client])
        assert approved.status_code == 200, approved.text
        callback = query_of(approved.json()["redirect_uri"])
        assert callback["state"] == body["state"]
        return {"authorization_id": authorization_id, "code": callback["code"], "verifier": verifier,
                "redirect_uri": body["redirect_uri"], "client": client}

    def exchange(self, grant: dict, **overrides) -> requests.Response:
        return self.post("/token", {"grant_type": "authorization_code", "client_app_id": grant["client"],
                                    "code": grant["code"], "redirect_uri": grant["redirect_uri"],
                                    "code_verifier": grant["verifier"], **overrides})

    def session(self, client: str = CLIENT) -> dict:
        response = self.exchange(self.code(client))
        assert response.status_code == 200, response.text
        return response.json()

    def refresh(self, refresh_token: str, client: str = CLIENT) -> requests.Response:
        return self.post("/token", {"grant_type": "refresh_token", "client_app_id": client,
                                    "refresh_token": refresh_token})

    # ---- checks
    def access_works(self, access_token: str) -> bool:
        response = self.get(f"{AUTH}/session", access_token)
        assert response.status_code in (200, 401), response.text
        return response.status_code == 200

    def sessions(self) -> int:
        return self.sql("SELECT count(*) FROM bz_agent_sessions")[0][0]

    def live_sessions(self) -> int:
        return self.sql("SELECT count(*) FROM bz_agent_sessions WHERE revoked_at IS NULL")[0][0]

    def revoked_at(self, session_id: str):
        return self.sql("SELECT revoked_at FROM bz_agent_sessions WHERE id = %s", (session_id,))[0][0]

    def status(self, authorization_id: str) -> str:
        return self.sql("SELECT status FROM bz_agent_authorizations WHERE id = %s", (authorization_id,))[0][0]


def hub_config(business_url: str) -> dict:
    config = json.loads((EXAMPLES / "hub.json").read_text())
    provider = config["tool_providers"][0]
    provider["openapi"] = str(EXAMPLES / "crm.openapi.json")
    provider["base_url"] = business_url + "/crm"
    config["routes"].append({**config["routes"][0], "route_key": SECOND, "name": "Billing desk"})
    config["client_apps"][0]["agent_authorize_url"] = business_url + "/consent/crm/authorize"
    config["client_apps"] += [
        {"app_id": OTHER, "name": "ERP", "allowed_routes": [SECOND], "enabled": True,
         "agent_authorize_url": business_url + "/consent/erp/authorize"},
        {"app_id": WIDE, "name": "Wide", "allowed_routes": [ROUTE, SECOND], "enabled": True,
         "agent_authorize_url": business_url + "/consent/wide/authorize"},
        {"app_id": "off-demo", "name": "Disabled", "allowed_routes": [ROUTE], "enabled": False,
         "agent_authorize_url": business_url + "/consent/off/authorize"},
        {"app_id": "bare-demo", "name": "No consent page", "allowed_routes": [ROUTE], "enabled": True},
    ]
    return config


@pytest.fixture
def hub(server, cli, sql, tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_CRM_SECRET", DEMO_SECRETS["crm"])
    monkeypatch.setenv("DEMO_ERP_SECRET", DEMO_SECRETS["erp"])
    by_system: dict[str, str] = {}  # filled below, once the hub has issued the tokens
    biz = LiveServer(create_business_app(DEMO_SECRETS, hub_url=server.url, client_tokens=by_system))
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(hub_config(biz.url)))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, (out, err)
    client_tokens = {}
    for app_id in (CLIENT, OTHER, WIDE):
        code, out, err = cli("clients", "token", app_id)
        assert code == 0, err
        client_tokens[app_id] = out["client_token"]
    by_system.update(crm=client_tokens[CLIENT], erp=client_tokens[OTHER])
    yield Hub(server, biz, sql, client_tokens)
    biz.stop()


# ================================================================ in a real browser

@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class AgentLogin:
    """`agent_client.login` in a thread; the address it would open arrives on `urls`."""

    def __init__(self, hub: Hub, store, device_label: str):
        self.urls: queue.Queue = queue.Queue()
        self.result: dict = {}
        self.thread = threading.Thread(target=self._run, args=(hub.live.url, store, device_label), daemon=True)
        self.thread.start()

    def _run(self, hub_url, store, device_label):
        try:
            self.result["session"] = login(hub_url, CLIENT, [ROUTE], device_label=device_label,
                                           store=store, open_url=self.urls.put, timeout=60)
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            self.result["error"] = exc

    def outcome(self) -> dict:
        self.thread.join(60)
        assert not self.thread.is_alive(), "login() did not return"
        return self.result


def consent_in_browser(browser, hub: Hub, username: str, password: str, device: str, store,
                       button: str) -> tuple[dict, list[str], list]:
    """Run the whole flow; returns login()'s outcome, every HTML text the browser received, and
    the browser's cookies at the end."""
    from playwright.sync_api import expect

    agent = AgentLogin(hub, store, device)
    url = agent.urls.get(timeout=30)
    assert url.startswith(hub.biz.url + "/consent/crm/authorize?authorization_id=")
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(15_000)
    html: list[str] = []
    try:
        signin = page.goto(url)
        assert signin.status == 200 and signin.headers["cache-control"] == "no-store"
        html.append(signin.text())
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        with page.expect_navigation() as consent:
            page.get_by_role("button", name=re.compile("Sign in")).click()
        assert consent.value.status == 200 and consent.value.headers["cache-control"] == "no-store"
        html.append(consent.value.text())
        user = {"alice": ("Alice Martin", "tenant-7"), "bob": ("Bob Chen", "tenant-9")}[username]
        expect(page.locator("[data-account]")).to_have_text(user[0])
        expect(page.locator("[data-tenant]")).to_have_text(user[1])
        expect(page.locator("[data-device]")).to_have_text(device)
        expect(page.locator("[data-routes]")).to_have_text(ROUTE)
        html.append(page.content())
        with page.expect_navigation(url=re.compile(r"^http://127\.0\.0\.1:\d+/callback\?")) as done:
            page.get_by_role("button", name=button).click()
        assert done.value.status == 200
        html.append(done.value.text())
        expect(page.locator("body")).to_contain_text("You can close this window")
        callback = query_of(page.url)
        cookies = context.cookies()
    finally:
        context.close()
    outcome = agent.outcome()
    outcome["callback"] = callback
    return outcome, html, cookies


def assert_client_token_stays_server_side(hub: Hub, html: list[str], cookies: list) -> None:
    assert html and all(html)
    for token in hub.tokens.values():
        for text in html:
            assert token not in text
        for cookie in cookies:
            assert token not in cookie["value"]


def test_end_to_end_login_in_chromium_then_bootstrap_and_refresh(browser, hub, tmp_path):
    store = tmp_path / "config" / "agent-session.json"
    live_before = hub.live_sessions()
    outcome, html, cookies = consent_in_browser(browser, hub, "alice", "alice-demo-password",
                                                "Alice's laptop", store, "Allow")
    assert "error" not in outcome, outcome.get("error")
    session = outcome["session"]
    assert "code" in outcome["callback"] and "state" in outcome["callback"]
    assert_client_token_stays_server_side(hub, html, cookies)

    # The session file: readable by the user only, holding what login() returned.
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.parent).st_mode) & 0o077 == 0
    saved = json.loads(store.read_text())
    assert saved == session
    assert saved["client_app_id"] == CLIENT
    assert hub.live_sessions() == live_before + 1

    # The session stands for the browser's user, not for anything the client said.
    view = hub.get(f"{AUTH}/session", session["access_token"])
    assert view.status_code == 200, view.text
    assert view.json()["principal"]["id"] == "alice" and view.json()["principal"]["tenant"] == "tenant-7"
    assert view.json()["on_behalf_of"] == "tenant-7:alice"
    assert view.json()["device_label"] == "Alice's laptop"
    assert view.json()["allowed_routes"] == [ROUTE]

    bootstrap = hub.get(BOOTSTRAP, session["access_token"])
    assert bootstrap.status_code == 200, bootstrap.text

    # Near expiry, access_token() refreshes and rewrites the file.
    file = AgentSessionFile(store)
    assert file.access_token() == session["access_token"]  # not near expiry: no refresh
    stale = {**saved, "access_expires_at": "2000-01-01T00:00:00Z"}
    file.save(stale)
    fresh = file.access_token()
    assert fresh != session["access_token"]
    rewritten = json.loads(store.read_text())
    assert rewritten["access_token"] == fresh
    assert rewritten["refresh_token"] != session["refresh_token"]
    assert parse_time(rewritten["access_expires_at"]) > datetime.now(UTC) + timedelta(minutes=10)
    assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
    assert hub.get(BOOTSTRAP, fresh).status_code == 200
    assert hub.get(BOOTSTRAP, session["access_token"]).status_code == 401
    assert file.access_token() == fresh  # fresh again: no second refresh


def test_denied_in_chromium_gives_access_denied_and_no_session(browser, hub, tmp_path):
    store = tmp_path / "agent-session.json"
    before = hub.sessions()
    outcome, html, cookies = consent_in_browser(browser, hub, "bob", "bob-demo-password",
                                                "Bob's desktop", store, "Deny")
    assert outcome["callback"].get("error") == "access_denied" and "code" not in outcome["callback"]
    assert isinstance(outcome.get("error"), AgentAuthError)
    assert "access_denied" in str(outcome["error"])
    assert "session" not in outcome and not store.exists()
    assert hub.sessions() == before
    assert hub.sql("SELECT status, session_id FROM bz_agent_authorizations") == [("denied", None)]
    assert_client_token_stays_server_side(hub, html, cookies)


# ================================================================ creating an authorization

def test_an_authorization_points_at_the_business_page(hub):
    for callback in (CALLBACK, "http://[::1]:8123/cb"):
        response, _, _ = hub.create(redirect_uri=callback)
        assert response.status_code == 201, response.text
        body = response.json()
        assert body["expires_in"] == 600
        assert body["authorization_url"] == (f"{hub.biz.url}/consent/crm/authorize"
                                             f"?authorization_id={body['authorization_id']}")
        context = hub.context(body["authorization_id"])
        assert context.status_code == 200, context.text
        assert context.json()["status"] == "pending"
        assert context.json()["requested_routes"] == [ROUTE]
        assert context.json()["device_label"] == "Test workstation"
        assert not {"state", "code_challenge", "redirect_uri"} & set(context.json())


@pytest.mark.parametrize("overrides, code", [
    pytest.param({"redirect_uri": "http://example.com:8080/cb"}, "invalid_request", id="public-callback"),
    pytest.param({"redirect_uri": "http://8.8.8.8:8080/cb"}, "invalid_request", id="public-ip-callback"),
    pytest.param({"redirect_uri": "https://127.0.0.1:8443/cb"}, "invalid_request", id="https-callback"),
    pytest.param({"redirect_uri": "http://127.0.0.1/cb"}, "invalid_request", id="no-explicit-port"),
    pytest.param({"redirect_uri": "http://user:pass@127.0.0.1:8080/cb"}, "invalid_request", id="credentials"),
    pytest.param({"redirect_uri": "http://localhost:8080/cb"}, "invalid_request", id="localhost"),
    pytest.param({"redirect_uri": "http://127.0.0.1:8080/cb#frag"}, "invalid_request", id="fragment"),
    pytest.param({"requested_routes": ["auto"]}, "invalid_request", id="route-auto"),
    pytest.param({"requested_routes": ["*"]}, "invalid_request", id="route-star"),
    pytest.param({"requested_routes": []}, "invalid_request", id="no-route"),
    pytest.param({"code_challenge": "too-short"}, "invalid_request", id="bad-challenge"),
    pytest.param({"code_challenge_method": "plain"}, "invalid_request", id="method-plain"),
    pytest.param({"requested_routes": [SECOND]}, "invalid_client", id="route-outside-allowlist"),
    pytest.param({"requested_routes": [ROUTE, SECOND]}, "invalid_client", id="one-route-outside"),
    pytest.param({"client_app_id": "off-demo"}, "invalid_client", id="disabled-client"),
    pytest.param({"client_app_id": "bare-demo"}, "invalid_client", id="no-authorize-url"),
    pytest.param({"client_app_id": "nobody"}, "invalid_client", id="unknown-client"),
])
def test_create_refusals_leave_nothing(hub, overrides, code):
    sessions = hub.sessions()
    response, _, _ = hub.create(**overrides)
    assert_error(response, 400, code)
    assert hub.sql("SELECT count(*) FROM bz_agent_authorizations")[0][0] == 0
    assert hub.sessions() == sessions


# ================================================================ approving and denying

@pytest.mark.parametrize("client, requested, approved, narrow_allowlist", [
    pytest.param(WIDE, [ROUTE], [ROUTE, SECOND], False, id="beyond-the-request"),
    pytest.param(CLIENT, [ROUTE], [SECOND], False, id="beyond-request-and-allowlist"),
    pytest.param(WIDE, [ROUTE, SECOND], [ROUTE, SECOND], True, id="beyond-the-allowlist"),
])
def test_approving_more_than_allowed_is_refused(hub, client, requested, approved, narrow_allowlist):
    authorization_id, _, _ = hub.authorization(client, requested)
    if narrow_allowlist:  # the operator narrowed the client after the request was made
        hub.sql("UPDATE bz_client_apps SET allowed_routes = %s WHERE app_id = %s", ([ROUTE], client))
    sessions = hub.sessions()
    assert_error(hub.approve(authorization_id, hub.tokens[client], approved), 403, "route_not_allowed")
    assert hub.status(authorization_id) == "pending"
    assert hub.sessions() == sessions


@pytest.mark.parametrize("action", ["approve", "deny", "context"])
@pytest.mark.parametrize("who, status, code", [
    pytest.param("wrong", 401, "unauthorized", id="wrong-client-token"),
    pytest.param("none", 401, "unauthorized", id="no-token"),
    pytest.param(OTHER, 404, "not_found", id="other-clients-token"),
])
def test_only_the_owning_client_token_decides(hub, action, who, status, code):
    authorization_id, _, _ = hub.authorization()
    token = {"wrong": fake_client_token(), "none": None}.get(who, hub.tokens.get(who))
    path = f"/authorizations/{authorization_id}"
    if action == "context":
        response = hub.get(AUTH + path, token)
    else:
        body = {} if action == "deny" else {"principal": PRINCIPAL, "on_behalf_of": "tenant-7:alice",
                                            "allowed_routes": [ROUTE]}
        response = hub.post(f"{path}/{action}", body, token)
    assert_error(response, status, code)
    assert hub.status(authorization_id) == "pending"
    assert hub.sessions() == 0


@pytest.mark.parametrize("first, second", [("approve", "approve"), ("approve", "deny"),
                                           ("deny", "approve"), ("deny", "deny")])
def test_a_decided_authorization_is_terminal(hub, first, second):
    authorization_id, _, _ = hub.authorization()
    assert getattr(hub, first)(authorization_id).status_code == 200
    assert_error(getattr(hub, second)(authorization_id), 409, "invalid_state")
    assert hub.status(authorization_id) == {"approve": "approved", "deny": "denied"}[first]
    assert hub.sessions() == 0


def test_an_expired_authorization_is_gone(hub):
    authorization_id, _, _ = hub.authorization()
    hub.sql("UPDATE bz_agent_authorizations SET expires_at = now() - interval '1 second' WHERE id = %s",
            (authorization_id,))
    context = hub.context(authorization_id)
    assert context.status_code == 200 and context.json()["status"] == "expired", context.text
    assert context.json()["expires_in"] == 0
    assert_error(hub.approve(authorization_id), 410, "expired")
    assert_error(hub.deny(authorization_id), 410, "expired")
    assert hub.sql("SELECT code_hash FROM bz_agent_authorizations WHERE id = %s", (authorization_id,))[0][0] is None
    assert hub.sessions() == 0


def test_deny_redirects_to_the_callback_with_access_denied(hub):
    authorization_id, _, body = hub.authorization()
    response = hub.deny(authorization_id)
    assert response.status_code == 200, response.text
    redirect = response.json()["redirect_uri"]
    assert redirect.startswith(CALLBACK + "?")
    assert query_of(redirect) == {"error": "access_denied", "state": body["state"]}


# ================================================================ code exchange

def test_the_code_exchange_issues_a_session_with_default_lifetimes(hub):
    grant = hub.code()
    assert grant["code"].startswith("bhc_")
    response = hub.exchange(grant)
    assert response.status_code == 200, response.text
    tokens = response.json()
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 900
    assert 30 * 86400 - 60 < tokens["refresh_expires_in"] <= 30 * 86400
    assert hub.status(grant["authorization_id"]) == "completed"
    assert hub.context(grant["authorization_id"]).json()["status"] == "consumed"
    view = hub.get(f"{AUTH}/session", tokens["access_token"]).json()
    assert view["allowed_routes"] == [ROUTE]
    access_left = parse_time(view["expires_at"]) - datetime.now(UTC)
    assert timedelta(minutes=14) < access_left <= timedelta(minutes=15, seconds=5)
    assert hub.get(BOOTSTRAP, tokens["access_token"]).status_code == 200


@pytest.mark.parametrize("mismatch", ["verifier", "redirect_uri", "client", "expired", "unknown-code",
                                      "malformed-verifier"])
def test_a_mismatched_code_exchange_is_refused_without_a_session(hub, mismatch):
    grant = hub.code()
    overrides = {
        "verifier": {"code_verifier": pkce_pair()[0]},
        "redirect_uri": {"redirect_uri": "http://127.0.0.1:49153/callback"},
        "client": {"client_app_id": OTHER},
        "expired": {},
        "unknown-code": {"code": "bhc_" + secrets.token_urlsafe(32)},
        "malformed-verifier": {"code_verifier": "short"},
    }[mismatch]
    if mismatch == "expired":
        hub.sql("UPDATE bz_agent_authorizations SET code_expires_at = now() - interval '1 second' "
                "WHERE id = %s", (grant["authorization_id"],))
    response = hub.exchange(grant, **overrides)
    assert_error(response, 400, "invalid_grant")
    assert "access_token" not in response.json()
    assert hub.sessions() == 0
    assert hub.sql("SELECT status, session_id FROM bz_agent_authorizations")[0] == ("approved", None)


def test_a_replayed_code_revokes_the_session_it_issued(hub):
    grant = hub.code()
    first = hub.exchange(grant)
    assert first.status_code == 200, first.text
    tokens = first.json()
    assert hub.access_works(tokens["access_token"])
    assert_error(hub.exchange(grant), 400, "invalid_grant")
    assert hub.sessions() == 1  # nothing new was issued
    assert hub.live_sessions() == 0  # and the first one is gone: fail closed
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.access_works(tokens["access_token"])
    assert hub.get(BOOTSTRAP, tokens["access_token"]).status_code == 401
    assert_error(hub.refresh(tokens["refresh_token"]), 400, "invalid_grant")


# ================================================================ refresh

def test_refresh_rotates_both_tokens(hub):
    tokens = hub.session()
    response = hub.refresh(tokens["refresh_token"])
    assert response.status_code == 200, response.text
    rotated = response.json()
    assert rotated["session_id"] == tokens["session_id"]
    assert rotated["access_token"] != tokens["access_token"]
    assert rotated["refresh_token"] != tokens["refresh_token"]
    assert rotated["expires_in"] == 900
    assert rotated["refresh_expires_in"] <= tokens["refresh_expires_in"]  # rotation does not extend
    assert hub.access_works(rotated["access_token"])
    assert not hub.access_works(tokens["access_token"])
    again = hub.refresh(rotated["refresh_token"])
    assert again.status_code == 200, again.text
    assert hub.sessions() == 1


def test_reusing_a_rotated_refresh_token_revokes_the_session(hub):
    tokens = hub.session()
    rotated = hub.refresh(tokens["refresh_token"]).json()
    assert_error(hub.refresh(tokens["refresh_token"]), 400, "invalid_grant")
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert hub.live_sessions() == 0
    assert not hub.access_works(rotated["access_token"])
    assert_error(hub.refresh(rotated["refresh_token"]), 400, "invalid_grant")


@pytest.mark.parametrize("case", ["revoked", "expired", "other-client", "unknown", "access-token"])
def test_refresh_refusals(hub, case):
    tokens = hub.session()
    token, client = tokens["refresh_token"], CLIENT
    if case == "revoked":
        assert hub.post("/revoke", {}, tokens["access_token"]).status_code == 200
    elif case == "expired":
        hub.sql("UPDATE bz_agent_sessions SET refresh_expires_at = now() - interval '1 second' WHERE id = %s",
                (tokens["session_id"],))
    elif case == "other-client":
        client = OTHER
    elif case == "unknown":
        token = "bhr_" + secrets.token_urlsafe(32)
    else:
        token = tokens["access_token"]
    response = hub.refresh(token, client)
    assert_error(response, 400, "invalid_grant")
    assert "access_token" not in response.json()
    assert hub.sessions() == 1
    assert hub.sql("SELECT count(*) FROM bz_agent_refresh_history")[0][0] == 0


# ================================================================ revocation

def test_the_owning_client_revokes_a_session(hub):
    tokens = hub.session()
    path = f"/sessions/{tokens['session_id']}/revoke"
    assert_error(hub.post(path, {}, hub.tokens[OTHER]), 404, "not_found")
    assert_error(hub.post(path, {}, fake_client_token()), 401, "unauthorized")
    assert hub.revoked_at(tokens["session_id"]) is None
    assert hub.access_works(tokens["access_token"])
    response = hub.post(path, {}, hub.tokens[CLIENT])
    assert response.status_code == 200, response.text
    assert response.json()["revoked"] is True and response.json()["session_id"] == tokens["session_id"]
    assert response.json()["already_revoked"] is False
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.access_works(tokens["access_token"])
    assert_error(hub.refresh(tokens["refresh_token"]), 400, "invalid_grant")


def test_an_agent_revokes_its_own_session(hub):
    tokens = hub.session()
    assert_error(hub.post("/revoke", {}, "bzat_" + secrets.token_urlsafe(32)), 401, "unauthorized")
    unknown = hub.post("/revoke", {}, "bha_" + secrets.token_urlsafe(32))
    assert unknown.status_code == 200 and unknown.json() == {"revoked": True}, unknown.text
    assert hub.revoked_at(tokens["session_id"]) is None
    response = hub.post("/revoke", {}, tokens["access_token"])
    assert response.status_code == 200, response.text
    assert response.json()["session_id"] == tokens["session_id"]
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.access_works(tokens["access_token"])
    assert hub.get(BOOTSTRAP, tokens["access_token"]).status_code == 401
    assert_error(hub.refresh(tokens["refresh_token"]), 400, "invalid_grant")


def test_an_agent_revokes_with_its_refresh_token(hub):
    tokens = hub.session()
    mismatched = hub.post("/revoke", {"client_app_id": OTHER, "refresh_token": tokens["refresh_token"]})
    assert mismatched.status_code == 200 and mismatched.json() == {"revoked": True}, mismatched.text
    assert hub.revoked_at(tokens["session_id"]) is None
    response = hub.post("/revoke", {"client_app_id": CLIENT, "refresh_token": tokens["refresh_token"]})
    assert response.status_code == 200, response.text
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.access_works(tokens["access_token"])


# ================================================================ storage

def test_only_hashes_are_stored(hub):
    grant = hub.code()
    first = hub.exchange(grant).json()
    second = hub.refresh(first["refresh_token"]).json()
    secrets_issued = [grant["code"], first["access_token"], first["refresh_token"],
                      second["access_token"], second["refresh_token"], grant["verifier"]]
    rows = {table: hub.sql(f"SELECT row_to_json(t)::text FROM {table} t") for table in AGENT_TABLES}
    assert all(len(found) == 1 for found in rows.values()), rows
    dump = "\n".join(str(row) for found in rows.values() for row in found)
    for secret in secrets_issued:
        assert secret not in dump
        assert re.sub(r"^bh[a-z]_", "", secret) not in dump  # nor without its prefix

    def sha(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    assert hub.sql("SELECT code_hash FROM bz_agent_authorizations")[0][0] == sha(grant["code"])
    assert hub.sql("SELECT access_token_hash, refresh_token_hash FROM bz_agent_sessions")[0] == (
        sha(second["access_token"]), sha(second["refresh_token"]))
    assert hub.sql("SELECT token_hash FROM bz_agent_refresh_history")[0][0] == sha(first["refresh_token"])


# ================================================================ the consent page

class Browserless:
    """The consent page through `requests`, keeping the business system's cookie."""

    def __init__(self, hub: Hub):
        self.hub, self.http = hub, requests.Session()

    def get(self, authorization_id: str) -> requests.Response:
        return self.http.get(f"{self.hub.biz.url}/consent/crm/authorize",
                             params={"authorization_id": authorization_id}, timeout=30)

    def post(self, action: str, **form) -> requests.Response:
        return self.http.post(f"{self.hub.biz.url}/consent/crm/{action}", data=form, timeout=30,
                              allow_redirects=False)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_the_consent_page_keeps_secrets_and_state_safe(hub):
    authorization_id, _, _ = hub.authorization()
    hub.sql("UPDATE bz_agent_authorizations SET device_label = %s WHERE id = %s",
            ("<script>alert(1)</script>", authorization_id))
    page = Browserless(hub)
    signin = page.get(authorization_id)
    assert signin.status_code == 200
    signed = page.post("login", csrf_token=csrf_of(signin.text), next=authorization_id,
                       username="alice", password="alice-demo-password")
    assert signed.status_code == 303
    consent = page.get(authorization_id)
    assert consent.status_code == 200 and "Allow" in consent.text
    for response in (signin, signed, consent):
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        for token in hub.tokens.values():
            assert token not in response.text
            assert token not in str(response.headers)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in consent.text and "<script>" not in consent.text
    assert authorization_id in consent.text


def test_a_wrong_password_does_not_sign_in(hub):
    authorization_id, _, _ = hub.authorization()
    page = Browserless(hub)
    signin = page.get(authorization_id)
    refusal = page.post("login", csrf_token=csrf_of(signin.text), next=authorization_id,
                        username="alice", password="bob-demo-password")
    assert refusal.status_code == 401
    assert "Allow" not in page.get(authorization_id).text


@pytest.mark.parametrize("token", ["missing", "wrong"])
def test_decisions_need_the_pages_csrf_token(hub, token):
    authorization_id, _, _ = hub.authorization()
    page = Browserless(hub)
    signin = page.get(authorization_id)
    assert page.post("login", csrf_token=csrf_of(signin.text), next=authorization_id,
                     username="alice", password="alice-demo-password").status_code == 303
    csrf = csrf_of(page.get(authorization_id).text)
    form = {"authorization_id": authorization_id, "decision": "approve"}
    if token == "wrong":
        form["csrf_token"] = secrets.token_urlsafe(24)
    assert page.post("decide", **form).status_code == 400
    assert hub.status(authorization_id) == "pending"
    assert hub.sessions() == 0
    # The same form with the page's token goes through, and only to the hub's callback.
    approved = page.post("decide", **{**form, "csrf_token": csrf})
    assert approved.status_code == 303
    assert approved.headers["Location"].startswith(CALLBACK + "?code=bhc_")
    assert hub.status(authorization_id) == "approved"
    # The page names the signed-in person for the agent to show (BUSINESS_SIDE.md §H.2).
    assert hub.sql("SELECT subject_display FROM bz_agent_authorizations WHERE id = %s",
                   (authorization_id,))[0][0] == {"name": "Alice Martin"}


@pytest.mark.parametrize("token", ["missing", "wrong"])
def test_signing_in_needs_the_pages_csrf_token(hub, token):
    authorization_id, _, _ = hub.authorization()
    page = Browserless(hub)
    page.get(authorization_id)  # the page and its cookie
    form = {"next": authorization_id, "username": "alice", "password": "alice-demo-password"}
    if token == "wrong":
        form["csrf_token"] = secrets.token_urlsafe(24)
    assert page.post("login", **form).status_code == 400
    assert "Allow" not in page.get(authorization_id).text


def test_signing_in_without_the_page_is_refused(hub):
    authorization_id, _, _ = hub.authorization()
    page = Browserless(hub)  # no cookie: the form was never served to this browser
    response = page.post("login", next=authorization_id, username="bob", password="bob-demo-password")
    assert response.status_code == 400
