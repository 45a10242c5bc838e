"""Issue 4, items 1, 4 and 5: workspaces and bootstrap (bailing.agent-runtime-profile.v1),
per-route knowledge (CLI, inline and on-demand delivery, the knowledge endpoints) and capability
search (bailing.agent-capability-search.v1 with its `discovery` block).

Every request goes over real HTTP to a live server backed by a real PostgreSQL; configurations
are written to tmp_path and applied with `bailing-admin config apply`.
"""
from __future__ import annotations

import copy
import json
import re
import uuid
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import assert_error, assert_ok, bearer

KNOWLEDGE = Path(__file__).parent / "data" / "knowledge"
API = "/agent-api/v1"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
SUBJECT = "tenant-7:user-42"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
KNOWLEDGE_DOCS = ("refunds.md", "warranty.md", "exchanges.md")  # 3 chunks each, all say "refund"

CRM_READ = {"sources": [{"provider": "demo-crm", "allow": ["customer.read"]}],
            "agent_direct": {"enabled": True}}
ALL_SCOPES = {
    "sources": [{"provider": "demo-crm", "allow": ["*"]}, {"provider": "demo-erp", "allow": ["*"]}],
    "agent_direct": {"enabled": True, "write_tools": [
        "customer_note_add", "customer_update_credit_limit", "order_create", "inventory_adjust",
        "inventory_reserve"]},
}
GOVERNANCE = {"planner": "local_agent", "execution": "bailinghub_governed",
              "authorization": "server_revalidated", "knowledge_trust": "reference_only",
              "tool_results_trust": "untrusted_data", "hidden_reasoning_sync": False}


# ----------------------------------------------------------------------------- helpers

def provider(name: str, spec: str, base_url: str, secret_env: str) -> dict:
    return {"name": name, "base_url": base_url, "openapi": str(EXAMPLES / spec),
            "secret_env": secret_env, "timeout_ms": 10000}


def route(key: str, **fields) -> dict:
    """A route that is in every workspace unless a field says otherwise."""
    return {"route_key": key, "name": f"Route {key}", "description": f"About {key}", "enabled": True,
            "audience": {"enabled": False},
            "target_config": {"system_prompt": f"You serve {key}."},
            "agent_client": {"enabled": True, "instructions": "Be brief."},
            "tools": copy.deepcopy(CRM_READ), "permission": "full", **fields}


def knowledge_route(key: str, **knowledge) -> dict:
    return route(key, agent_client={"enabled": True, "knowledge": {"enabled": True, **knowledge}})


def hub(*routes: dict, client_routes: list[str] | None = None) -> dict:
    keys = [r["route_key"] for r in routes]
    return {
        "tool_providers": [
            provider("demo-crm", "crm.openapi.json", "http://127.0.0.1:8100", "DEMO_CRM_SECRET"),
            provider("demo-erp", "erp.openapi.json", "http://127.0.0.1:8200", "DEMO_ERP_SECRET"),
        ],
        "routes": list(routes),
        "client_apps": [{"app_id": "desk-app", "name": "Desk", "enabled": True,
                         "allowed_routes": keys if client_routes is None else client_routes}],
    }


def call(server, token: str, method: str, path: str, body: dict | None = None):
    return server.request(method, API + path, headers=bearer(token),
                          **({} if body is None else {"json": body}))


def turn(server, token: str, route_key: str, text: str, **extra) -> dict:
    return assert_ok(call(server, token, "POST", f"/workspaces/{route_key}/turns", {
        "client_conversation_id": f"conv-{uuid.uuid4().hex[:8]}", "client_turn_id": "turn-1",
        "user_message_id": f"msg-{uuid.uuid4().hex[:8]}", "user_input": text, **extra}))


def tools_surface(server, token: str, route_key: str) -> dict:
    return assert_ok(call(server, token, "GET", f"/tools?route={route_key}"))


def search(server, token: str, route_key: str, body: dict):
    return call(server, token, "POST", f"/workspaces/{route_key}/capabilities/search", body)


def workspace_keys(server, token: str) -> list[str]:
    return [w["route"] for w in assert_ok(call(server, token, "GET", "/workspaces"))["workspaces"]]


@pytest.fixture
def session(cli):
    """Issue an Agent Session of desk-app; returns its access token."""

    def issue(routes: list[str], principal: dict | None = PRINCIPAL, on_behalf_of: str | None = SUBJECT,
              task_enrolled: bool = False) -> str:
        args = ["sessions", "issue", "--client", "desk-app", "--routes", ",".join(routes)]
        if principal is not None:
            args += ["--principal", json.dumps(principal)]
        if on_behalf_of is not None:
            args += ["--on-behalf-of", on_behalf_of]
        if task_enrolled:
            args.append("--task-enrolled")
        code, out, err = cli(*args)
        assert code == 0, err
        return out["access_token"]

    return issue


@pytest.fixture
def add_knowledge(cli):
    def add(route_key: str, *files: Path):
        return cli("knowledge", "add", route_key, *(str(f) for f in files))

    return add


def bootstrap(server, token: str, route_key: str) -> dict:
    return assert_ok(call(server, token, "GET", f"/workspaces/{route_key}/bootstrap"))


# ----------------------------------------------------------------------------- workspaces

# Each route but "open" fails exactly one condition of the workspace intersection.
WORKSPACE_ROUTES = [
    route("open"),
    route("switched-off", enabled=False),
    route("no-runtime", agent_client={"enabled": False}),
    route("other-tenant", audience={"enabled": True, "tenants": ["other"]}),
    route("not-in-session"),
    route("dropped-by-client"),
]
EXCLUDED = ["switched-off", "no-runtime", "other-tenant", "not-in-session", "dropped-by-client"]


@pytest.fixture
def intersection(apply, session):
    """A session over every route but not-in-session; then the client loses dropped-by-client."""
    apply(hub(*WORKSPACE_ROUTES))
    token = session([k["route_key"] for k in WORKSPACE_ROUTES if k["route_key"] != "not-in-session"])
    apply(hub(*WORKSPACE_ROUTES, client_routes=[r["route_key"] for r in WORKSPACE_ROUTES
                                                 if r["route_key"] != "dropped-by-client"]))
    return token


