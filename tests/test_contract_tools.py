"""The tool surface as the official Agent Client SDK sees it (WIRE_CONTRACT §2.6-§2.8, §2.10-§2.14,
§4.3), over real HTTP against the demo business system. One test per contract row: status, every
field and its type, nesting, schema string, error code; every refusal also proves nothing was
written. Our spec's budgets (1 MiB arguments, 2 MiB envelope) win over upstream's.

Fixtures: `governed` (route `desk`, client `ops-app`, a session acting for tenant-7:user-42),
`business`, `server`, `cli`, `sql`; `agent` and `approver` from test_tool_invocations.
"""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from admin_app.catalog.public_schema import KEYWORDS, public_input_schema
from admin_app.invocations.results import bounded_text
from admin_app.limits import RESULT_TEXT_MAX, TOOL_SCHEMA_MAX_DEPTH
from tests.conftest import governed_config
from tests.helpers import apply_config, assert_error, row_counts
from tests.test_tool_invocations import BASE, BIG_CREDIT, CANCEL, CUSTOMER, ROUTE, Agent, iid, issue
from tests.test_tool_invocations import agent, approver  # noqa: F401 - fixtures

# The same work on any server (the answers' shapes; the SQL behind them runs in
# tests/test_tool_invocations.py and tests/test_tool_approvals.py).
pytestmark = pytest.mark.any_server

