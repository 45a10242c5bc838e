"""The Agent Auth wire contract (/agent-auth/v1), row by row: statuses, every field and its type,
nesting, error codes, and for every refusal that nothing was written.

The hub runs on a loopback port over a real PostgreSQL. The clients' business pages are only
addresses here (nothing needs to serve them): the business backend is played by the test with
each client's Client Token.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import uuid
from datetime import datetime, timedelta

import pytest

from .conftest import EXAMPLES
from .helpers import assert_error, bearer, query_of, row_counts

# The same work on any server (the answers' shapes; the SQL behind them runs in tests/test_agent_auth.py).
pytestmark = pytest.mark.any_server

AUTH = "/agent-auth/v1"
CALLBACK = "http://127.0.0.1:49152/callback"
ROUTE, SECOND = "customers", "billing"
CLIENT, HTTPS, OTHER, WIDE, OFF, BARE = "crm-demo", "https-app", "other-app", "wide-app", "off-app", "bare-app"
PAGES = {CLIENT: "http://127.0.0.1:8100/authorize", HTTPS: "https://biz.example.com/agent/authorize?tenant=7",
         OTHER: "https://other.example.com/authorize", WIDE: "https://wide.example.com/authorize",
         OFF: "https://off.example.com/authorize"}
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["manager"], "audience": "internal"}
SUBJECT = "tenant-7:user-42"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# The seven keys of the older build, and the subject display of newer ones (BUSINESS_SIDE.md §H.2).
TOKEN_KEYS = {"token_type", "access_token", "expires_in", "refresh_token", "refresh_expires_in", "session_id",
              "client_app_id", "subject_display", "subject_display_status"}
TABLES = ("bz_agent_authorizations", "bz_agent_sessions", "bz_agent_refresh_history")


def is_uuid(value) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except (TypeError, ValueError):
        return False


def moment(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


class Hub:
    def __init__(self, live, sql, client_tokens: dict):
        self.live, self.sql, self.tokens = live, sql, client_tokens

    def post(self, path: str, body=None, token: str | None = None, **kwargs):
        if body is not None:
            kwargs["json"] = body
        headers = {**(bearer(token) if token else {}), **kwargs.pop("headers", {})}
        return self.live.post(AUTH + path, headers=headers, **kwargs)

    def get(self, path: str, token: str | None = None, **kwargs):
        return self.live.get(AUTH + path, headers=bearer(token) if token else {}, **kwargs)

    def counts(self) -> dict:
        return row_counts(self.sql, *TABLES)

    def fingerprint(self) -> list:
        return [self.sql(f"SELECT row_to_json(t)::text FROM {t} t ORDER BY 1") for t in TABLES]

    # ---- the flow
    @staticmethod
    def request(client: str = CLIENT, routes=(ROUTE,), **overrides) -> tuple[dict, str]:
        """A create-authorization body (a field overridden with None is left out) and its verifier."""
        verifier, challenge = pkce()
        body = {"client_app_id": client, "redirect_uri": CALLBACK, "state": secrets.token_urlsafe(16),
                "requested_routes": list(routes), "device_label": "Test workstation",
                "code_challenge": challenge, "code_challenge_method": "S256", **overrides}
        return {k: v for k, v in body.items() if v is not None}, verifier

    def start(self, client: str = CLIENT, routes=(ROUTE,), **overrides):
        body, verifier = self.request(client, routes, **overrides)
        return self.post("/authorizations", body), verifier, body

    def pending(self, client: str = CLIENT, routes=(ROUTE,)) -> tuple[str, str, dict]:
        response, verifier, body = self.start(client, routes)
        assert response.status_code == 201, response.text
        return response.json()["authorization_id"], verifier, body

    def approve(self, authorization_id: str, client: str = CLIENT, **overrides):
        body = {"principal": PRINCIPAL, "on_behalf_of": SUBJECT, "allowed_routes": [ROUTE], **overrides}
        return self.post(f"/authorizations/{authorization_id}/approve", body, self.tokens[client])

    def code(self, client: str = CLIENT) -> dict:
        authorization_id, verifier, _body = self.pending(client)
        approved = self.approve(authorization_id, client)
        assert approved.status_code == 200, approved.text
        return {"authorization_id": authorization_id, "code": query_of(approved.json()["redirect_uri"])["code"],
                "verifier": verifier, "client": client}

    def exchange(self, grant: dict, **overrides):
        return self.post("/token", {"grant_type": "authorization_code", "client_app_id": grant["client"],
                                    "code": grant["code"], "redirect_uri": CALLBACK,
                                    "code_verifier": grant["verifier"], **overrides})

    def session(self, client: str = CLIENT) -> dict:
        grant = self.code(client)
        response = self.exchange(grant)
        assert response.status_code == 200, response.text
        return {**response.json(), "authorization_id": grant["authorization_id"]}

    def refresh(self, token: str, client: str = CLIENT):
        return self.post("/token", {"grant_type": "refresh_token", "client_app_id": client, "refresh_token": token})

    def works(self, access_token: str) -> bool:
        status = self.get("/session", access_token).status_code
        assert status in (200, 401)
        return status == 200

    def revoked_at(self, session_id: str):
        return self.sql("SELECT revoked_at FROM bz_agent_sessions WHERE id = %s", (session_id,))[0][0]

    def status(self, authorization_id: str):
        return self.sql("SELECT status, code_hash FROM bz_agent_authorizations WHERE id = %s",
                        (authorization_id,))[0]


@pytest.fixture
def hub(server, cli, sql, tmp_path):
    config = json.loads((EXAMPLES / "hub.json").read_text())
    config["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    config["routes"].append({**config["routes"][0], "route_key": SECOND, "name": "Billing desk"})
    config["client_apps"] += [
        {"app_id": HTTPS, "name": "HTTPS app", "allowed_routes": [ROUTE], "enabled": True,
         "agent_authorize_url": PAGES[HTTPS]},
        {"app_id": OTHER, "name": "Other", "allowed_routes": [ROUTE], "enabled": True,
         "agent_authorize_url": PAGES[OTHER]},
        {"app_id": WIDE, "name": "Wide", "allowed_routes": [ROUTE, SECOND], "enabled": True,
         "agent_authorize_url": PAGES[WIDE]},
        {"app_id": OFF, "name": "Disabled", "allowed_routes": [ROUTE], "enabled": False,
         "agent_authorize_url": PAGES[OFF]},
        {"app_id": BARE, "name": "No page", "allowed_routes": [ROUTE], "enabled": True},
    ]
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(config))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, (out, err)
    tokens = {}
    for app_id in (CLIENT, HTTPS, OTHER, WIDE, BARE):
        code, out, err = cli("clients", "token", app_id)
        assert code == 0, err
        tokens[app_id] = out["client_token"]
    return Hub(server, sql, tokens)


# ================================================================ POST /authorizations

def test_create_answers_201_with_exactly_the_id_the_page_and_600_seconds(hub):
    for client in (CLIENT, HTTPS):
        before = hub.counts()["bz_agent_authorizations"]
        response, _, _ = hub.start(client)
        assert response.status_code == 201, response.text
        body = response.json()
        assert set(body) == {"authorization_id", "authorization_url", "expires_in"}
        assert is_uuid(body["authorization_id"])
        assert body["expires_in"] == 600 and type(body["expires_in"]) is int
        separator = "&" if "?" in PAGES[client] else "?"
        assert body["authorization_url"] == f"{PAGES[client]}{separator}authorization_id={body['authorization_id']}"
        assert hub.counts()["bz_agent_authorizations"] == before + 1
        assert hub.status(body["authorization_id"]) == ("pending", None)


def test_create_accepts_an_ipv6_loopback_callback_and_long_fields_at_their_limits(hub):
    response, _, _ = hub.start(redirect_uri="http://[::1]:8123/cb", state="s" * 512, device_label="d" * 128)
    assert response.status_code == 201, response.text
    response, _, _ = hub.start(state="s" * 8)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("overrides, code", [
    pytest.param({"device_label": None}, "invalid_request", id="device-label-missing"),
    pytest.param({"device_label": "   "}, "invalid_request", id="device-label-blank"),
    pytest.param({"device_label": "d" * 129}, "invalid_request", id="device-label-129"),
    pytest.param({"state": "s" * 7}, "invalid_request", id="state-7"),
    pytest.param({"state": "s" * 513}, "invalid_request", id="state-513"),
    pytest.param({"scope": "all"}, "invalid_request", id="unknown-field"),
    pytest.param({"redirect_uri": "http://example.com:8080/cb"}, "invalid_request", id="public-callback"),
    pytest.param({"redirect_uri": "https://127.0.0.1:8443/cb"}, "invalid_request", id="https-callback"),
    pytest.param({"redirect_uri": "http://127.0.0.1/cb"}, "invalid_request", id="no-explicit-port"),
    pytest.param({"redirect_uri": "http://u:p@127.0.0.1:8080/cb"}, "invalid_request", id="userinfo"),
    pytest.param({"redirect_uri": "http://127.0.0.1:8080/cb#f"}, "invalid_request", id="fragment"),
    pytest.param({"redirect_uri": "http://127.0.0.1:8080/" + "c" * 2030}, "invalid_request", id="callback-2049"),
    pytest.param({"requested_routes": []}, "invalid_request", id="no-route"),
    pytest.param({"requested_routes": [ROUTE, ROUTE]}, "invalid_request", id="duplicate-route"),
    pytest.param({"requested_routes": [f"r{i:02d}" for i in range(65)]}, "invalid_request", id="65-routes"),
    pytest.param({"requested_routes": ["auto"]}, "invalid_request", id="route-auto"),
    pytest.param({"requested_routes": ["*"]}, "invalid_request", id="route-star"),
    pytest.param({"code_challenge": "x" * 42}, "invalid_request", id="challenge-42"),
    pytest.param({"code_challenge_method": "plain"}, "invalid_request", id="method-plain"),
    pytest.param({"client_app_id": "CRM"}, "invalid_request", id="client-not-a-key"),
    pytest.param({"client_app_id": OFF}, "invalid_client", id="disabled-client"),
    pytest.param({"client_app_id": BARE}, "invalid_client", id="no-page"),
    pytest.param({"client_app_id": "nobody"}, "invalid_client", id="unknown-client"),
    pytest.param({"requested_routes": [SECOND]}, "invalid_client", id="route-outside-client-list"),
])
def test_create_refusals_write_nothing(hub, overrides, code):
    before = hub.counts()
    assert_error(hub.start(**overrides)[0], 400, code)
    assert hub.counts() == before


def test_create_with_an_authorize_page_no_longer_valid_is_503(hub):
    hub.sql("UPDATE bz_client_apps SET agent_authorize_url = 'http://biz.example.com/authorize' "
            "WHERE app_id = %s", (HTTPS,))
    before = hub.counts()
    assert_error(hub.start(HTTPS)[0], 503, "agent_authorize_url_invalid")
    assert hub.counts() == before


def test_create_is_limited_to_ten_a_minute_per_client_and_address(hub):
    for _ in range(10):
        assert hub.start()[0].status_code == 201
    before = hub.counts()
    response = hub.start()[0]
    assert_error(response, 429, "rate_limited")
    assert int(response.headers["Retry-After"]) > 0
    assert hub.counts() == before
    assert hub.start(HTTPS)[0].status_code == 201  # another client has its own budget


# ================================================================ GET /authorizations/:id

def test_context_shape_for_the_business_backend(hub):
    authorization_id, _, _ = hub.pending()
    response = hub.get(f"/authorizations/{authorization_id}", hub.tokens[CLIENT])
    assert response.status_code == 200, response.text
    body = response.json()
    assert {"authorization_id", "client", "device", "requested_routes", "status", "expires_at"} <= set(body)
    assert "session" not in body
    assert body["authorization_id"] == authorization_id
    assert body["client"] == {"app_id": CLIENT, "name": "CRM"}
    assert body["device"] == {"name": "Test workstation"}
    assert body["requested_routes"] == [ROUTE]
    assert body["status"] == "pending"
    left = moment(body["expires_at"]) - datetime.now(moment(body["expires_at"]).tzinfo)
    assert timedelta(seconds=590) < left <= timedelta(seconds=600)
    assert not {"state", "code_challenge", "redirect_uri", "principal"} & set(body)


def test_context_reports_the_session_once_consumed_and_revoked(hub):
    tokens = hub.session()
    path = f"/authorizations/{tokens['authorization_id']}"
    body = hub.get(path, hub.tokens[CLIENT]).json()
    assert body["status"] == "consumed"
    session = body["session"]
    assert session["session_id"] == tokens["session_id"] and session["state"] == "active"
    assert "revoked_at" not in session
    moment(session["expires_at"])
    assert hub.post(f"/sessions/{tokens['session_id']}/revoke", None, hub.tokens[CLIENT]).status_code == 200
    session = hub.get(path, hub.tokens[CLIENT]).json()["session"]
    assert session["state"] == "revoked"
    moment(session["revoked_at"])


@pytest.mark.parametrize("which", ["not-a-uuid", "unknown", "other-clients"])
def test_context_of_what_is_not_the_clients_is_404(hub, which):
    authorization_id, _, _ = hub.pending(OTHER)
    ident = {"not-a-uuid": "abc", "unknown": str(uuid.uuid4()), "other-clients": authorization_id}[which]
    assert_error(hub.get(f"/authorizations/{ident}", hub.tokens[CLIENT]), 404, "not_found")


def test_context_client_token_only_in_the_header(hub):
    authorization_id, _, _ = hub.pending()
    assert_error(hub.get(f"/authorizations/{authorization_id}"), 401, "unauthorized")
    assert_error(hub.get(f"/authorizations/{authorization_id}?access_token={hub.tokens[CLIENT]}"), 401, "unauthorized")
    assert_error(hub.get(f"/authorizations/{authorization_id}", "bzct_" + "A" * 43), 401, "unauthorized")


# ================================================================ approve and deny

def test_approve_answers_only_the_redirect_with_code_and_state(hub):
    authorization_id, _, start = hub.pending()
    response = hub.approve(authorization_id, principal={**PRINCIPAL, "channel": "desktop"},
                           subject_display={"name": "Alice"})
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"redirect_uri"}
    redirect = response.json()["redirect_uri"]
    assert redirect.startswith(CALLBACK + "?")
    params = query_of(redirect)
    assert set(params) == {"code", "state"} and params["state"] == start["state"]
    assert re.fullmatch(r"bhc_[A-Za-z0-9_-]{43}", params["code"])
    assert hub.status(authorization_id)[0] == "approved"


@pytest.mark.parametrize("overrides, status, code", [
    pytest.param({"on_behalf_of": None}, 400, "invalid_request", id="on-behalf-of-missing"),
    pytest.param({"on_behalf_of": " "}, 400, "invalid_request", id="on-behalf-of-blank"),
    pytest.param({"on_behalf_of": "s" * 192}, 400, "invalid_request", id="on-behalf-of-192"),
    pytest.param({"principal": {"tenant": "t"}}, 400, "invalid_request", id="principal-without-id"),
    pytest.param({"principal": {"id": "u" * 129}}, 400, "invalid_request", id="principal-id-129"),
    pytest.param({"principal": {"id": "u", "tenant": "t" * 129}}, 400, "invalid_request", id="tenant-129"),
    pytest.param({"principal": {"id": "u", "audience": "a" * 65}}, 400, "invalid_request", id="audience-65"),
    pytest.param({"principal": {"id": "u", "channel": "c" * 129}}, 400, "invalid_request", id="channel-129"),
    pytest.param({"principal": {"id": "u", "roles": ["r" * 65]}}, 400, "invalid_request", id="role-65"),
    pytest.param({"principal": {"id": "u", "email": "a@b"}}, 400, "invalid_request", id="principal-unknown-key"),
    pytest.param({"allowed_routes": []}, 400, "invalid_request", id="no-route"),
    pytest.param({"allowed_routes": ["auto"]}, 400, "invalid_request", id="route-auto"),
    pytest.param({"subject_display": {"name": "n" * 121}}, 400, "invalid_request", id="display-121"),
    pytest.param({"extra": 1}, 400, "invalid_request", id="unknown-field"),
    pytest.param({"allowed_routes": [SECOND]}, 403, "route_not_allowed", id="beyond-request"),
])
def test_approve_refusals_leave_the_request_pending(hub, overrides, status, code):
    authorization_id, _, _ = hub.pending()
    body = {"principal": PRINCIPAL, "on_behalf_of": SUBJECT, "allowed_routes": [ROUTE], **overrides}
    body = {k: v for k, v in body.items() if v is not None}
    before = hub.fingerprint()
    assert_error(hub.post(f"/authorizations/{authorization_id}/approve", body, hub.tokens[CLIENT]), status, code)
    assert hub.fingerprint() == before
    assert hub.status(authorization_id) == ("pending", None)


def test_approve_beyond_the_client_list_is_403(hub):
    authorization_id, _, _ = hub.pending(WIDE, (ROUTE, SECOND))
    hub.sql("UPDATE bz_client_apps SET allowed_routes = %s WHERE app_id = %s", ([ROUTE], WIDE))
    before = hub.fingerprint()
    assert_error(hub.approve(authorization_id, WIDE, allowed_routes=[ROUTE, SECOND]), 403, "route_not_allowed")
    assert hub.fingerprint() == before


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_decisions_on_a_terminal_or_unknown_request(hub, action):
    def decide(authorization_id: str, client: str = CLIENT):
        if action == "approve":
            return hub.approve(authorization_id, client)
        return hub.post(f"/authorizations/{authorization_id}/deny", {}, hub.tokens[client])

    decided, _, _ = hub.pending()
    assert hub.post(f"/authorizations/{decided}/deny", {}, hub.tokens[CLIENT]).status_code == 200
    expired, _, _ = hub.pending()
    hub.sql("UPDATE bz_agent_authorizations SET expires_at = now() - interval '1 second' WHERE id = %s", (expired,))
    others, _, _ = hub.pending(OTHER)
    before = hub.fingerprint()
    assert_error(decide(decided), 409, "invalid_state")
    assert_error(decide(expired), 410, "expired")
    assert_error(decide(others), 404, "not_found")
    assert_error(decide("not-a-uuid"), 404, "not_found")
    assert_error(decide(str(uuid.uuid4())), 404, "not_found")
    assert hub.fingerprint() == before
    assert hub.get(f"/authorizations/{expired}", hub.tokens[CLIENT]).json()["status"] == "expired"


def test_deny_answers_the_callback_with_access_denied_and_state(hub):
    authorization_id, _, start = hub.pending()
    response = hub.post(f"/authorizations/{authorization_id}/deny", {}, hub.tokens[CLIENT])
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"redirect_uri"}
    assert response.json()["redirect_uri"].startswith(CALLBACK + "?")
    assert query_of(response.json()["redirect_uri"]) == {"error": "access_denied", "state": start["state"]}
    assert hub.get(f"/authorizations/{authorization_id}", hub.tokens[CLIENT]).json()["status"] == "denied"


def test_deny_takes_no_body_at_all(hub):
    authorization_id, _, start = hub.pending()
    response = hub.post(f"/authorizations/{authorization_id}/deny", None, hub.tokens[CLIENT], data=b"")
    assert response.status_code == 200, response.text
    assert query_of(response.json()["redirect_uri"]) == {"error": "access_denied", "state": start["state"]}


def test_deny_with_a_non_empty_body_is_400(hub):
    authorization_id, _, _ = hub.pending()
    before = hub.fingerprint()
    assert_error(hub.post(f"/authorizations/{authorization_id}/deny", {"reason": "no"}, hub.tokens[CLIENT]),
                 400, "invalid_request")
    assert hub.fingerprint() == before


# ================================================================ POST /authorizations/:id/revoke

def test_withdrawing_a_pending_request_makes_it_terminal(hub):
    authorization_id, _, _ = hub.pending()
    response = hub.post(f"/authorizations/{authorization_id}/revoke", None, hub.tokens[CLIENT], data=b"")
    assert response.status_code == 200, response.text
    assert response.json() == {"authorization_id": authorization_id, "revoked": True}
    assert hub.get(f"/authorizations/{authorization_id}", hub.tokens[CLIENT]).json()["status"] == "denied"
    assert_error(hub.approve(authorization_id), 409, "invalid_state")


def test_withdrawing_an_approved_request_voids_its_code(hub):
    grant = hub.code()
    response = hub.post(f"/authorizations/{grant['authorization_id']}/revoke", {}, hub.tokens[CLIENT])
    assert response.status_code == 200, response.text
    assert "session_id" not in response.json()
    sessions = hub.counts()["bz_agent_sessions"]
    assert_error(hub.exchange(grant), 400, "invalid_grant")
    assert hub.counts()["bz_agent_sessions"] == sessions


def test_withdrawing_a_consumed_authorization_revokes_its_session(hub):
    tokens = hub.session()
    path = f"/authorizations/{tokens['authorization_id']}/revoke"
    response = hub.post(path, {}, hub.tokens[CLIENT])
    assert response.status_code == 200, response.text
    assert response.json() == {"authorization_id": tokens["authorization_id"], "revoked": True,
                               "session_id": tokens["session_id"]}
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.works(tokens["access_token"])
    assert hub.post(path, {}, hub.tokens[CLIENT]).status_code == 200  # idempotent


@pytest.mark.parametrize("case, status, code", [
    ("other-client", 404, "not_found"), ("not-a-uuid", 404, "not_found"), ("no-token", 401, "unauthorized"),
    ("body", 400, "invalid_request"), ("over-4-kib", 413, "request_too_large"),
])
def test_withdraw_refusals_change_nothing(hub, case, status, code):
    tokens = hub.session()
    ident = "abc" if case == "not-a-uuid" else tokens["authorization_id"]
    token = {"other-client": hub.tokens[OTHER], "no-token": None}.get(case, hub.tokens[CLIENT])
    kwargs = {"data": b"{}" + b" " * 4095} if case == "over-4-kib" else {}
    body = {"reason": "x"} if case == "body" else None
    before = hub.fingerprint()
    assert_error(hub.post(f"/authorizations/{ident}/revoke", body, token, **kwargs), status, code)
    assert hub.fingerprint() == before
    assert hub.works(tokens["access_token"])


# ================================================================ POST /token

def assert_token_response(response, client: str = CLIENT) -> dict:
    assert response.status_code == 200, response.text
    assert response.headers["Pragma"] == "no-cache"
    assert response.headers["Cache-Control"] == "no-store"
    body = response.json()
    assert set(body) == TOKEN_KEYS
    assert body["token_type"] == "Bearer"
    assert re.fullmatch(r"bha_[A-Za-z0-9_-]{43}", body["access_token"])
    assert re.fullmatch(r"bhr_[A-Za-z0-9_-]{43}", body["refresh_token"])
    assert type(body["expires_in"]) is int and body["expires_in"] == 900
    assert type(body["refresh_expires_in"]) is int and 30 * 86400 - 60 < body["refresh_expires_in"] <= 30 * 86400
    assert is_uuid(body["session_id"])
    assert body["client_app_id"] == client
    return body


def test_code_exchange_answers_the_token_keys_and_consumes_the_authorization(hub):
    grant = hub.code()
    before = hub.counts()["bz_agent_sessions"]
    tokens = assert_token_response(hub.exchange(grant))
    assert hub.counts()["bz_agent_sessions"] == before + 1
    assert hub.get(f"/authorizations/{grant['authorization_id']}", hub.tokens[CLIENT]).json()["status"] == "consumed"
    assert hub.works(tokens["access_token"])


def test_refresh_answers_the_token_keys_rotates_both_and_keeps_the_session_end(hub):
    first = hub.session()
    second = assert_token_response(hub.refresh(first["refresh_token"]))
    assert second["session_id"] == first["session_id"]
    assert second["access_token"] != first["access_token"] and second["refresh_token"] != first["refresh_token"]
    assert second["refresh_expires_in"] <= first["refresh_expires_in"]
    assert hub.works(second["access_token"]) and not hub.works(first["access_token"])


@pytest.mark.parametrize("body, code", [
    pytest.param({}, "invalid_request", id="no-grant-type"),
    pytest.param({"grant_type": 7}, "invalid_request", id="grant-type-not-a-string"),
    pytest.param({"grant_type": "password", "client_app_id": CLIENT}, "unsupported_grant_type", id="password"),
    pytest.param({"grant_type": "client_credentials"}, "unsupported_grant_type", id="client-credentials"),
    pytest.param({"grant_type": "refresh_token", "client_app_id": "CRM", "refresh_token": "bhr_" + "A" * 43},
                 "invalid_request", id="client-not-a-key"),
    pytest.param({"grant_type": "refresh_token", "client_app_id": CLIENT}, "invalid_request", id="missing-field"),
    pytest.param({"grant_type": "refresh_token", "client_app_id": CLIENT, "refresh_token": "bhr_" + "A" * 43,
                  "scope": "x"}, "invalid_request", id="unknown-field"),
    pytest.param({"grant_type": "refresh_token", "client_app_id": CLIENT, "refresh_token": "bhr_" + "A" * 43},
                 "invalid_grant", id="unknown-refresh-token"),
    pytest.param({"grant_type": "refresh_token", "client_app_id": CLIENT, "refresh_token": "bhr_short"},
                 "invalid_grant", id="short-refresh-token"),
])
def test_token_request_refusals(hub, body, code):
    hub.session()
    before = hub.fingerprint()
    response = hub.post("/token", body)
    assert_error(response, 400, code)
    assert response.headers["Pragma"] == "no-cache"
    assert hub.fingerprint() == before


@pytest.mark.parametrize("case", ["disabled-client", "page-no-longer-valid", "code-not-bhc", "other-redirect",
                                  "malformed-verifier", "wrong-verifier", "other-client", "expired-code"])
def test_code_exchange_refusals_are_invalid_grant_and_issue_nothing(hub, case):
    grant = hub.code()
    overrides = {}
    if case == "disabled-client":
        hub.sql("UPDATE bz_client_apps SET enabled = false WHERE app_id = %s", (CLIENT,))
    elif case == "page-no-longer-valid":
        hub.sql("UPDATE bz_client_apps SET agent_authorize_url = 'http://crm.example.com/authorize' "
                "WHERE app_id = %s", (CLIENT,))
    elif case == "code-not-bhc":
        overrides = {"code": "bzac_" + grant["code"][4:]}
    elif case == "other-redirect":
        overrides = {"redirect_uri": "http://127.0.0.1:49153/callback"}
    elif case == "malformed-verifier":
        overrides = {"code_verifier": "short"}
    elif case == "wrong-verifier":
        overrides = {"code_verifier": pkce()[0]}
    elif case == "other-client":
        overrides = {"client_app_id": OTHER}
    else:
        hub.sql("UPDATE bz_agent_authorizations SET code_expires_at = now() - interval '1 second'")
    before = hub.fingerprint()
    response = hub.exchange(grant, **overrides)
    assert_error(response, 400, "invalid_grant")
    assert response.headers["Pragma"] == "no-cache"
    assert hub.fingerprint() == before
    assert hub.status(grant["authorization_id"])[0] == "approved"


def test_a_replayed_code_is_invalid_grant(hub):
    grant = hub.code()
    assert_token_response(hub.exchange(grant))
    sessions = hub.counts()["bz_agent_sessions"]
    assert_error(hub.exchange(grant), 400, "invalid_grant")
    assert hub.counts()["bz_agent_sessions"] == sessions


def test_reusing_a_rotated_refresh_token_revokes_the_whole_session(hub):
    first = hub.session()
    second = assert_token_response(hub.refresh(first["refresh_token"]))
    assert_error(hub.refresh(first["refresh_token"]), 400, "invalid_grant")
    assert hub.revoked_at(first["session_id"]) is not None
    assert not hub.works(second["access_token"])
    assert_error(hub.refresh(second["refresh_token"]), 400, "invalid_grant")


@pytest.mark.parametrize("case", ["disabled-client", "page-no-longer-valid", "other-client", "revoked"])
def test_refresh_refusals_are_invalid_grant_and_rotate_nothing(hub, case):
    tokens = hub.session()
    client = CLIENT
    if case == "disabled-client":
        hub.sql("UPDATE bz_client_apps SET enabled = false WHERE app_id = %s", (CLIENT,))
    elif case == "page-no-longer-valid":
        hub.sql("UPDATE bz_client_apps SET agent_authorize_url = 'http://crm.example.com:80/a' WHERE app_id = %s",
                (CLIENT,))
    elif case == "other-client":
        client = OTHER
    else:
        hub.sql("UPDATE bz_agent_sessions SET revoked_at = now()")
    before = hub.fingerprint()
    assert_error(hub.refresh(tokens["refresh_token"], client), 400, "invalid_grant")
    assert hub.fingerprint() == before


def test_a_refresh_token_of_the_former_format_still_refreshes_into_the_current_one(hub):
    tokens = hub.session()
    legacy = "bzrt_" + secrets.token_urlsafe(32)
    hub.sql("UPDATE bz_agent_sessions SET refresh_token_hash = %s WHERE id = %s",
            (hashlib.sha256(legacy.encode()).hexdigest(), tokens["session_id"]))
    rotated = assert_token_response(hub.refresh(legacy))
    assert rotated["session_id"] == tokens["session_id"]


# ================================================================ GET /session

def test_session_view_shape(hub):
    tokens = hub.session()
    response = hub.get("/session", tokens["access_token"])
    assert response.status_code == 200, response.text
    view = response.json()
    assert {"session_id", "client_app_id", "device_label", "principal", "on_behalf_of", "allowed_routes",
            "created_at", "expires_at", "refresh_expires_at"} <= set(view)
    assert view["session_id"] == tokens["session_id"] and view["client_app_id"] == CLIENT
    assert view["device_label"] == "Test workstation"
    assert view["principal"] == PRINCIPAL and view["on_behalf_of"] == SUBJECT
    assert view["allowed_routes"] == [ROUTE]
    created, access, refresh = (moment(view[k]) for k in ("created_at", "expires_at", "refresh_expires_at"))
    assert created < access < refresh
    assert timedelta(minutes=14) < access - created <= timedelta(minutes=15, seconds=5)
    assert timedelta(days=30) - timedelta(minutes=1) < refresh - created <= timedelta(days=30, seconds=5)
    assert view["access_expires_at"] == view["expires_at"]  # the former name, kept
    assert not [key for key in view if "token" in key or "hash" in key]


def test_session_view_of_an_unlabelled_operator_session_still_has_a_device_label(hub, cli):
    code, out, err = cli("sessions", "issue", "--client", BARE, "--routes", ROUTE,
                         "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", SUBJECT)
    assert code == 0, err
    view = hub.get("/session", out["access_token"]).json()
    assert isinstance(view["device_label"], str) and view["device_label"].strip()


def test_an_access_token_near_the_session_end_expires_before_it(hub, cli):
    code, out, err = cli("sessions", "issue", "--client", CLIENT, "--routes", ROUTE, "--refresh-ttl", "60",
                         "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", SUBJECT)
    assert code == 0, err
    view = hub.get("/session", out["access_token"]).json()
    assert moment(view["expires_at"]) < moment(view["refresh_expires_at"])


# ================================================================ the agent bearer

@pytest.mark.parametrize("case", ["no-bha-prefix", "shorter-than-40", "legacy-prefix", "in-the-query",
                                  "client-disabled", "page-plain-http", "page-loopback-without-port",
                                  "page-removed-is-still-fine"])
def test_agent_bearer_validity(hub, case):
    tokens = hub.session(HTTPS)
    access = tokens["access_token"]
    assert hub.works(access)
    expect = 401
    if case == "no-bha-prefix":
        response = hub.get("/session", "bhx_" + access[4:])
    elif case == "shorter-than-40":
        response = hub.get("/session", access[:39])
    elif case == "legacy-prefix":
        response = hub.get("/session", "bzat_" + access[4:])
    elif case == "in-the-query":
        response = hub.get(f"/session?access_token={access}")
    else:
        change = {"client-disabled": "enabled = false",
                  "page-plain-http": "agent_authorize_url = 'http://biz.example.com/authorize'",
                  "page-loopback-without-port": "agent_authorize_url = 'http://127.0.0.1/authorize'",
                  "page-removed-is-still-fine": "agent_authorize_url = NULL"}[case]
        hub.sql(f"UPDATE bz_client_apps SET {change} WHERE app_id = %s", (HTTPS,))
        response = hub.get("/session", access)
        expect = 200 if case == "page-removed-is-still-fine" else 401
    if expect == 401:
        assert_error(response, 401, "unauthorized")
    else:
        assert response.status_code == 200, response.text


# ================================================================ POST /revoke

def test_revoke_with_the_bearer_ignores_the_body(hub):
    mine, other = hub.session(), hub.session()
    response = hub.post("/revoke", {"client_app_id": CLIENT, "refresh_token": other["refresh_token"], "x": 1},
                        mine["access_token"])
    assert response.status_code == 200, response.text
    assert response.json()["revoked"] is True and response.json()["session_id"] == mine["session_id"]
    assert hub.revoked_at(mine["session_id"]) is not None
    assert hub.revoked_at(other["session_id"]) is None
    again = hub.post("/revoke", None, mine["access_token"], data=b"not json", headers={"Content-Type": "text/plain"})
    assert again.status_code == 200 and again.json()["revoked"] is True, again.text


def test_revoke_with_an_expired_bearer_still_revokes_its_session(hub):
    tokens = hub.session()
    hub.sql("UPDATE bz_agent_sessions SET access_expires_at = now() - interval '1 second'")
    assert hub.post("/revoke", {}, tokens["access_token"]).status_code == 200
    assert hub.revoked_at(tokens["session_id"]) is not None


@pytest.mark.parametrize("header", ["Bearer bzat_" + "A" * 43, "Bearer short", "Basic abc", "Bearer "])
def test_revoke_with_a_bearer_that_is_not_an_access_token_is_401(hub, header):
    tokens = hub.session()
    before = hub.fingerprint()
    body = {"client_app_id": CLIENT, "refresh_token": tokens["refresh_token"]}
    assert_error(hub.live.post(AUTH + "/revoke", json=body, headers={"Authorization": header}), 401, "unauthorized")
    assert hub.fingerprint() == before


def test_revoke_answers_200_when_nothing_matched_and_writes_nothing(hub):
    tokens = hub.session()
    before = hub.fingerprint()
    for response in (hub.post("/revoke", {}, "bha_" + secrets.token_urlsafe(32)),
                     hub.post("/revoke", {"client_app_id": OTHER, "refresh_token": tokens["refresh_token"]}),
                     hub.post("/revoke", {"client_app_id": CLIENT, "refresh_token": "bhr_" + "A" * 43})):
        assert response.status_code == 200, response.text
        assert response.json() == {"revoked": True}
    assert hub.fingerprint() == before


def test_revoke_by_refresh_token_without_a_bearer(hub):
    tokens = hub.session()
    response = hub.post("/revoke", {"client_app_id": CLIENT, "refresh_token": tokens["refresh_token"]})
    assert response.status_code == 200, response.text
    assert response.json()["revoked"] is True
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.works(tokens["access_token"])


def test_revoke_without_bearer_and_without_body_is_400(hub):
    hub.session()
    before = hub.fingerprint()
    assert_error(hub.post("/revoke", None, data=b""), 400, "invalid_request")
    assert hub.fingerprint() == before


@pytest.mark.parametrize("body", [
    pytest.param({}, id="empty-object"),
    pytest.param({"client_app_id": CLIENT}, id="no-refresh-token"),
    pytest.param({"refresh_token": "RT"}, id="no-client"),
    pytest.param({"client_app_id": CLIENT, "refresh_token": "RT", "session_id": "x"}, id="unknown-field"),
    pytest.param({"client_app_id": CLIENT, "refresh_token": "AT"}, id="access-token-as-refresh"),
    pytest.param({"client_app_id": CLIENT, "refresh_token": 5}, id="not-a-string"),
])
def test_revoke_without_bearer_takes_only_client_and_refresh_token(hub, body):
    tokens = hub.session()
    body = {k: {"RT": tokens["refresh_token"], "AT": tokens["access_token"]}.get(v, v) for k, v in body.items()}
    before = hub.fingerprint()
    assert_error(hub.post("/revoke", body), 400, "invalid_request")
    assert hub.fingerprint() == before


# ================================================================ POST /sessions/:id/revoke

def test_client_revoke_does_not_read_the_body(hub):
    tokens = hub.session()
    response = hub.post(f"/sessions/{tokens['session_id']}/revoke", None, hub.tokens[CLIENT],
                        data=b"{not json", headers={"Content-Type": "text/plain"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["revoked"] is True and body["session_id"] == tokens["session_id"]
    assert body["already_revoked"] is False
    assert hub.revoked_at(tokens["session_id"]) is not None
    assert not hub.works(tokens["access_token"])
    assert hub.post(f"/sessions/{tokens['session_id']}/revoke", None, hub.tokens[CLIENT]).json()["revoked"] is True


@pytest.mark.parametrize("which, token, status, code", [
    ("not-a-uuid", CLIENT, 404, "not_found"),
    ("unknown", CLIENT, 404, "not_found"),
    ("mine", OTHER, 404, "not_found"),
    ("mine", None, 401, "unauthorized"),
    ("mine", "query", 401, "unauthorized"),
])
def test_client_revoke_refusals(hub, which, token, status, code):
    tokens = hub.session()
    ident = {"not-a-uuid": "abc", "unknown": str(uuid.uuid4()), "mine": tokens["session_id"]}[which]
    path = f"/sessions/{ident}/revoke"
    before = hub.fingerprint()
    if token == "query":
        response = hub.post(f"{path}?client_token={hub.tokens[CLIENT]}")
    else:
        response = hub.post(path, None, hub.tokens.get(token))
    assert_error(response, status, code)
    assert hub.fingerprint() == before
    assert hub.works(tokens["access_token"])


# ================================================================ paths

def test_unknown_paths_and_methods(hub):
    assert_error(hub.get("/nothing-here"), 404, "not_found")
    assert_error(hub.live.get(AUTH + "/token"), 405, "method_not_allowed")
    assert_error(hub.live.get(AUTH + "/revoke"), 405, "method_not_allowed")