def test_workspaces_are_the_intersection(server, intersection):
    body = assert_ok(call(server, intersection, "GET", "/workspaces"))
    assert body["schema_version"] == "bailing.agent-workspaces.v1"
    assert [(w["route"], w["name"], w["description"]) for w in body["workspaces"]] == [
        ("open", "Route open", "About open")]


# The gate's answer for each excluded route, in its order of checks.
EXCLUDED_CODES = {
    "switched-off": (404, "route_unavailable"),
    "no-runtime": (403, "agent_client_disabled"),
    "other-tenant": (403, "audience_not_allowed"),
    "not-in-session": (403, "route_not_allowed"),
    "dropped-by-client": (403, "route_not_allowed"),
}


@pytest.mark.parametrize("route_key", EXCLUDED)
def test_a_route_outside_the_workspace_cannot_bootstrap(server, intersection, route_key):
    assert bootstrap(server, intersection, "open")["workspace"]["route"] == "open"
    body = assert_error(call(server, intersection, "GET", f"/workspaces/{route_key}/bootstrap"),
                        *EXCLUDED_CODES[route_key])
    if body["error"] == "route_not_allowed":
        # Not allowed is answered before existence is looked at: nothing tells them apart.
        missing = assert_error(call(server, intersection, "GET", "/workspaces/never-defined/bootstrap"),
                               403, "route_not_allowed")
        assert body == missing


AUDIENCE_ROUTES = [
    route("public"),
    route("anonymous-ok", audience={"enabled": True, "anonymous": True}),
    route("tenant-gate", audience={"enabled": True, "tenants": ["tenant-7"]}),
    route("any-tenant", audience={"enabled": True, "tenants": ["*"]}),
]


@pytest.mark.parametrize("principal, expected", [
    (None, ["anonymous-ok", "public"]),
    (PRINCIPAL, ["anonymous-ok", "any-tenant", "public", "tenant-gate"]),
    ({"id": "user-9"}, ["anonymous-ok", "public"]),  # no tenant: '*' needs a present value
], ids=["anonymous", "tenant-7", "no-tenant"])
def test_workspaces_follow_the_audience(server, apply, session, principal, expected):
    apply(hub(*AUDIENCE_ROUTES))
    token = session([r["route_key"] for r in AUDIENCE_ROUTES], principal=principal, on_behalf_of=None)
    assert workspace_keys(server, token) == expected
    for key in {r["route_key"] for r in AUDIENCE_ROUTES} - set(expected):
        assert_error(call(server, token, "GET", f"/workspaces/{key}/bootstrap"), 403, "audience_not_allowed")


# ----------------------------------------------------------------------------- bootstrap

def test_bootstrap_has_exactly_the_profile_shape(server, apply, session):
    desk = route("desk", target_config={"system_prompt": "You help the order desk."},
                 agent_client={"enabled": True, "instructions": "Answer in English.",
                               "max_tool_calls": 7,
                               "memory": {"recent_messages": 4, "summary_enabled": True},
                               "knowledge": {"enabled": True, "top_k": 3, "max_docs": 2}},
                 tools=copy.deepcopy(ALL_SCOPES))
    apply(hub(desk))
    token = session(["desk"])
    body = bootstrap(server, token, "desk")
    assert set(body) == {"schema_version", "workspace", "profile", "capabilities"}
    assert body["schema_version"] == "bailing.agent-runtime-profile.v1"
    assert body["workspace"] == {"route": "desk", "name": "Route desk", "description": "About desk"}
    profile = body["profile"]
    assert set(profile) == {"revision", "instructions", "memory", "knowledge", "governance"}
    assert SHA256.match(profile["revision"])
    assert profile["instructions"] == ("[Route system rules]\nYou help the order desk.\n\n"
                                       "[Local agent rules]\nAnswer in English.")
    assert profile["memory"] == {"recent_messages": 4, "recent_budget_chars": 8000,
                                 "per_message_chars": 2000, "summary_enabled": True,
                                 "summary_max_chars": 1200}
    assert profile["knowledge"] == {"enabled": True, "sources": 0, "mode": "chunk", "top_k": 3,
                                    "max_docs": 2, "page_boost": False}
    assert profile["governance"] == {**GOVERNANCE, "max_tool_calls": 7, "permission": "full"}

    surface = tools_surface(server, token, "desk")
    tools = surface["tools"]
    caps = body["capabilities"]
    assert set(caps) == {"revision", "authorized_total", "active_limit", "readonly", "writes",
                         "approval_required"}
    assert caps["revision"] == surface["capability_revision"]
    assert caps["active_limit"] == 8
    assert caps["authorized_total"] == len(tools) > 12
    assert caps["readonly"] == sum(t["readonly"] for t in tools)
    assert caps["writes"] == sum(not t["readonly"] for t in tools) == 5
    assert caps["approval_required"] == sum(t["approval_required"] for t in tools) > 0


@pytest.mark.parametrize("target_config, agent_client, expected", [
    ({"system_prompt": "Prompt only."}, {"enabled": True}, "[Route system rules]\nPrompt only."),
    ({}, {"enabled": True, "instructions": "Instructions only."}, "[Local agent rules]\nInstructions only."),
    ({"system_prompt": "  Both.  "}, {"enabled": True, "instructions": "Second."},
     "[Route system rules]\nBoth.\n\n[Local agent rules]\nSecond."),
    ({"system_prompt": "Bell\x07here."}, {"enabled": True}, "[Route system rules]\nBell here."),
    ({"model": "m"}, {"enabled": True}, ""),
], ids=["prompt", "instructions", "both", "control-character", "neither"])
def test_bootstrap_instructions_are_prompt_then_client_instructions(server, apply, session,
                                                                    target_config, agent_client,
                                                                    expected):
    apply(hub(route("desk", target_config=target_config, agent_client=agent_client)))
    assert bootstrap(server, session(["desk"]), "desk")["profile"]["instructions"] == expected


