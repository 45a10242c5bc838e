"""The Agent Client SDK (`admin_app.agent_sdk`) holds a hub to the wire contract.

A scripted hub on loopback answers exactly what each test gives it and records every request, so
each test can send one contract answer with one field off and check that the SDK refuses the
whole answer with a ContractError naming that field, and that the requests leave exactly as the
official SDK sends them (resume with no body, search always with `limit`, revoke with the
refresh-token body and the bearer, batches under 50 events / 192 KiB, the v2 writer first after a
capabilities probe, one retry after a forced refresh on 401, a refresh lock shared between
processes)."""
from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest
from flask import Flask, Response, request

from admin_app.agent_sdk import (AgentAuthError, AgentClient, ContractError, HubError, RequestRefused,
                                 SessionStore, TaskBinding, Unsupported, login)
from admin_app.agent_sdk.audit import batches
from admin_app.agent_sdk.models import TokenSet
from admin_app.agent_sdk.session_store import session_record
from admin_app.config import PROJECT_ROOT

from .conftest import LiveServer

# The SDK against a scripted hub: no database at all.
pytestmark = pytest.mark.any_server

SESSION_ID = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
OTHER_SESSION = "6fa459ea-ee8a-4ca4-894e-db77e160355e"
RUN_ID = "2c5ea4c0-4067-41fa-8c2b-2f4d5d1c7e11"
ARCHIVE_ID = "9b2c1f3e-7d4a-4e5b-8c6d-1a2b3c4d5e6f"
CLIENT = "crm-demo"
ROUTE = "customers"
REV = "a" * 64
INV = "b" * 64
ACCESS, REFRESH = "bha_" + "A" * 43, "bhr_" + "A" * 43
API = "/agent-api/v1"


# ================================================================ a scripted hub

@dataclass
class Seen:
    method: str
    path: str
    headers: dict
    body: bytes
    query: dict


class ScriptedHub:
    def __init__(self):
        self.app = Flask("scripted-hub")
        self.answers: dict[tuple[str, str], list] = {}
        self.log: list[Seen] = []
        self.lock = threading.Lock()

        @self.app.route("/<path:path>", methods=["GET", "POST", "PUT", "DELETE"])
        def anything(path):
            with self.lock:
                seen = Seen(request.method, "/" + path, dict(request.headers), request.get_data(),
                            request.args.to_dict())
                self.log.append(seen)
                queue = self.answers.get((request.method, "/" + path))
                if not queue:
                    return Response('{"error":"not_found"}', 404, mimetype="application/json")
                answer = queue.pop(0) if len(queue) > 1 else queue[0]
            status, body = answer(seen) if callable(answer) else answer
            return Response(json.dumps(body), status, mimetype="application/json")

        self.live = LiveServer(self.app)
        self.url = self.live.url

    def on(self, method: str, path: str, *answers) -> None:
        self.answers[(method, path)] = list(answers)

    def sent(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.log if (s.method, s.path) == (method, path)]


@pytest.fixture
def hub():
    scripted = ScriptedHub()
    yield scripted
    scripted.live.stop()


def stored_session(hub_url: str, access: str = ACCESS, refresh: str = REFRESH, expires_in: int = 900) -> dict:
    tokens = TokenSet(access, refresh, expires_in, 86400, SESSION_ID, CLIENT)
    record = session_record(hub_url, tokens, None, time.time())
    record["allowed_routes"] = [ROUTE]
    return record


@pytest.fixture
def store(hub, tmp_path):
    s = SessionStore(tmp_path / "agent" / "session.json")
    s.save(stored_session(hub.url))
    return s


@pytest.fixture
def client(store):
    return AgentClient(store)


# ================================================================ contract answers

def token(**over) -> dict:
    body = {"token_type": "Bearer", "access_token": "bha_" + "B" * 43, "expires_in": 900,
            "refresh_token": "bhr_" + "B" * 43, "refresh_expires_in": 86000, "session_id": SESSION_ID,
            "client_app_id": CLIENT}
    body.update(over)
    return body


def session_view(**over) -> dict:
    body = {"session_id": SESSION_ID, "client_app_id": CLIENT, "device_label": "Alice's laptop",
            "principal": {"id": "alice", "tenant": "tenant-7"}, "on_behalf_of": "tenant-7:alice",
            "allowed_routes": [ROUTE], "created_at": "2026-01-01T00:00:00.000Z",
            "expires_at": "2026-01-01T00:15:00.000Z", "refresh_expires_at": "2026-01-31T00:00:00.000Z"}
    body.update(over)
    return body


def tool(**over) -> dict:
    body = {"name": "customer_search", "description": "Find customers by name.",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            "scope": "customer.read", "risk": "low", "approval_required": False, "readonly": True,
            "idempotent": True}
    body.update(over)
    return body


def workspaces(**over) -> dict:
    body = {"schema_version": "bailing.agent-workspaces.v1", "workspaces": [
        {"route": ROUTE, "name": "Customer desk", "description": "", "profile": "default", "permission": None,
         "profile_revision": REV, "capability_revision": REV, "authorized_tool_count": 3,
         "active_tool_limit": 12}]}
    body.update(over)
    return body


def bootstrap(**over) -> dict:
    body = {"schema_version": "bailing.agent-runtime-profile.v1",
            "workspace": {"route": ROUTE, "name": "Customer desk", "description": ""},
            "profile": {"revision": REV, "instructions": "Be brief.",
                        "knowledge": {"enabled": False, "sources": 0},
                        "memory": {"recent_messages": 12, "recent_budget_chars": 8000, "per_message_chars": 2000,
                                   "summary_enabled": False, "summary_max_chars": 1200},
                        "governance": {"planner": "local_agent", "hidden_reasoning_sync": False}},
            "capabilities": {"revision": REV, "authorized_total": 3, "active_limit": 12, "readonly": 2,
                             "writes": 1, "approval_required": 1}}
    body.update(over)
    return body


def turn_context(**over) -> dict:
    body = {"schema_version": "bailing.agent-turn-context.v1", "run_id": RUN_ID, "profile_revision": REV,
            "capability_revision": REV,
            "context": {"instructions": "Be brief.", "page_context": {}, "renderers": [],
                        "memory": {"summary": None, "recent": []}, "memory_refs": [], "knowledge": [],
                        "knowledge_refs": [], "governance": {"planner": "local_agent"}},
            "active_tools": [tool()]}
    body.update(over)
    return body


def discovery(returned: int = 1, authorized: int = 1, limit: int = 12, **over) -> dict:
    body = {"mode": "ranked_candidates", "scope": "current_authorization", "returned_count": returned,
            "authorized_total": authorized, "matched_total": None, "matched_total_exact": False, "limit": limit,
            "truncated": authorized > returned, "has_more": authorized > returned,
            "truncation_scope": "authorized_catalog", "pagination": "unsupported"}
    body.update(over)
    return body


def search(**over) -> dict:
    body = {"schema_version": "bailing.agent-capability-search.v1", "route": ROUTE, "capability_revision": REV,
            "query": "customer", "tools": [tool()], "discovery": discovery()}
    body.update(over)
    return body


