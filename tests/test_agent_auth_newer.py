"""Agent Auth's newer surfaces (BUSINESS_SIDE.md §H.2-§H.4) over real HTTP and a real PostgreSQL:
the subject display (approve body, token answers, GET /session, the business views and its PUT),
the business session list (filters, the cursor bound to them, order, strict query parsing) and
the usage capabilities a hub without models answers. Every refusal is checked for its status,
its code and that nothing was written.

One hub and database serve the module (tests that break the database have their own): each test
works on sessions of its own, or on the listing client's, which only the listing tests read.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest
import requests

from admin_app import create_app
from admin_app.agent_sdk.auth import parse_session, parse_token
from admin_app.identity import subject_display

from .conftest import EXAMPLES, cli_runner, serve
from .helpers import assert_error, assert_ok, bearer, query_of

AUTH = "/agent-auth/v1"
CALLBACK = "http://127.0.0.1:49152/callback"
ROUTE = "customers"
CLIENT, OTHER, LISTED = "crm-demo", "other-app", "list-app"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["manager"], "audience": "internal"}
SUBJECT = "tenant-7:user-42"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TABLES = ("bz_agent_authorizations", "bz_agent_sessions", "bz_agent_refresh_history")
BUSINESS_KEYS = {"session_id", "client_app_id", "device_label", "subject_display", "subject_display_status",
                 "principal", "on_behalf_of", "allowed_routes", "state", "created_at", "expires_at"}


def moment(text: str) -> datetime:
    assert TIMESTAMP.match(text), text
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


class Hub:
    def __init__(self, live, sql, cli, tokens: dict):
        self.live, self.sql, self.cli, self.tokens = live, sql, cli, tokens
        self.url = ""

    def call(self, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
        headers = {**(bearer(token) if token else {}), **kwargs.pop("headers", {})}
        return self.live.request(method, AUTH + path, headers=headers, **kwargs)

    def fingerprint(self) -> list:
        return [self.sql(f"SELECT row_to_json(t)::text FROM {t} t ORDER BY 1") for t in TABLES]

    # ---- the browser flow, played by the test
    def pending(self, client: str = CLIENT) -> tuple[str, str]:
        # One hub serves the module: the authorization limit (10 a minute) would stop it.
        self.sql("DELETE FROM bz_rate_limits")
        verifier, challenge = pkce()
        response = self.call("POST", "/authorizations", json={
            "client_app_id": client, "redirect_uri": CALLBACK, "state": secrets.token_urlsafe(16),
            "requested_routes": [ROUTE], "device_label": "Test workstation", "code_challenge": challenge,
            "code_challenge_method": "S256"})
        assert response.status_code == 201, response.text
        return response.json()["authorization_id"], verifier

    def approve(self, authorization_id: str, client: str = CLIENT, **extra) -> requests.Response:
        body = {"principal": PRINCIPAL, "on_behalf_of": SUBJECT, "allowed_routes": [ROUTE], **extra}
        return self.call("POST", f"/authorizations/{authorization_id}/approve", self.tokens[client], json=body)

    def login(self, client: str = CLIENT, **extra) -> dict:
        """An exchanged session: the token answer, with the authorization id."""
        authorization_id, verifier = self.pending(client)
        approved = self.approve(authorization_id, client, **extra)
        assert approved.status_code == 200, approved.text
        response = self.call("POST", "/token", json={
            "grant_type": "authorization_code", "client_app_id": client,
            "code": query_of(approved.json()["redirect_uri"])["code"], "redirect_uri": CALLBACK,
            "code_verifier": verifier})
        assert response.status_code == 200, response.text
        return {**response.json(), "authorization_id": authorization_id}

    def put_display(self, session_id: str, body, token: str | None = None, **kwargs) -> requests.Response:
        if body is not None:
            kwargs["json"] = body
        return self.call("PUT", f"/sessions/{session_id}/subject-display",
                         self.tokens[CLIENT] if token is None else token, **kwargs)

    def listing(self, query: str = "", token: str | None = None) -> requests.Response:
        return self.call("GET", "/sessions" + query, self.tokens[LISTED] if token is None else token)

    def stored(self, session_id: str):
        return self.sql("SELECT subject_display FROM bz_agent_sessions WHERE id = %s", (session_id,))[0][0]


@pytest.fixture(scope="module")
def world(databases, migrated_template, tmp_path_factory):
    url = databases.copy(migrated_template)
    app = create_app({"database_url": url, "data_dir": tmp_path_factory.mktemp("var")})
    live = serve(app)
    cli = cli_runner(app)

    def sql(query: str, params=None):
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    config = json.loads((EXAMPLES / "hub.json").read_text())
    config["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    config["client_apps"][0]["agent_authorize_url"] = "http://127.0.0.1:8100/authorize"
    config["client_apps"] += [
        {"app_id": app_id, "name": app_id, "allowed_routes": [ROUTE], "enabled": True,
         "agent_authorize_url": f"https://{app_id}.example.com/authorize"} for app_id in (OTHER, LISTED)]
    path = tmp_path_factory.mktemp("config") / "hub.json"
    path.write_text(json.dumps(config))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, (out, err)
    tokens = {}
    for app_id in (CLIENT, OTHER, LISTED):
        code, out, err = cli("clients", "token", app_id)
        assert code == 0, err
        tokens[app_id] = out["client_token"]
    hub = Hub(live, sql, cli, tokens)
    hub.url = url
    yield hub
    live.stop()
    app.extensions["bailing"].db.dispose()
    databases.release(url)


# ================================================================ the rules, unit by unit

VALID_NAMES = [
    pytest.param("Alice", "Alice", id="plain"),
    pytest.param("  Alice Martin \u3000", "Alice Martin", id="trimmed-as-javascript"),
    pytest.param("\ufeffAlice\u00a0", "Alice", id="bom-and-nbsp-trimmed"),
    pytest.param("a" * 120, "a" * 120, id="120-units"),
    pytest.param(" " * 10 + "a" * 120 + " " * 10, "a" * 120, id="120-units-once-trimmed"),
    pytest.param("\U0001F600" * 60, "\U0001F600" * 60, id="60-emoji-120-units"),
    pytest.param("Zoë 李 \U0001F469\u200d\U0001F4BB", "Zoë 李 \U0001F469\u200d\U0001F4BB", id="zwj-emoji"),
    pytest.param("é" * 120, "é" * 120, id="120-bmp"),
    pytest.param("a\u00a0b", "a\u00a0b", id="inner-nbsp"),
]

INVALID_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("   ", id="blank"),
    pytest.param("\u00a0\u2003", id="only-unicode-blanks"),
    pytest.param("a" * 121, id="121-units"),
    pytest.param("\U0001F600" * 61, id="61-emoji-122-units"),
    pytest.param("a" * 119 + "\U0001F600", id="119-plus-emoji-121-units"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\tb", id="tab"),
    pytest.param("a\nb", id="lf"),
    pytest.param("Alice\r", id="cr-at-the-end"),
    pytest.param("a\x1fb", id="us"),
    pytest.param("a\x7fb", id="del"),
    pytest.param("a\x80b", id="c1-first"),
    pytest.param("a\x9fb", id="c1-last"),
    pytest.param("a\u2028b", id="line-separator"),
    pytest.param("a\u2029b", id="paragraph-separator"),
    pytest.param("a\ud800b", id="lone-high-surrogate"),
    pytest.param("a\udc00", id="lone-low-surrogate"),
    pytest.param("\ude00\ud83d", id="reversed-pair"),
    pytest.param(42, id="number"),
    pytest.param(None, id="null-name"),
    pytest.param(["Alice"], id="array"),
]


@pytest.mark.parametrize("name, kept", VALID_NAMES)
def test_a_valid_name_is_kept_trimmed(name, kept):
    assert subject_display.name_problem(name) is None
    assert subject_display.stored({"name": name}) == {"name": kept}
    assert subject_display.view({"name": kept}) == {"subject_display": {"name": kept},
                                                    "subject_display_status": "provided"}


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_an_invalid_name_has_a_problem(name):
    assert subject_display.name_problem(name) is not None


@pytest.mark.parametrize("stored", [None, {}, {"name": ""}, {"name": " Alice"}, {"name": "A", "x": 1},
                                    {"name": "a\x00"}, "Alice", ["Alice"]])
def test_whatever_is_stored_that_is_not_a_valid_name_answers_missing(stored):
    assert subject_display.view(stored) == {"subject_display": None, "subject_display_status": "missing"}


# ================================================================ H.2 the approve body and the answers

def test_a_display_given_at_approval_is_in_every_answer(world):
    tokens = world.login(subject_display={"name": "  Alice Martin  "})
    expected = {"subject_display": {"name": "Alice Martin"}, "subject_display_status": "provided"}
    assert {k: tokens[k] for k in expected} == expected
    assert set(tokens) - {"authorization_id"} == {
        "token_type", "access_token", "expires_in", "refresh_token", "refresh_expires_in", "session_id",
        "client_app_id", "subject_display", "subject_display_status"}
    assert world.stored(tokens["session_id"]) == {"name": "Alice Martin"}
    assert world.sql("SELECT subject_display FROM bz_agent_authorizations WHERE id = %s",
                     (tokens["authorization_id"],))[0][0] == {"name": "Alice Martin"}
    refreshed = world.call("POST", "/token", json={"grant_type": "refresh_token", "client_app_id": CLIENT,
                                                   "refresh_token": tokens["refresh_token"]})
    assert {k: assert_ok(refreshed)[k] for k in expected} == expected
    view = assert_ok(world.call("GET", "/session", refreshed.json()["access_token"]))
    assert {k: view[k] for k in expected} == expected
    context = assert_ok(world.call("GET", f"/authorizations/{tokens['authorization_id']}", world.tokens[CLIENT]))
    assert {k: context["session"][k] for k in expected} == expected
    # The SDK in this repository reads them as `provided`, never as unavailable.
    assert parse_token(refreshed.json(), "POST /token", CLIENT).subject_display_status == "provided"
    assert parse_session(view, "GET /session").subject_display == {"name": "Alice Martin"}


@pytest.mark.parametrize("extra", [{}, {"subject_display": None}], ids=["absent", "null"])
def test_without_a_display_every_answer_says_missing(world, extra):
    tokens = world.login(**extra)
    expected = {"subject_display": None, "subject_display_status": "missing"}
    assert {k: tokens[k] for k in expected} == expected
    assert world.stored(tokens["session_id"]) is None
    view = assert_ok(world.call("GET", "/session", tokens["access_token"]))
    assert {k: view[k] for k in expected} == expected
    assert parse_token(tokens, "POST /token", CLIENT).subject_display_status == "missing"
    assert parse_session(view, "GET /session").subject_display_status == "missing"


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_an_invalid_display_at_approval_leaves_the_request_pending(world, name):
    authorization_id, _ = world.pending()
    before = world.fingerprint()
    assert_error(world.approve(authorization_id, subject_display={"name": name}), 400, "invalid_request")
    assert world.fingerprint() == before


@pytest.mark.parametrize("value", [{}, {"name": "Alice", "email": "a@b"}, {"display_name": "Alice"}, "Alice",
                                   ["Alice"], 1, True],
                         ids=["no-name", "extra-key", "other-key", "string", "array", "number", "boolean"])
def test_a_display_not_exactly_name_at_approval_is_refused(world, value):
    authorization_id, _ = world.pending()
    before = world.fingerprint()
    assert_error(world.approve(authorization_id, subject_display=value), 400, "invalid_request")
    assert world.fingerprint() == before


# ================================================================ H.2 PUT /sessions/:id/subject-display

def test_put_sets_the_display_last_write_wins_and_changes_nothing_else(world):
    tokens = world.login()
    columns = "access_token_hash, refresh_token_hash, access_expires_at, refresh_expires_at, revoked_at"
    before = world.sql(f"SELECT {columns} FROM bz_agent_sessions WHERE id = %s", (tokens["session_id"],))
    first = assert_ok(world.put_display(tokens["session_id"], {"subject_display": {"name": " Alice "}}))
    assert first["subject_display"] == {"name": "Alice"} and first["subject_display_status"] == "provided"
    second = assert_ok(world.put_display(tokens["session_id"], {"subject_display": {"name": "Alice Martin"}}))
    assert BUSINESS_KEYS | {"authorization_id"} == set(second)
    assert second["session_id"] == tokens["session_id"] and second["authorization_id"] == tokens["authorization_id"]
    assert second["state"] == "active" and second["principal"] == PRINCIPAL and second["on_behalf_of"] == SUBJECT
    assert world.stored(tokens["session_id"]) == {"name": "Alice Martin"}
    view = assert_ok(world.call("GET", "/session", tokens["access_token"]))
    assert view["subject_display"] == {"name": "Alice Martin"}
    assert world.sql(f"SELECT {columns} FROM bz_agent_sessions WHERE id = %s", (tokens["session_id"],)) == before
    cleared = assert_ok(world.put_display(tokens["session_id"], {"subject_display": None}))
    assert (cleared["subject_display"], cleared["subject_display_status"]) == (None, "missing")
    assert world.stored(tokens["session_id"]) is None


def test_put_answers_the_session_end_as_expires_at(world):
    tokens = world.login()
    body = assert_ok(world.put_display(tokens["session_id"], {"subject_display": {"name": "\U0001F600" * 60}}))
    assert body["subject_display"] == {"name": "\U0001F600" * 60}
    end = world.sql("SELECT refresh_expires_at FROM bz_agent_sessions WHERE id = %s", (tokens["session_id"],))[0][0]
    assert moment(body["expires_at"]) == end.replace(microsecond=end.microsecond // 1000 * 1000)
    assert not [key for key in body if "token" in key or "hash" in key]


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_put_with_an_invalid_name_writes_nothing(world, name):
    tokens = world.login(subject_display={"name": "Alice"})
    before = world.fingerprint()
    assert_error(world.put_display(tokens["session_id"], {"subject_display": {"name": name}}), 400, "invalid_request")
    assert world.fingerprint() == before


PUT_BODIES = {
    "empty-body": {"data": b""},
    "empty-object": {"json": {}},
    "extra-field": {"json": {"subject_display": None, "session_id": "x"}},
    "display-extra-key": {"json": {"subject_display": {"name": "A", "x": 1}}},
    "display-string": {"json": {"subject_display": "Alice"}},
    "not-json": {"data": b"{subject_display"},
    "not-an-object": {"json": [{"subject_display": None}]},
    "over-4096-bytes": {"data": json.dumps({"subject_display": {"name": "Alice"}}).encode() + b" " * 4096},
}


@pytest.mark.parametrize("case", PUT_BODIES)
def test_put_bodies_other_than_exactly_subject_display_write_nothing(world, case):
    tokens = world.login(subject_display={"name": "Alice"})
    before = world.fingerprint()
    assert_error(world.put_display(tokens["session_id"], None, **PUT_BODIES[case]), 400, "invalid_request")
    assert world.fingerprint() == before


def test_put_at_exactly_4096_bytes_is_read(world):
    tokens = world.login()
    body = json.dumps({"subject_display": {"name": "Alice"}}).encode()
    assert_ok(world.put_display(tokens["session_id"], None, data=body + b" " * (4096 - len(body))))


@pytest.mark.parametrize("case, status, code", [
    ("revoked", 409, "session_inactive"),
    ("refresh-expired", 409, "session_inactive"),
    ("other-clients", 404, "not_found"),
    ("unknown", 404, "not_found"),
    ("not-a-uuid", 404, "not_found"),
    ("no-token", 401, "unauthorized"),
    ("agent-token", 401, "unauthorized"),
    ("other-method", 405, "method_not_allowed"),
])
def test_put_refusals_write_nothing(world, case, status, code):
    tokens = world.login(subject_display={"name": "Alice"})
    session_id, token, method = tokens["session_id"], world.tokens[CLIENT], "PUT"
    if case == "revoked":
        assert world.call("POST", f"/sessions/{session_id}/revoke", token).status_code == 200
    elif case == "refresh-expired":
        world.sql("UPDATE bz_agent_sessions SET refresh_expires_at = now() - interval '1 second', "
                  "access_expires_at = now() - interval '2 seconds' WHERE id = %s", (session_id,))
    elif case == "other-clients":
        token = world.tokens[OTHER]
    elif case == "unknown":
        session_id = str(uuid.uuid4())
    elif case == "not-a-uuid":
        session_id = "abc"
    elif case == "agent-token":
        token = tokens["access_token"]
    before = world.fingerprint()
    if case == "no-token":
        response = world.call("PUT", f"/sessions/{session_id}/subject-display", json={"subject_display": None})
    else:
        for method in (("GET", "POST", "DELETE", "PATCH") if case == "other-method" else ("PUT",)):
            response = world.call(method, f"/sessions/{session_id}/subject-display", token,
                                  json={"subject_display": None})
            assert_error(response, status, code)
    assert_error(response, status, code)
    assert world.fingerprint() == before
    assert world.stored(tokens["session_id"]) == {"name": "Alice"}


def test_put_and_list_answer_503_when_the_store_fails(server, sql, cli, tmp_path):
    """A store without the column (migration 076 missing, or any storage error): the PUT is
    `subject_display_unavailable`, the list `agent_auth_lifecycle_unavailable`."""
    config = json.loads((EXAMPLES / "hub.json").read_text())
    config["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    config["client_apps"][0]["agent_authorize_url"] = "http://127.0.0.1:8100/authorize"
    (tmp_path / "hub.json").write_text(json.dumps(config))
    assert cli("config", "apply", str(tmp_path / "hub.json"))[0] == 0
    code, out, err = cli("clients", "token", CLIENT)
    assert code == 0, err
    token = out["client_token"]
    sql("ALTER TABLE bz_agent_sessions DROP COLUMN subject_display")
    assert_error(server.request("PUT", f"{AUTH}/sessions/{uuid.uuid4()}/subject-display", headers=bearer(token),
                                json={"subject_display": None}), 503, "subject_display_unavailable")
    assert_error(server.get(f"{AUTH}/sessions", headers=bearer(token)), 503, "agent_auth_lifecycle_unavailable")


# ================================================================ H.3 GET /sessions

@pytest.fixture(scope="module")
def listed(world):
    """The listing client's sessions, oldest first: four from the browser flow and four an
    operator issued, with known creation times (two sharing one, to order by id), one revoked
    and one past its end."""
    base = datetime.fromisoformat("2026-01-01T00:00:00.000+00:00")
    made = []
    for i in range(4):
        tokens = world.login(LISTED, subject_display={"name": f"User {i}"} if i % 2 else None)
        made.append({"session_id": tokens["session_id"], "authorization_id": tokens["authorization_id"]})
    people = [({"id": "u1", "tenant": "t1", "roles": ["clerk"]}, "t1:u1"),
              ({"id": "u1", "tenant": "t2"}, "t2:u1"),
              ({"id": "u2"}, "u2"),
              (None, None)]
    for principal, subject in people:
        args = ["sessions", "issue", "--client", LISTED, "--routes", ROUTE]
        if principal is not None:
            args += ["--principal", json.dumps(principal), "--on-behalf-of", subject]
        code, out, err = world.cli(*args)
        assert code == 0, err
        made.append({"session_id": out["session_id"], "authorization_id": None})
    times = [base + timedelta(minutes=i) for i in range(len(made))]
    times[5] = times[4]  # one instant, two sessions: ordered by session id, descending
    for entry, created in zip(made, times, strict=True):
        entry["created_at"] = created
        world.sql("UPDATE bz_agent_sessions SET created_at = %s WHERE id = %s", (created, entry["session_id"]))
    world.sql("UPDATE bz_agent_sessions SET revoked_at = now() WHERE id = %s", (made[1]["session_id"],))
    world.sql("UPDATE bz_agent_sessions SET refresh_expires_at = now() - interval '1 minute', "
              "access_expires_at = now() - interval '2 minutes' WHERE id = %s", (made[2]["session_id"],))
    return made


def newest_first(sessions: list[dict]) -> list[str]:
    ordered = sorted(sessions, key=lambda s: (s["created_at"], uuid.UUID(s["session_id"])), reverse=True)
    return [s["session_id"] for s in ordered]


def ids(body: dict) -> list[str]:
    return [item["session_id"] for item in body["list"]]


def test_the_list_is_newest_first_with_ties_by_session_id(world, listed):
    body = assert_ok(world.listing())
    assert set(body) == {"list", "next_cursor"} and body["next_cursor"] is None
    assert ids(body) == newest_first(listed)


def test_each_session_is_the_business_object_without_token_material(world, listed):
    items = {item["session_id"]: item for item in assert_ok(world.listing())["list"]}
    first = items[listed[0]["session_id"]]
    assert set(first) == BUSINESS_KEYS | {"authorization_id"}
    assert first["authorization_id"] == listed[0]["authorization_id"]
    assert first["client_app_id"] == LISTED and first["device_label"] == "Test workstation"
    assert first["principal"] == PRINCIPAL and first["on_behalf_of"] == SUBJECT
    assert first["allowed_routes"] == [ROUTE] and first["state"] == "active"
    assert (first["subject_display"], first["subject_display_status"]) == (None, "missing")
    assert items[listed[3]["session_id"]]["subject_display"] == {"name": "User 3"}
    assert items[listed[3]["session_id"]]["subject_display_status"] == "provided"
    assert moment(first["created_at"]) == listed[0]["created_at"]
    end = world.sql("SELECT refresh_expires_at FROM bz_agent_sessions WHERE id = %s", (listed[0]["session_id"],))[0][0]
    assert moment(first["expires_at"]) == end.replace(microsecond=end.microsecond // 1000 * 1000)
    revoked = items[listed[1]["session_id"]]
    assert revoked["state"] == "revoked" and moment(revoked["revoked_at"])
    assert items[listed[2]["session_id"]]["state"] == "expired" and "revoked_at" not in items[listed[2]["session_id"]]
    operator = items[listed[5]["session_id"]]
    assert "authorization_id" not in operator
    assert operator["principal"] == {"id": "u1", "tenant": "t2", "roles": []}
    assert items[listed[7]["session_id"]]["principal"] is None
    text = json.dumps(items)
    for key in ("access_token", "refresh_token", "hash"):
        assert key not in text


def _expect(listed: list[dict], name: str) -> list[str]:
    """The sessions each filter keeps, by their place in `listed`."""
    keep = {"authorization": [2], "on_behalf_of": [0, 1, 2, 3], "principal": [4], "tenant": [0, 1, 2, 3],
            "no-tenant": [6, 7], "active": [0, 3, 4, 5, 6, 7], "expired": [2], "revoked": [1],
            "tenant-and-state": [0, 3], "other-tenant": [5]}[name]
    return newest_first([listed[i] for i in keep])


@pytest.mark.parametrize("name, query", [
    ("authorization", "authorization_id={a2}"),
    ("on_behalf_of", f"on_behalf_of={SUBJECT}"),
    ("principal", "principal_id=u1&tenant=t1"),
    ("tenant", "tenant=tenant-7"),
    ("no-tenant", "tenant="),
    ("active", "state=active"),
    ("expired", "state=expired"),
    ("revoked", "state=revoked"),
    ("tenant-and-state", "tenant=tenant-7&state=active"),
    ("other-tenant", "tenant=t2"),
])
def test_each_filter(world, listed, name, query):
    query = query.replace("{a2}", listed[2]["authorization_id"].upper())
    assert ids(assert_ok(world.listing("?" + query))) == _expect(listed, name)


def test_other_clients_sessions_are_never_listed(world, listed):
    mine = {s["session_id"] for s in listed}
    theirs = set(ids(assert_ok(world.listing(token=world.tokens[OTHER]))))
    assert not mine & theirs
    assert ids(assert_ok(world.listing(f"?authorization_id={listed[0]['authorization_id']}",
                                       token=world.tokens[OTHER]))) == []


def test_paging_walks_every_session_once_in_order(world, listed):
    seen, cursor, pages = [], None, 0
    while True:
        body = assert_ok(world.listing("?limit=3" + (f"&cursor={cursor}" if cursor else "")))
        seen += ids(body)
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
        assert len(body["list"]) == 3 and len(cursor) <= 2048
    assert seen == newest_first(listed) and pages == 3
    exact = assert_ok(world.listing("?limit=8"))
    assert len(exact["list"]) == 8 and exact["next_cursor"] is None
    assert len(assert_ok(world.listing())["list"]) == 8  # the default, 20, holds them all


def test_the_cursor_is_canonical_base64url_of_its_json(world, listed):
    body = assert_ok(world.listing("?limit=1&state=active"))
    cursor = body["next_cursor"]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    decoded = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    binding = hashlib.sha256(json.dumps([LISTED, None, None, None, None, "active"],
                                        separators=(",", ":")).encode()).hexdigest()
    assert decoded == {"v": 1, "binding": binding, "created_at": body["list"][0]["created_at"],
                       "session_id": body["list"][0]["session_id"]}
    following = assert_ok(world.listing(f"?limit=1&state=active&cursor={cursor}"))
    assert ids(following) == _expect(listed, "active")[1:2]


def _cursor(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize("case", ["other-filters", "no-filters", "other-client", "padded", "not-base64",
                                  "tampered-binding", "version-2", "extra-key", "bad-time", "bad-id",
                                  "not-json", "2049-chars"])
def test_a_cursor_is_valid_only_with_its_own_filters(world, listed, case):
    body = assert_ok(world.listing("?limit=1&state=active"))
    cursor = body["next_cursor"]
    value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    query, token = f"?limit=1&state=active&cursor={cursor}", None
    if case == "other-filters":
        query = f"?limit=1&state=revoked&cursor={cursor}"
    elif case == "no-filters":
        query = f"?cursor={cursor}"
    elif case == "other-client":
        token = world.tokens[OTHER]
    elif case == "padded":
        query = f"?limit=1&state=active&cursor={cursor}{'=' * (-len(cursor) % 4) or '===='}"
    elif case == "not-base64":
        query = f"?limit=1&state=active&cursor={cursor[:-1]}!"
    elif case == "tampered-binding":
        query = f"?limit=1&state=active&cursor={_cursor({**value, 'binding': '0' * 64})}"
    elif case == "version-2":
        query = f"?limit=1&state=active&cursor={_cursor({**value, 'v': 2})}"
    elif case == "extra-key":
        query = f"?limit=1&state=active&cursor={_cursor({**value, 'x': 1})}"
    elif case == "bad-time":
        query = f"?limit=1&state=active&cursor={_cursor({**value, 'created_at': '2026-01-01T00:00:00Z'})}"
    elif case == "bad-id":
        query = f"?limit=1&state=active&cursor={_cursor({**value, 'session_id': 'abc'})}"
    elif case == "not-json":
        query = "?limit=1&state=active&cursor=" + base64.urlsafe_b64encode(b"{v:1}").rstrip(b"=").decode()
    elif case == "2049-chars":
        query = "?limit=1&state=active&cursor=" + "A" * 2049
    before = world.fingerprint()
    assert_error(world.listing(query, token), 400, "invalid_request")
    assert world.fingerprint() == before


@pytest.mark.parametrize("query", [
    "limit=0", "limit=101", "limit=01", "limit=1000", "limit=1.0", "limit=-1", "limit=abc", "limit=",
    "limit=%2B5", "limit=%205", "limit=1&limit=2", "state=all", "state=", "state=Active", "state=active&state=revoked",
    "authorization_id=abc", "authorization_id=", "on_behalf_of=", "on_behalf_of=%20x", "on_behalf_of=x%20",
    "on_behalf_of=a%01b", "on_behalf_of=" + "s" * 192, "principal_id=u1", "principal_id=&tenant=t1",
    "principal_id=" + "p" * 129 + "&tenant=t1", "tenant=" + "t" * 129, "tenant=%20t1", "tenant=t1&tenant=t2",
    "page=2", "offset=0", "cursor=",
], ids=lambda q: q[:40])
def test_the_query_is_parsed_strictly(world, listed, query):
    before = world.fingerprint()
    assert_error(world.listing("?" + query), 400, "invalid_request")
    assert world.fingerprint() == before


def test_limits_at_their_bounds_are_accepted(world, listed):
    assert len(assert_ok(world.listing("?limit=1"))["list"]) == 1
    assert len(assert_ok(world.listing("?limit=100"))["list"]) == 8
    assert assert_ok(world.listing("?on_behalf_of=" + "s" * 191))["list"] == []
    assert assert_ok(world.listing("?principal_id=" + "p" * 128 + "&tenant=" + "t" * 128))["list"] == []


@pytest.mark.parametrize("case", ["no-token", "agent-token", "in-the-query", "post", "delete"])
def test_the_list_needs_the_client_token_and_get(world, listed, case):
    tokens = world.login()
    if case == "no-token":
        assert_error(world.call("GET", "/sessions"), 401, "unauthorized")
    elif case == "agent-token":
        assert_error(world.listing(token=tokens["access_token"]), 401, "unauthorized")
    elif case == "in-the-query":
        assert_error(world.call("GET", f"/sessions?access_token={world.tokens[LISTED]}"), 401, "unauthorized")
    else:
        assert_error(world.call(case.upper(), "/sessions", world.tokens[LISTED]), 405, "method_not_allowed")


def test_the_list_reads_an_index_range_of_the_client(world, listed):
    assert world.sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'bz_agent_sessions_client_created'") == [(
        ("CREATE INDEX bz_agent_sessions_client_created ON public.bz_agent_sessions "
         "USING btree (client_app_id, created_at DESC, id DESC)"),)]
    with psycopg.connect(world.url) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(row[0] for row in conn.execute(
            "EXPLAIN SELECT id FROM bz_agent_sessions WHERE client_app_id = %s "
            "AND (created_at, id) < (now(), %s::uuid) ORDER BY created_at DESC, id DESC LIMIT 21",
            (LISTED, str(uuid.uuid4()))).fetchall())
    assert "bz_agent_sessions_client_created" in plan and "Sort" not in plan


# ================================================================ H.4 usage

CAPABILITIES = {
    "schema": "bailing.usage.v1", "supported": False, "modes": ["credits", "periodic"], "streaming": True,
    "orchestration": "host", "business_authorization_unchanged": True,
    "model_gateway": {
        "schema": "bailing.model-gateway.v1", "supported": False, "orchestration": "host", "streaming": True,
        "provider_response": "bailing.provider-response.v1", "settlement": "asynchronous",
        "model_tools": {"schema": "bailing.model-tools.v1", "directory": True, "execution": True,
                        "tools_path": "/usage/v1/model/tools"},
        "requests_path": "/usage/v1/model/requests", "models_path": "/usage/v1/model/models",
        "summary_path": "/usage/v1/model/summary", "billing_unit": "USD", "turn_required": False}}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer bhu_s_" + "A" * 43},
                                     {"Authorization": "Bearer nonsense"}], ids=["none", "usage", "garbage"])
def test_usage_capabilities_say_unsupported_without_authentication(world, headers):
    response = world.live.get("/usage/v1/capabilities", headers=headers)
    assert assert_ok(response) == CAPABILITIES
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"


@pytest.mark.parametrize("method, path", [
    ("GET", "/usage/v1/session"), ("POST", "/usage/v1/sessions/exchange"), ("POST", "/usage/v1/sessions/revoke"),
    ("GET", "/usage/v1/model/models"), ("GET", "/usage/v1/model/tools"), ("GET", "/usage/v1/model/summary"),
    ("POST", "/usage/v1/model/requests"), ("POST", "/usage/v1/model/requests/stream"),
    ("GET", "/usage/v1/model/requests/op-1"), ("POST", "/usage/v1/model/requests/op-1/cancel"),
    ("GET", "/usage/v1/external/billing/x"), ("POST", "/usage/v1/capabilities"), ("DELETE", "/usage/v1/capabilities"),
    ("GET", "/usage/v1"), ("GET", "/usage/v1/"), ("OPTIONS", "/usage/v1/model/models"), ("PUT", "/usage/v1/x/y"),
])
@pytest.mark.parametrize("auth", [None, "Bearer bhu_s_" + "A" * 43], ids=["anonymous", "bearer"])
def test_every_other_usage_path_is_404_not_found_never_401(world, method, path, auth):
    response = world.live.request(method, path, headers={"Authorization": auth} if auth else {},
                                  json={} if method in ("POST", "PUT") else None)
    assert response.status_code == 404, response.text
    assert response.json() == {"error": "not_found"}
    assert response.headers["Cache-Control"] == "no-store"