LEAKY_TARGET = {
    "system_prompt": "You help the warehouse team.",
    "api_key": "sk-zq-route-api-key-0001",
    "model": "zq-model-large-7",
    "temperature": 0.734519,
    "base_url": "https://zq-llm-gateway.example/v1",
    "credentials": {"username": "zq-cred-user", "password": "zq-cred-password-9"},
    "headers": {"X-Api-Key": "zq-header-key"},
}
LEAKS = ("sk-zq-route-api-key-0001", "zq-model-large-7", "0.734519", "zq-llm-gateway",
         "zq-cred-user", "zq-cred-password-9", "zq-header-key", "zq-provider-host.example",
         "zq-provider-path", "ZQ_PROVIDER_SECRET_ENV", "zq-env-secret-value", "api_key", "temperature",
         "credentials")


def test_bootstrap_never_shows_credentials_model_settings_or_provider_urls(server, apply, session,
                                                                           monkeypatch):
    monkeypatch.setenv("ZQ_PROVIDER_SECRET_ENV", "zq-env-secret-value")
    doc = hub(route("vault", target_config=LEAKY_TARGET,
                    agent_client={"enabled": True, "instructions": "Mind the stock."},
                    tools={"sources": [{"provider": "vault-crm", "allow": ["*"]}],
                           "agent_direct": {"enabled": True, "write_tools": ["customer_note_add"]}}))
    doc["tool_providers"].append(provider("vault-crm", "crm.openapi.json",
                                          "https://zq-provider-host.example:9443/zq-provider-path",
                                          "ZQ_PROVIDER_SECRET_ENV"))
    apply(doc)
    token = session(["vault"])
    response = call(server, token, "GET", "/workspaces/vault/bootstrap")
    body = assert_ok(response)
    assert body["profile"]["instructions"] == ("[Route system rules]\nYou help the warehouse team.\n\n"
                                               "[Local agent rules]\nMind the stock.")
    assert body["capabilities"]["authorized_total"] > 0
    responses = {
        "bootstrap": response.text,
        "workspaces": call(server, token, "GET", "/workspaces").text,
        "turn": json.dumps(turn(server, token, "vault", "add a note")),
        "search": search(server, token, "vault", {"query": "customer"}).text,
    }
    for name, text in responses.items():
        lowered = text.lower()
        assert "zq" not in lowered, f"{name} leaks a route or provider secret: {text[:2000]}"
        assert [s for s in LEAKS if s.lower() in lowered] == [], name


def test_a_knowledge_only_workspace_bootstraps_with_no_tools(server, apply, session):
    apply(hub(route("handbook", tools={"sources": CRM_READ["sources"], "agent_direct": {"enabled": False}},
                    agent_client={"enabled": True, "knowledge": {"enabled": True}}), route("desk")))
    token = session(["handbook", "desk"])
    assert workspace_keys(server, token) == ["desk", "handbook"]
    caps = bootstrap(server, token, "handbook")["capabilities"]
    assert {k: v for k, v in caps.items() if k != "revision"} == {
        "authorized_total": 0, "active_limit": 8, "readonly": 0, "writes": 0, "approval_required": 0}
    assert caps["revision"] != bootstrap(server, token, "desk")["capabilities"]["revision"]
    context = turn(server, token, "handbook", "Where is the refund policy?")
    assert context["active_tools"] == []
    assert context["capability_revision"] == caps["revision"]
    # The business tool surface needs tools.agent_direct, which this route does not have.
    assert_error(call(server, token, "GET", "/tools?route=handbook"), 403, "agent_direct_disabled")


def test_agent_client_disabled_closes_only_the_runtime(server, apply, session):
    apply(hub(route("legacy", agent_client={"enabled": False}), route("desk")))
    token = session(["legacy", "desk"])
    assert workspace_keys(server, token) == ["desk"]
    for method, path, body in [
        ("GET", "/workspaces/legacy/bootstrap", None),
        ("POST", "/workspaces/legacy/capabilities/search", {"query": "customer"}),
        ("GET", "/workspaces/legacy/knowledge/capabilities", None),
        ("POST", "/workspaces/legacy/turns", {"client_conversation_id": "c", "client_turn_id": "t",
                                              "user_message_id": "m", "user_input": "hi"}),
    ]:
        assert_error(call(server, token, method, path, body), 403, "agent_client_disabled")
    surface = tools_surface(server, token, "legacy")
    assert surface["route"] == "legacy"
    assert sorted(t["name"] for t in surface["tools"]) == [
        "customer_contacts_list", "customer_get", "customer_search"]


# ----------------------------------------------------------------------------- profile.revision

REVISION_ROUTE = route(
    "desk",
    tools={"sources": [{"provider": "demo-crm", "allow": ["customer.read", "customer.write"]}],
           "agent_direct": {"enabled": True, "write_tools": ["customer_note_add"]}},
    target_config={"system_prompt": "You help the desk.", "model": "model-a", "temperature": 0.2},
    agent_client={"enabled": True, "instructions": "Be brief.", "max_tool_calls": 5,
                  "memory": {"recent_messages": 12}, "knowledge": {"enabled": True, "top_k": 5}},
)


def _route(doc):
    return doc["routes"][0]


def _memory(doc):
    return _route(doc)["agent_client"]["memory"]


