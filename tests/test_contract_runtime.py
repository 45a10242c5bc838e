"""The Runtime surfaces of /agent-api/v1 against the upstream wire contract the official client
validates (WIRE_CONTRACT §2.1-2.5, §2.9, §2.15): each row's status, fields and their types,
nesting, schema strings and error codes. Every refusal is also checked to have written nothing.

Over real HTTP to a live server backed by a real PostgreSQL; configurations are applied with
`bailing-admin config apply`.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
import uuid
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import assert_error, assert_ok, bearer, row_counts

# The same work on any server (the answers' shapes; the SQL behind them runs in the runtime's own tests).
pytestmark = pytest.mark.any_server

API = "/agent-api/v1"
KNOWLEDGE = Path(__file__).parent / "data" / "knowledge"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
HEX64 = re.compile(r"^[0-9a-f]{64}$")
UUID_V4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TOOL_KEYS = {"name", "description", "input_schema", "scope", "risk", "approval_required", "readonly",
             "idempotent"}
TABLES = ("bz_runs", "bz_messages", "bz_threads")

CRM_ALL = {"sources": [{"provider": "demo-crm", "allow": ["*"]}],
           "agent_direct": {"enabled": True, "write_tools": ["customer_note_add"]}}
WIDE = {"sources": [{"provider": "demo-crm", "allow": ["*"]}, {"provider": "demo-erp", "allow": ["*"]}],
        "agent_direct": {"enabled": True, "write_tools": [
            "customer_note_add", "customer_update_credit_limit", "order_create", "inventory_adjust",
            "inventory_reserve"]}}
SYSTEM = {"name": "Order desk", "summary": "Orders and customers of the shop.",
          "domains": ["orders", "customers"], "boundaries": ["No refunds over 1000 EUR."]}


# ----------------------------------------------------------------------------- helpers

def route(key: str, **fields) -> dict:
    return {"route_key": key, "name": f"Route {key}", "description": f"About {key}", "enabled": True,
            "audience": {"enabled": False}, "target_config": {"system_prompt": f"You serve {key}."},
            "agent_client": {"enabled": True, "instructions": "Be brief."},
            "tools": copy.deepcopy(CRM_ALL), "permission": "full", **fields}


def hub(*routes: dict, client_routes: list[str] | None = None) -> dict:
    def provider(name, spec, port, env):
        return {"name": name, "base_url": f"http://127.0.0.1:{port}", "openapi": str(EXAMPLES / spec),
                "secret_env": env, "timeout_ms": 10000}

    return {"tool_providers": [provider("demo-crm", "crm.openapi.json", 8100, "DEMO_CRM_SECRET"),
                               provider("demo-erp", "erp.openapi.json", 8200, "DEMO_ERP_SECRET")],
            "routes": list(routes),
            "client_apps": [{"app_id": "desk-app", "name": "Desk", "enabled": True,
                             "allowed_routes": [r["route_key"] for r in routes]
                             if client_routes is None else client_routes}]}


@pytest.fixture
def session(cli):
    """An Agent Session of desk-app over these routes: (access token, session id)."""

    def issue(routes: list[str], principal: dict | None = PRINCIPAL, enrolled: bool = False):
        args = ["sessions", "issue", "--client", "desk-app", "--routes", ",".join(routes),
                "--on-behalf-of", "tenant-7:user-42"]
        if principal is not None:
            args += ["--principal", json.dumps(principal)]
        if enrolled:
            args.append("--task-enrolled")
        code, out, err = cli(*args)
        assert code == 0, err
        return out["access_token"], out["session_id"]

    return issue


def call(server, token: str, method: str, path: str, body=None, **kwargs):
    headers = {**bearer(token), **kwargs.pop("headers", {})}
    if body is not None:
        kwargs["json"] = body
    return server.request(method, API + path, headers=headers, **kwargs)


@pytest.fixture
def counts(sql):
    def take() -> dict:
        return row_counts(sql, *TABLES)

    return take


def turn_body(n: int = 1, **changes) -> dict:
    return {"client_conversation_id": "conv-1", "client_turn_id": f"turn-{n}",
            "user_message_id": f"msg-{n}", "user_input": "Find the customer named Ada", **changes}


def sha256_canonical(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def assert_tool(tool: dict) -> None:
    assert TOOL_KEYS <= set(tool), tool
    assert isinstance(tool["name"], str) and isinstance(tool["description"], str)
    assert tool["input_schema"]["type"] == "object"
    assert tool["risk"] in ("low", "medium", "high")
    assert all(isinstance(tool[k], bool) for k in ("approval_required", "readonly", "idempotent"))


@pytest.fixture
def desk(apply, session):
    """One route `desk` over every CRM tool; returns (token, session id)."""
    apply(hub(route("desk")))
    return session(["desk"])


# ----------------------------------------------------------------------------- §2.1 route gate

GATE_ROUTES = [
    route("open"),
    route("off", enabled=False),
    route("no-runtime", agent_client={"enabled": False}),
    route("no-direct", tools={"agent_direct": {"enabled": False}}),
    route("foreign", audience={"enabled": True, "tenants": ["other"]}),
    # Fail two steps: the earlier one answers.
    route("off-foreign", enabled=False, audience={"enabled": True, "tenants": ["other"]}),
    route("foreign-no-runtime", audience={"enabled": True, "tenants": ["other"]},
          agent_client={"enabled": False}),
    route("foreign-no-direct", audience={"enabled": True, "tenants": ["other"]},
          tools={"agent_direct": {"enabled": False}}),
    route("unlisted"),
]
LISTED = [r["route_key"] for r in GATE_ROUTES if r["route_key"] != "unlisted"]


@pytest.fixture
def gate(apply, session, sql):
    """A session over every route but `unlisted`; both lists also name `never-defined`, a route that
    does not exist (configuration cannot list one, so the stored lists are extended directly)."""
    apply(hub(*GATE_ROUTES))
    token, session_id = session(LISTED)
    sql("UPDATE bz_client_apps SET allowed_routes = array_append(allowed_routes, 'never-defined')")
    sql("UPDATE bz_agent_sessions SET allowed_routes = array_append(allowed_routes, 'never-defined')")
    return token, session_id


RUNTIME_GATE = [
    ("auto", 400, "invalid_route"),
    ("unlisted", 403, "route_not_allowed"),
    ("missing-and-unlisted", 403, "route_not_allowed"),
    ("never-defined", 404, "route_unavailable"),
    ("off", 404, "route_unavailable"),
    ("off-foreign", 404, "route_unavailable"),
    ("foreign", 403, "audience_not_allowed"),
    ("foreign-no-runtime", 403, "audience_not_allowed"),
    ("no-runtime", 403, "agent_client_disabled"),
]


@pytest.mark.parametrize("route_key, status, code", RUNTIME_GATE, ids=[r[0] for r in RUNTIME_GATE])
@pytest.mark.parametrize("method, path, body", [
    ("GET", "/workspaces/{}/bootstrap", None),
    ("POST", "/workspaces/{}/turns", turn_body()),
    ("POST", "/workspaces/{}/capabilities/search", {"query": "customer", "limit": 12}),
], ids=["bootstrap", "turn", "search"])
def test_runtime_gate_codes_in_order(server, gate, counts, route_key, status, code, method, path, body):
    token, _ = gate
    before = counts()
    assert_error(call(server, token, method, path.format(route_key), body), status, code)
    assert counts() == before


def test_runtime_surfaces_do_not_need_agent_direct(server, gate):
    token, _ = gate
    bootstrap = assert_ok(call(server, token, "GET", "/workspaces/no-direct/bootstrap"))
    assert bootstrap["capabilities"]["authorized_total"] == 0
    assert assert_ok(call(server, token, "POST", "/workspaces/no-direct/turns", turn_body()))["active_tools"] == []


TOOLS_GATE = [
    ("auto", 400, "invalid_route"),
    ("Not-A-Key", 400, "invalid_route"),
    ("unlisted", 403, "route_not_allowed"),
    ("off", 404, "route_unavailable"),
    ("no-direct", 403, "agent_direct_disabled"),
    ("foreign-no-direct", 403, "agent_direct_disabled"),
    ("foreign", 403, "audience_not_allowed"),
]


@pytest.mark.parametrize("route_key, status, code", TOOLS_GATE, ids=[r[0] for r in TOOLS_GATE])
def test_tool_surface_gate_codes_in_order(server, gate, route_key, status, code):
    token, _ = gate
    assert_error(call(server, token, "GET", "/tools", params={"route": route_key}), status, code)


def test_the_tool_surface_does_not_need_agent_client(server, gate):
    assert assert_ok(call(server, gate[0], "GET", "/tools", params={"route": "no-runtime"}))["route"] == "no-runtime"


@pytest.mark.parametrize("segment", ["Open", "a", "x" * 65, "-open"])
def test_a_path_segment_that_is_no_route_key_is_not_found(server, gate, segment):
    assert_error(call(server, gate[0], "GET", f"/workspaces/{segment}/bootstrap"), 404, "not_found")


def test_a_wildcard_in_the_stored_lists_allows_every_route(server, apply, session, sql):
    apply(hub(route("open"), route("other"), client_routes=["open"]))
    token, _ = session(["open"])
    assert_error(call(server, token, "GET", "/workspaces/other/bootstrap"), 403, "route_not_allowed")
    sql("UPDATE bz_client_apps SET allowed_routes = '{*}'")
    sql("UPDATE bz_agent_sessions SET allowed_routes = '{*}'")
    assert [w["route"] for w in assert_ok(call(server, token, "GET", "/workspaces"))["workspaces"]] == ["open", "other"]
    assert_ok(call(server, token, "GET", "/workspaces/other/bootstrap"))


# ----------------------------------------------------------------------------- §2.2 workspaces

def test_workspaces_list_every_route_that_passes_the_gate(server, gate):
    body = assert_ok(call(server, gate[0], "GET", "/workspaces"))
    assert set(body) == {"schema_version", "workspaces"}
    assert body["schema_version"] == "bailing.agent-workspaces.v1"
    assert [w["route"] for w in body["workspaces"]] == ["no-direct", "open"]


def test_a_workspace_entry_has_exactly_the_listed_fields(server, apply, session, sql):
    apply(hub(route("desk", agent_client={"enabled": True, "active_tool_limit": 5})))
    token, _ = session(["desk"])
    # Configuration refuses control characters in names; older rows may still hold them.
    sql("UPDATE bz_routes SET name = %s, description = %s", ("Desk\x07desk", "  About\x1b the desk  "))
    [entry] = assert_ok(call(server, token, "GET", "/workspaces"))["workspaces"]
    assert set(entry) == {"route", "name", "description", "profile", "permission", "profile_revision",
                          "capability_revision", "authorized_tool_count", "active_tool_limit"}
    assert entry["route"] == "desk"
    assert entry["name"] == "Desk desk" and entry["description"] == "About  the desk"
    assert isinstance(entry["profile"], str) and len(entry["profile"]) <= 64
    assert entry["permission"] == "full"
    boot = assert_ok(call(server, token, "GET", "/workspaces/desk/bootstrap"))
    catalog = assert_ok(call(server, token, "GET", "/tools", params={"route": "desk"}))
    assert entry["profile_revision"] == boot["profile"]["revision"]
    assert entry["capability_revision"] == boot["capabilities"]["revision"] == catalog["capability_revision"]
    assert entry["authorized_tool_count"] == len(catalog["tools"]) > 0
    assert entry["active_tool_limit"] == 5 == boot["capabilities"]["active_limit"]


def test_workspace_name_and_description_are_bounded(server, apply, session):
    apply(hub(route("desk", name="N" * 191, description="D" * 2000)))
    token, _ = session(["desk"])
    [entry] = assert_ok(call(server, token, "GET", "/workspaces"))["workspaces"]
    assert entry["name"] == "N" * 128 and entry["description"] == "D" * 1000
    workspace = assert_ok(call(server, token, "GET", "/workspaces/desk/bootstrap"))["workspace"]
    assert workspace == {"route": "desk", "name": "N" * 128, "description": "D" * 1000}


# ----------------------------------------------------------------------------- §2.3 bootstrap

def test_bootstrap_has_exactly_the_listed_shape(server, apply, session):
    apply(hub(route("desk", agent_client={"enabled": True, "instructions": "Be brief.", "max_tool_calls": 4,
                                          "active_tool_limit": 6,
                                          "knowledge": {"enabled": True, "top_k": 3}})))
    token, _ = session(["desk"])
    body = assert_ok(call(server, token, "GET", "/workspaces/desk/bootstrap"))
    assert set(body) == {"schema_version", "workspace", "profile", "capabilities"}
    assert body["schema_version"] == "bailing.agent-runtime-profile.v1"
    assert body["workspace"] == {"route": "desk", "name": "Route desk", "description": "About desk"}
    profile = body["profile"]
    assert set(profile) == {"revision", "instructions", "knowledge", "memory", "governance"}
    assert profile["instructions"] == "[Route system rules]\nYou serve desk.\n\n[Local agent rules]\nBe brief."
    assert profile["knowledge"] == {"enabled": True, "sources": 0, "mode": "chunk", "top_k": 3,
                                    "max_docs": 4, "page_boost": False}
    assert set(profile["memory"]) == {"recent_messages", "recent_budget_chars", "per_message_chars",
                                      "summary_enabled", "summary_max_chars"}
    assert profile["governance"] == {
        "planner": "local_agent", "execution": "bailinghub_governed", "authorization": "server_revalidated",
        "knowledge_trust": "reference_only", "tool_results_trust": "untrusted_data",
        "hidden_reasoning_sync": False, "max_tool_calls": 4, "permission": "full"}
    # The revision is the SHA-256 of the canonical {schema, workspace, profile body}.
    shown = {k: v for k, v in profile.items() if k != "revision"}
    assert profile["revision"] == sha256_canonical(
        {"schema": "bailing.agent-runtime-profile.v1", "workspace": body["workspace"], "profile": shown})
    caps = body["capabilities"]
    assert set(caps) == {"revision", "authorized_total", "active_limit", "readonly", "writes",
                         "approval_required"}
    tools = assert_ok(call(server, token, "GET", "/tools", params={"route": "desk"}))["tools"]
    assert caps["active_limit"] == 6 and caps["authorized_total"] == len(tools)
    assert caps["readonly"] == sum(t["readonly"] for t in tools)
    assert caps["writes"] == sum(not t["readonly"] for t in tools) == 1
    assert caps["approval_required"] == sum(t["approval_required"] for t in tools)


def test_bootstrap_of_a_workspace_without_knowledge_shows_only_that(server, desk):
    body = assert_ok(call(server, desk[0], "GET", "/workspaces/desk/bootstrap"))
    assert body["profile"]["knowledge"] == {"enabled": False, "sources": 0}
    assert body["capabilities"]["active_limit"] == 8  # the default


# ----------------------------------------------------------------------------- §2.4 turns

def test_a_turn_has_exactly_the_listed_shape(server, desk):
    token, _ = desk
    body = assert_ok(call(server, token, "POST", "/workspaces/desk/turns",
                          turn_body(page_context={"title": "Customers", "custom": [1, {"x": None}]},
                             renderers=["markdown"])))
    assert {"schema_version", "run_id", "profile_revision", "capability_revision", "context",
            "active_tools"} <= set(body)
    assert "task_binding" not in body and "discovery" not in body
    assert body["schema_version"] == "bailing.agent-turn-context.v1"
    assert UUID_V4.match(body["run_id"])
    boot = assert_ok(call(server, token, "GET", "/workspaces/desk/bootstrap"))
    assert body["profile_revision"] == boot["profile"]["revision"]
    assert body["capability_revision"] == boot["capabilities"]["revision"]
    context = body["context"]
    assert set(context) == {"instructions", "page_context", "renderers", "memory", "memory_refs",
                            "knowledge", "knowledge_refs", "governance"}
    assert context["instructions"] == boot["profile"]["instructions"]
    assert context["governance"] == boot["profile"]["governance"]
    assert context["page_context"] == {"title": "Customers", "custom": [1, {"x": None}]}
    assert context["renderers"] == ["markdown"]
    assert context["memory"] == {"summary": None, "recent": [], "omitted_messages": 0,
                                 "limits": {"recent_messages": 12, "recent_budget_chars": 8000,
                                            "per_message_chars": 2000}}
    [ref] = context["memory_refs"]
    assert set(ref) == {"thread_id", "summary_upto_id", "prior_messages"}
    assert isinstance(ref["thread_id"], int) and ref["summary_upto_id"] == 0 and ref["prior_messages"] == 0
    assert context["knowledge"] == [] and context["knowledge_refs"] == []
    tools = body["active_tools"]
    assert isinstance(tools, list) and 0 < len(tools) <= 8
    for tool in tools:
        assert_tool(tool)


def test_memory_recent_entries_carry_role_content_and_created_at(server, desk):
    token, _ = desk
    first = assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body(1, user_input="Who is Ada?")))
    assert_ok(call(server, token, "POST", f"/runs/{first['run_id']}/complete",
                   {"assistant_message_id": "a-1", "status": "completed", "content": "Customer 7."}))
    second = assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body(2, user_input="And Bo?")))
    memory = second["context"]["memory"]
    assert [(e["role"], e["content"]) for e in memory["recent"]] == [("user", "Who is Ada?"),
                                                                      ("assistant", "Customer 7.")]
    assert all(ISO_MS.match(e["created_at"]) for e in memory["recent"])
    assert second["context"]["memory_refs"][0]["prior_messages"] == 2
    assert second["context"]["memory_refs"][0]["thread_id"] == first["context"]["memory_refs"][0]["thread_id"]


@pytest.mark.parametrize("limit", [1, 5, 12])
def test_active_tools_are_at_most_the_active_tool_limit(server, apply, session, limit):
    apply(hub(route("wide", tools=copy.deepcopy(WIDE), agent_client={"enabled": True, "active_tool_limit": limit})))
    token, _ = session(["wide"])
    body = assert_ok(call(server, token, "POST", "/workspaces/wide/turns", turn_body(user_input="inventory levels")))
    assert len(body["active_tools"]) == limit
    assert len({t["name"] for t in body["active_tools"]}) == limit


def test_active_tools_are_ranked_against_the_page_hints_and_the_user_input(server, apply, session):
    apply(hub(route("wide", tools=copy.deepcopy(WIDE), agent_client={"enabled": True, "active_tool_limit": 4})))
    token, _ = session(["wide"])
    plain = assert_ok(call(server, token, "POST", "/workspaces/wide/turns", turn_body(1, user_input="hello")))
    hinted = assert_ok(call(server, token, "POST", "/workspaces/wide/turns",
                            turn_body(2, user_input="hello", page_context={"page_name": "inventory"})))
    assert {t["name"] for t in hinted["active_tools"]} == {
        "inventory_adjust", "inventory_get", "inventory_reserve", "inventory_search"}
    assert hinted["active_tools"] != plain["active_tools"]


def test_an_active_tool_limit_over_twelve_is_refused_by_config_apply(cli, tmp_path):
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(hub(route("desk", agent_client={"enabled": True, "active_tool_limit": 13}))))
    code, _, err = cli("config", "apply", str(path))
    assert code != 0 and "active_tool_limit" in json.dumps(err)


def _page(size: int) -> dict:
    page = {"title": ""}
    page["title"] = "x" * (size - len(json.dumps(page, separators=(",", ":"))))
    return page


def test_page_context_over_16_kib_is_413_page_context_too_large(server, desk, counts):
    token, _ = desk
    before = counts()
    assert_error(call(server, token, "POST", "/workspaces/desk/turns", turn_body(page_context=_page(16385))),
                 413, "page_context_too_large")
    assert counts() == before
    assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body(page_context=_page(16384))))


BAD_TURNS = {
    "missing-user-input": {k: v for k, v in turn_body().items() if k != "user_input"},
    "blank-user-input": turn_body(user_input=" \t\n"),
    "control-user-input": turn_body(user_input="a\x1bb"),
    "long-user-input": turn_body(user_input="😀" * 32001),
    "id-129": turn_body(client_turn_id="t" * 129),
    "id-pattern": turn_body(user_message_id="m/1"),
    "page-context-list": turn_body(page_context=["x"]),
    "renderers-21": turn_body(renderers=[f"r{i}" for i in range(21)]),
    "renderers-duplicate": turn_body(renderers=["a", "a"]),
    "renderer-pattern": turn_body(renderers=["a b"]),
    "unknown-field": turn_body(discovery={}),
    "knowledge-delivery-inline": turn_body(knowledge_delivery="inline"),
}


@pytest.mark.parametrize("case", list(BAD_TURNS))
def test_a_bad_turn_is_400_invalid_request(server, desk, counts, case):
    before = counts()
    assert_error(call(server, desk[0], "POST", "/workspaces/desk/turns", BAD_TURNS[case]), 400, "invalid_request")
    assert counts() == before


BINDING = {"schema_version": "bailing.agent-task-binding.v1",
           "task_id": "9732FEB7-11A4-4A72-A6FB-8F39EBF61199", "scope_hash": "b" * 64}


@pytest.mark.parametrize("binding, status, code", [
    ({**BINDING, "extra": 1}, 400, "TASK_INVALID_INPUT"),
    ({k: v for k, v in BINDING.items() if k != "scope_hash"}, 400, "TASK_INVALID_INPUT"),
    ({**BINDING, "task_id": "task-1"}, 400, "TASK_INVALID_INPUT"),
    ({**BINDING, "scope_hash": "B" * 64}, 400, "TASK_INVALID_INPUT"),
    ([BINDING], 400, "TASK_INVALID_INPUT"),
    ({**BINDING, "schema_version": "bailing.agent-task-binding.v2"}, 501, "TASK_UNSUPPORTED"),
], ids=["extra-key", "missing-key", "task-id", "scope-hash-case", "not-object", "other-schema"])
def test_a_bad_task_binding_is_refused_with_its_task_code(server, desk, counts, binding, status, code):
    before = counts()
    assert_error(call(server, desk[0], "POST", "/workspaces/desk/turns", turn_body(task_binding=binding)),
                 status, code)
    assert counts() == before


def test_a_well_formed_binding_of_a_task_the_session_is_not_in_is_409_member_mismatch(server, desk, counts):
    # The echo of an admitted binding is tests/test_task_control.py's: here no such task exists.
    before = counts()
    assert_error(call(server, desk[0], "POST", "/workspaces/desk/turns", turn_body(task_binding=BINDING)),
                 409, "TASK_MEMBER_MISMATCH")
    assert counts() == before


def test_a_task_enrolled_session_without_a_binding_is_409_task_required(server, apply, session, counts):
    apply(hub(route("desk")))
    token, _ = session(["desk"], enrolled=True)
    before = counts()
    assert_error(call(server, token, "POST", "/workspaces/desk/turns", turn_body()), 409, "TASK_REQUIRED")
    assert counts() == before


def test_turn_idempotency_and_turn_conflict(server, desk, counts):
    token, _ = desk
    first = assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body()))
    # Surrounding blanks of identifiers are trimmed: the same turn.
    again = assert_ok(call(server, token, "POST", "/workspaces/desk/turns",
                           turn_body(client_turn_id=" turn-1 ", user_message_id="msg-1\n")))
    assert again == first
    before = counts()
    assert_error(call(server, token, "POST", "/workspaces/desk/turns", turn_body(user_input="Other")),
                 409, "turn_conflict")
    assert_error(call(server, token, "POST", "/workspaces/desk/turns", turn_body(2, user_message_id="msg-1")),
                 409, "turn_conflict")
    assert counts() == before


def test_a_turn_body_over_512_kib_is_413_arguments_too_large(server, desk, counts):
    raw = json.dumps(turn_body()).encode()
    data = b" " * (512 * 1024 + 1 - len(raw)) + raw
    before = counts()
    body = assert_error(call(server, desk[0], "POST", "/workspaces/desk/turns", data=data), 413, "arguments_too_large")
    assert body["max_bytes"] == 512 * 1024
    assert counts() == before


@pytest.fixture
def knowledge_desk(apply, session, cli):
    apply(hub(route("kb", agent_client={"enabled": True, "knowledge": {"enabled": True, "top_k": 4}})))
    code, _, err = cli("knowledge", "add", "kb", *(str(KNOWLEDGE / n) for n in ("refunds.md", "warranty.md")))
    assert code == 0, err
    return session(["kb"])


def test_turn_knowledge_is_an_array_of_ref_title_content_with_refs(server, knowledge_desk):
    body = assert_ok(call(server, knowledge_desk[0], "POST", "/workspaces/kb/turns", turn_body(user_input="refund")))
    context = body["context"]
    assert "knowledge_delivery" not in context
    items, refs = context["knowledge"], context["knowledge_refs"]
    assert isinstance(items, list) and 0 < len(items) <= 4
    for n, (item, ref) in enumerate(zip(items, refs, strict=True), start=1):
        assert item["ref"] == ref["ref"] == f"knowledge:{n}"
        assert isinstance(item["title"], str) and len(item["title"]) <= 300
        assert isinstance(item["content"], str) and 0 < len(item["content"]) <= 3000
        assert set(ref) == {"ref", "doc_id", "title", "score"}
        assert isinstance(ref["doc_id"], int) and ref["title"] == item["title"]
        assert isinstance(ref["score"], (int, float)) and ref["score"] >= 0
    assert [r["score"] for r in refs] == sorted((r["score"] for r in refs), reverse=True)


def test_on_demand_knowledge_keeps_the_array_with_bounded_hints(server, knowledge_desk):
    token, _ = knowledge_desk
    inline = assert_ok(call(server, token, "POST", "/workspaces/kb/turns",
                            turn_body(1, user_input="refund")))["context"]
    hinted = assert_ok(call(server, token, "POST", "/workspaces/kb/turns",
                            turn_body(2, user_input="refund", knowledge_delivery="on_demand")))["context"]
    assert hinted["knowledge_delivery"] == "on_demand"
    assert [i["ref"] for i in hinted["knowledge"]] == [i["ref"] for i in inline["knowledge"]]
    assert hinted["knowledge_refs"] == inline["knowledge_refs"]
    for hint, full in zip(hinted["knowledge"], inline["knowledge"], strict=True):
        assert hint["content"] == full["content"][:240]
        assert hint["content_chars"] >= len(hint["content"])
        assert hint["hint_truncated"] is (hint["content_chars"] > 240)
    assert any(h["hint_truncated"] for h in hinted["knowledge"])


# ----------------------------------------------------------------------------- §2.5 search

@pytest.fixture
def wide(apply, session):
    apply(hub(route("wide", tools=copy.deepcopy(WIDE)), route("desk")))
    return session(["wide", "desk"])


def search(server, token, body, route_key="wide", **kwargs):
    return call(server, token, "POST", f"/workspaces/{route_key}/capabilities/search", body, **kwargs)


def test_search_has_exactly_the_listed_shape(server, wide):
    token, _ = wide
    body = assert_ok(search(server, token, {"query": "  inventory\n levels ", "limit": 5}))
    assert set(body) == {"schema_version", "schema", "route", "capability_revision", "query", "tools",
                         "discovery"}
    assert body["schema_version"] == "bailing.agent-capability-search.v1" == body["schema"]
    assert body["route"] == "wide"
    assert HEX64.match(body["capability_revision"])
    assert body["query"] == "inventory\n levels"
    assert len(body["tools"]) == 5
    for tool in body["tools"]:
        assert_tool(tool)
    authorized = assert_ok(call(server, token, "GET", "/workspaces/wide/bootstrap"))["capabilities"]["authorized_total"]
    assert body["discovery"] == {
        "mode": "ranked_candidates", "scope": "current_authorization", "returned_count": 5,
        "authorized_total": authorized, "matched_total": None, "matched_total_exact": False, "limit": 5,
        "truncated": True, "has_more": True, "truncation_scope": "authorized_catalog",
        "pagination": "unsupported"}


def test_search_default_limit_is_the_active_tool_limit(server, wide):
    body = assert_ok(search(server, wide[0], {"query": "order"}))
    assert body["discovery"]["limit"] == 8 and len(body["tools"]) == 8


def test_search_query_of_2000_characters_is_accepted(server, wide):
    assert assert_ok(search(server, wide[0], {"query": "a" * 2000, "limit": 1}))["query"] == "a" * 2000


@pytest.mark.parametrize("body", [
    {"query": "a" * 2001}, {"query": "a\x00b"}, {"query": "a\x1fb"}, {"query": " "}, {},
    {"query": "x", "limit": 0}, {"query": "x", "limit": 13}, {"query": "x", "limit": 1.5},
    {"run_id": "not-a-uuid"}, {"query": "x", "cursor": "1"},
], ids=["query-2001", "query-nul", "query-control", "blank-no-run", "empty", "limit-0", "limit-13",
        "limit-fraction", "run-id-format", "unknown-field"])
def test_search_refusals_are_400(server, wide, body):
    assert_error(search(server, wide[0], body), 400, "invalid_request")


def test_search_by_run_id_uses_the_runs_user_input(server, wide):
    token, _ = wide
    run_id = assert_ok(call(server, token, "POST", "/workspaces/wide/turns",
                            turn_body(user_input="reserve inventory")))["run_id"]
    body = assert_ok(search(server, token, {"run_id": run_id.upper(), "limit": 12}))
    assert body["query"] == "reserve inventory" and body["run_id"] == run_id
    assert body["tools"] == assert_ok(search(server, token, {"query": "reserve inventory", "limit": 12}))["tools"]


def test_search_with_a_run_of_another_session_or_route_is_404_run_not_found(server, wide, session):
    token, _ = wide
    other, _ = session(["wide"])
    foreign = assert_ok(call(server, other, "POST", "/workspaces/wide/turns", turn_body()))["run_id"]
    elsewhere = assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body()))["run_id"]
    for run_id in (foreign, elsewhere, str(uuid.uuid4())):
        assert_error(search(server, token, {"run_id": run_id}), 404, "run_not_found")


def test_search_by_a_task_enrolled_session_needs_a_bound_run(server, apply, session):
    apply(hub(route("wide", tools=copy.deepcopy(WIDE))))
    token, _ = session(["wide"], enrolled=True)
    assert_error(search(server, token, {"query": "order"}), 409, "TASK_REQUIRED")
    assert_error(search(server, token, {"run_id": str(uuid.uuid4())}), 409, "TASK_REQUIRED")
    # Search with a run bound to a real task: tests/test_task_control.py.


def test_search_over_8_kib_is_413_arguments_too_large(server, wide):
    data = b" " * (8 * 1024 - 10) + json.dumps({"query": "order"}).encode()
    assert_error(search(server, wide[0], None, data=data), 413, "arguments_too_large")


# ----------------------------------------------------------------------------- §2.9 completion

def completion(**changes) -> dict:
    return {"assistant_message_id": "asst-1", "status": "completed", "content": "Done.",
            "model": "m", "runtime": "r",
            "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 5, "total_tokens": 15,
                      "tool_calls": 1, "cost_usd": 0.002}, **changes}


@pytest.fixture
def run(server, desk):
    token, _ = desk
    return token, assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body()))["run_id"]


def complete(server, token, run_id, body):
    return call(server, token, "POST", f"/runs/{run_id}/complete", body)


def test_a_completion_has_exactly_the_listed_shape(server, run):
    token, run_id = run
    first = assert_ok(complete(server, token, run_id, completion()))
    assert set(first) == {"schema_version", "schema", "run_id", "assistant_message_id", "status",
                          "idempotent_replay", "completed_at"}
    assert first["schema_version"] == first["schema"] == "bailing.agent-run-completion.v1"
    assert first["run_id"] == run_id and first["assistant_message_id"] == "asst-1"
    assert first["status"] == "completed" and first["idempotent_replay"] is False
    assert ISO_MS.match(first["completed_at"])
    replay = assert_ok(complete(server, token, run_id, completion()))
    assert replay == {**first, "idempotent_replay": True}


@pytest.mark.parametrize("field, value, accepted", [
    ("model", "😀" * 95 + "m", True), ("model", "😀" * 96, False), ("runtime", "r" * 191, True),
    ("runtime", "r" * 192, False), ("content", "😀" * 32000, True), ("content", "😀" * 32000 + "x", False),
    ("content", "   ", False), ("content", "a\x0bb", False),
], ids=["model-191-units", "model-192-units", "runtime-191", "runtime-192", "content-64000-units",
        "content-64001-units", "content-blank", "content-control"])
def test_completion_text_is_counted_in_utf16_units(server, run, counts, field, value, accepted):
    token, run_id = run
    before = counts()
    response = complete(server, token, run_id, completion(**{field: value}))
    if accepted:
        assert_ok(response)
    else:
        assert_error(response, 400, "invalid_request")
        assert counts() == before


@pytest.mark.parametrize("usage, accepted", [
    ({"cost_usd": 0.5, "output_tokens": 2.5}, True),
    ({"input_tokens": 0}, True),
    ({"reasoning_tokens": 1}, False),
    ({"input_tokens": -1}, False),
    ({"input_tokens": "1"}, False),
    ({"input_tokens": True}, False),
], ids=["fractions", "zero", "unknown-key", "negative", "string", "bool"])
def test_completion_usage_has_six_keys_of_finite_numbers(server, run, counts, usage, accepted):
    token, run_id = run
    before = counts()
    response = complete(server, token, run_id, completion(usage=usage))
    if accepted:
        assert_ok(response)
    else:
        assert_error(response, 400, "invalid_request")
        assert counts() == before


def test_a_changed_replay_is_409_run_completion_conflict(server, run, counts):
    token, run_id = run
    assert_ok(complete(server, token, run_id, completion()))
    before = counts()
    assert_error(complete(server, token, run_id, completion(content="Other.")), 409, "run_completion_conflict")
    assert counts() == before


def test_an_assistant_message_id_of_another_run_is_409_assistant_message_conflict(server, run, counts):
    token, run_id = run
    assert_ok(complete(server, token, run_id, completion()))
    second = assert_ok(call(server, token, "POST", "/workspaces/desk/turns", turn_body(2)))["run_id"]
    before = counts()
    assert_error(complete(server, token, second, completion()), 409, "assistant_message_conflict")
    assert counts() == before


def test_an_unknown_or_foreign_run_is_409_and_a_bad_uuid_400(server, run, session, counts):
    token, run_id = run
    other, _ = session(["desk"])
    before = counts()
    assert_error(complete(server, other, run_id, completion()), 409, "run_completion_conflict")
    assert_error(complete(server, token, str(uuid.uuid4()), completion()), 409, "run_completion_conflict")
    assert_error(complete(server, token, "not-a-uuid", completion()), 400, "invalid_request")
    assert counts() == before


# ----------------------------------------------------------------------------- §2.15 system-info

SYSTEM_KEYS = {"schema_version", "binding", "metadata_status", "revision", "system", "tool_status",
               "availability"}


def test_system_info_describes_the_binding(server, apply, session, counts):
    apply(hub(route("desk", agent_client={"enabled": True, "system_info": SYSTEM})))
    token, session_id = session(["desk"])
    before = counts()
    # No body is read: whatever comes with the GET does not matter.
    body = assert_ok(call(server, token, "GET", "/workspaces/desk/system-info", data=b"{not json"))
    assert counts() == before
    assert set(body) == SYSTEM_KEYS
    assert body["schema_version"] == "bailing.agent-system-info.v1"
    assert body["binding"] == {"client_app_id": "desk-app", "session_id": session_id, "workspace": "desk"}
    assert body["metadata_status"] == "configured" and HEX64.match(body["revision"])
    assert body["system"] == SYSTEM
    assert body["tool_status"] == "not_loaded" and body["availability"] == "unknown"


def test_system_info_revision_moves_with_the_description(server, apply, session):
    apply(hub(route("desk", agent_client={"enabled": True, "system_info": SYSTEM})))
    token, _ = session(["desk"])
    first = assert_ok(call(server, token, "GET", "/workspaces/desk/system-info"))["revision"]
    apply(hub(route("desk", name="Renamed", agent_client={"enabled": True, "system_info": SYSTEM})))
    assert assert_ok(call(server, token, "GET", "/workspaces/desk/system-info"))["revision"] == first
    apply(hub(route("desk", agent_client={"enabled": True, "system_info": {**SYSTEM, "summary": "Other."}})))
    assert assert_ok(call(server, token, "GET", "/workspaces/desk/system-info"))["revision"] != first


def test_system_info_without_a_description_is_missing(server, desk):
    body = assert_ok(call(server, desk[0], "GET", "/workspaces/desk/system-info"))
    assert body["metadata_status"] == "missing" and body["revision"] is None and body["system"] is None
    assert "unavailable_reason" not in body


@pytest.mark.parametrize("route_key, reason", [("no-runtime", "agent_client_disabled"),
                                               ("no-direct", "agent_direct_disabled")])
def test_system_info_says_why_a_surface_is_unavailable(server, gate, route_key, reason):
    body = assert_ok(call(server, gate[0], "GET", f"/workspaces/{route_key}/system-info"))
    assert body["availability"] == "unavailable" and body["unavailable_reason"] == reason


@pytest.mark.parametrize("route_key, status, code", [
    ("auto", 400, "invalid_route"), ("unlisted", 403, "route_not_allowed"), ("off", 404, "route_unavailable"),
    ("foreign", 403, "audience_not_allowed"), ("Open", 404, "not_found"),
], ids=["auto", "unlisted", "off", "foreign", "not-a-key"])
def test_system_info_gate(server, gate, route_key, status, code):
    assert_error(call(server, gate[0], "GET", f"/workspaces/{route_key}/system-info"), status, code)


@pytest.mark.parametrize("system_info", [
    {"name": "x"}, {"name": " ", "summary": "s"}, {"name": "a\tb", "summary": "s"},
    {"name": "x" * 121, "summary": "s"}, {"name": "n", "summary": "s" * 401},
    {"name": "n", "summary": "s", "domains": ["d"] * 7}, {"name": "n", "summary": "s", "boundaries": ["b" * 161]},
    {"name": "n", "summary": "s", "extra": 1},
], ids=["no-summary", "blank-name", "tab", "name-121", "summary-401", "domains-7", "boundary-161", "extra"])
def test_config_apply_refuses_a_bad_system_info(cli, tmp_path, system_info):
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(hub(route("desk", agent_client={"enabled": True, "system_info": system_info}))))
    code, _, err = cli("config", "apply", str(path))
    assert code != 0 and "system_info" in json.dumps(err)


# ----------------------------------------------------------------------------- every reply

def test_every_runtime_reply_is_no_store(server, desk):
    token, _ = desk
    for method, path, body in [("GET", "/workspaces", None), ("GET", "/workspaces/desk/system-info", None),
                               ("POST", "/workspaces/desk/turns", {"bad": 1}),
                               ("POST", "/runs/not-a-uuid/complete", {}),
                               ("GET", "/workspaces/auto/bootstrap", None)]:
        response = call(server, token, method, path, body)
        assert response.headers["Cache-Control"] == "no-store", (path, response.status_code)