def invocation(**over) -> dict:
    body = {"schema_version": "bailing.agent-tool-invocation.v1", "invocation_id": INV, "route": ROUTE,
            "tool": "customer_search", "state": "executed", "ok": True, "auto_retry_allowed": False,
            "text": "Found 1 customer.", "business_status": 200}
    body.update(over)
    return body


def receipt(**over) -> dict:
    body = {"schema_version": "bailing.agent-invocation-receipt.v1", "read_only": True,
            "business_operation_performed": False, "invocation_id": INV, "agent_run_id": RUN_ID, "route": ROUTE,
            "tool": "customer_search", "observed_at": "2026-01-01T00:00:00.000Z", "result": invocation(),
            "result_source": "job", "dispatch_state": "attempted", "approval": {"status": "none"},
            "journal_state": "completed"}
    body.update(over)
    return body


INSPECTION = {"schema_version": "bailing.agent-invocation-inspection-capabilities.v1",
              "receipt_schema": "bailing.agent-invocation-receipt.v1", "read_only": True}


def header(**over) -> dict:
    body = {"schema": "bailing.agent-conversation-audit.v1", "conversation_id": ARCHIVE_ID,
            "client_archive_id": ARCHIVE_ID, "client_conversation_id": "conv-1", "client_app_id": CLIENT,
            "route_key": ROUTE, "state": "enrolling", "member_count": 2, "confirmed_count": 1,
            "last_sequence": 0, "message_count": 0, "turn_count": 0, "last_turn_status": None,
            "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z"}
    body.update(over)
    return body


def ack(last: int) -> dict:
    return {"schema": "bailing.agent-conversation-audit-ack.v1", "conversation_id": ARCHIVE_ID,
            "last_sequence": last}


def without(body: dict, path: str) -> dict:
    out = copy.deepcopy(body)
    *parents, last = path.split(".")
    target = out
    for p in parents:
        target = target[int(p)] if isinstance(target, list) else target[p]
    del target[last]
    return out


def with_value(body: dict, path: str, value) -> dict:
    out = copy.deepcopy(body)
    *parents, last = path.split(".")
    target = out
    for p in parents:
        target = target[int(p)] if isinstance(target, list) else target[p]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return out


def refused(call, field: str) -> ContractError:
    with pytest.raises(ContractError) as caught:
        call()
    assert caught.value.field == field, str(caught.value)
    return caught.value


# ================================================================ Agent Auth

def test_session_view_is_read_and_typed(hub, client):
    hub.on("GET", "/agent-auth/v1/session", (200, session_view()))
    view = client.session()
    assert view.on_behalf_of == "tenant-7:alice" and view.allowed_routes == (ROUTE,)
    assert view.refresh_expires_at > view.expires_at
    assert hub.sent("GET", "/agent-auth/v1/session")[0].headers["Authorization"] == f"Bearer {ACCESS}"


@pytest.mark.parametrize("field, value", [
    ("device_label", "   "), ("device_label", "x" * 129), ("on_behalf_of", ""), ("on_behalf_of", "x" * 257),
    ("allowed_routes", []), ("principal", "alice"), ("created_at", "yesterday"),
    ("refresh_expires_at", "2026-01-01T00:15:00.000Z"), ("refresh_expires_at", "2026-01-01T00:10:00.000Z"),
    ("session_id", "not-a-uuid"),
])
def test_session_view_off_contract_is_refused(hub, client, field, value):
    hub.on("GET", "/agent-auth/v1/session", (200, session_view(**{field: value})))
    refused(client.session, field)


@pytest.mark.parametrize("field", ["device_label", "principal", "on_behalf_of", "allowed_routes", "created_at",
                                   "expires_at", "refresh_expires_at"])
def test_session_view_missing_field_is_refused(hub, client, field):
    hub.on("GET", "/agent-auth/v1/session", (200, without(session_view(), field)))
    refused(client.session, field)


@pytest.mark.parametrize("field, value", [
    ("token_type", "bearer"), ("expires_in", 0), ("expires_in", 31 * 86400 + 1), ("expires_in", "900"),
    ("refresh_expires_in", 0), ("refresh_expires_in", 366 * 86400 + 1), ("refresh_token", "bhr_" + "x" * 8189),
    ("session_id", OTHER_SESSION.upper() + "x"), ("client_app_id", "erp-demo"),
])
def test_a_refresh_answer_off_contract_is_refused_and_the_file_kept(hub, store, field, value):
    hub.on("POST", "/agent-auth/v1/token", (200, token(**{field: value})))
    before = store.load()
    refused(store.refresh, field)
    assert store.load() == before  # nothing half-written


@pytest.mark.parametrize("field", ["token_type", "access_token", "refresh_token", "expires_in",
                                   "refresh_expires_in", "session_id", "client_app_id"])
def test_a_token_answer_missing_a_field_is_refused(hub, store, field):
    hub.on("POST", "/agent-auth/v1/token", (200, without(token(), field)))
    refused(store.refresh, field)


def test_refresh_rotates_both_tokens_and_keeps_the_file_private(hub, store):
    hub.on("POST", "/agent-auth/v1/token", (200, token()))
    renewed = store.refresh()
    sent = json.loads(hub.sent("POST", "/agent-auth/v1/token")[0].body)
    assert sent == {"grant_type": "refresh_token", "client_app_id": CLIENT, "refresh_token": REFRESH}
    assert renewed["access_token"] == token()["access_token"] and renewed["refresh_token"] == token()["refresh_token"]
    assert renewed["allowed_routes"] == [ROUTE]
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.lock_path).st_mode) == 0o600


def test_a_refused_refresh_is_an_auth_error(hub, store):
    hub.on("POST", "/agent-auth/v1/token", (400, {"error": "invalid_grant", "message": "no"}))
    with pytest.raises(AgentAuthError):
        store.refresh()


def test_a_refresh_for_another_session_is_refused(hub, store):
    hub.on("POST", "/agent-auth/v1/token", (200, token(session_id=OTHER_SESSION)))
    with pytest.raises(AgentAuthError):
        store.refresh()


def test_a_401_gets_one_retry_after_a_forced_refresh(hub, client):
    hub.on("GET", "/agent-auth/v1/session", (401, {"error": "unauthorized"}), (200, session_view()))
    hub.on("POST", "/agent-auth/v1/token", (200, token()))
    client.session()
    calls = [(s.method, s.path, s.headers.get("Authorization")) for s in hub.log]
    assert calls == [("GET", "/agent-auth/v1/session", f"Bearer {ACCESS}"),
                     ("POST", "/agent-auth/v1/token", None),
                     ("GET", "/agent-auth/v1/session", f"Bearer {token()['access_token']}")]


def test_a_second_401_is_not_retried_again(hub, client):
    hub.on("GET", "/agent-auth/v1/session", (401, {"error": "unauthorized"}))
    hub.on("POST", "/agent-auth/v1/token", (200, token()))
    with pytest.raises(HubError) as caught:
        client.session()
    assert caught.value.status == 401 and caught.value.code == "unauthorized"
    assert len(hub.sent("GET", "/agent-auth/v1/session")) == 2
    assert len(hub.sent("POST", "/agent-auth/v1/token")) == 1