PROFILE_EDITS = [
    ("system_prompt", lambda d: _route(d)["target_config"].update(system_prompt="You help others."), True),
    ("instructions", lambda d: _route(d)["agent_client"].update(instructions="Be thorough."), True),
    ("memory.recent_messages", lambda d: _memory(d).update(recent_messages=3), True),
    ("memory.summary_enabled", lambda d: _memory(d).update(summary_enabled=True), True),
    ("memory.per_message_chars", lambda d: _memory(d).update(per_message_chars=99), True),
    ("max_tool_calls", lambda d: _route(d)["agent_client"].update(max_tool_calls=9), True),
    ("permission", lambda d: _route(d).update(permission="readonly"), True),
    ("knowledge.top_k", lambda d: _route(d)["agent_client"]["knowledge"].update(top_k=7), True),
    ("knowledge.enabled", lambda d: _route(d)["agent_client"]["knowledge"].update(enabled=False), True),
    ("route name", lambda d: _route(d).update(name="Renamed desk"), True),
    ("route description", lambda d: _route(d).update(description="Another text"), True),
    ("target_config.model", lambda d: _route(d)["target_config"].update(model="model-b"), False),
    ("target_config.temperature", lambda d: _route(d)["target_config"].update(temperature=0.9), False),
    ("target_config.api_key", lambda d: _route(d)["target_config"].update(api_key="sk-new"), False),
    ("provider base_url",
     lambda d: d["tool_providers"][0].update(base_url="https://crm.example:8443"), False),
    ("write_tools", lambda d: _route(d)["tools"]["agent_direct"]["write_tools"].append(
        "customer_update_email"), False),
]


@pytest.mark.parametrize("edit, changes", [(e, c) for _, e, c in PROFILE_EDITS],
                         ids=[name for name, _, _ in PROFILE_EDITS])
def test_profile_revision_moves_exactly_with_what_the_profile_shows(server, apply, session, edit, changes):
    doc = hub(copy.deepcopy(REVISION_ROUTE))
    apply(doc)
    first, second = session(["desk"]), session(["desk"], principal={"id": "user-9"}, on_behalf_of=None)
    before = bootstrap(server, first, "desk")
    assert bootstrap(server, first, "desk")["profile"]["revision"] == before["profile"]["revision"]
    assert bootstrap(server, second, "desk")["profile"]["revision"] == before["profile"]["revision"]

    edit(doc)
    report = apply(doc)
    assert report["changed"]["routes"] or report["changed"]["tool_providers"], report  # it landed
    after = bootstrap(server, first, "desk")
    assert (after["profile"]["revision"] != before["profile"]["revision"]) is changes
    # The revision names exactly the workspace and the profile body, no more and no less.
    def shown(body):
        return body["workspace"], {k: v for k, v in body["profile"].items() if k != "revision"}

    same_body = shown(after) == shown(before)
    assert same_body is not changes
    assert bootstrap(server, second, "desk")["profile"]["revision"] == after["profile"]["revision"]


def test_profile_revision_follows_the_knowledge_document_count(server, apply, session, add_knowledge,
                                                               tmp_path):
    apply(hub(copy.deepcopy(REVISION_ROUTE)))
    token = session(["desk"])
    revisions = [bootstrap(server, token, "desk")["profile"]["revision"]]

    assert add_knowledge("desk", KNOWLEDGE / "refunds.md")[0] == 0
    body = bootstrap(server, token, "desk")
    assert body["profile"]["knowledge"]["sources"] == 1
    revisions.append(body["profile"]["revision"])
    assert revisions[1] != revisions[0]

    # Replacing a document's text keeps the count, so what the profile shows is unchanged.
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nFirst refund note.\n")
    assert add_knowledge("desk", notes)[1]["documents"][0]["status"] == "added"
    revisions.append(bootstrap(server, token, "desk")["profile"]["revision"])
    notes.write_text("# Notes\n\nSecond refund note, rewritten.\n")
    assert add_knowledge("desk", notes)[1]["documents"][0]["status"] == "replaced"
    body = bootstrap(server, token, "desk")
    assert body["profile"]["knowledge"]["sources"] == 2
    assert body["profile"]["revision"] == revisions[2]
    assert len(set(revisions)) == 3


# ----------------------------------------------------------------------------- knowledge: CLI

def _stored(sql, route_key: str) -> list[tuple]:
    return sql("SELECT d.name, d.media_type, count(c.id) FROM bz_knowledge_documents d "
               "LEFT JOIN bz_knowledge_chunks c ON c.document_id = d.id WHERE d.route_key = %s "
               "GROUP BY d.name, d.media_type ORDER BY d.name", (route_key,))


def test_knowledge_add_stores_markdown_and_text(apply, add_knowledge, sql):
    apply(hub(knowledge_route("kb")))
    code, out, err = add_knowledge("kb", KNOWLEDGE / "refunds.md", KNOWLEDGE / "shipping.txt")
    assert code == 0, err
    assert out == {"documents": [
        {"route": "kb", "name": "refunds.md", "status": "added", "title": "Refund handbook", "chunks": 3},
        {"route": "kb", "name": "shipping.txt", "status": "added", "title": "shipping", "chunks": 1},
    ]}
    assert _stored(sql, "kb") == [("refunds.md", "text/markdown", 3), ("shipping.txt", "text/plain", 1)]
    headings = sql("SELECT c.heading FROM bz_knowledge_chunks c JOIN bz_knowledge_documents d "
                   "ON d.id = c.document_id WHERE d.name = 'refunds.md' ORDER BY c.ordinal")
    assert headings == [("Refund handbook",), ("Eligibility",), ("Timelines",)]


@pytest.mark.parametrize("route_key, files, code", [
    ("no-such-route", ["refunds.md"], "route_not_found"),
    ("kb", ["manual.pdf"], "invalid_request"),
    ("kb", ["refunds.md", "manual.pdf"], "invalid_request"),  # all or none
], ids=["unknown-route", "pdf", "md-then-pdf"])
def test_knowledge_add_refusals_store_nothing(apply, add_knowledge, sql, route_key, files, code):
    apply(hub(knowledge_route("kb")))
    exit_code, out, err = add_knowledge(route_key, *(KNOWLEDGE / f for f in files))
    assert exit_code == 1
    assert err["error"] == code, err
    assert out == ""
    assert sql("SELECT count(*) FROM bz_knowledge_documents")[0][0] == 0
    assert sql("SELECT count(*) FROM bz_knowledge_chunks")[0][0] == 0