HEX64 = re.compile(r"^[0-9a-f]{64}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MILLIS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
EIGHT = {"name", "description", "input_schema", "scope", "risk", "approval_required", "readonly", "idempotent"}
OPTIONAL = {"usage_guidance_available", "description_truncated"}
STATES = {"executed", "business_rejected", "awaiting_approval", "denied", "rejected_before_dispatch",
          "reconciliation_required", "in_progress"}
RESULT_KEYS = {"schema_version", "invocation_id", "route", "tool", "state", "ok", "auto_retry_allowed", "text"}
RECEIPT_KEYS = {"schema_version", "read_only", "business_operation_performed", "invocation_id", "agent_run_id",
                "route", "tool", "observed_at", "result", "result_source", "dispatch_state", "approval",
                "journal_state"}
TABLES = ("bz_tool_invocations", "bz_tool_approvals", "bz_tool_journal")


# ---------------------------------------------------------------- helpers

def snapshot(sql) -> dict:
    """Row count and content hash of every tool table: equal before and after means nothing written."""
    return {t: sql(f"SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) "
                   f"FROM {t} x")[0] for t in TABLES}


def turn(agent: Agent, label: str = "t1") -> str:
    response = agent.server.post(f"/agent-api/v1/workspaces/{ROUTE}/turns", headers=agent.headers, json={
        "client_conversation_id": "conv-" + label, "client_turn_id": "turn-" + label,
        "user_message_id": "msg-" + label, "user_input": "Look up customer C-100234."})
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def six(agent: Agent, tool: str, arguments: dict, label: str, run_id: str) -> dict:
    """Exactly the six fields the official client sends."""
    return {"invocation_id": iid(label), "route": ROUTE, "capability_revision": agent.revision(),
            "agent_run_id": run_id, "tool": tool, "arguments": arguments}


def check_result(body: dict, label: str, tool: str) -> dict:
    """Every field of §2.11 with its type; the hub's own fields beside them agree."""
    assert RESULT_KEYS <= set(body), body
    assert body["schema_version"] == "bailing.agent-tool-invocation.v1"
    assert body["invocation_id"] == iid(label) and body["route"] == ROUTE and body["tool"] == tool
    assert body["state"] in STATES and body["status"] == body["state"]
    assert isinstance(body["ok"], bool) and body["ok"] is (body["state"] == "executed")
    assert body["auto_retry_allowed"] is (body["state"] == "in_progress")
    assert isinstance(body["text"], str) and 0 < len(body["text"]) <= RESULT_TEXT_MAX
    if "business_status" in body:
        assert type(body["business_status"]) is int and 100 <= body["business_status"] <= 599
    if "approval_id" in body:
        assert type(body["approval_id"]) is int and body["approval_id"] >= 1
    assert "retry_after_ms" not in body and "rate_limit" not in body  # no rate limit configured
    return body


def post(agent: Agent, body: dict):
    return agent.server.post(BASE, json=body, headers=agent.headers)


def walk(schema, depth: int = 1):
    """Every (sub-schema, depth) of a projected input schema."""
    yield schema, depth
    if not isinstance(schema, dict):
        return
    for name in ("items", "additionalProperties"):
        if isinstance(schema.get(name), dict):
            yield from walk(schema[name], depth + 1)
    for sub in (schema.get("properties") or {}).values():
        yield from walk(sub, depth + 1)
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(key) or []:
            yield from walk(sub, depth + 1)


def catalog(agent: Agent, **params) -> dict:
    response = agent.server.get("/agent-api/v1/tools", params={"route": ROUTE, **params}, headers=agent.headers)
    assert response.status_code == 200, response.text
    return response.json()


# ================================================================ §2.6 tool projection

def test_every_projected_tool_is_the_closed_set_of_eight_fields(agent):
    tools = catalog(agent)["tools"]
    assert len(tools) > 10
    for tool in tools:
        assert EIGHT <= set(tool) <= EIGHT | OPTIONAL, tool
        assert TOOL_NAME.fullmatch(tool["name"])
        assert isinstance(tool["description"], str) and tool["description"].strip()
        assert len(tool["description"]) <= 500 <= 1200
        assert isinstance(tool["scope"], str) and 0 < len(tool["scope"]) <= 256
        assert tool["risk"] in ("low", "medium", "high")
        for flag in ("approval_required", "readonly", "idempotent"):
            assert isinstance(tool[flag], bool), (tool["name"], flag)
        for flag in OPTIONAL & set(tool):
            assert tool[flag] is True
        schema = tool["input_schema"]
        assert schema["type"] == "object" and isinstance(schema["properties"], dict)
        assert len(json.dumps(schema, separators=(",", ":")).encode()) <= 65536
        for node, depth in walk(schema):
            assert depth <= TOOL_SCHEMA_MAX_DEPTH
            if isinstance(node, dict):
                assert set(node) <= KEYWORDS, (tool["name"], set(node) - KEYWORDS)


APPROVAL_CASES = {
    "when-rule-only": ("customer_update_credit_limit", True),   # medium risk, an approval.when rule
    "high-risk": ("customer_merge", True),
    "acc-required": ("order_cancel", True),
    "plain-read": ("customer_get", False),
    "plain-write": ("customer_note_add", False),
}


@pytest.mark.parametrize("tool, expected", APPROVAL_CASES.values(), ids=APPROVAL_CASES.keys())
def test_approval_required_is_a_boolean_covering_every_approval_source(agent, tool, expected):
    tools = {t["name"]: t for t in catalog(agent)["tools"]}
    assert tools[tool]["approval_required"] is expected


def test_a_route_forcing_approval_makes_the_tool_approval_required(agent, business, cli, tmp_path):
    config = governed_config(business.url)
    config["routes"][0]["tools"]["agent_direct"]["force_approval_tools"] = ["customer_get"]
    apply_config(cli, tmp_path, config)
    tools = {t["name"]: t for t in catalog(agent)["tools"]}
    assert tools["customer_get"]["approval_required"] is True
    assert tools["customer_search"]["approval_required"] is False


def test_the_projected_input_schema_keeps_only_allowlisted_keywords():
    deep: dict = {"type": "string", "default": "x"}
    for _ in range(20):
        deep = {"type": "object", "properties": {"next": deep}, "title": "level"}
    full = {"type": "object", "additionalProperties": False, "required": ["a"], "properties": {
        "a": {"type": "integer", "minimum": 1, "default": 2, "examples": [3], "title": "A", "$comment": "no",
              "readOnly": True, "deprecated": True},
        "b": {"anyOf": [{"type": "string", "pattern": "^x"}, {"type": "null"}], "discriminator": {}},
        "c": {"type": "array", "items": {"type": "string", "enum": ["p", "q"]}, "uniqueItems": True},
        "deep": deep}}
    out = public_input_schema(full)
    assert out["properties"]["a"] == {"type": "integer", "minimum": 1}
    assert out["properties"]["b"] == {"anyOf": [{"type": "string", "pattern": "^x"}, {"type": "null"}]}
    assert out["properties"]["c"] == {"type": "array", "items": {"type": "string", "enum": ["p", "q"]}}
    assert out["required"] == ["a"] and out["additionalProperties"] is False
    depths = [d for _, d in walk(out)]
    assert max(depths) == TOOL_SCHEMA_MAX_DEPTH + 1  # the sub-schema past the limit is an empty `{}`
    assert all(node == {} for node, d in walk(out) if d > TOOL_SCHEMA_MAX_DEPTH)
    # The root is an object with properties whatever the source says.
    assert public_input_schema({"type": "string"}) == {"type": "object", "properties": {}}


def test_calls_are_validated_against_the_full_schema_not_the_projected_one(agent, business, sql):
    """`maximum` is shown, but a value the full schema refuses never reaches the business system."""
    tools = {t["name"]: t for t in catalog(agent)["tools"]}
    assert "inventory_search" in tools
    result = agent.invoke("inventory_search", {"limit": 1000}, "contract-schema")
    assert result["state"] == "rejected_before_dispatch" and result["ok"] is False
    assert business.executions() == []


NAMES = {
    "dotted": "thing.update",
    "dashed": "thing-update",
    "leading-digit": "1thing",
    "sixty-five": "t" * 65,
}


@pytest.mark.parametrize("op_id", NAMES.values(), ids=NAMES.keys())
def test_config_apply_refuses_an_operation_name_the_client_cannot_call(cli, sql, tmp_path, op_id):
    from tests.test_catalog_compiler import thing_doc

    doc = thing_doc()
    operation = doc["paths"]["/things/{thing_id}"]["patch"]
    operation["operationId"] = op_id
    (tmp_path / "things.json").write_text(json.dumps(doc))
    config = {"tool_providers": [{"name": "things", "base_url": "http://127.0.0.1:9", "openapi": str(
        tmp_path / "things.json"), "secret_env": "THINGS_SECRET"}]}
    before = row_counts(sql, "bz_tool_providers", "bz_routes")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _out, err = cli("config", "apply", str(path))
    assert code == 1
    problems = [p["message"] for p in err["problems"] if p["path"] == "tool_providers[0].openapi"]
    assert any("paths./things/{thing_id}.patch" in m and "operationId" in m for m in problems), err
    assert row_counts(sql, "bz_tool_providers", "bz_routes") == before


def test_a_valid_name_of_sixty_four_characters_applies(cli, sql, tmp_path):
    from tests.test_catalog_compiler import thing_doc

    doc = thing_doc()
    doc["paths"]["/things/{thing_id}"]["patch"]["operationId"] = "_" + "t" * 63
    (tmp_path / "things.json").write_text(json.dumps(doc))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"tool_providers": [{"name": "things", "base_url": "http://127.0.0.1:9",
                                                    "openapi": str(tmp_path / "things.json"),
                                                    "secret_env": "THINGS_SECRET"}]}))
    code, _out, err = cli("config", "apply", str(path))
    assert code == 0, err
    assert sql("SELECT count(*) FROM bz_tool_providers")[0][0] == 1


