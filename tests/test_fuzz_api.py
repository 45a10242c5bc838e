"""Property-based fuzzing of every operation of the three published OpenAPI documents
(/agent-api/v1, /agent-auth/v1, /admin/api) with schemathesis, over real HTTP on loopback against
a real PostgreSQL.

For every generated request the harness sends it twice: once with a refused credential (none, a
malformed one, a token of another kind, an admin role lacking the permission), once with the
credential the operation wants. Every response must be a documented status with a body and headers
matching the document, never a 5xx; and a refused request (status >= 400) must leave the whole
database exactly as it was (per table: row count and md5 of the ordered row texts).

The world (the hub over the demo business system, a session, a Client Token, admin tokens, a
pending approval, an executed tool job, a run, a linked audit archive, a pending authorization) is
built once per module in a template database; each test gets a fresh copy of it, so the IDs are
the same everywhere and hooks mix them into generated path, query and body values to get past 404s.

Bounded: BAILING_FUZZ_EXAMPLES examples per operation (default 4); a long run by hand sets it high.
BAILING_FUZZ_SEED replays a failing run (its seed is attached to every failure).
"""
from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import os
import secrets
import tempfile
import uuid
from pathlib import Path

import hypothesis
import psycopg
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from psycopg import sql as pgsql
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_headers_conformance,
                                 response_schema_conformance, status_code_conformance)
from schemathesis.config import SchemathesisConfig
from sqlalchemy.engine import make_url

from admin_app import create_app
from admin_app.openapi import document
from tests.conftest import DEMO_SECRETS, Business, cli_of, governed_config, serve
from tests.helpers import PASSWORD_LINE

# The same work on any server (generated requests to every operation; the SQL each reaches runs
# in that operation's own tests).
pytestmark = pytest.mark.any_server

EXAMPLES = int(os.environ.get("BAILING_FUZZ_EXAMPLES", "4"))
SEED = int(os.environ["BAILING_FUZZ_SEED"]) if os.environ.get("BAILING_FUZZ_SEED") else secrets.randbits(64)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]
# Tables a refused request may legitimately write: the agent-auth limit counts every well-formed
# authorization request before the client is looked up (as it always has), so one refused later
# (an unknown client) is still counted there. The only other refusal that commits (a replayed
# code or rotated refresh token revoking its session) is never provoked here, see _mixable.
WRITTEN_ON_REFUSAL: frozenset[str] = frozenset({"bz_rate_limits"})

# Hypothesis keeps caches (and, unless told otherwise, an example database) under .hypothesis in
# the working directory: keep all of it out of the repository.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "bailing-fuzz-hypothesis")

AGENT_API, AGENT_AUTH, ADMIN_API = "/agent-api/v1", "/agent-auth/v1", "/admin/api"

# Real values of the seeded world, by parameter or field name; filled once per module.
REAL: dict[str, list] = {}
# Never mixed: a real refresh token sent to /token rotates it, and its reuse then revokes the
# session on purpose (a refusal that writes); /revoke may use it, that only revokes.
NOT_MIXED = {("/token", "refresh_token")}
STATS = {"requests": 0, "examples": 0}
STATUSES: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
# Invocation ids are 64 lowercase hex digits, chosen by the caller.
INV_CANCEL, INV_READ = "c" * 64, "d" * 64


# ------------------------------------------------------------------ schemas

def _schema(prefix: str):
    schema = schemathesis.openapi.from_dict(document(prefix), config=SchemathesisConfig(seed=SEED))

    @schema.hook
    def flatmap_path_parameters(ctx, path_parameters):
        return _mix(ctx.operation.path, path_parameters)

    @schema.hook
    def flatmap_query(ctx, query):
        return _mix(ctx.operation.path, query)

    @schema.hook
    def flatmap_body(ctx, body):
        return _mix(ctx.operation.path, body)

    return schema