def test_knowledge_add_again_is_unchanged_and_a_changed_file_replaces(apply, add_knowledge, sql, tmp_path):
    apply(hub(knowledge_route("kb")))
    doc = tmp_path / "policy.md"
    doc.write_text("# Policy\n\nThe old garnet refund rule.\n\n## Extra\n\nA second garnet section.\n")
    assert add_knowledge("kb", doc)[1]["documents"][0] == {
        "route": "kb", "name": "policy.md", "status": "added", "title": "Policy", "chunks": 2}
    ids_before = sql("SELECT id FROM bz_knowledge_chunks ORDER BY id")
    assert add_knowledge("kb", doc)[1]["documents"] == [
        {"route": "kb", "name": "policy.md", "status": "unchanged"}]
    assert sql("SELECT id FROM bz_knowledge_chunks ORDER BY id") == ids_before

    doc.write_text("# Policy v2\n\nThe new onyx refund rule.\n")
    assert add_knowledge("kb", doc)[1]["documents"][0] == {
        "route": "kb", "name": "policy.md", "status": "replaced", "title": "Policy v2", "chunks": 1}
    assert _stored(sql, "kb") == [("policy.md", "text/markdown", 1)]
    assert sql("SELECT content FROM bz_knowledge_chunks") == [("The new onyx refund rule.",)]


# ----------------------------------------------------------------------------- knowledge: turns

@pytest.fixture
def knowledge_hub(apply, add_knowledge):
    """Routes kb (knowledge with the given settings), kb-other (knowledge), kb-off (none)."""

    def build(**settings) -> None:
        apply(hub(knowledge_route("kb", **settings), knowledge_route("kb-other"),
                  route("kb-off", agent_client={"enabled": True, "knowledge": {"enabled": False}})))
        assert add_knowledge("kb", *(KNOWLEDGE / n for n in (*KNOWLEDGE_DOCS, "shipping.txt")))[0] == 0
        assert add_knowledge("kb-other", KNOWLEDGE / "shipping.txt")[0] == 0
        assert add_knowledge("kb-off", KNOWLEDGE / "refunds.md")[0] == 0

    return build


def _chunk_texts(sql, route_key: str) -> dict[int, str]:
    return dict(sql("SELECT c.id, c.content FROM bz_knowledge_chunks c JOIN bz_knowledge_documents d "
                    "ON d.id = c.document_id WHERE d.route_key = %s", (route_key,)))


@pytest.mark.parametrize("top_k, max_docs", [(2, 1), (5, 1), (5, 2), (8, 3), (50, 50), (1, 50)])
def test_inline_knowledge_respects_top_k_and_max_docs(server, session, sql, knowledge_hub, top_k, max_docs):
    knowledge_hub(top_k=top_k, max_docs=max_docs)
    token = session(["kb"])
    context = turn(server, token, "kb", "refund")["context"]
    assert "knowledge_delivery" not in context  # echoed only when negotiated
    items = context["knowledge"]
    # Three documents hold three "refund" chunks each, so the bounds decide the count exactly.
    assert len(items) == min(top_k, 3 * max_docs, 9)
    assert len({i["document"] for i in items}) <= max_docs
    assert {i["document"] for i in items} <= set(KNOWLEDGE_DOCS)
    texts = _chunk_texts(sql, "kb")
    for n, item in enumerate(items, start=1):
        assert set(item) == {"ref", "chunk_id", "document", "title", "heading", "content", "truncated",
                             "trust"}
        assert item["ref"] == f"knowledge:{n}"
        assert item["trust"] == "reference_only"
        assert item["content"] == texts[item["chunk_id"]] and item["truncated"] is False
    assert len({i["chunk_id"] for i in items}) == len(items)
    refs = context["knowledge_refs"]
    assert [r["ref"] for r in refs] == [i["ref"] for i in items]
    assert [r["title"] for r in refs] == [i["title"] for i in items]
    assert all(isinstance(r["doc_id"], int) and isinstance(r["score"], (int, float)) for r in refs)


def test_inline_knowledge_is_empty_when_nothing_matches_or_it_is_disabled(server, session, knowledge_hub):
    knowledge_hub()
    token = session(["kb", "kb-off"])
    nothing = turn(server, token, "kb", "zzzz qqqq")["context"]
    assert nothing["knowledge"] == [] and nothing["knowledge_refs"] == []
    assert turn(server, token, "kb", "parcel delays")["context"]["knowledge"][0]["document"] \
        == "shipping.txt"
    off = turn(server, token, "kb-off", "What is the refund rule?")["context"]
    assert off["knowledge"] == [] and off["knowledge_refs"] == []


def test_on_demand_turns_get_bounded_hints_instead_of_bodies(server, session, sql, knowledge_hub):
    knowledge_hub(top_k=50, max_docs=50)
    token = session(["kb"])
    inline = turn(server, token, "kb", "refund")["context"]
    context = turn(server, token, "kb", "refund", knowledge_delivery="on_demand")["context"]
    assert context["knowledge_delivery"] == "on_demand"
    # Instructions, governance and memory are the same in both modes.
    for key in ("instructions", "governance", "memory"):
        assert context[key] == inline[key]
    assert "knowledge_delivery" not in inline
    items = context["knowledge"]
    assert [i["chunk_id"] for i in items] == [i["chunk_id"] for i in inline["knowledge"]]
    assert [i["ref"] for i in items] == [i["ref"] for i in inline["knowledge"]]
    assert context["knowledge_refs"] == inline["knowledge_refs"]
    assert len(items) == 9
    texts = _chunk_texts(sql, "kb")
    for item in items:
        assert set(item) == {"ref", "chunk_id", "document", "title", "heading", "content", "hint_truncated",
                             "content_chars", "trust"}
        full = texts[item["chunk_id"]]
        # The body is replaced by its bounded hint, in the same place every client reads.
        assert len(item["content"]) <= 240 and item["content"] == full[:240]
        assert item["hint_truncated"] is (len(full) > 240)
        assert item["content_chars"] == len(full)
        assert item["trust"] == "reference_only"
    assert {i["hint_truncated"] for i in items} == {True, False}


