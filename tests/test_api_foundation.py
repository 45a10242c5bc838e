"""Issue 2, items 7 and 8: agent bearer authentication, /admin/api/me, the one JSON error envelope
with `Cache-Control: no-store`, POST /agent-auth/v1/revoke, and request-body limits enforced
while the body is read.

Every request goes over real HTTP to a live server backed by a real PostgreSQL.
"""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from admin_app import create_app
from admin_app.identity.roles import PERMISSIONS
from admin_app.identity.tokens import hash_token
from tests.conftest import serve
from tests.helpers import admin_token, bearer

SESSION = "/agent-auth/v1/session"
REVOKE = "/agent-auth/v1/revoke"
ME = "/admin/api/me"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
UNKNOWN_ACCESS = "bha_" + "A" * 43  # well formed, issued to nobody
JSON = {"Content-Type": "application/json"}

# Words that only appear in a body when an exception or its traceback leaked into it.
INTERNALS = ("traceback", 'file "', "sqlalchemy", "psycopg", "werkzeug", "site-packages",
             "admin_app", "exception", "operationalerror", "127.0.0.1")


# ----------------------------------------------------------------------------- helpers

def assert_no_internals(text: str) -> None:
    lowered = text.lower()
    leaked = [word for word in INTERNALS if word in lowered]
    assert not leaked, f"internal details in a response body: {leaked}: {text[:500]}"


def assert_envelope(response, status: int, code: str) -> dict:
    """The one API error shape: JSON {"error", "message", ...}, never cached, nothing internal."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert body["error"] == code, body
    assert isinstance(body.get("message"), str) and body["message"], body
    assert_no_internals(response.text)
    return body


def assert_unauthorized(response) -> None:
    body = assert_envelope(response, 401, "unauthorized")
    assert set(body) == {"error", "message"}
    assert response.headers.get("WWW-Authenticate", "").startswith("Bearer")


def revoked_at(sql, session_id: str):
    rows = sql("SELECT revoked_at FROM bz_agent_sessions WHERE id = %s", (session_id,))
    assert len(rows) == 1
    return rows[0][0]


def assert_session_intact(live, sql, session: dict) -> None:
    """Nothing was written: the session is not revoked and its access token still works."""
    assert revoked_at(sql, session["session_id"]) is None
    assert live.get(SESSION, headers=bearer(session["access_token"])).status_code == 200


@pytest.fixture
def agent(issue_session) -> dict:
    """A fresh Agent Session of crm-demo on the route customers."""
    return issue_session()


@pytest.fixture
def other_client(cli, configured, tmp_path) -> str:
    """A second enabled client app, erp-demo, allowed on the same route."""
    path = tmp_path / "other-client.json"
    path.write_text(json.dumps({"client_apps": [
        {"app_id": "erp-demo", "name": "ERP", "allowed_routes": ["customers"], "enabled": True}]}))
    code, _, err = cli("config", "apply", str(path))
    assert code == 0, err
    return "erp-demo"


@pytest.fixture
def make_admin(cli):
    """`make_admin(username, role)`: a new admin's personal admin API token."""
    return lambda username, role: admin_token(cli, username, role)


# ----------------------------------------------------------------------------- 1. agent bearer

def test_a_fresh_access_token_sees_its_session_metadata_and_no_secret(server, agent):
    response = server.get(SESSION, headers=bearer(agent["access_token"]))

    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert body["session_id"] == agent["session_id"]
    assert body["client_app_id"] == "crm-demo"
    assert body["principal"] == PRINCIPAL
    assert body["on_behalf_of"] == "tenant-7:user-42"
    assert body["allowed_routes"] == ["customers"]
    assert body["access_expires_at"] == agent["access_expires_at"]
    assert body["refresh_expires_at"] == agent["refresh_expires_at"]
    for secret in (agent["access_token"], agent["refresh_token"],
                   hash_token(agent["access_token"]), hash_token(agent["refresh_token"])):
        assert secret not in response.text
    assert not [key for key in body if "token" in key or "hash" in key]


def _spoil_sql(query: str):
    return lambda ctx: ctx.sql(query, (ctx.agent["session_id"],))