def test_an_expiring_access_token_is_refreshed_before_the_call(hub, tmp_path):
    s = SessionStore(tmp_path / "s.json")
    s.save(stored_session(hub.url, expires_in=30))  # inside the refresh margin
    hub.on("POST", "/agent-auth/v1/token", (200, token()))
    hub.on("GET", "/agent-auth/v1/session", (200, session_view()))
    AgentClient(s).session()
    assert [s.path for s in hub.log] == ["/agent-auth/v1/token", "/agent-auth/v1/session"]


REFRESHER = ("import sys; from admin_app.agent_sdk import SessionStore; "
             "print(SessionStore(sys.argv[1]).access_token(force=True, stale=sys.argv[2]))")


def test_two_processes_sharing_the_session_spend_the_refresh_token_once(hub, store):
    """Both processes were refused with the same access token; only one may refresh (the hub
    would revoke the session on a second use of the rotated refresh token)."""
    def slow_refresh(seen):
        time.sleep(0.5)  # wide enough for the other process to try at the same time
        spent = json.loads(seen.body)["refresh_token"]
        n = len(hub.sent("POST", "/agent-auth/v1/token"))
        return 200, token(access_token=f"bha_{n:043d}", refresh_token=f"bhr_{n:043d}",
                          **({"token_type": "Replayed"} if spent != REFRESH else {}))

    hub.on("POST", "/agent-auth/v1/token", slow_refresh)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", REFRESHER, str(store.path), ACCESS], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert len(hub.sent("POST", "/agent-auth/v1/token")) == 1
    assert outs[0][0].strip() == outs[1][0].strip() == store.load()["access_token"] == f"bha_{1:043d}"


def test_revoke_sends_the_refresh_token_body_and_the_bearer_then_forgets(hub, client, store):
    hub.on("POST", "/agent-auth/v1/revoke", (200, {"revoked": True}))
    client.revoke()
    sent = hub.sent("POST", "/agent-auth/v1/revoke")[0]
    assert json.loads(sent.body) == {"client_app_id": CLIENT, "refresh_token": REFRESH}
    assert sent.headers["Authorization"] == f"Bearer {ACCESS}"
    assert not store.exists()


@pytest.mark.parametrize("status", [401, 500, 204])
def test_login_stops_unless_the_stored_session_is_revoked_with_200(hub, store, status):
    hub.on("POST", "/agent-auth/v1/revoke", (status, {"revoked": True}))
    hub.on("POST", "/agent-auth/v1/authorizations", (201, {}))
    with pytest.raises(AgentAuthError):
        login(hub.url, CLIENT, [ROUTE], device_label="laptop", store=store, open_url=lambda url: None, timeout=1)
    assert hub.sent("POST", "/agent-auth/v1/authorizations") == []
    assert store.exists()  # still there: the person decides what to do with it


def test_login_revokes_first_then_expects_201(hub, store):
    hub.on("POST", "/agent-auth/v1/revoke", (200, {"revoked": True}))
    hub.on("POST", "/agent-auth/v1/authorizations",
           (200, {"authorization_id": SESSION_ID, "authorization_url": "https://biz.example/a", "expires_in": 600}))
    with pytest.raises(ContractError) as caught:
        login(hub.url, CLIENT, [ROUTE], device_label="laptop", store=store, open_url=lambda url: None, timeout=1)
    assert caught.value.field == "status"
    assert [s.path for s in hub.log] == ["/agent-auth/v1/revoke", "/agent-auth/v1/authorizations"]
    sent = json.loads(hub.log[1].body)
    assert set(sent) == {"client_app_id", "redirect_uri", "state", "requested_routes", "device_label",
                         "code_challenge", "code_challenge_method"}
    assert sent["code_challenge_method"] == "S256" and sent["device_label"] == "laptop"
    assert not store.exists()


# ================================================================ workspaces and bootstrap

def test_workspaces_keep_route_name_description_only(hub, client):
    hub.on("GET", f"{API}/workspaces", (200, workspaces()))
    found = client.workspaces()
    assert [(w.route, w.name, w.description) for w in found] == [(ROUTE, "Customer desk", "")]


def test_workspaces_accept_route_key_and_the_schema_key(hub, client):
    body = {"schema": "bailing.agent-workspaces.v1", "workspaces": [{"route_key": ROUTE}]}
    hub.on("GET", f"{API}/workspaces", (200, body))
    assert client.workspaces()[0].route == ROUTE


@pytest.mark.parametrize("body, field", [
    (workspaces(schema_version="bailing.agent-workspace-list.v1"), "schema_version"),
    (without(workspaces(), "schema_version"), "schema_version"),
    (workspaces(workspaces=[{"route": f"r{i:03d}"} for i in range(129)]), "workspaces"),
    (workspaces(workspaces=[{"route": ROUTE}, {"route": ROUTE}]), "workspaces[1].route"),
    (workspaces(workspaces=[{"route": "Customers"}]), "workspaces[0].route"),
    (workspaces(workspaces=[{"name": "x"}]), "workspaces[0].route"),
    (workspaces(workspaces=[{"route": ROUTE, "name": 5}]), "workspaces[0].name"),
    (workspaces(workspaces={}), "workspaces"),
])
def test_workspaces_off_contract_are_refused(hub, client, body, field):
    hub.on("GET", f"{API}/workspaces", (200, body))
    refused(client.workspaces, field)


def test_bootstrap_is_typed(hub, client):
    hub.on("GET", f"{API}/workspaces/{ROUTE}/bootstrap", (200, bootstrap()))
    found = client.bootstrap(ROUTE)
    assert found.capabilities.revision == REV and found.profile_revision == REV
    assert found.capabilities.approval_required == 1 and found.instructions == "Be brief."


@pytest.mark.parametrize("body, field", [
    (bootstrap(schema_version="bailing.agent-runtime-profile.v2"), "schema_version"),
    (with_value(bootstrap(), "workspace.route", "orders"), "workspace.route"),
    (with_value(bootstrap(), "profile.revision", "A" * 64), "profile.revision"),
    (with_value(bootstrap(), "profile.instructions", "x" * 100_001), "profile.instructions"),
    (with_value(bootstrap(), "profile.governance", {"pad": "x" * 70_000}), "profile"),
    (without(bootstrap(), "capabilities.revision"), "capabilities.revision"),
    (with_value(bootstrap(), "capabilities.writes", -1), "capabilities.writes"),
    (without(bootstrap(), "profile.memory"), "profile.memory"),
])
def test_bootstrap_off_contract_is_refused(hub, client, body, field):
    hub.on("GET", f"{API}/workspaces/{ROUTE}/bootstrap", (200, body))
    refused(lambda: client.bootstrap(ROUTE), field)


# ================================================================ turn

def start_turn(client, **extra):
    return client.turn(ROUTE, client_conversation_id="conv-1", client_turn_id="t1", user_message_id="m1",
                       user_input="Find ACME", **extra)


def test_a_turn_sends_exactly_the_request_and_reads_the_context(hub, client):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, turn_context()))
    context = start_turn(client, page_context={"title": "Customers"}, renderers=["markdown"])
    assert context.run_id == RUN_ID and context.active_tools[0].name == "customer_search"
    assert context.task_binding is None and context.knowledge == []
    assert json.loads(hub.log[0].body) == {"client_conversation_id": "conv-1", "client_turn_id": "t1",
                                           "user_message_id": "m1", "user_input": "Find ACME",
                                           "page_context": {"title": "Customers"}, "renderers": ["markdown"]}