def _mixable(path: str, values) -> list[str]:
    if not isinstance(values, dict):
        return []
    return [k for k in values if REAL.get(k) and (path, k) not in NOT_MIXED]


def _mix(path: str, values):
    """The generated values as they are, or with some named fields replaced by real ones."""
    keys = _mixable(path, values)
    if not keys:
        return st.just(values)
    choices = st.fixed_dictionaries({k: st.one_of(st.none(), st.sampled_from(REAL[k])) for k in keys})
    return choices.map(lambda picked: {**values, **{k: v for k, v in picked.items() if v is not None}})


SCHEMAS = {prefix: _schema(prefix) for prefix in (AGENT_API, AGENT_AUTH, ADMIN_API)}
SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES, deadline=None, database=None, derandomize=False, print_blob=True,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


# ------------------------------------------------------------------ the seeded world

class World:
    """Credentials and IDs of the seeded template; the same in every copy."""

    def __init__(self):
        self.tokens: dict[str, str] = {}
        self.ids: dict[str, list[str]] = {}
        self.template = ""  # the seeded database each test copies


def _admin(run, name: str, role: str) -> str:
    run("admins", "create", name, "--role", role, "--password-stdin", input=PASSWORD_LINE)
    return run("admins", "token", name)["token"]


def _session(run) -> dict:
    return run("sessions", "issue", "--client", "ops-app", "--routes", "desk",
               "--principal", '{"id": "user-42", "tenant": "tenant-7"}', "--on-behalf-of", "tenant-7:user-42")