def _revoke_by_cli(ctx) -> None:
    code, _, err = ctx.cli("sessions", "revoke", ctx.agent["session_id"])
    assert code == 0, err


def _client_token(ctx) -> str:
    code, out, err = ctx.cli("clients", "token", "crm-demo")
    assert code == 0, err
    return out["client_token"]


def _admin_token(ctx) -> str:
    return ctx.make_admin("root", "admin")


def _access(ctx) -> str:
    return ctx.agent["access_token"]


def _one_char_changed(token: str) -> str:
    return token[:-1] + ("B" if token[-1] == "A" else "A")


# case id -> (the Authorization header to send, or None for none; what to do to the session first)
UNAUTHORIZED = {
    "no header": (lambda c: None, None),
    "unknown token": (lambda c: f"Bearer {UNKNOWN_ACCESS}", None),
    "no Bearer scheme": (lambda c: _access(c), None),
    "Basic scheme": (lambda c: f"Basic {_access(c)}", None),
    "two tokens": (lambda c: f"Bearer {_access(c)} {_access(c)}", None),
    "empty header": (lambda c: "", None),
    "Bearer and no token": (lambda c: "Bearer ", None),
    "refresh token as access token": (lambda c: f"Bearer {c.agent['refresh_token']}", None),
    "Client Token as access token": (lambda c: f"Bearer {_client_token(c)}", None),
    "admin token as access token": (lambda c: f"Bearer {_admin_token(c)}", None),
    "access token with the refresh prefix": (lambda c: "Bearer bhr_" + _access(c)[4:], None),
    "one character changed": (lambda c: f"Bearer {_one_char_changed(_access(c))}", None),
    "garbage": (lambda c: "Bearer <script>%00'--;", None),
    "overlong token": (lambda c: "Bearer " + _access(c) * 8, None),
    "expired access token": (
        lambda c: f"Bearer {_access(c)}",
        _spoil_sql("UPDATE bz_agent_sessions SET access_expires_at = now() - interval '1 second' "
                   "WHERE id = %s")),
    "expired refresh session": (
        lambda c: f"Bearer {_access(c)}",
        _spoil_sql("UPDATE bz_agent_sessions SET refresh_expires_at = now() - interval '1 second' "
                   "WHERE id = %s")),
    "revoked session": (lambda c: f"Bearer {_access(c)}", _revoke_by_cli),
    "client app disabled": (
        lambda c: f"Bearer {_access(c)}",
        _spoil_sql("UPDATE bz_client_apps SET enabled = false WHERE app_id = "
                   "(SELECT client_app_id FROM bz_agent_sessions WHERE id = %s)")),
}


class Ctx:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


@pytest.mark.parametrize("case", list(UNAUTHORIZED))
def test_every_failed_agent_bearer_gets_the_same_401(server, agent, cli, sql, make_admin, case):
    header_of, spoil = UNAUTHORIZED[case]
    ctx = Ctx(agent=agent, cli=cli, sql=sql, make_admin=make_admin)
    reference = server.get(SESSION, headers=bearer(UNKNOWN_ACCESS))
    assert_unauthorized(reference)
    if spoil is not None:
        # The 401 below must come from the change, not from a token that never worked.
        assert server.get(SESSION, headers=bearer(agent["access_token"])).status_code == 200
        spoil(ctx)

    header = header_of(ctx)
    response = server.get(SESSION, headers={} if header is None else {"Authorization": header})

    assert_unauthorized(response)
    assert response.content == reference.content
    assert response.headers["WWW-Authenticate"] == reference.headers["WWW-Authenticate"]


# ----------------------------------------------------------------------------- 2. /admin/api/me

EVERYTHING = frozenset(PERMISSIONS)
# As issue 2 lists them; admin holds everything.
ROLE_PERMISSIONS = {
    "admin": EVERYTHING,
    "auditor": {"runs:read", "audit:read"},
    "approver": {"approvals:read", "approvals:decide"},
    "support": {"runs:read"},
}