# ----------------------------------------------------------------------------- knowledge endpoints

def test_knowledge_capabilities(server, session, knowledge_hub):
    knowledge_hub(top_k=3)
    token = session(["kb", "kb-off"])
    body = assert_ok(call(server, token, "GET", "/workspaces/kb/knowledge/capabilities"))
    assert body == {"schema": "bailing.agent-knowledge-capabilities.v1", "route": "kb", "enabled": True,
                    "documents": 4, "delivery_modes": ["inline", "on_demand"], "trust": "reference_only",
                    "search": {"max_query_chars": 1000, "max_results": 20, "default_results": 3,
                               "hint_max_chars": 240},
                    "read": {"max_chars": 16000}}
    off = assert_ok(call(server, token, "GET", "/workspaces/kb-off/knowledge/capabilities"))
    assert off["enabled"] is False and off["documents"] == 1


def test_knowledge_search_returns_hints_within_the_limit(server, session, sql, knowledge_hub):
    knowledge_hub(top_k=4, max_docs=50)
    token = session(["kb"])
    path = "/workspaces/kb/knowledge/search"
    body = assert_ok(call(server, token, "POST", path, {"query": "refund"}))
    assert body["schema"] == "bailing.agent-knowledge-search.v1"
    assert body["route"] == "kb" and body["trust"] == "reference_only"
    assert body["limit"] == 4 and len(body["results"]) == 4  # default: the route's top_k
    texts = _chunk_texts(sql, "kb")
    for item in body["results"]:
        assert "content" not in item
        assert item["hint"] == texts[item["chunk_id"]][:240]
        assert item["trust"] == "reference_only"
    for limit, expected in ((1, 1), (20, 9)):
        found = assert_ok(call(server, token, "POST", path, {"query": "refund", "limit": limit}))
        assert found["limit"] == limit and len(found["results"]) == expected
    sapphire = assert_ok(call(server, token, "POST", path, {"query": "sapphire"}))["results"]
    assert {r["document"] for r in sapphire} == {"refunds.md"} and len(sapphire) == 3
    assert assert_ok(call(server, token, "POST", path, {"query": "zzzz qqqq"}))["results"] == []


@pytest.mark.parametrize("body", [
    {}, {"query": ""}, {"query": "   \n\t"}, {"query": 7}, {"query": "x" * 1001},
    {"query": "refund", "limit": 0}, {"query": "refund", "limit": 21}, {"query": "refund", "limit": "5"},
    {"query": "refund", "limit": True}, {"query": "refund", "offset": 0}, {"query": "refund", "route": "kb"},
], ids=["missing", "empty", "blank", "not-a-string", "too-long", "limit-0", "limit-21", "limit-text",
        "limit-bool", "unknown-offset", "unknown-route"])
def test_knowledge_search_refuses_bad_requests(server, session, knowledge_hub, body):
    knowledge_hub()
    assert_error(call(server, session(["kb"]), "POST", "/workspaces/kb/knowledge/search", body),
                 400, "invalid_request")


def test_knowledge_read_pages_a_chunk(server, session, sql, knowledge_hub):
    knowledge_hub()
    token = session(["kb"])
    hit = assert_ok(call(server, token, "POST", "/workspaces/kb/knowledge/search",
                         {"query": "sapphire handbook", "limit": 1}))["results"][0]
    full = _chunk_texts(sql, "kb")[hit["chunk_id"]]
    assert len(full) > 240 and hit["hint_truncated"] is True
    path = "/workspaces/kb/knowledge/read"
    whole = assert_ok(call(server, token, "POST", path, {"chunk_id": hit["chunk_id"]}))
    assert whole == {"schema": "bailing.agent-knowledge-read.v1", "route": "kb", "chunk_id": hit["chunk_id"],
                     "document": "refunds.md", "title": "Refund handbook", "heading": "Refund handbook",
                     "content": full, "offset": 0, "total_chars": len(full), "truncated": False,
                     "next_offset": None, "max_chars": 16000, "trust": "reference_only"}
    tail = assert_ok(call(server, token, "POST", path, {"chunk_id": hit["chunk_id"], "offset": 100}))
    assert tail["content"] == full[100:] and tail["offset"] == 100 and tail["truncated"] is False
    end = assert_ok(call(server, token, "POST", path, {"chunk_id": hit["chunk_id"], "offset": len(full)}))
    assert end["content"] == "" and end["next_offset"] is None
    assert_error(call(server, token, "POST", path, {"chunk_id": hit["chunk_id"], "offset": len(full) + 1}),
                 400, "invalid_request")


def test_knowledge_read_of_a_chunk_longer_than_the_read_window(server, session, sql, knowledge_hub):
    """The chunker never writes a chunk over 16,000 characters, so this stored chunk is lengthened
    directly to exercise the read window's truncation and paging."""
    knowledge_hub()
    token = session(["kb"])
    chunk_id = assert_ok(call(server, token, "POST", "/workspaces/kb/knowledge/search",
                              {"query": "sapphire handbook", "limit": 1}))["results"][0]["chunk_id"]
    long_text = "".join(f"line {i:05d} of the refund appendix.\n" for i in range(1000))  # 37,000 chars
    sql("UPDATE bz_knowledge_chunks SET content = %s WHERE id = %s", (long_text, chunk_id))
    path, offset, pages = "/workspaces/kb/knowledge/read", 0, []
    while offset is not None:
        page = assert_ok(call(server, token, "POST", path, {"chunk_id": chunk_id, "offset": offset}))
        assert page["offset"] == offset and page["total_chars"] == len(long_text)
        assert len(page["content"]) <= 16000
        assert page["truncated"] is (page["next_offset"] is not None)
        pages.append(page["content"])
        offset = page["next_offset"]
    assert [len(p) for p in pages] == [16000, 16000, len(long_text) - 32000]
    assert "".join(pages) == long_text