@pytest.mark.parametrize("body, field", [
    (turn_context(run_id="not-a-uuid"), "run_id"),
    (turn_context(run_id="2c5ea4c0-4067-61fa-8c2b-2f4d5d1c7e11"), "run_id"),  # version 6
    (turn_context(active_tools=[tool(name=f"t{i}") for i in range(13)]), "active_tools"),
    (turn_context(active_tools={}), "active_tools"),
    (without(turn_context(), "active_tools"), "active_tools"),
    (with_value(turn_context(), "context.knowledge", {}), "context.knowledge"),
    (with_value(turn_context(), "context.knowledge_refs", {}), "context.knowledge_refs"),
    (with_value(turn_context(), "context.memory_refs", "none"), "context.memory_refs"),
    (turn_context(schema_version="bailing.agent-turn-context.v2"), "schema_version"),
    (turn_context(capability_revision="abc"), "capability_revision"),
    (turn_context(task_binding={"schema_version": "bailing.agent-task-binding.v1", "task_id": "x",
                                "scope_hash": REV}), "task_binding"),
    (with_value(turn_context(), "context.knowledge_delivery", "on_demand"), "context.knowledge_delivery"),
])
def test_a_turn_off_contract_is_refused(hub, client, body, field):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, body))
    refused(lambda: start_turn(client), field)


BINDING = TaskBinding("7d0f9b1e-3a2c-4b5d-8e6f-0a1b2c3d4e5f", "c" * 64)


def test_a_sent_task_binding_needs_its_identical_echo(hub, client):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, turn_context(task_binding=BINDING.wire())))
    assert start_turn(client, task_binding=BINDING).task_binding == BINDING
    assert json.loads(hub.log[0].body)["task_binding"] == {
        "schema_version": "bailing.agent-task-binding.v1", "task_id": BINDING.task_id, "scope_hash": "c" * 64}


@pytest.mark.parametrize("echo", [None, {**BINDING.wire(), "scope_hash": "d" * 64}])
def test_a_missing_or_different_binding_echo_is_refused(hub, client, echo):
    body = turn_context() if echo is None else turn_context(task_binding=echo)
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, body))
    error = refused(lambda: start_turn(client, task_binding=BINDING), "task_binding")
    assert "TASK_BINDING_CONFLICT" in error.reason


def test_on_demand_knowledge_needs_its_echo(hub, client):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, turn_context()))
    refused(lambda: start_turn(client, knowledge_delivery="on_demand"), "context.knowledge_delivery")
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns",
           (200, with_value(turn_context(), "context.knowledge_delivery", "on_demand")))
    assert start_turn(client, knowledge_delivery="on_demand").knowledge_delivery == "on_demand"
    assert json.loads(hub.log[-1].body)["knowledge_delivery"] == "on_demand"


@pytest.mark.parametrize("extra, field", [
    ({"client_turn_id": "has space"}, "client_turn_id"), ({"user_input": "   "}, "user_input"),
    ({"user_input": "x" * 64_001}, "user_input"), ({"user_input": "a\x00b"}, "user_input"),
    ({"renderers": ["a", "a"]}, "renderers"), ({"page_context": []}, "page_context"),
])
def test_a_turn_the_contract_forbids_is_not_sent(hub, client, extra, field):
    base = {"client_conversation_id": "conv-1", "client_turn_id": "t1", "user_message_id": "m1",
            "user_input": "Find ACME"}
    with pytest.raises(RequestRefused) as caught:
        client.turn(ROUTE, **{**base, **extra})
    assert caught.value.field == field and hub.log == []


# ================================================================ tool projection

@pytest.mark.parametrize("field", ["name", "description", "input_schema", "scope", "risk", "approval_required",
                                   "readonly", "idempotent"])
def test_a_tool_missing_any_of_the_eight_fields_refuses_the_answer(hub, client, field):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns", (200, turn_context(active_tools=[without(tool(), field)])))
    refused(lambda: start_turn(client), f"active_tools[0].{field}")


@pytest.mark.parametrize("over, field", [
    ({"name": "9lives"}, "name"), ({"name": "a" * 65}, "name"), ({"description": "  "}, "description"),
    ({"description": "x" * 1201}, "description"), ({"input_schema": {"type": "array"}}, "input_schema.type"),
    ({"input_schema": {"type": "object", "description": "x" * 65536}}, "input_schema"),
    ({"scope": "s" * 257}, "scope"), ({"risk": "critical"}, "risk"), ({"readonly": "yes"}, "readonly"),
    ({"approval_required": 1}, "approval_required"),
])
def test_a_tool_off_contract_refuses_the_answer(hub, client, over, field):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/turns",
           (200, turn_context(active_tools=[tool(name="ok_tool"), tool(**over)])))
    refused(lambda: start_turn(client), f"active_tools[1].{field}")


# ================================================================ search and detail

def test_search_always_sends_limit_and_keeps_consistent_discovery(hub, client):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/capabilities/search", (200, search()))
    found = client.search(ROUTE, "customer")
    assert json.loads(hub.log[0].body) == {"limit": 12, "query": "customer"}
    assert found.discovery is not None and found.discovery.returned_count == 1
    client.search(ROUTE, run_id=RUN_ID, limit=3)
    assert json.loads(hub.log[1].body) == {"limit": 3, "run_id": RUN_ID}


@pytest.mark.parametrize("disc", [discovery(returned=2), discovery(limit=5), discovery(authorized=3),
                                  discovery(truncated=True), discovery(has_more=True), discovery(mode="exhaustive"),
                                  discovery(matched_total_exact=True)])
def test_inconsistent_discovery_is_discarded_but_the_tools_kept(hub, client, disc):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/capabilities/search", (200, search(discovery=disc)))
    found = client.search(ROUTE, "customer")
    assert found.discovery is None and [t.name for t in found.tools] == ["customer_search"]


@pytest.mark.parametrize("body, field", [
    (search(route="orders"), "route"), (search(tools=[tool(name=f"t{i}") for i in range(13)]), "tools"),
    (search(schema_version="bailing.agent-capability-search.v0"), "schema_version"),
    (search(tools=[tool(risk="none")]), "tools[0].risk"), (search(capability_revision=None), "capability_revision"),
])
def test_search_off_contract_is_refused(hub, client, body, field):
    hub.on("POST", f"{API}/workspaces/{ROUTE}/capabilities/search", (200, body))
    refused(lambda: client.search(ROUTE, "customer"), field)


def test_search_without_query_or_run_is_not_sent(hub, client):
    with pytest.raises(RequestRefused):
        client.search(ROUTE, "  ")
    with pytest.raises(RequestRefused):
        client.search(ROUTE, "x", limit=13)
    assert hub.log == []


def detail(**over) -> dict:
    body = {"schema_version": "bailing.agent-tool-detail.v1", "route": ROUTE, "capability_revision": REV,
            "tool": tool(usage_guidance_available=True),
            "usage_guidance": {"text": "Search by name.", "truncated": False, "source_chars": 15,
                               "max_chars": 32768, "source_bytes": 15, "max_bytes": 65536}}
    body.update(over)
    return body


def test_tool_detail_is_read_with_route_and_revision(hub, client):
    hub.on("GET", f"{API}/tools/customer_search", (200, detail()))
    found = client.tool_detail(ROUTE, "customer_search", REV)
    assert found.usage_guidance.text == "Search by name." and found.tool.usage_guidance_available
    assert hub.log[0].query == {"route": ROUTE, "capability_revision": REV}