@pytest.mark.parametrize("role", list(ROLE_PERMISSIONS))
def test_admin_me_shows_the_role_and_its_permissions(server, make_admin, role):
    token = make_admin("alice", role)

    response = server.get(ME, headers=bearer(token))

    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert body["username"] == "alice"
    assert body["role"] == role
    assert set(body["permissions"]) == set(ROLE_PERMISSIONS[role])
    assert token not in response.text


def test_admin_holds_every_permission_the_other_roles_hold():
    others = set().union(*(perms for role, perms in ROLE_PERMISSIONS.items() if role != "admin"))
    assert others <= EVERYTHING


def _disable_admin(ctx) -> None:
    ctx.sql("UPDATE bz_admins SET disabled = true WHERE username = 'alice'")


def _revoke_admin_tokens(ctx) -> None:
    ctx.sql("UPDATE bz_admin_tokens SET revoked_at = now()")


ADMIN_REFUSALS = {
    "disabled admin": (lambda c: f"Bearer {c.admin}", _disable_admin),
    "revoked admin token": (lambda c: f"Bearer {c.admin}", _revoke_admin_tokens),
    "agent access token": (lambda c: f"Bearer {c.agent['access_token']}", None),
    "admin token without Bearer": (lambda c: c.admin, None),
    "admin token, one character changed": (lambda c: f"Bearer {_one_char_changed(c.admin)}", None),
    "no header": (lambda c: None, None),
}


@pytest.mark.parametrize("case", list(ADMIN_REFUSALS))
def test_admin_me_refuses_with_the_same_401(server, make_admin, agent, sql, case):
    header_of, spoil = ADMIN_REFUSALS[case]
    ctx = Ctx(admin=make_admin("alice", "auditor"), agent=agent, sql=sql)
    assert server.get(ME, headers=bearer(ctx.admin)).status_code == 200
    reference = server.get(SESSION, headers=bearer(UNKNOWN_ACCESS))
    if spoil is not None:
        spoil(ctx)

    header = header_of(ctx)
    response = server.get(ME, headers={} if header is None else {"Authorization": header})

    assert_unauthorized(response)
    assert response.content == reference.content


# ----------------------------------------------------------------------------- 3. error envelope

NOT_FOUND = ["/agent-auth/v1/nothing-here", "/agent-auth/v1/session/extra",
             "/admin/api/nothing-here", "/admin/api/me/"]
AGENT_API_NOT_FOUND = ["/agent-api/v1/nothing-here", "/agent-api/v1/",
                       "/agent-api/v1/runs/x/y/z"]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", NOT_FOUND)
def test_unknown_api_paths_get_the_json_404(server, path, method):
    response = server.request(method, path, headers=bearer(UNKNOWN_ACCESS))
    assert_envelope(response, 404, "not_found")


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", AGENT_API_NOT_FOUND)
def test_unknown_agent_api_paths_check_the_bearer_before_answering_404(server, agent, path, method):
    """As upstream Core: a caller without a valid bearer learns nothing about which paths exist."""
    refused = server.request(method, path, headers=bearer(UNKNOWN_ACCESS))
    assert_envelope(refused, 401, "unauthorized")
    assert_envelope(server.request(method, path), 401, "unauthorized")

    found_nothing = server.request(method, path, headers=bearer(agent["access_token"]))
    assert_envelope(found_nothing, 404, "not_found")


@pytest.mark.parametrize("method, path, allowed", [
    ("POST", SESSION, "GET"),
    ("DELETE", SESSION, "GET"),
    ("GET", REVOKE, "POST"),
    ("PUT", ME, "GET"),
])
def test_a_wrong_method_gets_the_json_405(server, method, path, allowed):
    response = server.request(method, path)
    assert_envelope(response, 405, "method_not_allowed")
    assert allowed in [m.strip() for m in response.headers["Allow"].split(",")]


