"""Several hub hosts: two real hubs (gunicorn, two workers each, their own data folders and ports)
on one database and one BAILING_SECRET_KEY behave as one hub. A console session started on one is
good on the other and ends on both; the agent-auth limit and the sign-in throttle count the
attempts of both together; a configuration applied elsewhere is seen by both at once. Without a
shared key, a session cookie of one host is refused by the other (why the key must be set). A
provider changed while a request runs is cached as it was read (no process keeps an old one).
See docs/operations.md, "Several hub hosts"."""
from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import shutil
import time
from collections.abc import Iterator

import pytest
import requests
from sqlalchemy import select

from admin_app.catalog.store import compiled_providers
from admin_app.identity import sign_in_throttle as throttle
from admin_app.identity.models import ToolProvider
from tests.conftest import EXAMPLES, run_cli_process
from tests.gunicorn_hub import GunicornHub
from tests.helpers import PASSWORD, assert_error, bearer, make_admin, row_counts
from tests.test_console_server import GENERIC, csrf_of, location

pytestmark = pytest.mark.any_server

AUTHORIZATIONS = "/agent-auth/v1/authorizations"
TOOLS = "/agent-api/v1/tools?route=customers"
SIGN_IN = "/console/login"
AGENT_TABLES = ("bz_agent_authorizations", "bz_agent_sessions", "bz_agent_refresh_history")
# Requests per host when each of its workers should have answered some (the master hands a
# connection to whichever worker takes it first).
SPREAD = 6


def authorization_body(client: str = "crm-demo") -> dict:
    """A valid create-authorization body for examples/hub.json's client."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return {"client_app_id": client, "redirect_uri": "http://127.0.0.1:49152/callback",
            "state": secrets.token_urlsafe(16), "requested_routes": ["customers"],
            "device_label": "Test workstation", "code_challenge": challenge, "code_challenge_method": "S256"}


@contextlib.contextmanager
def two_hosts(db_url: str, tmp_path, secret_key: str | None = "several-hosts-shared-secret"
              ) -> Iterator[tuple[GunicornHub, GunicornHub]]:
    """Host A and host B: each its own gunicorn master, two workers, data folder and port."""
    a = GunicornHub(db_url, workers=2, data_dir=tmp_path / "host-a", secret_key=secret_key)
    b = GunicornHub(db_url, workers=2, data_dir=tmp_path / "host-b", secret_key=secret_key)
    with a, b:
        yield a, b


@pytest.fixture
def hosts(db_url, cli, configured, tmp_path):
    make_admin(cli, "ann", "admin")
    with two_hosts(db_url, tmp_path) as pair:
        yield pair


class Person:
    """One browser (one cookie jar: cookies name no port, so it goes to either host)."""

    def __init__(self):
        self.http = requests.Session()

    def get(self, host: GunicornHub, path: str) -> requests.Response:
        return self.http.get(host.url + path, allow_redirects=False, timeout=60)

    def post(self, host: GunicornHub, path: str, data: dict) -> requests.Response:
        return self.http.post(host.url + path, data=data, allow_redirects=False, timeout=60)

    def form_token(self, host: GunicornHub) -> str:
        page = self.get(host, SIGN_IN)
        assert page.status_code == 200, page.text
        return csrf_of(page.text)

    def sign_in(self, host: GunicornHub, username: str, password: str, token: str | None = None):
        return self.post(host, SIGN_IN, {"username": username, "password": password,
                                         "csrf_token": token or self.form_token(host)})


def signed_in_page(response: requests.Response) -> bool:
    return response.status_code == 200 and 'action="/console/logout"' in response.text


def to_sign_in(response: requests.Response) -> bool:
    return response.status_code in (302, 303) and location(response).startswith(SIGN_IN)


# ================================================================ console sessions

def test_a_session_started_on_one_host_works_on_the_other_and_ends_on_both(hosts, sql):
    a, b = hosts
    ann = Person()
    assert ann.sign_in(a, "ann", PASSWORD).status_code == 303
    cookie = {"Cookie": "bailing_session=" + ann.http.cookies["bailing_session"]}
    for _ in range(SPREAD):  # every worker of both hosts reads the one server-side session
        assert signed_in_page(ann.get(a, "/console/access-log"))
        assert signed_in_page(ann.get(b, "/console/access-log"))
    assert sql("SELECT count(*) FROM bz_console_sessions WHERE ended_at IS NULL") == [(1,)]

    # Signed out on B, with the CSRF token of a page B rendered.
    token = csrf_of(ann.get(b, "/console/access-log").text)
    assert to_sign_in(ann.post(b, "/console/logout", {"csrf_token": token}))
    assert sql("SELECT end_reason FROM bz_console_sessions") == [("signed_out",)]
    for host in (a, b) * SPREAD:  # the cookie as it was before signing out: refused everywhere
        replay = requests.get(host.url + "/console/access-log", headers=cookie, allow_redirects=False, timeout=60)
        assert to_sign_in(replay)


def test_without_a_shared_key_the_other_host_refuses_the_cookie(db_url, cli, configured, tmp_path, sql):
    """What docs/operations.md warns of: each host signs cookies with its own data folder's key."""
    make_admin(cli, "ann", "admin")
    with two_hosts(db_url, tmp_path, secret_key=None) as (a, b):
        ann = Person()
        assert ann.sign_in(a, "ann", PASSWORD).status_code == 303
        assert signed_in_page(ann.get(a, "/console/access-log"))
        assert to_sign_in(ann.get(b, "/console/access-log"))
    keys = {(tmp_path / host / "secret_key").read_text() for host in ("host-a", "host-b")}
    assert len(keys) == 2
    assert sql("SELECT count(*) FROM bz_console_sessions WHERE ended_at IS NULL") == [(1,)]