@pytest.mark.parametrize("body, field", [
    (detail(capability_revision="c" * 64), "capability_revision"),
    (with_value(detail(), "tool.name", "other"), "tool.name"),
    (with_value(detail(), "usage_guidance.max_chars", 40000), "usage_guidance.max_chars"),
    (with_value(detail(), "usage_guidance.source_chars", 40000), "usage_guidance.truncated"),
    (without(detail(), "usage_guidance.source_bytes"), "usage_guidance.source_bytes"),
])
def test_tool_detail_off_contract_is_refused(hub, client, body, field):
    hub.on("GET", f"{API}/tools/customer_search", (200, body))
    refused(lambda: client.tool_detail(ROUTE, "customer_search", REV), field)


# ================================================================ invoke, resume, receipt

def call(client, **over):
    args = {"capability_revision": REV, "agent_run_id": RUN_ID, "tool": "customer_search",
            "arguments": {"q": "acme"}, "invocation_id": INV}
    args.update(over)
    return client.invoke(ROUTE, **args)


def test_invoke_sends_exactly_six_fields(hub, client):
    hub.on("POST", f"{API}/tool-invocations", (200, invocation()))
    result = call(client)
    assert result.state == "executed" and result.ok and result.business_status == 200
    assert json.loads(hub.log[0].body) == {"invocation_id": INV, "route": ROUTE, "capability_revision": REV,
                                           "agent_run_id": RUN_ID, "tool": "customer_search",
                                           "arguments": {"q": "acme"}}


def test_invoke_generates_a_hex_invocation_id(hub, client):
    hub.on("POST", f"{API}/tool-invocations", lambda seen: (200, invocation(
        invocation_id=json.loads(seen.body)["invocation_id"])))
    result = call(client, invocation_id=None)
    assert len(result.invocation_id) == 64 and result.invocation_id != INV


def test_arguments_within_our_one_mebibyte_budget_are_sent_and_beyond_are_not(hub, client):
    hub.on("POST", f"{API}/tool-invocations", (200, invocation()))
    overhead = len('{"q":""}')
    call(client, arguments={"q": "x" * (1024 * 1024 - overhead)})
    assert len(hub.log) == 1
    with pytest.raises(RequestRefused) as caught:
        call(client, arguments={"q": "x" * (1024 * 1024 - overhead + 1)})
    assert caught.value.field == "arguments" and len(hub.log) == 1


@pytest.mark.parametrize("over, field", [
    ({"state": "done"}, "state"), ({"ok": "true"}, "ok"), ({"auto_retry_allowed": None}, "auto_retry_allowed"),
    ({"text": "x" * 8193}, "text"), ({"business_status": 99}, "business_status"),
    ({"business_status": 600}, "business_status"), ({"approval_id": 0}, "approval_id"),
    ({"approval_id": "7"}, "approval_id"), ({"invocation_id": "c" * 64}, "invocation_id"),
    ({"route": "orders"}, "route"), ({"tool": "customer_get"}, "tool"),
    ({"retry_after_ms": 60000}, "retry_after_ms"),
    ({"schema_version": "bailing.agent-tool-invocation.v2"}, "schema_version"),
])
def test_an_invocation_off_contract_is_refused(hub, client, over, field):
    hub.on("POST", f"{API}/tool-invocations", (200, invocation(**over)))
    refused(lambda: call(client), field)


@pytest.mark.parametrize("field", ["state", "ok", "auto_retry_allowed", "text", "invocation_id", "route", "tool"])
def test_an_invocation_missing_a_field_is_refused(hub, client, field):
    hub.on("POST", f"{API}/tool-invocations", (200, without(invocation(), field)))
    refused(lambda: call(client), field)


RATE = {"level": "tool", "count": 10, "window_sec": 60, "scope": "tool_provider_shared", "source": "declaration"}


def limited(**over) -> dict:
    body = invocation(state="rejected_before_dispatch", ok=False, auto_retry_allowed=True, retry_after_ms=60000,
                      rate_limit=RATE)
    del body["business_status"]
    body.update(over)
    return body


def test_a_rate_limited_rejection_is_read(hub, client):
    hub.on("POST", f"{API}/tool-invocations", (200, limited()))
    result = call(client)
    assert result.retry_after_ms == 60000 and result.rate_limit.window_sec == 60


@pytest.mark.parametrize("over, field", [
    ({"auto_retry_allowed": False}, "retry_after_ms"), ({"retry_after_ms": 0}, "retry_after_ms"),
    ({"retry_after_ms": 86_400_001}, "retry_after_ms"), ({"rate_limit": {**RATE, "window_sec": 2}},
                                                        "rate_limit.window_sec"),
    ({"rate_limit": {**RATE, "source": "guess"}}, "rate_limit.source"),
    ({"rate_limit": {**RATE, "level": "route"}}, "rate_limit.level"),
    ({"rate_limit": {**RATE, "scope": "route"}}, "rate_limit.scope"),
])
def test_rate_limit_fields_off_contract_are_refused(hub, client, over, field):
    hub.on("POST", f"{API}/tool-invocations", (200, limited(**over)))
    refused(lambda: call(client), field)


def test_resume_sends_no_body_at_all(hub, client):
    hub.on("POST", f"{API}/tool-invocations/{INV}/resume", (200, invocation()))
    assert client.resume(INV, route=ROUTE, tool="customer_search").state == "executed"
    sent = hub.log[0]
    assert sent.body == b"" and "Content-Type" not in sent.headers
    assert sent.headers.get("Content-Length", "0") == "0"


def test_resume_checks_the_echoed_invocation(hub, client):
    hub.on("POST", f"{API}/tool-invocations/{INV}/resume", (200, invocation(invocation_id="c" * 64)))
    refused(lambda: client.resume(INV), "invocation_id")


def test_receipt_probes_inspection_first(hub, client):
    hub.on("GET", f"{API}/tool-invocations/inspection-capabilities", (200, INSPECTION))
    hub.on("GET", f"{API}/tool-invocations/{INV}/receipt", (200, receipt()))
    found = client.receipt(INV)
    assert found.result.state == "executed" and found.approval_status == "none"
    client.receipt(INV)
    assert [s.path.rsplit("/", 1)[1] for s in hub.log] == ["inspection-capabilities", "receipt", "receipt"]


def test_receipt_on_a_hub_without_inspection_is_unsupported(hub, client):
    with pytest.raises(Unsupported):
        client.receipt(INV)
    assert [s.path for s in hub.log] == [f"{API}/tool-invocations/inspection-capabilities"]


@pytest.mark.parametrize("body, field", [
    ({**INSPECTION, "schema": INSPECTION["schema_version"], "schema_version": None}, "schema_version"),
    ({"schema": INSPECTION["schema_version"], "receipt_schema": INSPECTION["receipt_schema"], "read_only": True},
     "schema_version"),
    ({**INSPECTION, "read_only": False}, "read_only"),
    ({**INSPECTION, "receipt_schema": "bailing.agent-invocation-receipt.v2"}, "receipt_schema"),
])
def test_inspection_capabilities_off_contract_are_refused(hub, client, body, field):
    hub.on("GET", f"{API}/tool-invocations/inspection-capabilities", (200, body))
    refused(lambda: client.receipt(INV), field)