def test_every_api_response_success_or_error_is_no_store(server, agent, make_admin):
    admin = make_admin("alice", "auditor")
    access = bearer(agent["access_token"])
    calls = [
        (200, lambda: server.get(SESSION, headers=access)),
        (200, lambda: server.get(ME, headers=bearer(admin))),
        (401, lambda: server.get(SESSION)),
        (401, lambda: server.get(ME, headers=access)),
        (401, lambda: server.get("/agent-api/v1/nothing-here")),
        (404, lambda: server.get("/agent-api/v1/nothing-here", headers=access)),
        (405, lambda: server.get(REVOKE)),
        (400, lambda: server.post(REVOKE, data="[]", headers={"Content-Type": "text/plain"})),
        (400, lambda: server.post(REVOKE, data="{", headers=JSON)),
        (200, lambda: server.post(REVOKE, json={}, headers=access)),
    ]
    for expected, call in calls:
        response = call()
        assert response.status_code == expected, (expected, response.request.url, response.text)
        assert response.headers.get("Cache-Control") == "no-store", response.request.url
        assert response.headers["Content-Type"].startswith("application/json")
        assert_no_internals(response.text)


def test_an_unexpected_failure_is_a_bare_500_envelope(tmp_path):
    """A database that cannot be reached raises deep inside a view: the client sees only the
    envelope, never the exception's text."""
    app = create_app({"database_url": "postgresql://nobody@127.0.0.1:1/none", "data_dir": tmp_path})
    live = serve(app)
    try:
        response = live.get(SESSION, headers=bearer(UNKNOWN_ACCESS))
        body = assert_envelope(response, 500, "internal_error")
        assert set(body) == {"error", "message"}
        assert "nobody" not in response.text and "refused" not in response.text.lower()
    finally:
        live.stop()
        app.extensions["bailing"].db.dispose()


def test_the_html_page_has_a_csp_without_inline_scripts(server):
    response = server.get("/")

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/html")
    directives = {}
    for part in response.headers["Content-Security-Policy"].split(";"):
        words = part.split()
        if words:
            directives[words[0].lower()] = words[1:]
    script_src = directives.get("script-src", directives.get("default-src"))
    assert script_src, directives
    assert "'unsafe-inline'" not in script_src
    assert "'unsafe-eval'" not in script_src
    assert "*" not in script_src
    assert "Traceback" not in response.text


# ----------------------------------------------------------------------------- 4. revoke

def test_revoke_with_the_access_bearer_and_an_empty_object(server, agent, issue_session, sql):
    bystander = issue_session()

    response = server.post(REVOKE, json={}, headers=bearer(agent["access_token"]))

    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert body["session_id"] == agent["session_id"]
    assert body["already_revoked"] is False
    assert body["revoked_at"]
    assert revoked_at(sql, agent["session_id"]) is not None
    assert_unauthorized(server.get(SESSION, headers=bearer(agent["access_token"])))
    again = server.post(REVOKE, json={}, headers=bearer(agent["access_token"]))
    assert again.status_code == 200 and again.json()["already_revoked"] is True, again.text
    assert_session_intact(server, sql, bystander)


def test_revoke_with_client_app_id_and_refresh_token_and_no_bearer(server, agent, issue_session, sql):
    bystander = issue_session()

    response = server.post(REVOKE, json={"client_app_id": "crm-demo",
                                         "refresh_token": agent["refresh_token"]})

    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    assert response.json()["session_id"] == agent["session_id"]
    assert revoked_at(sql, agent["session_id"]) is not None
    assert_unauthorized(server.get(SESSION, headers=bearer(agent["access_token"])))
    assert_session_intact(server, sql, bystander)


def test_revoke_with_refresh_token_works_while_sending_an_expired_bearer(server, agent, sql):
    sql("UPDATE bz_agent_sessions SET access_expires_at = now() - interval '1 second' WHERE id = %s",
        (agent["session_id"],))
    assert_unauthorized(server.get(SESSION, headers=bearer(agent["access_token"])))

    response = server.post(REVOKE, headers=bearer(agent["access_token"]),
                           json={"client_app_id": "crm-demo", "refresh_token": agent["refresh_token"]})

    assert response.status_code == 200, response.text
    assert revoked_at(sql, agent["session_id"]) is not None


def _grant_other_clients_session(ctx):
    erp = ctx.issue_session(client="erp-demo")
    return {"client_app_id": "crm-demo", "refresh_token": erp["refresh_token"]}, erp