def test_knowledge_read_stays_inside_the_route(server, session, sql, knowledge_hub):
    knowledge_hub()
    token = session(["kb", "kb-other"])
    foreign = next(iter(_chunk_texts(sql, "kb-other")))
    path = "/workspaces/kb/knowledge/read"
    assert_error(call(server, token, "POST", path, {"chunk_id": foreign}), 404, "knowledge_not_found")
    assert_error(call(server, token, "POST", path, {"chunk_id": 2**31 - 1}), 404, "knowledge_not_found")
    assert assert_ok(call(server, token, "POST", "/workspaces/kb-other/knowledge/read",
                          {"chunk_id": foreign}))["document"] == "shipping.txt"


@pytest.mark.parametrize("chunk_id", [2**31, 10**12, 2**63 - 1])
def test_knowledge_read_of_a_large_unknown_chunk_id_is_not_found(server, session, knowledge_hub, chunk_id):
    knowledge_hub()
    assert_error(call(server, session(["kb"]), "POST", "/workspaces/kb/knowledge/read", {"chunk_id": chunk_id}),
                 404, "knowledge_not_found")


@pytest.mark.parametrize("body", [
    {}, {"chunk_id": 0}, {"chunk_id": "1"}, {"chunk_id": 1, "offset": -1}, {"chunk_id": 1, "limit": 5},
], ids=["missing", "zero", "text", "negative-offset", "unknown-field"])
def test_knowledge_read_refuses_bad_requests(server, session, knowledge_hub, body):
    knowledge_hub()
    assert_error(call(server, session(["kb"]), "POST", "/workspaces/kb/knowledge/read", body),
                 400, "invalid_request")


def test_knowledge_endpoints_without_knowledge_are_unavailable(server, session, sql, knowledge_hub):
    knowledge_hub()
    token = session(["kb-off"])
    own = next(iter(_chunk_texts(sql, "kb-off")))  # documents exist, but knowledge is off
    assert_error(call(server, token, "POST", "/workspaces/kb-off/knowledge/search", {"query": "refund"}),
                 404, "knowledge_unavailable")
    assert_error(call(server, token, "POST", "/workspaces/kb-off/knowledge/read", {"chunk_id": own}),
                 404, "knowledge_unavailable")
    # A route outside the session's workspace is not even a workspace.
    assert_error(call(server, token, "POST", "/workspaces/kb/knowledge/search", {"query": "refund"}),
                 403, "route_not_allowed")


# ----------------------------------------------------------------------------- capability search

@pytest.fixture
def catalog(apply, session):
    """ops: every scope of CRM and ERP with five writes (more than 12 tools); desk: 3 CRM reads;
    handbook: knowledge only. Returns tokens of two sessions over all three."""
    apply(hub(route("ops", tools=copy.deepcopy(ALL_SCOPES)), route("desk"),
              route("handbook", tools={"agent_direct": {"enabled": False}})))
    return session(["ops", "desk", "handbook"]), session(["ops", "desk", "handbook"])


DISCOVERY_KEYS = {"mode", "scope", "returned_count", "authorized_total", "matched_total",
                  "matched_total_exact", "limit", "truncated", "has_more", "truncation_scope", "pagination"}


def expected_discovery(returned: int, authorized: int, limit: int) -> dict:
    return {"mode": "ranked_candidates", "scope": "current_authorization", "returned_count": returned,
            "authorized_total": authorized, "matched_total": None, "matched_total_exact": False,
            "limit": limit, "truncated": authorized > returned, "has_more": authorized > returned,
            "truncation_scope": "authorized_catalog", "pagination": "unsupported"}


def test_capability_search_returns_twelve_complete_tools_and_exact_discovery(server, catalog):
    token = catalog[0]
    surface = tools_surface(server, token, "ops")
    by_name = {t["name"]: t for t in surface["tools"]}
    assert len(by_name) > 12
    body = assert_ok(search(server, token, "ops", {"query": "inventory", "limit": 12}))
    assert body["schema_version"] == body["schema"] == "bailing.agent-capability-search.v1"
    assert body["route"] == "ops" and body["capability_revision"] == surface["capability_revision"]
    assert body["query"] == "inventory"
    assert "run_id" not in body
    tools = body["tools"]
    assert len(tools) == 12
    for tool in tools:
        assert tool == by_name[tool["name"]]  # the same complete typed projection
    assert len({t["name"] for t in tools}) == 12
    assert set(body["discovery"]) == DISCOVERY_KEYS
    assert body["discovery"] == expected_discovery(12, len(by_name), 12)
    assert body["discovery"]["truncated"] is True and body["discovery"]["has_more"] is True


def test_capability_search_returns_the_active_tool_limit_by_default(server, catalog, apply, session):
    token = catalog[0]
    authorized = len(tools_surface(server, token, "ops")["tools"])
    body = assert_ok(search(server, token, "ops", {"query": "inventory"}))
    assert len(body["tools"]) == 8 and body["discovery"] == expected_discovery(8, authorized, 8)
    apply(hub(route("ops", tools=copy.deepcopy(ALL_SCOPES),
                    agent_client={"enabled": True, "active_tool_limit": 3})))
    limited = assert_ok(search(server, token, "ops", {"query": "inventory"}))
    assert limited["discovery"] == expected_discovery(3, authorized, 3)
    assert [t["name"] for t in limited["tools"]] == [t["name"] for t in body["tools"]][:3]


def test_capability_search_ranks_inventory_tools_first_without_dropping_others(server, catalog):
    token = catalog[0]
    names = [t["name"] for t in assert_ok(search(server, token, "ops", {"query": "inventory", "limit": 12}))["tools"]]
    assert set(names[:4]) == {"inventory_adjust", "inventory_get", "inventory_reserve", "inventory_search"}
    # Zero-score tools still fill the result: customer tools never mention inventory.
    assert any(n.startswith("customer_") for n in names)
    again = [t["name"] for t in assert_ok(search(server, token, "ops", {"query": "inventory", "limit": 12}))["tools"]]
    assert again == names