@pytest.mark.parametrize("body, field", [
    ({**without(receipt(), "schema_version"), "schema": "bailing.agent-invocation-receipt.v1"}, "schema_version"),
    (receipt(read_only=False), "read_only"), (receipt(business_operation_performed=True),
                                              "business_operation_performed"),
    (receipt(result=None), "result_source"), (receipt(result_source="none"), "result_source"),
    (receipt(dispatch_state="sent"), "dispatch_state"), (receipt(journal_state="lost"), "journal_state"),
    (receipt(approval={"status": "pending"}), "approval.approval_id"),
    (receipt(approval={"status": "none", "approval_id": 3}), "approval.approval_id"),
    (receipt(approval={"status": "maybe", "approval_id": 3}), "approval.status"),
    (receipt(agent_run_id="run-1"), "agent_run_id"), (receipt(observed_at="now"), "observed_at"),
    (receipt(result=invocation(retry_after_ms=0)), "result.retry_after_ms"),
    (receipt(result=invocation(tool="customer_get")), "result.tool"),
])
def test_a_receipt_off_contract_is_refused(hub, client, body, field):
    hub.on("GET", f"{API}/tool-invocations/inspection-capabilities", (200, INSPECTION))
    hub.on("GET", f"{API}/tool-invocations/{INV}/receipt", (200, body))
    refused(lambda: client.receipt(INV), field)


# ================================================================ complete

def finish(client, **over):
    args = {"assistant_message_id": "a1", "status": "completed", "content": "Done."}
    args.update(over)
    return client.complete(RUN_ID, **args)


def test_complete_reads_run_id_and_status_even_without_a_schema_marker(hub, client):
    hub.on("POST", f"{API}/runs/{RUN_ID}/complete", (200, {"run_id": RUN_ID, "status": "completed"}))
    assert finish(client, usage={"input_tokens": 3, "cost_usd": 0.5}).status == "completed"
    assert json.loads(hub.log[0].body) == {"assistant_message_id": "a1", "status": "completed", "content": "Done.",
                                           "usage": {"input_tokens": 3, "cost_usd": 0.5}}


@pytest.mark.parametrize("body, field", [
    ({"run_id": OTHER_SESSION, "status": "completed"}, "run_id"), ({"run_id": RUN_ID, "status": "failed"}, "status"),
    ({"schema_version": "bailing.agent-run-completion.v2", "run_id": RUN_ID, "status": "completed"},
     "schema_version"), ({"status": "completed"}, "run_id"),
])
def test_a_completion_off_contract_is_refused(hub, client, body, field):
    hub.on("POST", f"{API}/runs/{RUN_ID}/complete", (200, body))
    refused(lambda: finish(client), field)


@pytest.mark.parametrize("over, field", [({"content": " "}, "content"), ({"status": "done"}, "status"),
                                         ({"usage": {"tokens": 1}}, "usage.tokens"),
                                         ({"usage": {"input_tokens": -1}}, "usage.input_tokens"),
                                         ({"model": "m" * 192}, "model")])
def test_a_completion_the_contract_forbids_is_not_sent(hub, client, over, field):
    with pytest.raises(RequestRefused) as caught:
        finish(client, **over)
    assert caught.value.field == field and hub.log == []


# ================================================================ conversation audit

def create_v1(client):
    return client.create_archive(ROUTE, client_archive_id=ARCHIVE_ID, client_conversation_id="conv-1",
                                 member_session_ids=[SESSION_ID, OTHER_SESSION],
                                 member_labels={SESSION_ID: "Desktop"})


def test_a_v1_archive_is_created_with_200_and_a_flat_header(hub, client):
    hub.on("POST", f"{API}/conversation-audits", (200, header()))
    made = create_v1(client)
    assert (made.conversation_id, made.state, made.member_count, made.confirmed_count) == (
        ARCHIVE_ID, "enrolling", 2, 1)
    assert json.loads(hub.log[0].body) == {"client_archive_id": ARCHIVE_ID, "client_conversation_id": "conv-1",
                                           "route": ROUTE, "member_session_ids": [SESSION_ID, OTHER_SESSION],
                                           "member_labels": {SESSION_ID: "Desktop"}}


@pytest.mark.parametrize("status, body, field", [
    (201, header(), "status"), (200, header(member_count=3), "member_count"),
    (200, header(member_count=65), "member_count"), (200, header(confirmed_count=0), "confirmed_count"),
    (200, header(confirmed_count=3), "confirmed_count"), (200, header(last_sequence=-1), "last_sequence"),
    (200, header(state="ready"), "state"), (200, header(conversation_id="x"), "conversation_id"),
    (200, {**without(header(), "schema"), "schema_version": "bailing.agent-conversation-audit.v1"}, "schema"),
    (200, {"schema": "bailing.agent-conversation-audit.v1", "conversation": header()}, "member_count"),
])
def test_an_archive_header_off_contract_is_refused(hub, client, status, body, field):
    hub.on("POST", f"{API}/conversation-audits", (status, body))
    refused(lambda: create_v1(client), field)


def test_confirm_sends_an_empty_object_and_checks_the_echo(hub, client):
    hub.on("POST", f"{API}/conversation-audits/{ARCHIVE_ID}/confirm",
           (200, header(state="ready", confirmed_count=2)), (200, header(conversation_id=OTHER_SESSION)))
    assert client.confirm_archive(ARCHIVE_ID, member_count=2).state == "ready"
    assert json.loads(hub.log[0].body) == {}
    refused(lambda: client.confirm_archive(ARCHIVE_ID), "conversation_id")


def events(n: int, content: str = "hello") -> list[dict]:
    out = []
    for i in range(1, n + 1):
        out.append({"event_id": f"e{i}", "sequence": i, "client_turn_id": "t1", "kind": "user_message",
                    "content": content})
    return out


def test_events_go_in_batches_of_at_most_fifty(hub, client):
    hub.on("POST", f"{API}/conversation-audits/{ARCHIVE_ID}/events",
           lambda seen: (200, ack(json.loads(seen.body)["events"][-1]["sequence"])))
    sizes = []
    last = client.append_events(ARCHIVE_ID, events(120), on_batch=lambda batch, a: sizes.append(len(batch)))
    assert sizes == [50, 50, 20] and last.last_sequence == 120
    sent = [json.loads(s.body)["events"] for s in hub.log]
    assert [e["sequence"] for batch in sent for e in batch] == list(range(1, 121))


def test_events_go_in_batches_of_at_most_192_kib_of_json(hub, client):
    hub.on("POST", f"{API}/conversation-audits/{ARCHIVE_ID}/events",
           lambda seen: (200, ack(json.loads(seen.body)["events"][-1]["sequence"])))
    client.append_events(ARCHIVE_ID, events(12, "ü" * 30_000))  # ~60 KB of UTF-8 each
    assert len(hub.log) > 1
    assert all(len(s.body) <= 192 * 1024 for s in hub.log)
    assert [len(json.loads(s.body)["events"]) for s in hub.log] == [3, 3, 3, 3]