# case id -> ctx -> (body, the session that must stay unrevoked)
BAD_GRANTS = {
    "this session's refresh token under another client": lambda c: (
        {"client_app_id": "erp-demo", "refresh_token": c.agent["refresh_token"]}, c.agent),
    "another client's refresh token under this client": _grant_other_clients_session,
    "unknown client": lambda c: (
        {"client_app_id": "ghost-app", "refresh_token": c.agent["refresh_token"]}, c.agent),
    "unknown refresh token": lambda c: (
        {"client_app_id": "crm-demo", "refresh_token": "bhr_" + "A" * 43}, c.agent),
}


@pytest.mark.parametrize("case", list(BAD_GRANTS))
def test_revoke_with_a_refresh_token_that_is_not_the_clients_revokes_nothing(
        server, agent, other_client, issue_session, sql, case):
    """The answer is the same whether or not the token matched: nothing to learn from it."""
    body, victim = BAD_GRANTS[case](Ctx(agent=agent, issue_session=issue_session))

    response = server.post(REVOKE, json=body)

    assert response.status_code == 200, response.text
    assert response.json() == {"revoked": True}
    assert_session_intact(server, sql, victim)


# case id -> (send the access bearer?, body from the session)
INVALID_FIELDS = {
    "access token as refresh token": (False, lambda a: {
        "client_app_id": "crm-demo", "refresh_token": a["access_token"]}),
    "unknown field beside the refresh token": (False, lambda a: {
        "client_app_id": "crm-demo", "refresh_token": a["refresh_token"], "scope": "all"}),
    "refresh_token missing": (False, lambda a: {"client_app_id": "crm-demo"}),
    "client_app_id missing": (False, lambda a: {"refresh_token": a["refresh_token"]}),
    "refresh_token not a string": (False, lambda a: {"client_app_id": "crm-demo", "refresh_token": 5}),
    "client_app_id malformed": (False, lambda a: {"client_app_id": "CRM Demo",
                                                  "refresh_token": a["refresh_token"]}),
}


@pytest.mark.parametrize("case", list(INVALID_FIELDS))
def test_revoke_with_bad_fields_is_invalid_request_and_changes_nothing(server, agent, sql, case):
    with_bearer, body_of = INVALID_FIELDS[case]
    headers = bearer(agent["access_token"]) if with_bearer else {}

    response = server.post(REVOKE, json=body_of(agent), headers=headers)

    assert_envelope(response, 400, "invalid_request")
    assert_session_intact(server, sql, agent)


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", None, "application/json; charset=latin-1",
])
def test_revoke_reads_its_body_as_json_whatever_the_content_type(server, agent, content_type):
    """As upstream Core: the Content-Type header is not checked, the body is read as UTF-8 JSON."""
    data = json.dumps({"client_app_id": "crm-demo", "refresh_token": agent["refresh_token"]})
    headers = {} if content_type is None else {"Content-Type": content_type}

    response = server.post(REVOKE, data=data.encode(), headers=headers)

    assert response.status_code == 200, response.text
    assert response.json()["revoked"] is True
    assert server.get(SESSION, headers=bearer(agent["access_token"])).status_code == 401


VALID_BY_REFRESH = '"client_app_id": "crm-demo", "refresh_token": "RT"'
BAD_JSON = {
    "invalid JSON": "{" + VALID_BY_REFRESH,
    "duplicate keys": '{"a":1,"a":2}',
    "duplicate keys in an otherwise valid body":
        '{"client_app_id": "crm-demo", ' + VALID_BY_REFRESH + "}",
    "JSON array": "[{" + VALID_BY_REFRESH + "}]",
    "NaN": '{"a": NaN}',
    "Infinity beside valid fields": "{" + VALID_BY_REFRESH + ', "n": -Infinity}',
    "bare NaN": "NaN",
    "invalid UTF-8": b'{"client_app_id": "crm-demo\xff", "refresh_token": "RT"}',
}