def _ok(response: requests.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text[:2000]
    return response.json()


def _seed(live, world: World, validate) -> None:
    """Real objects made through the API itself; each answer is also checked against its document."""
    agent = {"Authorization": f"Bearer {world.tokens['agent']}"}
    client = {"Authorization": f"Bearer {world.tokens['client']}"}

    tools = _ok(live.get(AGENT_API + "/tools", params={"route": "desk"}, headers=agent))
    revision = tools["capability_revision"]
    turn = _ok(live.post(AGENT_API + "/workspaces/desk/turns", headers=agent, json={
        "client_conversation_id": "conv-1", "client_turn_id": "turn-1", "user_message_id": "m1",
        "user_input": "Cancel order ORD-000001, it is a duplicate."}))
    run_id = turn["run_id"]

    def invoke(invocation_id: str, tool: str, arguments: dict) -> dict:
        return _ok(live.post(AGENT_API + "/tool-invocations", headers=agent, json={
            "invocation_id": invocation_id, "route": "desk", "capability_revision": revision, "tool": tool,
            "arguments": arguments, "run_id": run_id}))

    pending = invoke(INV_CANCEL, "order_cancel", {"order_id": "ORD-000001", "reason": "duplicate"})
    assert pending["status"] == "awaiting_approval", pending
    executed = invoke(INV_READ, "customer_get", {"customer_id": "C-100234"})
    assert executed["status"] == "executed", executed

    archive = _ok(live.post(AGENT_API + "/conversation-audits", headers=agent, json={
        "client_archive_id": str(uuid.uuid4()), "client_conversation_id": "conv-1", "route": "desk",
        "member_session_ids": [world.ids["session_id"][0]]}), 200)["conversation_id"]
    _ok(live.post(f"{AGENT_API}/conversation-audits/{archive}/events", headers=agent, json={"events": [
        {"event_id": "e1", "sequence": 1, "client_turn_id": "turn-1", "kind": "turn_start"},
        {"event_id": "e2", "sequence": 2, "client_turn_id": "turn-1", "kind": "user_message", "content": "Hi"},
        {"event_id": "e3", "sequence": 3, "client_turn_id": "turn-1", "kind": "run_link", "run_id": run_id,
         "member_session_id": world.ids["session_id"][0]},
        {"event_id": "e4", "sequence": 4, "client_turn_id": "turn-1", "kind": "turn_end",
         "status": "completed"}]}))

    # The browser authorization flow end to end: one left pending, one exchanged for a session.
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    start = {"client_app_id": "ops-app", "redirect_uri": "http://127.0.0.1:49152/callback",
             "state": "state-0123456789", "requested_routes": ["desk"], "device_label": "Fuzz box",
             "code_challenge": challenge, "code_challenge_method": "S256"}
    pending_auth = validate(AGENT_AUTH, "/authorizations", "POST",
                            live.post(AGENT_AUTH + "/authorizations", json=start), 201)["authorization_id"]
    flow = validate(AGENT_AUTH, "/authorizations", "POST",
                    live.post(AGENT_AUTH + "/authorizations", json=start), 201)["authorization_id"]
    validate(AGENT_AUTH, "/authorizations/{authorization_id}", "GET",
             live.get(f"{AGENT_AUTH}/authorizations/{flow}", headers=client))
    redirect = validate(AGENT_AUTH, "/authorizations/{authorization_id}/approve", "POST", live.post(
        f"{AGENT_AUTH}/authorizations/{flow}/approve", headers=client,
        json={"principal": {"id": "user-7"}, "on_behalf_of": "tenant-7:user-7", "allowed_routes": ["desk"]}))
    code = dict(p.split("=", 1) for p in redirect["redirect_uri"].split("?", 1)[1].split("&"))["code"]
    issued = validate(AGENT_AUTH, "/token", "POST", live.post(AGENT_AUTH + "/token", json={
        "grant_type": "authorization_code", "client_app_id": "ops-app", "code": code,
        "redirect_uri": start["redirect_uri"], "code_verifier": verifier}))
    refreshed = validate(AGENT_AUTH, "/token", "POST", live.post(AGENT_AUTH + "/token", json={
        "grant_type": "refresh_token", "client_app_id": "ops-app", "refresh_token": issued["refresh_token"]}))
    validate(AGENT_AUTH, "/session", "GET",
             live.get(AGENT_AUTH + "/session", headers={"Authorization": f"Bearer {refreshed['access_token']}"}))
    denied = validate(AGENT_AUTH, "/authorizations", "POST",
                      live.post(AGENT_AUTH + "/authorizations", json=start), 201)["authorization_id"]
    validate(AGENT_AUTH, "/authorizations/{authorization_id}/deny", "POST",
             live.post(f"{AGENT_AUTH}/authorizations/{denied}/deny", headers=client, json={}))

    admin = {"Authorization": f"Bearer {world.tokens['admin']}"}
    approval_id = pending["approval"]["id"]
    job_ids = [str(r[0]) for r in _rows(live, "SELECT id FROM bz_tool_invocations ORDER BY invocation_id")]
    validate(ADMIN_API, "/tool-approvals/{approval_id}/snapshot", "GET",
             live.get(f"{ADMIN_API}/tool-approvals/{approval_id}/snapshot", headers=admin), raw=True)
    validate(ADMIN_API, "/agent-runs/{run_id}", "GET", live.get(f"{ADMIN_API}/agent-runs/{run_id}", headers=admin))
    for job in job_ids:
        validate(ADMIN_API, "/tool-jobs/{job_id}", "GET", live.get(f"{ADMIN_API}/tool-jobs/{job}", headers=admin))
        validate(ADMIN_API, "/runs/{job_id}/trace", "GET", live.get(f"{ADMIN_API}/runs/{job}/trace", headers=admin))
    thread_id = str(_rows(live, f"SELECT thread_id FROM bz_runs WHERE id = '{run_id}'")[0][0])
    validate(ADMIN_API, "/threads/{thread_id}/agent-runs/{run_id}/trace", "GET",
             live.get(f"{ADMIN_API}/threads/{thread_id}/agent-runs/{run_id}/trace", headers=admin))
    validate(ADMIN_API, "/conversation-audits/{archive_id}", "GET",
             live.get(f"{ADMIN_API}/conversation-audits/{archive}", headers=admin))

    world.ids.update({
        "session_id": [world.ids["session_id"][0], issued["session_id"]],
        "authorization_id": [pending_auth, flow, denied],
        "run_id": [run_id], "thread_id": [thread_id], "job_id": job_ids, "approval_id": [approval_id],
        "archive_id": [archive], "conversation_id": [archive],
        "invocation_id": [INV_CANCEL, INV_READ],
        "route": ["desk"], "route_key": ["desk"], "requested_routes": [["desk"]], "allowed_routes": [["desk"]],
        "client_app_id": ["ops-app"], "capability_revision": [revision],
        "tool": ["customer_get", "order_cancel"], "name": ["customer_get", "order_cancel"],
        "redirect_uri": [start["redirect_uri"]], "code_challenge": [challenge],
        "args_hash": [pending["approval"]["args_hash"]],
        "refresh_token": [world.tokens["refresh"]],
    })


def _rows(live, query: str) -> list:
    with psycopg.connect(live.db_url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


@pytest.fixture(scope="module")
def world(databases, migrated_template, tmp_path_factory):
    """The seeded template database (and the demo business system it points at, alive for the module)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DEMO_CRM_SECRET", DEMO_SECRETS["crm"])
        env.setenv("DEMO_ERP_SECRET", DEMO_SECRETS["erp"])
        business = Business()
        url = databases.create(template=migrated_template)
        app = create_app({"database_url": url, "data_dir": tmp_path_factory.mktemp("fuzz-seed")})
        live = serve(app)
        live.db_url = url
        try:
            run = cli_of(app)
            config = governed_config(business.url)
            config["client_apps"][0]["agent_authorize_url"] = "http://127.0.0.1:8200/authorize"
            path = tmp_path_factory.mktemp("fuzz-config") / "hub.json"
            path.write_text(json.dumps(config))
            run("config", "apply", str(path))
            session = _session(run)
            w = World()
            w.tokens = {"agent": session["access_token"], "refresh": session["refresh_token"],
                        "client": run("clients", "token", "ops-app")["client_token"],
                        "admin": _admin(run, "root", "admin"), "support": _admin(run, "sam", "support")}
            w.ids["session_id"] = [session["session_id"]]
            _seed(live, w, _validate_seed)
        finally:
            live.stop()
            app.extensions["bailing"].db.dispose()
        REAL.clear()
        REAL.update(w.ids)
        w.template = make_url(url).database
        yield w
        business.live.stop()


def _validate_seed(prefix: str, path: str, method: str, response: requests.Response, status: int = 200,
                   raw: bool = False):
    assert response.status_code == status, response.text[:2000]
    SCHEMAS[prefix][path][method].validate_response(response)
    return None if raw else response.json()


@pytest.fixture
def db_url(databases, world):
    """A fresh copy of the seeded world for each test (conftest's app, server and cli use it)."""
    return databases.create(template=world.template)


# ------------------------------------------------------------------ the database fingerprint

class Fingerprint:
    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True)
        tables = [r[0] for r in self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
            if r[0] not in WRITTEN_ON_REFUSAL]
        assert tables
        self.query = pgsql.SQL(" UNION ALL ").join(
            pgsql.SQL("SELECT {name}, count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), ''))"
                      " FROM {table} t").format(name=pgsql.Literal(name), table=pgsql.Identifier(name))
            for name in tables)

    def take(self) -> dict:
        return {name: (count, digest) for name, count, digest in self.conn.execute(self.query)}

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def fingerprint(db_url):
    fp = Fingerprint(db_url)
    yield fp
    fp.close()


# ------------------------------------------------------------------ one generated case

class Harness:
    def __init__(self, world: World, server, cli, fingerprint: Fingerprint):
        self.world, self.server, self.cli, self.fingerprint = world, server, cli, fingerprint
        self.tokens = dict(world.tokens)
        self.rotation = itertools.count()

    def valid(self, prefix: str, operation) -> str | None:
        if prefix == AGENT_API:
            return self.tokens["agent"]
        if prefix == ADMIN_API:
            return self.tokens["admin"]
        schemes = {name for requirement in operation.definition.raw.get("security", [{}]) for name in requirement}
        if "clientToken" in schemes:
            return self.tokens["client"]
        if "agentAccessToken" in schemes:
            return self.tokens["agent"]
        return None

    def refused(self, prefix: str) -> str | None:
        """A credential the operation must refuse (or, where none is needed, ignore), in rotation."""
        other = {AGENT_API: ["client", "admin"], AGENT_AUTH: ["admin"], ADMIN_API: ["agent", "client", "support"]}
        variants = [None, "garbage", "bzat_" + "A" * 43, *other[prefix]]
        pick = variants[next(self.rotation) % len(variants)]
        return self.tokens.get(pick, pick)

    def send(self, prefix: str, case, bearer: str | None):
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        case.headers = headers
        before = self.fingerprint.take()
        response = case.call(base_url=self.server.url + prefix, timeout=30)
        STATS["requests"] += 1
        STATUSES[f"{case.method} {prefix}{case.operation.path}"][response.status_code] += 1
        case.validate_response(response, checks=CHECKS)
        if response.status_code >= 400:
            after = self.fingerprint.take()
            changed = sorted(name for name in before if before[name] != after[name])
            assert not changed, (f"{case.method} {prefix}{case.formatted_path} answered "
                                 f"{response.status_code} but wrote to {changed}: {response.text[:500]}")
        return response

    def run(self, prefix: str, case) -> None:
        STATS["examples"] += 1
        try:
            self.send(prefix, case, self.refused(prefix))
            response = self.send(prefix, case, self.valid(prefix, case.operation))
            if response.status_code == 200 and case.operation.path in ("/revoke", "/sessions/{session_id}/revoke"):
                # A revoked fuzz session would turn every later example into a 401: issue a new one.
                code, out, err = self.cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                                          "--principal", '{"id": "user-42", "tenant": "tenant-7"}')
                assert code == 0, err
                self.tokens["agent"] = out["access_token"]
        except BaseException as exc:
            exc.add_note(f"Replay with BAILING_FUZZ_SEED={SEED} BAILING_FUZZ_EXAMPLES={EXAMPLES}")
            raise


@pytest.fixture
def harness(world, server, cli, fingerprint) -> Harness:
    return Harness(world, server, cli, fingerprint)


# ------------------------------------------------------------------ the tests, one per operation

def _operations() -> list:
    """(prefix, operation) of every documented operation, each its own test with its own ID, so
    that parallel runs (pytest-xdist) schedule and count every one of them."""
    found = []
    for prefix, schema in SCHEMAS.items():
        for result in schema.get_all_operations():
            operation = result.ok()
            found.append(pytest.param(prefix, operation, id=f"{prefix}{operation.path} {operation.method.upper()}"))
    return found


@pytest.mark.parametrize("prefix, operation", _operations())
def test_operation(prefix, operation, harness):
    @SETTINGS
    @hypothesis.seed(SEED)
    @hypothesis.given(case=operation.as_strategy(hooks=SCHEMAS[prefix].hooks))
    def fuzz(case):
        harness.run(prefix, case)

    fuzz()


def test_every_document_is_fuzzed():
    """Each document's operations are all collected above (none filtered out by accident)."""
    collected = collections.Counter(prefix for prefix, _ in (p.values for p in _operations()))
    for prefix in SCHEMAS:
        documented = sum(1 for item in document(prefix)["paths"].values()
                         for method in item if method in {"get", "post", "put", "patch", "delete"})
        assert documented and collected[prefix] == documented, prefix


def teardown_module():
    print(f"\nfuzz: {STATS['examples']} examples, {STATS['requests']} requests")
    for label, counts in sorted(STATUSES.items()):
        print(f"  {label}: " + ", ".join(f"{code}x{n}" for code, n in sorted(counts.items())))