def test_batches_are_filled_to_the_byte_limit():
    full = list(batches(events(12, "ü" * 30_000)))
    single = len(json.dumps({"events": full[0][:1]}, ensure_ascii=False, separators=(",", ":")).encode())
    assert single * 4 > 192 * 1024 >= single * 3  # so three per batch is the most that fits


@pytest.mark.parametrize("bad, field", [
    ({"kind": "note"}, "events[0].kind"), ({"extra": 1}, "events[0]"), ({"sequence": 0}, "events[0].sequence"),
    ({"content": "\x00"}, "events[0].content"), ({"event_id": "bad id"}, "events[0].event_id"),
])
def test_an_event_the_contract_forbids_stops_the_whole_append_before_any_batch(hub, client, bad, field):
    batch = events(60)
    batch[0] = {**batch[0], **bad}
    with pytest.raises(RequestRefused) as caught:
        client.append_events(ARCHIVE_ID, batch)
    assert caught.value.field == field and hub.log == []


@pytest.mark.parametrize("body, field", [
    (ack(49), "last_sequence"), ({**ack(50), "conversation_id": OTHER_SESSION}, "conversation_id"),
    ({"schema_version": "bailing.agent-conversation-audit-ack.v1", "conversation_id": ARCHIVE_ID,
      "last_sequence": 50}, "schema"),
])
def test_an_ack_off_contract_is_refused(hub, client, body, field):
    hub.on("POST", f"{API}/conversation-audits/{ARCHIVE_ID}/events", (200, body))
    refused(lambda: client.append_events(ARCHIVE_ID, events(50)), field)


@pytest.fixture
def other(hub, tmp_path):
    s = SessionStore(tmp_path / "other.json")
    record = stored_session(hub.url, access="bha_" + "O" * 43)
    s.save({**record, "session_id": OTHER_SESSION, "client_app_id": "erp-demo"})
    return AgentClient(s)


CAPS = {"schema": "bailing.agent-conversation-audit-capabilities.v1", "cross_binding_members": True,
        "member_bindings": "session-client-route.v1"}


def answer_sessions(seen):
    own = seen.headers["Authorization"] == f"Bearer {ACCESS}"
    return 200, session_view(**({} if own else {"session_id": OTHER_SESSION, "client_app_id": "erp-demo",
                                                 "allowed_routes": ["orders"]}))


def create_v2(client, other):
    return client.create_cross_archive(ROUTE, client_archive_id=ARCHIVE_ID, client_conversation_id="conv-1",
                                       label="CRM", others=[(other, "orders", "ERP")])


def test_a_v2_archive_probes_capabilities_and_puts_the_writer_first(hub, client, other):
    hub.on("GET", "/agent-auth/v1/session", answer_sessions)
    hub.on("GET", f"{API}/conversation-audits/capabilities", (200, CAPS))
    hub.on("POST", f"{API}/conversation-audits", (200, header()))
    create_v2(client, other)
    order = [(s.method, s.path) for s in hub.log]
    assert order == [("GET", f"{API}/conversation-audits/capabilities"), ("GET", "/agent-auth/v1/session"),
                     ("GET", "/agent-auth/v1/session"), ("POST", f"{API}/conversation-audits")]
    assert json.loads(hub.sent("POST", f"{API}/conversation-audits")[0].body) == {
        "schema": "bailing.agent-conversation-audit-create.v2", "client_archive_id": ARCHIVE_ID,
        "client_conversation_id": "conv-1",
        "members": [{"session_id": SESSION_ID, "client_app_id": CLIENT, "route": ROUTE, "label": "CRM"},
                    {"session_id": OTHER_SESSION, "client_app_id": "erp-demo", "route": "orders", "label": "ERP"}]}


@pytest.mark.parametrize("caps", [None, {**CAPS, "cross_binding_members": False}])
def test_no_v2_archive_without_cross_binding_support(hub, client, other, caps):
    hub.on("GET", "/agent-auth/v1/session", answer_sessions)
    if caps is not None:
        hub.on("GET", f"{API}/conversation-audits/capabilities", (200, caps))
    with pytest.raises(Unsupported):
        create_v2(client, other)
    assert hub.sent("POST", f"{API}/conversation-audits") == []


def test_a_v2_header_must_describe_the_writer(hub, client, other):
    hub.on("GET", "/agent-auth/v1/session", answer_sessions)
    hub.on("GET", f"{API}/conversation-audits/capabilities", (200, CAPS))
    hub.on("POST", f"{API}/conversation-audits", (200, header(client_app_id="erp-demo", route_key="orders")))
    refused(lambda: create_v2(client, other), "client_app_id")


def test_a_v2_member_on_another_hub_is_not_sent(hub, client, tmp_path):
    s = SessionStore(tmp_path / "far.json")
    s.save({**stored_session("http://127.0.0.1:9"), "session_id": OTHER_SESSION})
    with pytest.raises(RequestRefused):
        create_v2(client, AgentClient(s))
    assert hub.log == []


def test_audit_capabilities_off_contract_are_refused(hub, client):
    hub.on("GET", f"{API}/conversation-audits/capabilities", (200, {**CAPS, "cross_binding_members": "yes"}))
    refused(client.audit_capabilities, "cross_binding_members")
    hub.on("GET", f"{API}/conversation-audits/capabilities",
           (200, {**without(CAPS, "schema"), "schema_version": CAPS["schema"]}))
    refused(client.audit_capabilities, "schema")


# ================================================================ refusals are typed

def test_a_refusal_carries_status_and_code(hub, client):
    hub.on("POST", f"{API}/tool-invocations", (409, {"error": "capability_changed", "message": "stale"}))
    with pytest.raises(HubError) as caught:
        call(client)
    assert (caught.value.status, caught.value.code, caught.value.message) == (409, "capability_changed", "stale")


def test_a_non_json_answer_is_off_contract(hub, client):
    hub.app.view_functions["anything"] = lambda path: Response("<html>", 200, mimetype="text/html")
    refused(client.workspaces, "")


# ================================================================ system info and task control

def system_info(**over) -> dict:
    body = {"schema_version": "bailing.agent-system-info.v1",
            "binding": {"client_app_id": CLIENT, "session_id": SESSION_ID, "workspace": ROUTE},
            "metadata_status": "configured", "revision": REV,
            "system": {"name": "Demo CRM", "summary": "Customers.", "domains": ["accounts"], "boundaries": []},
            "tool_status": "not_loaded", "availability": "unknown"}
    body.update(over)
    return body


def test_system_info_is_read(hub, client):
    hub.on("GET", f"{API}/workspaces/{ROUTE}/system-info", (200, system_info()))
    assert client.system_info(ROUTE).system["name"] == "Demo CRM"
    hub.on("GET", f"{API}/workspaces/{ROUTE}/system-info",
           (200, system_info(metadata_status="missing", revision=None, system=None, availability="unavailable",
                             unavailable_reason="agent_direct_disabled")))
    assert client.system_info(ROUTE).unavailable_reason == "agent_direct_disabled"