@pytest.mark.parametrize("case", list(BAD_JSON))
def test_revoke_with_a_body_that_is_not_one_strict_json_object_is_invalid_request(
        server, agent, sql, case):
    raw = BAD_JSON[case]
    token = agent["refresh_token"]
    data = raw.replace(b"RT", token.encode()) if isinstance(raw, bytes) else raw.replace("RT", token).encode()

    response = server.post(REVOKE, data=data, headers=JSON)

    body = assert_envelope(response, 400, "invalid_request")
    # Refused as a document, before any field is looked at (a lenient parser would instead
    # complain about field "a" or "n", or accept the duplicate).
    assert not [p for p in body.get("problems", []) if p.get("path")], body
    assert_session_intact(server, sql, agent)


# ----------------------------------------------------------------------------- 5. body limits

LIMIT = 1024


@pytest.fixture
def small_server(db_url, tmp_path):
    """The same database served by an app whose JSON bodies are limited to LIMIT bytes."""
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "small",
                              "json_body_max_bytes": LIMIT})
    live = serve(application)
    yield live
    live.stop()
    application.extensions["bailing"].db.dispose()


def open_post(live, path: str, headers: dict, first: bytes | None = None) -> http.client.HTTPConnection:
    """Send a POST's headers (and `first`, in the same packet) and nothing more, so the test
    decides how much of the body the server ever gets."""
    url = urlsplit(live.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    conn.putrequest("POST", path, skip_accept_encoding=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders(first)
    return conn


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def read_response(conn: http.client.HTTPConnection, waiting_for: str):
    try:
        response = conn.getresponse()
        return response, response.read()
    except TimeoutError:
        pytest.fail(f"no answer within 10 s: the server is waiting for {waiting_for}")
    finally:
        conn.close()


def assert_too_large(response, raw: bytes) -> dict:
    assert response.status == 413, raw
    assert response.getheader("Cache-Control") == "no-store"
    assert response.getheader("Content-Type", "").startswith("application/json")
    body = json.loads(raw)
    assert body["error"] == "request_too_large"
    assert isinstance(body["message"], str) and body["message"]
    assert body["max_bytes"] == LIMIT
    return body


def test_a_declared_oversized_body_is_refused_before_it_is_read(small_server, agent, sql):
    conn = open_post(small_server, REVOKE, {
        **JSON, **bearer(agent["access_token"]), "Content-Length": "5000"}, first=b'{"pad": "')

    response, raw = read_response(conn, "the 5000 declared bytes")

    body = assert_too_large(response, raw)
    assert body["observed_bytes"] == 0
    assert_session_intact(small_server, sql, agent)


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(small_server, agent, sql):
    conn = open_post(small_server, REVOKE, {
        **JSON, **bearer(agent["access_token"]), "Transfer-Encoding": "chunked"})
    sent = 0
    for _ in range(2):
        conn.send(chunk(b" " * 800))
        sent += 800
    # The body has not ended (no last chunk): an answer now means the server stopped reading.
    response, raw = read_response(conn, "the end of the chunked body")

    body = assert_too_large(response, raw)
    assert LIMIT < body["observed_bytes"] <= sent
    assert_session_intact(small_server, sql, agent)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("size, accepted", [(LIMIT, True), (LIMIT + 1, False)])
def test_a_body_of_exactly_the_limit_is_accepted_and_one_byte_more_is_not(
        small_server, agent, sql, framing, size, accepted):
    body = b"{}" + b" " * (size - 2)  # revoke with the bearer, padded with JSON whitespace
    assert len(body) == size
    data = body if framing == "content-length" else iter([body[:600], body[600:]])

    response = small_server.post(REVOKE, data=data, headers={**JSON, **bearer(agent["access_token"])})

    if accepted:
        assert response.status_code == 200, response.text
        assert response.json()["session_id"] == agent["session_id"]
        assert revoked_at(sql, agent["session_id"]) is not None
    else:
        body = assert_envelope(response, 413, "request_too_large")
        assert body["max_bytes"] == LIMIT
        assert body["observed_bytes"] == (0 if framing == "content-length" else LIMIT + 1)
        assert_session_intact(small_server, sql, agent)