@pytest.mark.parametrize("query", ["zzzz qqqq", "?!", "xylophone"])
def test_capability_search_for_an_unrelated_query_orders_by_name(server, catalog, query):
    token = catalog[0]
    all_names = sorted(t["name"] for t in tools_surface(server, token, "ops")["tools"])
    first = assert_ok(search(server, token, "ops", {"query": query, "limit": 12}))
    second = assert_ok(search(server, token, "ops", {"query": query, "limit": 12}))
    names = [t["name"] for t in first["tools"]]
    assert names == all_names[:12]  # all scores zero: ties broken by name, nothing dropped
    assert [t["name"] for t in second["tools"]] == names
    assert first["discovery"] == expected_discovery(12, len(all_names), 12)


@pytest.mark.parametrize("limit", [1, 3, 12])
def test_capability_search_limit(server, catalog, limit):
    token = catalog[0]
    authorized = len(tools_surface(server, token, "ops")["tools"])
    body = assert_ok(search(server, token, "ops", {"query": "order", "limit": limit}))
    assert len(body["tools"]) == limit
    assert body["discovery"] == expected_discovery(limit, authorized, limit)
    full = assert_ok(search(server, token, "ops", {"query": "order", "limit": 12}))
    assert [t["name"] for t in body["tools"]] == [t["name"] for t in full["tools"]][:limit]


def test_capability_search_in_a_small_catalog_is_not_truncated(server, catalog):
    token = catalog[0]
    body = assert_ok(search(server, token, "desk", {"query": "inventory"}))
    assert sorted(t["name"] for t in body["tools"]) == [
        "customer_contacts_list", "customer_get", "customer_search"]
    assert body["discovery"] == expected_discovery(3, 3, 8)
    limited = assert_ok(search(server, token, "desk", {"query": "customer", "limit": 2}))
    assert limited["discovery"] == expected_discovery(2, 3, 2)
    empty = assert_ok(search(server, token, "handbook", {"query": "customer", "limit": 12}))
    assert empty["tools"] == [] and empty["discovery"] == expected_discovery(0, 0, 12)


@pytest.mark.parametrize("body", [
    {}, {"query": ""}, {"query": "   "}, {"query": 5}, {"query": "x" * 2001}, {"query": "a\x07b"},
    {"run_id": ""}, {"run_id": "not-a-uuid"}, {"run_id": "1ec9414c-232a-6b00-b3c8-9e6bdeced846"},
    {"query": "order", "limit": 0}, {"query": "order", "limit": 13}, {"query": "order", "limit": "3"},
    {"query": "order", "limit": True}, {"query": "order", "route": "ops"},
], ids=["empty-body", "empty-query", "blank-query", "query-number", "query-too-long", "query-control",
        "empty-run-id", "run-id-not-uuid", "run-id-v6", "limit-0", "limit-13", "limit-text", "limit-bool",
        "unknown-field"])
def test_capability_search_refuses_bad_requests(server, catalog, body):
    assert_error(search(server, catalog[0], "ops", body), 400, "invalid_request")


def test_capability_search_by_run_id_of_the_same_session_and_route(server, catalog):
    token = catalog[0]
    run_id = turn(server, token, "ops", "check inventory levels")["run_id"]
    body = assert_ok(search(server, token, "ops", {"run_id": run_id}))
    assert body["run_id"] == run_id
    by_query = assert_ok(search(server, token, "ops", {"query": "check inventory levels"}))
    assert body["tools"] == by_query["tools"]
    assert {t["name"] for t in body["tools"][:4]} == {
        "inventory_adjust", "inventory_get", "inventory_reserve", "inventory_search"}
    blank = assert_ok(search(server, token, "ops", {"run_id": run_id, "query": "   "}))
    assert blank["tools"] == body["tools"]
    # An explicit query wins over the run's user message.
    explicit = assert_ok(search(server, token, "ops", {"run_id": run_id, "query": "zzzz"}))
    plain = assert_ok(search(server, token, "ops", {"query": "zzzz"}))
    assert explicit["tools"] == plain["tools"] != body["tools"]


def test_capability_search_refuses_a_run_of_another_session_or_route(server, catalog):
    mine, theirs = catalog
    other_session_run = turn(server, theirs, "ops", "inventory")["run_id"]
    other_route_run = turn(server, mine, "desk", "inventory")["run_id"]
    for run_id in (other_session_run, other_route_run, str(uuid.uuid4())):
        assert_error(search(server, mine, "ops", {"run_id": run_id}), 404, "run_not_found")
        assert_error(search(server, mine, "ops", {"run_id": run_id, "query": "inventory"}), 404, "run_not_found")
    assert assert_ok(search(server, theirs, "ops", {"run_id": other_session_run}))["run_id"] == other_session_run


def test_a_task_enrolled_session_must_search_with_its_run_id(server, catalog, session):
    token = session(["ops"], task_enrolled=True)
    assert_error(search(server, token, "ops", {"query": "inventory"}), 409, "TASK_REQUIRED")
    assert_error(search(server, token, "ops", {"run_id": str(uuid.uuid4())}), 409, "TASK_REQUIRED")
    # Search with a run bound to a real task: tests/test_task_control.py.


def test_knowledge_search_never_exceeds_its_advertised_maximum(server, apply, session, add_knowledge,
                                                              tmp_path):
    apply(hub(knowledge_route("kb", top_k=50, max_docs=50)))
    many = tmp_path / "many.md"
    many.write_text("".join(f"## Section {i}\n\nRefund rule number {i}.\n\n" for i in range(30)))
    assert add_knowledge("kb", many)[1]["documents"][0]["chunks"] == 30
    token = session(["kb"])
    caps = assert_ok(call(server, token, "GET", "/workspaces/kb/knowledge/capabilities"))["search"]
    assert caps["max_results"] == 20
    found = assert_ok(call(server, token, "POST", "/workspaces/kb/knowledge/search", {"query": "refund"}))
    assert len(found["results"]) <= caps["max_results"] and found["limit"] <= caps["max_results"]
    assert caps["default_results"] <= caps["max_results"]