@pytest.mark.parametrize("body, field", [
    ({**without(system_info(), "schema_version"), "schema": "bailing.agent-system-info.v1"}, "schema_version"),
    (with_value(system_info(), "binding.session_id", OTHER_SESSION), "binding.session_id"),
    (system_info(revision=None), "metadata_status"), (system_info(tool_status="loaded"), "tool_status"),
    (system_info(availability="unavailable"), "unavailable_reason"),
    (with_value(system_info(), "system.domains", ["d"] * 7), "system.domains"),
    (with_value(system_info(), "system.name", "n" * 121), "system.name"),
])
def test_system_info_off_contract_is_refused(hub, client, body, field):
    hub.on("GET", f"{API}/workspaces/{ROUTE}/system-info", (200, body))
    refused(lambda: client.system_info(ROUTE), field)


def test_system_info_of_an_older_hub_is_unsupported_but_a_closed_route_is_a_refusal(hub, client):
    with pytest.raises(Unsupported):
        client.system_info(ROUTE)
    hub.on("GET", f"{API}/workspaces/{ROUTE}/system-info", (404, {"error": "route_unavailable", "message": "x"}))
    with pytest.raises(HubError) as caught:
        client.system_info(ROUTE)
    assert caught.value.code == "route_unavailable"


TASK_CAPS = {"schema_version": "bailing.agent-task-control-capabilities.v1", "supported": True, "mode": "optional",
             "task_schema": "bailing.agent-task.v1", "metering": "write_invocation", "same_hub_only": True,
             "controls": ["pause", "resume", "cancel"], "inspect_invocation": True}


@pytest.mark.parametrize("status, body", [(404, {}), (405, {}), (501, {"error": "TASK_UNSUPPORTED"}),
                                          (404, {"error": "not_found"})])
def test_task_control_unsupported_answers(hub, client, status, body):
    hub.on("GET", f"{API}/task-control/capabilities", (status, body))
    with pytest.raises(Unsupported):
        client.task_control_capabilities()


@pytest.mark.parametrize("body, field", [
    ({**TASK_CAPS, "inspect_invocation": False}, "inspect_invocation"),
    ({**TASK_CAPS, "controls": ["pause"]}, "controls"), ({**TASK_CAPS, "mode": "strict"}, "mode"),
    ({**without(TASK_CAPS, "schema_version"), "schema": TASK_CAPS["schema_version"]}, "schema_version"),
])
def test_task_control_capabilities_off_contract_are_refused(hub, client, body, field):
    hub.on("GET", f"{API}/task-control/capabilities", (200, body))
    refused(client.task_control_capabilities, field)


def test_task_control_capabilities_are_read(hub, client):
    hub.on("GET", f"{API}/task-control/capabilities", (200, TASK_CAPS))
    assert client.task_control_capabilities().supported is True


def test_a_code_outside_the_contract_has_no_public_code(hub, client):
    hub.on("POST", f"{API}/runs/{RUN_ID}/complete", (409, {"error": "completion_conflict", "message": "x"}))
    with pytest.raises(HubError) as caught:
        finish(client)
    assert caught.value.code == "completion_conflict" and caught.value.public_code is None
    hub.on("POST", f"{API}/runs/{RUN_ID}/complete", (409, {"error": "run_completion_conflict", "message": "x"}))
    with pytest.raises(HubError) as caught:
        finish(client)
    assert caught.value.public_code == "run_completion_conflict"


def test_a_v2_member_whose_session_does_not_hold_its_route_is_not_sent(hub, client, other):
    hub.on("GET", "/agent-auth/v1/session", answer_sessions)
    hub.on("GET", f"{API}/conversation-audits/capabilities", (200, CAPS))
    with pytest.raises(RequestRefused):
        client.create_cross_archive(ROUTE, client_archive_id=ARCHIVE_ID, client_conversation_id="conv-1",
                                    others=[(other, "billing", None)])
    assert hub.sent("POST", f"{API}/conversation-audits") == []


# ================================================================ knowledge on demand (our spec)

KB_CAPS = {"schema": "bailing.agent-knowledge-capabilities.v1", "route": ROUTE, "enabled": True, "documents": 2,
           "delivery_modes": ["inline", "on_demand"], "trust": "reference_only",
           "search": {"max_query_chars": 1000, "max_results": 20, "default_results": 5, "hint_max_chars": 240},
           "read": {"max_chars": 16000}}
HINT = {"chunk_id": 7, "document": "credit-policy.md", "title": "Credit policy", "heading": "Limits",
        "hint": "Limits above 10,000 EUR need", "hint_truncated": True, "content_chars": 900,
        "trust": "reference_only"}
KB_SEARCH = {"schema": "bailing.agent-knowledge-search.v1", "route": ROUTE, "trust": "reference_only", "limit": 3,
             "results": [HINT]}
KB_READ = {"schema": "bailing.agent-knowledge-read.v1", "route": ROUTE, "chunk_id": 7, "document": "credit-policy.md",
           "title": "Credit policy", "heading": None, "content": "x" * 100, "offset": 0, "total_chars": 250,
           "truncated": True, "next_offset": 100, "max_chars": 100, "trust": "reference_only"}


def test_knowledge_is_read(hub, client):
    hub.on("GET", f"{API}/workspaces/{ROUTE}/knowledge/capabilities", (200, KB_CAPS))
    hub.on("POST", f"{API}/workspaces/{ROUTE}/knowledge/search", (200, KB_SEARCH))
    hub.on("POST", f"{API}/workspaces/{ROUTE}/knowledge/read", (200, KB_READ))
    assert client.knowledge_capabilities(ROUTE).default_results == 5
    assert client.knowledge_search(ROUTE, "credit", limit=3)[0].chunk_id == 7
    assert client.knowledge_read(ROUTE, 7).next_offset == 100
    assert [json.loads(s.body) for s in hub.log if s.method == "POST"] == [{"query": "credit", "limit": 3},
                                                                         {"chunk_id": 7}]


@pytest.mark.parametrize("path, body, field", [
    ("capabilities", {**KB_CAPS, "trust": "trusted"}, "trust"),
    ("capabilities", {**KB_CAPS, "delivery_modes": ["streamed"]}, "delivery_modes[0]"),
    ("capabilities", with_value(KB_CAPS, "search.default_results", 21), "search.default_results"),
    ("search", {**KB_SEARCH, "limit": 4}, "limit"),
    ("search", {**KB_SEARCH, "results": [HINT] * 4}, "results"),
    ("search", {**KB_SEARCH, "results": [{**HINT, "hint": "h" * 241}]}, "results[0].hint"),
    ("search", {**KB_SEARCH, "results": [{**HINT, "hint_truncated": False}]}, "results[0].hint_truncated"),
    ("search", {**KB_SEARCH, "results": [{**HINT, "trust": "instructions"}]}, "results[0].trust"),
    ("read", {**KB_READ, "next_offset": 90}, "next_offset"), ("read", {**KB_READ, "truncated": False}, "next_offset"),
    ("read", {**KB_READ, "chunk_id": 8}, "chunk_id"), ("read", {**KB_READ, "content": "x" * 101}, "content"),
])
def test_knowledge_off_contract_is_refused(hub, client, path, body, field):
    method = "GET" if path == "capabilities" else "POST"
    hub.on(method, f"{API}/workspaces/{ROUTE}/knowledge/{path}", (200, body))
    call_it = {"capabilities": lambda: client.knowledge_capabilities(ROUTE),
               "search": lambda: client.knowledge_search(ROUTE, "credit", limit=3),
               "read": lambda: client.knowledge_read(ROUTE, 7)}[path]
    refused(call_it, field)