# ================================================================ §2.7 catalog

def test_the_catalog_answer(agent):
    body = catalog(agent)
    assert body["schema_version"] == "bailing.agent-tool-catalog.v1"
    assert body["route"] == ROUTE
    assert HEX64.fullmatch(body["capability_revision"])
    names = [t["name"] for t in body["tools"]]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert "schema" not in body


@pytest.mark.parametrize("params, status, code", [
    ({}, 400, "invalid_request"),                         # no route
    ({"route": "desk", "extra": "1"}, 400, "invalid_request"),
    ({"route": "auto"}, 400, "invalid_route"),
    ({"route": "Not A Key"}, 400, "invalid_route"),
    ({"route": "elsewhere"}, 403, "route_not_allowed"),
])
def test_catalog_refusals(agent, params, status, code):
    response = agent.server.get("/agent-api/v1/tools", params=params, headers=agent.headers)
    assert_error(response, status, code)
    assert response.headers["Cache-Control"] == "no-store"


def test_the_catalog_without_agent_direct_is_403_agent_direct_disabled(agent, business, cli, tmp_path):
    config = governed_config(business.url)
    config["routes"][0]["tools"]["agent_direct"]["enabled"] = False
    apply_config(cli, tmp_path, config)
    assert_error(agent.server.get("/agent-api/v1/tools", params={"route": ROUTE}, headers=agent.headers),
                 403, "agent_direct_disabled")


# ================================================================ §2.10 invoke

def test_an_invoke_with_exactly_the_six_fields_runs_and_records_its_run(agent, business, sql):
    run_id = turn(agent)
    response = post(agent, six(agent, "customer_get", CUSTOMER, "six", run_id))
    assert response.status_code == 200, response.text
    result = check_result(response.json(), "six", "customer_get")
    assert result["state"] == "executed" and result["business_status"] == 200
    assert sql("SELECT run_id::text FROM bz_tool_invocations WHERE invocation_id = %s", (iid("six"),)) \
        == [(run_id,)]
    assert len(business.executions("customer_get")) == 1


def test_run_id_is_accepted_as_the_earlier_name_of_agent_run_id(agent, business, sql):
    run_id = turn(agent)
    body = six(agent, "customer_get", CUSTOMER, "alias", run_id)
    body["run_id"] = body.pop("agent_run_id")
    first = post(agent, body)
    assert first.status_code == 200, first.text
    # The same call under either name, or both, is the same invocation.
    both = dict(body, agent_run_id=run_id)
    assert post(agent, both).json() == first.json()
    assert len(business.executions()) == 1


def _other_uuid() -> str:
    import uuid

    return str(uuid.uuid4())