# ================================================================ the agent-auth limit

def test_the_authorization_limit_counts_both_hosts_together(hosts, sql):
    a, b = hosts
    answers = [requests.post((a, b)[i % 2].url + AUTHORIZATIONS, json=authorization_body(), timeout=60)
               for i in range(10)]
    assert [r.status_code for r in answers] == [201] * 10, [r.text for r in answers]
    before = (row_counts(sql, *AGENT_TABLES), sql("SELECT key, hits, xmin::text FROM bz_rate_limits"))
    assert [len(hits) for _, hits, _ in before[1]] == [10]
    for host in (a, b) * 3:  # the eleventh and later, on either host and any of its workers
        response = requests.post(host.url + AUTHORIZATIONS, json=authorization_body(), timeout=60)
        assert_error(response, 429, "rate_limited")
        assert response.headers["Retry-After"] == "60"
    assert (row_counts(sql, *AGENT_TABLES), sql("SELECT key, hits, xmin::text FROM bz_rate_limits")) == before
    assert before[0]["bz_agent_authorizations"] == 10


# ================================================================ the sign-in throttle

def unknown_names(count: int) -> list[str]:
    """Names of no admin, each counted in a bucket of its own (so no account delay)."""
    names, buckets = [], set()
    for n in range(1000):
        name = f"nobody-{n}"
        bucket = throttle.account_key(None, name)
        if bucket not in buckets:
            names.append(name)
            buckets.add(bucket)
        if len(names) == count:
            return names
    raise AssertionError("not enough buckets")


def throttle_state(sql) -> list:
    return sql("SELECT key, failures, last_failure_at FROM bz_sign_in_failures ORDER BY key")


def test_failed_sign_ins_on_one_host_slow_and_hold_back_the_other(hosts, sql):
    a, b = hosts
    person = Person()
    for _ in range(throttle.ACCOUNT_FREE_FAILURES):
        failed = person.sign_in(a, "ann", "wrong password")
        assert failed.status_code == 401 and GENERIC in failed.text
    # The account's failures, all on A, delay an attempt on B as they would on A.
    token = person.form_token(b)
    started = time.monotonic()
    failed = person.sign_in(b, "ann", "wrong password", token)
    assert failed.status_code == 401
    assert time.monotonic() - started >= throttle.account_delay(throttle.ACCOUNT_FREE_FAILURES)

    # The address's failures, alternating between the hosts, up to the point where it must wait.
    left = throttle.ADDRESS_FREE_FAILURES - throttle.ACCOUNT_FREE_FAILURES - 1
    tokens = {a.url: person.form_token(a), b.url: person.form_token(b)}
    for i, name in enumerate(unknown_names(left)):
        host = (a, b)[i % 2]
        assert person.sign_in(host, name, "wrong password", tokens[host.url]).status_code == 401
    last = (a, b)[(left - 1) % 2]
    other = b if last is a else a

    # The very next attempt, on the other host, waits: 429, the right password not even checked.
    before = (throttle_state(sql), row_counts(sql, "bz_console_sessions"))
    held = person.sign_in(other, "ann", PASSWORD, tokens[other.url])
    assert {k: n for k, n, _ in before[0]}[throttle.address_key("127.0.0.1")] == 10
    assert held.status_code == 429 and "Too many failed sign-ins" in held.text
    assert held.headers["Retry-After"] == "1"  # ten failures: a one-second window
    assert (throttle_state(sql), row_counts(sql, "bz_console_sessions")) == before

    # Once the window has passed, a failure on that host doubles the window for the first one.
    time.sleep(1.1)
    assert person.sign_in(other, "nobody-else", "wrong password", tokens[other.url]).status_code == 401
    before = (throttle_state(sql), row_counts(sql, "bz_console_sessions"))
    held = person.sign_in(last, "ann", PASSWORD, tokens[last.url])
    assert held.status_code == 429
    assert int(held.headers["Retry-After"]) in (1, 2)
    assert (throttle_state(sql), row_counts(sql, "bz_console_sessions")) == before


