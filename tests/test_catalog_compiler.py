"""The OpenAPI + ACC compiler and the text bounds, without a database.

Real documents: examples/crm.openapi.json and examples/erp.openapi.json. Small inline documents
for the boundary and error cases.
"""
from __future__ import annotations

import copy
import json

import pytest

from admin_app.catalog import text_bounds
from admin_app.catalog.compiler import CompileError, compile_provider
from admin_app.catalog.projection import Visible
from admin_app.catalog.text_bounds import bound_description, bound_guidance
from tests.conftest import EXAMPLES

# Pure Python: no database.
pytestmark = pytest.mark.any_server

PROVIDER_TIMEOUT = 7777  # distinct from every ACC timeout_ms in the examples
BASE_URL = "http://127.0.0.1:8100"


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.openapi.json").read_text())


def compiled(doc: dict, *, base_url: str = BASE_URL, timeout_ms: int = PROVIDER_TIMEOUT):
    return compile_provider("p", doc, base_url, timeout_ms)


def refs_in(node) -> list:
    """Every "$ref" key anywhere below node."""
    if isinstance(node, dict):
        return (["$ref"] if "$ref" in node else []) + [r for v in node.values() for r in refs_in(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs_in(v)]
    return []


# ---------------------------------------------------------------- the example documents

# name: (doc, scope, method, path, readonly, idempotent, risk, approval_required, n_when_rules,
#        subject_required, sensitive, timeout_ms, properties, required)
EXPECTED = {
    "customer_search": ("crm", "customer.read", "GET", "/customers", True, True, "low", False, 0,
                        False, False, 5000, {"q"}, {"q"}),
    "customer_get": ("crm", "customer.read", "GET", "/customers/{customer_id}", True, True, "low", False, 0,
                     False, False, PROVIDER_TIMEOUT, {"customer_id"}, {"customer_id"}),
    "customer_update_credit_limit": ("crm", "customer.write", "PATCH", "/customers/{customer_id}", False,
                                     False, "medium", False, 1, True, False, 10000,
                                     {"customer_id", "credit_limit"}, {"customer_id", "credit_limit"}),
    "customer_contacts_list": ("crm", "customer.read", "GET", "/customers/{customer_id}/contacts", True,
                               True, "low", False, 0, False, False, 5000,
                               {"customer_id", "role", "limit"}, {"customer_id"}),
    "customer_note_add": ("crm", "customer.write", "POST", "/customers/{customer_id}/notes", False, False,
                          "low", False, 0, True, False, 5000,
                          {"customer_id", "body", "visibility", "pinned"}, {"customer_id", "body"}),
    "customer_update_email": ("crm", "customer.write", "PUT", "/customers/{customer_id}/email", False, True,
                              "medium", False, 0, True, False, 8000,
                              {"customer_id", "email", "notify_customer"}, {"customer_id", "email"}),
    # risk high without approval.required: approval is still required
    "customer_merge": ("crm", "customer.write", "POST", "/customer-merges", False, False, "high", True, 0,
                       True, False, 30000, {"source_customer_id", "target_customer_id", "reason"},
                       {"source_customer_id", "target_customer_id", "reason"}),
    # a POST that ACC declares readonly; sensitive arguments
    "customer_export_csv": ("crm", "customer.export", "POST", "/customer-exports", True, True, "medium",
                            False, 0, True, True, 60000,
                            {"segment", "status", "country", "created_after", "fields", "include_contacts"},
                            set()),
    "order_list": ("erp", "order.read", "GET", "/orders", True, True, "low", False, 0, False, False, 8000,
                   {"status", "customer_id", "limit", "cursor"}, set()),
    "order_create": ("erp", "order.write", "POST", "/orders", False, False, "medium", False, 0, True, False,
                     15000, {"customer_id", "lines", "currency", "shipping_address",
                             "requested_delivery_date", "customer_reference"},
                     {"customer_id", "lines", "currency"}),
    "order_get": ("erp", "order.read", "GET", "/orders/{order_id}", True, True, "low", False, 0, False, False,
                  5000, {"order_id"}, {"order_id"}),
    "order_cancel": ("erp", "order.write", "POST", "/orders/{order_id}/cancellation", False, True, "high",
                     True, 0, True, False, 15000, {"order_id", "reason", "comment"}, {"order_id", "reason"}),
    "order_update_shipping_address": ("erp", "order.write", "PUT", "/orders/{order_id}/shipping-address",
                                      False, True, "medium", False, 0, True, False, 10000,
                                      {"order_id", "recipient", "line1", "line2", "postal_code", "city",
                                       "region", "country"},
                                      {"order_id", "recipient", "line1", "postal_code", "city", "country"}),
    "inventory_get": ("erp", "inventory.read", "GET", "/inventory/{sku}", True, True, "low", False, 0, False,
                      False, 5000, {"sku", "warehouse_id"}, {"sku"}),
    "inventory_search": ("erp", "inventory.read", "POST", "/inventory/search", True, True, "low", False, 0,
                         False, False, 10000,
                         {"text", "warehouse_ids", "below_reorder_point", "min_available", "limit", "cursor"},
                         set()),
    "inventory_adjust": ("erp", "inventory.write", "POST", "/inventory/{sku}/adjustments", False, False,
                         "medium", False, 2, True, False, 10000,
                         {"sku", "warehouse_id", "quantity_delta", "reason", "comment", "reference"},
                         {"sku", "warehouse_id", "quantity_delta", "reason"}),
    "inventory_reserve": ("erp", "inventory.write", "POST", "/inventory/{sku}/reservations", False, True,
                          "low", False, 0, True, False, 8000,
                          {"sku", "order_id", "warehouse_id", "quantity", "hold_minutes"},
                          {"sku", "order_id", "warehouse_id", "quantity"}),
    "warehouse_list": ("erp", "inventory.read", "GET", "/warehouses", True, True, "low", False, 0, False,
                       False, 3000, {"country", "active"}, set()),
    # a large text body (a whole CSV file) behind a required approval
    "order_import": ("erp", "order.write", "POST", "/order-imports", False, False, "high", True, 0, True,
                     False, 60000, {"file_name", "csv", "dry_run"}, {"file_name", "csv"}),
}


@pytest.fixture(scope="module")
def examples() -> dict:
    return {name: compiled(example(name)) for name in ("crm", "erp")}


@pytest.mark.parametrize("doc", ["crm", "erp"])
def test_exactly_the_enabled_acc_operations_become_tools(examples, doc):
    expected = {name for name, row in EXPECTED.items() if row[0] == doc}
    assert set(examples[doc].tools) == expected
    assert examples[doc].warnings == []


def test_disabled_acc_and_operations_without_acc_give_no_tool(examples):
    raw = example("crm")
    assert raw["paths"]["/customers/{customer_id}"]["delete"]["x-agent-capability"]["enabled"] is False
    assert "x-agent-capability" not in raw["paths"]["/health"]["get"]
    assert "customer_delete" not in examples["crm"].tools
    assert "health_check" not in examples["crm"].tools


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_operation_compiles_to_its_governance_flags(examples, name):
    (doc, scope, method, path, readonly, idempotent, risk, approval, n_rules, subject, sensitive,
     timeout, properties, required) = EXPECTED[name]
    tool = examples[doc].tools[name]
    acc = example(doc)["paths"][path][method.lower()]["x-agent-capability"]
    assert (tool.name, tool.scope, tool.method, tool.path) == (name, scope, method, path)
    assert (tool.readonly, tool.idempotent, tool.risk) == (readonly, idempotent, risk)
    assert tool.approval_required is approval
    assert list(tool.approval_rules) == acc.get("approval", {}).get("when", [])
    assert len(tool.approval_rules) == n_rules
    assert tool.approval_prompt == acc.get("approval", {}).get("prompt")
    assert (tool.subject_required, tool.sensitive, tool.timeout_ms) == (subject, sensitive, timeout)
    schema = tool.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == properties
    assert set(schema.get("required", [])) == required
    assert refs_in(schema) == []


def test_path_and_query_parameters_and_body_properties_are_flattened(examples):
    contacts = examples["crm"].tools["customer_contacts_list"]
    assert contacts.locations == {"customer_id": "path", "role": "query", "limit": "query"}
    assert contacts.input_schema["properties"]["role"]["enum"] == [
        "billing", "purchasing", "technical", "executive", "other"]
    # the parameter's description is kept on its schema
    assert contacts.input_schema["properties"]["limit"]["description"] == "Maximum number of contacts to return."

    credit = examples["crm"].tools["customer_update_credit_limit"]
    assert credit.locations == {"customer_id": "path", "credit_limit": "body"}
    assert credit.input_schema["properties"]["credit_limit"]["type"] == "number"


def test_refs_in_bodies_are_resolved_to_their_schemas(examples):
    note = examples["crm"].tools["customer_note_add"].input_schema["properties"]
    assert note["visibility"] == {"type": "string", "enum": ["internal", "account_team"], "default": "internal"}

    order = examples["erp"].tools["order_create"].input_schema["properties"]
    assert order["currency"] == {"type": "string", "enum": ["EUR", "USD", "GBP", "CHF"]}
    line = order["lines"]["items"]
    assert line["required"] == ["sku", "quantity", "unit_price"]
    assert set(line["properties"]) == {"sku", "quantity", "unit_price"}
    assert order["shipping_address"]["properties"]["country"]["pattern"] == "^[A-Z]{2}$"

    address = examples["erp"].tools["order_update_shipping_address"]
    assert address.locations["recipient"] == "body" and address.locations["order_id"] == "path"


def test_provider_timeout_applies_only_without_acc_timeout():
    doc = example("crm")
    low, high = compiled(doc, timeout_ms=1000).tools, compiled(doc, timeout_ms=90000).tools
    assert (low["customer_get"].timeout_ms, high["customer_get"].timeout_ms) == (1000, 90000)
    assert low["customer_search"].timeout_ms == high["customer_search"].timeout_ms == 5000



@pytest.mark.parametrize("risk, required, expected", [
    ("low", None, False), ("medium", False, False), ("low", True, True), ("high", None, True),
    ("high", False, True),  # approval.required: false cannot switch off what risk: high demands
])
def test_approval_required_from_acc_required_or_high_risk(risk, required, expected):
    acc = {"risk": {"level": risk}}
    if required is not None:
        acc["approval"] = {"required": required}
    tool = compiled(one_tool_doc(acc, summary="x")).tools["x_read"]
    assert tool.approval_required is expected


def test_path_item_parameters_are_inherited_and_overridden_and_bodies_kept_whole():
    acc = {"version": 1, "enabled": True, "scope": "x.write", "execution": {"readonly": False}}
    doc = {"openapi": "3.1.0", "info": {"title": "x", "version": "1"}, "paths": {"/x/{id}": {
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "lang", "in": "query", "schema": {"type": "string"}}],
        "post": {"operationId": "x_post", "x-agent-capability": acc, "parameters": [
            {"name": "lang", "in": "query", "required": True, "schema": {"type": "string", "enum": ["en", "de"]}},
            {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}],
            "requestBody": {"required": False, "content": {"application/json": {"schema": {
                "type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}}}}},
        "put": {"operationId": "x_put", "x-agent-capability": acc, "requestBody": {"required": True, "content": {
            "application/merge-patch+json": {"schema": {"type": "array", "items": {"type": "string"}}}}}},
    }}}
    result = compiled(doc)
    post, put = result.tools["x_post"], result.tools["x_put"]
    assert post.input_schema["properties"] == {
        "id": {"type": "string"}, "lang": {"type": "string", "enum": ["en", "de"]}, "a": {"type": "integer"}}
    assert post.input_schema["required"] == ["id", "lang"]  # an optional body makes none of it required
    assert post.locations == {"id": "path", "lang": "query", "a": "body"}
    assert put.locations == {"id": "path", "lang": "query", "body": "whole_body"}
    assert put.input_schema["required"] == ["body", "id"]
    assert [(w["code"], w["tool"]) for w in result.warnings] == [("parameter_not_exposed", "x_post")]

    doc["paths"]["/x/{id}"]["post"]["parameters"][1]["required"] = True  # a required header
    with pytest.raises(CompileError) as caught:
        compiled(doc)
    assert any("x_post" in loc and "X-Trace" in msg for loc, msg in caught.value.problems)



def extension_keys(node) -> list[str]:
    if isinstance(node, dict):
        return [k for k in node if k.startswith("x-")] + [x for v in node.values() for x in extension_keys(v)]
    if isinstance(node, list):
        return [x for v in node for x in extension_keys(v)]
    return []


def test_vendor_extensions_inside_schemas_do_not_reach_the_projection():
    doc = thing_doc()
    thing_op(doc)["parameters"][0]["schema"]["x-db-column"] = "things.internal_id"
    doc["components"]["schemas"]["ThingUpdate"]["properties"]["amount"]["x-ledger-account"] = "4711"
    tool = compiled(doc).tools["thing_update"]
    assert set(tool.input_schema["properties"]) == {"thing_id", "amount", "note", "tags"}
    assert extension_keys(Visible(tool, False).projection()) == []


# ---------------------------------------------------------------- compile errors

def thing_doc() -> dict:
    """One valid write operation with a path parameter and a $ref'd object body."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "Things", "version": "1"},
        "paths": {
            "/things/{thing_id}": {
                "patch": {
                    "operationId": "thing_update",
                    "summary": "Update a thing",
                    "parameters": [{"name": "thing_id", "in": "path", "required": True,
                                    "schema": {"type": "string"}}],
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/ThingUpdate"}}}},
                    "responses": {"200": {"description": "ok"}},
                    "x-agent-capability": {
                        "version": 1, "enabled": True, "scope": "thing.write",
                        "risk": {"level": "medium"},
                        "approval": {"when": [{"param": "amount", "op": ">", "value": 100}]},
                        "execution": {"readonly": False},
                    },
                },
            },
        },
        "components": {"schemas": {"ThingUpdate": {
            "type": "object", "required": ["amount"],
            "properties": {"amount": {"type": "number"}, "note": {"type": "string"},
                           "tags": {"type": "array", "items": {"type": "string"}}},
        }}},
    }


def thing_op(doc: dict) -> dict:
    return doc["paths"]["/things/{thing_id}"]["patch"]


def set_acc(keys: tuple, value):
    def mutate(doc):
        node = thing_op(doc)["x-agent-capability"]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return mutate


def when(rule: dict):
    return set_acc(("approval", "when"), [rule])


def ref_cycle(doc):
    doc["components"]["schemas"]["ThingUpdate"]["properties"]["parent"] = {
        "$ref": "#/components/schemas/ThingUpdate"}


def duplicate_operation_id(doc):
    doc["paths"]["/other-things"] = {"post": copy.deepcopy(thing_op(doc))}
    del doc["paths"]["/other-things"]["post"]["parameters"]


def no_operation_id(doc):
    del thing_op(doc)["operationId"]


# case: (mutation, where the error must point, a word the message must contain)
COMPILE_ERRORS = {
    "risk-extreme": (set_acc(("risk", "level"), "extreme"), "thing_update", "risk.level"),
    "version-2": (set_acc(("version",), 2), "thing_update", "version"),
    "missing-scope": (set_acc(("scope",), KeyError), "thing_update", "scope"),
    "timeout-zero": (set_acc(("execution", "timeout_ms"), 0), "thing_update", "timeout_ms"),
    "when-undeclared-param": (when({"param": "discount", "op": ">", "value": 1}), "thing_update", "discount"),
    "when-numeric-op-on-string": (when({"param": "note", "op": ">", "value": 5}), "thing_update", "note"),
    "when-in-with-scalar": (when({"param": "note", "op": "in", "value": "urgent"}), "thing_update", "note"),
    "when-string-never-coerced": (when({"param": "amount", "op": "==", "value": "100"}), "thing_update",
                                  "amount"),
    "when-unknown-op": (when({"param": "amount", "op": "~=", "value": 1}), "thing_update", "when"),
    "duplicate-operation-id": (duplicate_operation_id, "thing_update", "twice"),
    "missing-operation-id": (no_operation_id, "paths./things/{thing_id}.patch", "operationId"),
    "ref-cycle": (ref_cycle, "thing_update", "$ref"),
}


@pytest.mark.parametrize("mutate, where, word", COMPILE_ERRORS.values(), ids=COMPILE_ERRORS.keys())
def test_compile_error_names_the_operation(mutate, where, word):
    doc = thing_doc()
    compiled(doc)  # the unmutated document compiles
    mutate(doc)
    with pytest.raises(CompileError) as caught:
        compiled(doc)
    assert caught.value.problems, "a compile error carries its problems"
    assert any(where in f"{loc}: {msg}" and word in msg for loc, msg in caught.value.problems), \
        caught.value.problems


@pytest.mark.parametrize("rule", [
    {"param": "amount", "op": ">=", "value": 1.5},
    {"param": "amount", "op": "in", "value": [1, 2.5]},
    {"param": "note", "op": "contains", "value": "urgent"},
    {"param": "note", "op": "==", "value": "x"},
    {"param": "tags", "op": "contains", "value": "vip"},
    {"param": "thing_id", "op": "in", "value": ["a", "b"]},
    {"param": "note", "op": "exists"},
], ids=lambda r: f"{r['param']} {r['op']}")
def test_well_typed_approval_rules_compile_and_are_kept(rule):
    doc = thing_doc()
    when(rule)(doc)
    tool = compiled(doc).tools["thing_update"]
    assert list(tool.approval_rules) == [rule]
    assert tool.approval_required is False


def test_recursive_schema_of_an_operation_without_acc_does_not_break_the_provider():
    doc = thing_doc()
    doc["components"]["schemas"]["Node"] = {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}
    doc["paths"]["/tree"] = {"get": {"operationId": "tree_get", "responses": {"200": {
        "description": "tree", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Node"}}}}}}}
    assert set(compiled(doc).tools) == {"thing_update"}


# ---------------------------------------------------------------- description bound (500 code points)

GRIN = "\U0001F600"  # 😀: one code point, four UTF-8 bytes, two UTF-16 units
EURO = "\u20ac"      # €: one code point, three UTF-8 bytes


@pytest.mark.parametrize("text, kept, truncated", [
    ("a" * 500, "a" * 500, False),
    ("a" * 501, "a" * 500, True),
    (GRIN * 500, GRIN * 500, False),
    (GRIN * 501, GRIN * 500, True),
    ("a" * 499 + GRIN, "a" * 499 + GRIN, False),
    ("a" * 499 + GRIN + "b", "a" * 499 + GRIN, True),
    ("\x07\x00" * 20 + "a" * 500, "a" * 500, False),  # controls are cleaned before counting
], ids=["500-ascii", "501-ascii", "500-astral", "501-astral", "499+astral", "499+astral+1",
        "controls-not-counted"])
def test_description_is_capped_at_500_code_points(text, kept, truncated):
    bounded = bound_description(text)
    assert bounded.text == kept
    assert bounded.truncated is truncated


def one_tool_doc(acc_extra: dict | None = None, **op) -> dict:
    return {"openapi": "3.1.0", "info": {"title": "x", "version": "1"}, "paths": {"/x": {"get": {
        "operationId": "x_read", "responses": {"200": {"description": "ok"}}, **op,
        "x-agent-capability": {"version": 1, "enabled": True, "scope": "x.read", **(acc_extra or {})},
    }}}}


def only_tool(doc: dict):
    result = compiled(doc)
    return result.tools["x_read"], result.warnings


@pytest.mark.parametrize("summary, truncated", [
    ("s" * 500, False), ("s" * 501, True), (GRIN * 500, False), (GRIN * 501, True),
], ids=["500", "501", "500-astral", "501-astral"])
def test_compiled_summary_is_truncated_with_a_warning_only_past_500(summary, truncated):
    tool, warnings = only_tool(one_tool_doc(summary=summary))
    assert tool.description.text == summary[:500]
    assert len(tool.description.text) == min(len(summary), 500)
    assert tool.description.truncated is truncated
    assert tool.description.source_chars == len(summary)
    view = Visible(tool, False).projection()
    assert view["description"] == summary[:500]
    assert view.get("description_truncated") is (True if truncated else None)
    expected = [("tool_description_truncated", "x_read")] if truncated else []
    assert [(w["code"], w["tool"]) for w in warnings] == expected


# ---------------------------------------------------------------- guidance bound (32768 cp / 65536 B)

@pytest.mark.parametrize("text, kept, truncated", [
    ("a" * 32768, "a" * 32768, False),
    ("a" * 32769, "a" * 32768, True),
    ("a" * 32768 + EURO, "a" * 32768, True),          # code-point limit first (32771 bytes)
    (EURO * 21845, EURO * 21845, False),              # 65535 bytes
    (EURO * 21846, EURO * 21845, True),               # 65538 bytes: byte limit long before 32768 cp
    ("\u00e9" * 32768, "\u00e9" * 32768, False),      # exactly both limits
    ("\u00e9" * 32769, "\u00e9" * 32768, True),
    (GRIN * 16384, GRIN * 16384, False),              # exactly 65536 bytes
    (GRIN * 16385, GRIN * 16384, True),
    ("a" + GRIN * 16384, "a" + GRIN * 16383, True),   # the last 😀 straddles: dropped whole
    ("abc" + GRIN * 16384, "abc" + GRIN * 16383, True),
    (EURO * 1000 + GRIN * 1000 + "x" * 1000, EURO * 1000 + GRIN * 1000 + "x" * 1000, False),
], ids=["32768-ascii", "32769-ascii", "cp-first", "21845-euro", "21846-euro", "32768-e-acute",
        "32769-e-acute", "16384-grin", "16385-grin", "straddle-1", "straddle-3", "under-both"])
def test_guidance_is_bounded_by_code_points_and_bytes(text, kept, truncated):
    bounded = bound_guidance(text)
    assert bounded.text == kept
    assert bounded.truncated is truncated
    assert bounded.source_chars == len(text)
    assert bounded.source_bytes == len(text.encode("utf-8"))
    encoded = bounded.text.encode("utf-8")
    assert len(bounded.text) <= 32768 and len(encoded) <= 65536
    assert encoded.decode("utf-8") == bounded.text and "\ufffd" not in bounded.text
    assert text.startswith(bounded.text)
    if truncated:  # the longest prefix: one more character would break a limit
        following = text[len(bounded.text)]
        assert len(bounded.text) + 1 > 32768 or len(encoded) + len(following.encode("utf-8")) > 65536


def test_euro_guidance_reports_its_original_size():
    bounded = bound_guidance(EURO * 21846)
    assert (len(bounded.text), bounded.truncated, bounded.source_chars, bounded.source_bytes) == (
        21845, True, 21846, 65538)


@pytest.mark.parametrize("text, cleaned", [
    ("a" * 32768 + "\x00\x01\x1b\x7f\x85", "a" * 32768),
    ("line\r\nnext\rlast\tend", "line\nnext\nlast\tend"),
    ("\x00" * 10 + "a" * 32769, "a" * 32768),
], ids=["controls-at-the-limit", "newlines-and-tab", "controls-before-overflow"])
def test_guidance_counts_after_control_character_cleanup(text, cleaned):
    bounded = bound_guidance(text)
    assert bounded.text == cleaned
    expected_source = text_bounds.clean(text)
    assert bounded.source_chars == len(expected_source)
    assert bounded.source_bytes == len(expected_source.encode("utf-8"))
    assert bounded.truncated is (len(expected_source) > 32768)


def test_compiled_long_guidance_is_cut_with_a_warning():
    tool, warnings = only_tool(one_tool_doc(summary="Long", description=EURO * 30000))
    source = "Long\n\n" + EURO * 30000
    g = tool.guidance
    assert (g.truncated, g.source_chars, g.source_bytes) == (True, len(source), len(source.encode()))
    assert g.text == source[:6 + (65536 - 6) // 3]
    assert len(g.text.encode()) <= 65536
    assert [(w["code"], w["tool"]) for w in warnings] == [("tool_usage_guidance_truncated", "x_read")]
    assert Visible(tool, False).usage_guidance() == {
        "text": g.text, "truncated": True, "source_chars": len(source), "max_chars": 32768,
        "source_bytes": len(source.encode()), "max_bytes": 65536}


# ---------------------------------------------------------------- usage guidance availability

@pytest.mark.parametrize("op, guidance, available, parts", [
    ({"summary": "Read x"}, None, False, ["Read x"]),
    ({"description": "Reads x in detail."}, None, False, ["Reads x in detail."]),
    ({"summary": "Read x", "description": "Reads x in detail."}, None, True,
     ["Read x", "Reads x in detail."]),
    ({"summary": "Read x"}, {"when_to_use": "When x is needed."}, True, ["Read x", "When x is needed."]),
    ({"summary": "Read x"}, {"returns": "One x."}, True, ["Read x", "One x."]),
    ({"summary": "Read x"}, {"examples": [{"id": "first"}, {"id": "second"}]}, True,
     ["Read x", '"first"']),
], ids=["summary-only", "description-only", "summary+description", "when_to_use", "returns", "examples"])
def test_usage_guidance_available_only_when_guidance_holds_more(op, guidance, available, parts):
    acc = {"guidance": guidance} if guidance else None
    tool, warnings = only_tool(one_tool_doc(acc, **op))
    assert warnings == []
    assert tool.usage_guidance_available is available
    view = Visible(tool, False).projection()
    assert view.get("usage_guidance_available") is (True if available else None)
    assert "description_truncated" not in view
    for part in parts:
        assert part in tool.guidance.text
    assert '"second"' not in tool.guidance.text  # only the first example
    assert tool.guidance.truncated is False


def test_example_guidance_keeps_summary_description_and_first_example(examples):
    tool = examples["crm"].tools["customer_search"]
    op = example("crm")["paths"]["/customers"]["get"]
    guidance = op["x-agent-capability"]["guidance"]
    text = tool.guidance.text
    for part in (op["summary"], op["description"], guidance["when_to_use"], guidance["returns"], "Nordwind"):
        assert part in text
    assert "billing@acme-logistics.example" not in text
    assert tool.description.text == op["summary"]
    assert tool.usage_guidance_available is True


# ---------------------------------------------------------------- execution fingerprint

def test_execution_fingerprint_follows_execution_not_wording():
    doc = thing_doc()
    base = compiled(doc).tools["thing_update"].execution_fingerprint
    assert compiled(doc).tools["thing_update"].execution_fingerprint == base

    reworded = thing_doc()
    thing_op(reworded)["summary"] = "Update one thing (reworded)"
    thing_op(reworded)["x-agent-capability"]["guidance"] = {"when_to_use": "Whenever."}
    assert compiled(reworded).tools["thing_update"].execution_fingerprint == base

    moved = compiled(doc, base_url="http://127.0.0.1:9999").tools["thing_update"]
    assert moved.execution_fingerprint != base
    riskier = thing_doc()
    thing_op(riskier)["x-agent-capability"]["risk"]["level"] = "high"
    assert compiled(riskier).tools["thing_update"].execution_fingerprint != base