MALFORMED = {
    "missing-invocation_id": lambda b: b.pop("invocation_id"),
    "missing-arguments": lambda b: b.pop("arguments"),
    "extra-field": lambda b: b.update(extra=1),
    "invocation_id-uppercase": lambda b: b.update(invocation_id="A" * 64),
    "invocation_id-63": lambda b: b.update(invocation_id="a" * 63),
    "invocation_id-number": lambda b: b.update(invocation_id=7),
    "revision-not-hex": lambda b: b.update(capability_revision="z" * 64),
    "tool-dotted": lambda b: b.update(tool="customer.get"),
    "tool-65": lambda b: b.update(tool="t" * 65),
    "agent_run_id-not-uuid": lambda b: b.update(agent_run_id="run-1"),
    "agent_run_id-number": lambda b: b.update(agent_run_id=5),
    "run-names-disagree": lambda b: b.update(run_id=_other_uuid()),
    "arguments-array": lambda b: b.update(arguments=[1]),
    "route-number": lambda b: b.update(route=7),
}


@pytest.mark.parametrize("change", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_invoke_is_400_invalid_request_and_writes_nothing(agent, business, sql, change):
    body = six(agent, "customer_get", CUSTOMER, "malformed", turn(agent))
    before = snapshot(sql)
    change(body)
    assert_error(post(agent, body), 400, "invalid_request")
    assert snapshot(sql) == before
    assert business.executions() == []


def test_a_run_of_another_session_is_409_agent_run_conflict(agent, server, cli, business, sql):
    other = Agent(server, issue(cli, "--on-behalf-of", "tenant-7:user-43"))
    foreign_run = turn(other, "other")
    before = snapshot(sql)
    for run_id in (foreign_run, _other_uuid()):  # another session's run; no run at all
        assert_error(post(agent, six(agent, "customer_get", CUSTOMER, "foreign", run_id)),
                     409, "agent_run_conflict")
    assert snapshot(sql) == before
    assert business.executions() == []


def test_a_run_of_another_route_is_409_agent_run_conflict(agent, server, business, cli, sql, tmp_path):
    config = governed_config(business.url)
    spare = json.loads(json.dumps(config["routes"][0]))
    spare.update(route_key="spare", name="Spare")
    config["routes"].append(spare)
    config["client_apps"][0]["allowed_routes"] = ["desk", "spare"]
    apply_config(cli, tmp_path, config)
    both = Agent(server, _issue_both(cli))
    response = both.server.post("/agent-api/v1/workspaces/spare/turns", headers=both.headers, json={
        "client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m", "user_input": "hi"})
    assert response.status_code == 200, response.text
    before = snapshot(sql)
    assert_error(post(both, six(both, "customer_get", CUSTOMER, "route-run", response.json()["run_id"])),
                 409, "agent_run_conflict")
    assert snapshot(sql) == before


def _issue_both(cli) -> dict:
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk,spare",
                         "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                         "--on-behalf-of", "tenant-7:user-42")
    assert code == 0, err
    return out


@pytest.mark.parametrize("change", ["arguments", "tool", "run"])
def test_an_invocation_id_bound_to_another_call_is_409_invocation_conflict(agent, business, sql, change):
    run_id = turn(agent)
    assert post(agent, six(agent, "customer_get", CUSTOMER, "bound", run_id)).status_code == 200
    body = six(agent, "customer_get", CUSTOMER, "bound", run_id)
    if change == "arguments":
        body["arguments"] = {"customer_id": "C-100235"}
    elif change == "tool":
        body["tool"], body["arguments"] = "customer_search", {"q": "acme"}
    else:
        body["agent_run_id"] = turn(agent, "t2")
    before = snapshot(sql)
    assert_error(post(agent, body), 409, "invocation_conflict")
    assert snapshot(sql) == before
    assert len(business.executions()) == 1


def test_a_stale_revision_on_a_new_call_is_409_capability_changed(agent, business, sql):
    body = six(agent, "customer_get", CUSTOMER, "stale", turn(agent))
    body["capability_revision"] = "0" * 64
    before = snapshot(sql)
    error = assert_error(post(agent, body), 409, "capability_changed")
    assert error["capability_revision"] == agent.revision()
    assert snapshot(sql) == before


def test_a_retry_after_the_tool_left_the_catalog_is_409_capability_changed(agent, business, sql, cli,
                                                                             tmp_path):
    run_id = turn(agent)
    body = six(agent, "customer_note_add", {"customer_id": "C-100234", "body": "hello"}, "retry", run_id)
    assert post(agent, body).json()["state"] == "executed"
    config = governed_config(business.url)
    config["routes"][0]["tools"]["agent_direct"]["write_tools"].remove("customer_note_add")
    apply_config(cli, tmp_path, config)
    before = snapshot(sql)
    assert_error(post(agent, body), 409, "capability_changed")
    assert snapshot(sql) == before
    assert len(business.executions()) == 1


def test_a_new_call_naming_a_tool_outside_the_catalog_is_404_tool_not_found(agent, business, sql):
    before = snapshot(sql)
    body = six(agent, "customer_delete", {"customer_id": "C-100234"}, "unlisted", turn(agent))
    assert_error(post(agent, body), 404, "tool_not_found")
    assert snapshot(sql) == before


@pytest.mark.parametrize("route, status, code", [
    ("auto", 400, "invalid_route"), ("Bad.Key", 400, "invalid_route"), ("elsewhere", 403, "route_not_allowed")])
def test_an_invoke_the_route_gate_refuses_writes_nothing(agent, business, sql, route, status, code):
    body = six(agent, "customer_get", CUSTOMER, "gate", turn(agent))
    body["route"] = route
    before = snapshot(sql)
    assert_error(post(agent, body), status, code)
    assert snapshot(sql) == before


def test_arguments_over_our_one_mebibyte_budget_are_413_with_the_byte_counts(agent, business, sql):
    body = six(agent, "customer_search", {"q": "x" * 1_048_576}, "big", turn(agent))
    before = snapshot(sql)
    error = assert_error(post(agent, body), 413, "arguments_too_large")
    assert (error["origin"], error["dispatch"], error["limit_scope"]) == ("core", "not_dispatched", "arguments")
    assert error["max_bytes"] == 1_048_576 and error["actual_bytes"] == 1_048_576 + len('{"q":""}')
    assert snapshot(sql) == before


def test_arguments_beyond_upstreams_four_kibibytes_are_accepted(agent, business):
    """Our spec's budget wins over upstream's 4096-byte argument cap."""
    arguments = {"customer_id": "C-100234", "body": "€" * 3990}  # within the schema, ~12 KB of JSON
    assert len(json.dumps(arguments, ensure_ascii=False).encode()) > 2 * 4096
    response = post(agent, six(agent, "customer_note_add", arguments, "mid", turn(agent)))
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "executed"


# ================================================================ §2.11 the invocation result

def test_an_executed_result_carries_the_business_status_and_its_text(agent, business):
    result = check_result(agent.invoke("customer_get", CUSTOMER, "exec"), "exec", "customer_get")
    assert result["ok"] is True and result["business_status"] == 200
    assert json.loads(result["text"]) == result["result"]["body"]
    assert "approval_id" not in result


def test_a_business_refusal_is_ok_false_with_its_status(agent, business):
    result = check_result(agent.invoke("customer_get", {"customer_id": "C-999999"}, "nf"), "nf", "customer_get")
    assert result["state"] == "business_rejected" and result["ok"] is False
    assert result["business_status"] == 404


def test_an_awaiting_result_names_its_numeric_approval(agent, business, approver):
    result = check_result(agent.invoke("customer_update_credit_limit", BIG_CREDIT, "wait"), "wait",
                          "customer_update_credit_limit")
    second = check_result(agent.invoke("order_cancel", CANCEL, "wait-2"), "wait-2", "order_cancel")
    assert result["state"] == second["state"] == "awaiting_approval"
    assert result["approval_id"] != second["approval_id"]
    assert "business_status" not in result and result["ok"] is False
    [item] = [i for i in approver.approvals() if i["id"] == result["approval"]["id"]]
    assert item["approval_id"] == result["approval_id"]
    assert str(result["approval_id"]) in result["text"]


def test_a_refusal_before_dispatch_has_no_business_status(agent, business):
    result = check_result(agent.invoke("customer_update_credit_limit", {"customer_id": "C-100234",
                                                                        "credit_limit": -1}, "refused"),
                          "refused", "customer_update_credit_limit")
    assert result["state"] == "rejected_before_dispatch" and result["ok"] is False
    assert "business_status" not in result and "approval_id" not in result
    assert business.executions() == []


def test_an_unresolved_result_names_the_idempotency_key(agent, business, sql):
    business.fault("customer_get", "drop_response")
    result = check_result(agent.invoke("customer_get", CUSTOMER, "lost"), "lost", "customer_get")
    assert result["state"] == "reconciliation_required" and result["auto_retry_allowed"] is False
    [(key,)] = sql("SELECT idempotency_key FROM bz_tool_journal")
    assert key in result["text"]
    assert business.executions()[0]["idempotency_key"] == key


def test_result_text_is_bounded_and_control_characters_are_replaced():
    assert bounded_text("a\x00b\x07c\td\ne\rf\x7fg\x85") == "a\ufffdb\ufffdc\td\ne\rf\ufffdg\ufffd"
    assert len(bounded_text("x" * 20000)) == RESULT_TEXT_MAX


# ================================================================ §2.12 resume

def awaiting(agent: Agent, label: str = "resume") -> dict:
    result = agent.invoke("customer_update_credit_limit", BIG_CREDIT, label)
    assert result["state"] == "awaiting_approval"
    return result


def test_resume_without_any_body_is_what_the_client_sends(agent, business, approver):
    pending = awaiting(agent)
    headers = {"Authorization": agent.headers["Authorization"]}  # no body, no content type
    response = agent.server.post(f"{BASE}/{iid('resume')}/resume", headers=headers)
    assert response.status_code == 200, response.text
    waiting = check_result(response.json(), "resume", "customer_update_credit_limit")
    assert waiting["state"] == "awaiting_approval" and waiting["approval_id"] == pending["approval_id"]
    approver.approve(pending["approval"])
    response = agent.server.post(f"{BASE}/{iid('resume')}/resume", headers=headers)
    done = check_result(response.json(), "resume", "customer_update_credit_limit")
    assert done["state"] == "executed" and done["business_status"] == 200
    assert len(business.executions()) == 1


def test_a_denied_approval_resumes_as_denied(agent, business, approver):
    pending = awaiting(agent)
    approver.deny(pending["approval"])
    denied = check_result(agent.resume("resume"), "resume", "customer_update_credit_limit")
    assert denied["state"] == "denied" and denied["approval_id"] == pending["approval_id"]
    assert business.executions() == []


@pytest.mark.parametrize("data, status, code", [
    (b'{"x": 1}', 400, "invalid_request"), (b"[]", 400, "invalid_request"), (b"nope", 400, "invalid_request"),
    (b"{" + b" " * 1100 + b"}", 413, "arguments_too_large")])
def test_resume_refuses_any_body_but_nothing_or_an_empty_object(agent, business, approver, sql, data, status,
                                                                 code):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    before = snapshot(sql)
    response = agent.server.post(f"{BASE}/{iid('resume')}/resume", data=data, headers=agent.headers)
    error = assert_error(response, status, code)
    if status == 413:
        assert error["limit_scope"] == "request_body" and error["max_bytes"] == 1024
    assert snapshot(sql) == before
    assert business.executions() == []


@pytest.mark.parametrize("path_id", ["inv-1", "A" * 64, "a" * 63, "a" * 65])
def test_resume_and_receipt_of_a_path_that_is_no_invocation_id_are_404_not_found(agent, sql, path_id):
    before = snapshot(sql)
    assert_error(agent.server.post(f"{BASE}/{path_id}/resume", headers=agent.headers), 404, "not_found")
    assert_error(agent.server.get(f"{BASE}/{path_id}/receipt", headers=agent.headers), 404, "not_found")
    # Authentication comes first.
    assert_error(agent.server.post(f"{BASE}/{path_id}/resume"), 401, "unauthorized")
    assert snapshot(sql) == before


def test_resume_of_an_unknown_id_is_404_invocation_not_found(agent, sql):
    before = snapshot(sql)
    assert_error(agent.resume_raw("never"), 404, "invocation_not_found")
    assert snapshot(sql) == before


# ================================================================ §2.13 inspection capabilities

def test_inspection_capabilities(agent):
    response = agent.server.get(f"{BASE}/inspection-capabilities", headers=agent.headers)
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    assert response.json() == {"schema_version": "bailing.agent-invocation-inspection-capabilities.v1",
                               "receipt_schema": "bailing.agent-invocation-receipt.v1", "read_only": True}


def test_inspection_capabilities_refuse_a_query_string_and_a_stranger(agent):
    assert_error(agent.server.get(f"{BASE}/inspection-capabilities?x=1", headers=agent.headers),
                 400, "invalid_request")
    assert_error(agent.server.get(f"{BASE}/inspection-capabilities"), 401, "unauthorized")


# ================================================================ §2.14 receipt

def receipt(agent: Agent, label: str) -> dict:
    response = agent.receipt_raw(label)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == RECEIPT_KEYS
    assert body["schema_version"] == "bailing.agent-invocation-receipt.v1"
    assert body["read_only"] is True and body["business_operation_performed"] is False
    assert body["invocation_id"] == iid(label) and body["route"] == ROUTE
    assert MILLIS.fullmatch(body["observed_at"])
    observed = datetime.strptime(body["observed_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - observed).total_seconds()) < 60
    assert (body["result_source"] == "none") is (body["result"] is None)
    return body


def test_the_receipt_of_an_executed_call(agent, business, sql):
    run_id = turn(agent)
    done = post(agent, six(agent, "customer_get", CUSTOMER, "rcpt", run_id)).json()
    body = receipt(agent, "rcpt")
    assert body["agent_run_id"] == run_id and body["tool"] == "customer_get"
    assert body["result"] == done
    assert (body["result_source"], body["dispatch_state"], body["journal_state"]) == ("job", "attempted",
                                                                                       "completed")
    assert body["approval"] == {"status": "none"}


def test_the_receipt_reads_an_approval_without_consuming_it(agent, business, approver, sql):
    pending = awaiting(agent, "rcpt-wait")
    body = receipt(agent, "rcpt-wait")
    assert body["approval"] == {"status": "pending", "approval_id": pending["approval_id"]}
    assert body["agent_run_id"] is None  # made without a turn
    assert (body["dispatch_state"], body["journal_state"]) == ("not_dispatched", "absent")
    approver.approve(pending["approval"])
    before = snapshot(sql)
    for _ in range(3):
        body = receipt(agent, "rcpt-wait")
        assert body["approval"] == {"status": "approved", "approval_id": pending["approval_id"]}
        assert body["result"]["state"] == "awaiting_approval"
    assert snapshot(sql) == before  # read-only: nothing consumed, dispatched or changed
    assert business.executions() == []


def test_the_receipt_of_an_uncertain_call(agent, business):
    business.fault("customer_get", "drop_response")
    agent.invoke("customer_get", CUSTOMER, "rcpt-lost")
    body = receipt(agent, "rcpt-lost")
    assert body["result"]["state"] == "reconciliation_required"
    assert (body["dispatch_state"], body["journal_state"]) == ("unknown", "uncertain")


def test_an_interrupted_dispatch_reads_as_reconciliation_from_the_journal_and_stays_as_it_is(agent, business,
                                                                                            sql):
    agent.invoke("customer_note_add", {"customer_id": "C-100234", "body": "x"}, "rcpt-crash")
    sql("UPDATE bz_tool_invocations SET status = 'in_progress', business_status = NULL, result_body = NULL")
    sql("UPDATE bz_tool_journal SET state = 'dispatching', http_status = NULL, finished_at = NULL")
    before = snapshot(sql)
    body = receipt(agent, "rcpt-crash")  # no dispatcher holds the lock: it is gone
    assert body["result"]["state"] == "reconciliation_required" and body["result_source"] == "journal"
    assert (body["dispatch_state"], body["journal_state"]) == ("unknown", "dispatching")
    assert snapshot(sql) == before


def test_the_receipt_refuses_a_query_string_and_changes_nothing(agent, business, sql):
    agent.invoke("customer_get", CUSTOMER, "rcpt-q")
    before = snapshot(sql)
    assert_error(agent.server.get(f"{BASE}/{iid('rcpt-q')}/receipt?x=1", headers=agent.headers),
                 400, "invalid_request")
    assert snapshot(sql) == before


def test_the_receipt_of_a_tool_no_longer_authorized_is_409_capability_changed(agent, business, cli, tmp_path):
    agent.invoke("customer_note_add", {"customer_id": "C-100234", "body": "x"}, "rcpt-gone")
    config = governed_config(business.url)
    config["routes"][0]["tools"]["agent_direct"]["write_tools"].remove("customer_note_add")
    apply_config(cli, tmp_path, config)
    assert_error(agent.receipt_raw("rcpt-gone"), 409, "capability_changed")
    assert_error(agent.receipt_raw("never-made"), 404, "invocation_not_found")


# ================================================================ §4.3 admin tool approvals

def test_admin_approval_items_carry_upstreams_fields_beside_ours(agent, business, approver):
    pending = awaiting(agent, "adm")
    [item] = approver.approvals("pending")
    assert item["id"] == pending["approval"]["id"] and UUID.fullmatch(item["id"])
    assert type(item["approval_id"]) is int and item["approval_id"] == pending["approval_id"]
    assert UUID.fullmatch(item["job_id"])
    assert item["request_id"] == item["invocation_id"] == iid("adm")
    assert item["provider"] == "demo-crm" and item["tool"] == "customer_update_credit_limit"
    assert item["scope"] == "customer.write" and item["risk"] == "medium"
    assert HEX64.fullmatch(item["args_hash"]) and item["status"] == "pending"
    assert item["on_behalf_of"] == "tenant-7:user-42" and item["reason"] is None
    assert "args_json" not in item and "snapshot" not in item  # our spec: snapshots on demand only


def test_admin_approvals_filter_by_approved_and_denied(agent, business, approver):
    approved = awaiting(agent, "f1")
    denied = awaiting(agent, "f2")
    approver.approve(approved["approval"])
    approver.deny(denied["approval"])
    assert [i["approval_id"] for i in approver.approvals("approved")] == [approved["approval_id"]]
    assert [i["approval_id"] for i in approver.approvals("denied")] == [denied["approval_id"]]
    assert approver.approvals("pending") == []
    assert {i["approval_id"] for i in approver.approvals("all")} == {approved["approval_id"],
                                                                     denied["approval_id"]}


def test_an_approval_is_decided_by_its_number(agent, business, approver, sql):
    pending = awaiting(agent, "num")
    number = pending["approval_id"]
    assert approver.get(f"/tool-approvals/{number}").json()["id"] == pending["approval"]["id"]
    response = approver.decide(str(number), "approve", args_hash=pending["approval"]["args_hash"])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ok"] is True and body["rerun"] is False
    assert body["id"] == pending["approval"]["id"] and body["approval_id"] == number
    assert body["status"] == "approved"
    assert business.executions() == []  # the agent resumes; a decision never reruns the call


def test_deciding_again_is_refused_and_writes_nothing(agent, business, approver, sql):
    pending = awaiting(agent, "again")
    approver.approve(pending["approval"])
    before = snapshot(sql)
    response = approver.decide(str(pending["approval_id"]), "deny", args_hash=pending["approval"]["args_hash"],
                               reason="changed my mind")
    assert_error(response, 409, "approval_not_pending")
    assert snapshot(sql) == before


@pytest.mark.parametrize("ref", ["999999", "0", "-1", "9" * 30])
def test_an_unknown_approval_number_is_404(approver, sql, ref):
    before = snapshot(sql)
    assert_error(approver.get(f"/tool-approvals/{ref}"), 404, "approval_not_found")
    assert_error(approver.decide(ref, "approve", args_hash="0" * 64), 404, "approval_not_found")
    assert snapshot(sql) == before


# ================================================================ sql/059: numeric approval ids

def test_migration_059_numbers_existing_approvals_in_creation_order(empty_db):
    import uuid as uuid_mod

    import psycopg

    from admin_app import migrations
    from tests.conftest import SQL_DIR

    assert migrations.upgrade(empty_db, SQL_DIR, to=58)[-1] == "058_agent_conversation_member_bindings.sql"
    ids = [uuid_mod.uuid4() for _ in range(3)]
    ages = {ids[0]: 30, ids[1]: 10, ids[2]: 20}  # seconds ago: creation order is 0, 2, 1
    with psycopg.connect(empty_db, autocommit=True) as conn:
        conn.execute("INSERT INTO bz_client_apps (app_id, name) VALUES ('app-one', 'App')")
        session = uuid_mod.uuid4()
        conn.execute("INSERT INTO bz_agent_sessions (id, client_app_id, allowed_routes, access_token_hash, "
                     "access_expires_at, refresh_expires_at, identity_hash) VALUES "
                     "(%s, 'app-one', '{desk}', %s, now(), now(), %s)", (session, "a" * 64, "b" * 64))
        for n, approval in enumerate(ids):
            job = uuid_mod.uuid4()
            conn.execute("INSERT INTO bz_tool_invocations (id, session_id, invocation_id, route_key, tool, "
                         "provider, scope, request_hash, args_hash, argument_keys, execution_fingerprint, "
                         "capability_revision, status) VALUES (%s, %s, %s, 'desk', 't', 'p', 's', %s, %s, "
                         "'{}', %s, %s, 'awaiting_approval')",
                         (job, session, str(n), "c" * 64, "d" * 64, "e" * 64, "f" * 64))
            conn.execute("INSERT INTO bz_tool_approvals (id, job_id, tool, route_key, risk, policy, snapshot, "
                         "args_hash, snapshot_bytes, argument_keys, summary, created_at) VALUES "
                         "(%s, %s, 't', 'desk', 'high', '{}', '{}', %s, 2, '{}', 's', "
                         "now() - make_interval(secs => %s))", (approval, job, "d" * 64, ages[approval]))
    assert migrations.upgrade(empty_db, SQL_DIR, to=59) == ["059_tool_approval_numbers.sql"]
    with psycopg.connect(empty_db, autocommit=True) as conn:
        numbers = dict(conn.execute("SELECT id, number FROM bz_tool_approvals").fetchall())
        assert [numbers[ids[0]], numbers[ids[2]], numbers[ids[1]]] == [1, 2, 3]
        job = conn.execute("SELECT job_id FROM bz_tool_approvals WHERE id = %s", (ids[0],)).fetchone()[0]
        conn.execute("DELETE FROM bz_tool_approvals WHERE id = %s", (ids[0],))
        (fresh,) = conn.execute("INSERT INTO bz_tool_approvals (id, job_id, tool, route_key, risk, policy, "
                                "snapshot, args_hash, snapshot_bytes, argument_keys, summary) VALUES "
                                "(%s, %s, 't', 'desk', 'high', '{}', '{}', %s, 2, '{}', 's') RETURNING number",
                                (uuid_mod.uuid4(), job, "d" * 64)).fetchone()
        assert fresh == 4  # new rows continue after the highest number, never reuse one