# ================================================================ the catalog

def revisions(host: GunicornHub, token: str) -> set[str]:
    """The capability revisions the host's workers answer (each asked a few times)."""
    seen = set()
    for _ in range(SPREAD):
        response = requests.get(host.url + TOOLS, headers=bearer(token), timeout=60)
        assert response.status_code == 200, response.text
        seen.add(response.json()["capability_revision"])
    return seen


def tool_names(host: GunicornHub, token: str) -> set[str]:
    response = requests.get(host.url + TOOLS, headers=bearer(token), timeout=60)
    return {tool["name"] for tool in response.json()["tools"]}


def apply_elsewhere(db_url: str, folder, doc: dict) -> None:
    """`bailing-admin config apply`, run as its own process: an operator on a third machine."""
    path = folder / "hub.json"
    path.write_text(json.dumps(doc))
    result = run_cli_process(["config", "apply", str(path)], db_url)
    assert result.returncode == 0, result.stderr


def test_a_configuration_applied_elsewhere_is_seen_by_both_hosts(hosts, issue_session, db_url, tmp_path):
    a, b = hosts
    token = issue_session()["access_token"]
    first = revisions(a, token) | revisions(b, token)
    assert len(first) == 1  # every worker of both hosts has computed (and kept) the same one

    # A provider's document changes: both hosts compile it again, without a restart.
    folder = tmp_path / "config"
    folder.mkdir()
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    openapi = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    openapi["paths"]["/customers"]["get"]["description"] = "Search customers (changed on another host)."
    (folder / "crm.openapi.json").write_text(json.dumps(openapi))
    apply_elsewhere(db_url, folder, doc)
    second = revisions(a, token) | revisions(b, token)
    assert len(second) == 1 and second != first

    # A route's tool settings change: the write tool leaves the catalog of both.
    assert "customer_update_credit_limit" in tool_names(a, token)
    doc["routes"][0]["tools"]["sources"][0]["allow"] = ["customer.read"]
    doc["routes"][0]["tools"]["agent_direct"]["write_tools"] = []
    apply_elsewhere(db_url, folder, doc)
    third = revisions(a, token) | revisions(b, token)
    assert len(third) == 1 and third.isdisjoint(first | second)
    assert "customer_update_credit_limit" not in tool_names(a, token) | tool_names(b, token)
    shutil.rmtree(folder)


def test_a_provider_changed_during_a_request_is_cached_as_it_was_read(app, configured, sql):
    """The in-process half of the above: a request whose session already holds the provider's row
    when an apply elsewhere commits compiles the document it reads now, never its old copy under
    the new version (which this process would then keep serving while the others moved on)."""
    database = app.extensions["bailing"].db
    with database.session() as db:
        held = db.scalars(select(ToolProvider).where(ToolProvider.name == "demo-crm")).one()
        sql("UPDATE bz_tool_providers SET updated_at = now(), openapi = jsonb_set(openapi, "
            "'{paths,/customers,get,summary}', '\"Changed by an apply elsewhere.\"') WHERE name = 'demo-crm'")
        assert "Changed" not in json.dumps(held.openapi)  # the session's copy is the old one
        compiled = compiled_providers(db, ["demo-crm"])["demo-crm"]
        assert "Changed by an apply elsewhere." in compiled.tools["customer_search"].description.text
    with database.session() as db:
        assert compiled_providers(db, ["demo-crm"])["demo-crm"] is compiled  # cached under that version
