"""`config apply` of the providers' rate-limit fields (BUSINESS_SIDE.md §D.2): `rate_limit_per_min`
(an integer >= 0, Core's 120 when omitted) and `tool_rate_limits` (`default`, `overrides`, each
policy exactly inherit / disabled / custom). Every refusal names the field's path and writes
nothing; an invalid ACC declaration is accepted as "no limit" with a warning in the report."""
from __future__ import annotations

import json

from tests.conftest import EXAMPLES
from tests.helpers import apply_config, cli_refused

PROVIDER = {"name": "demo-crm", "base_url": "http://127.0.0.1:9/crm", "openapi": str(EXAMPLES / "crm.openapi.json"),
            "secret_env": "DEMO_CRM_SECRET"}
AT = "tool_providers[0]"
POLICIES = f"{AT}.tool_rate_limits"


def refused(cli, tmp_path, **fields) -> list[dict]:
    path = tmp_path / "hub.json"
    path.write_text(json.dumps({"tool_providers": [{**PROVIDER, **fields}]}))
    return cli_refused(cli("config", "apply", str(path)), "invalid_request")["problems"]


def stored(sql) -> list[tuple]:
    return sql("SELECT name, rate_limit_per_min, tool_rate_limits FROM bz_tool_providers ORDER BY name")


CUSTOM = {"mode": "custom", "count": 5, "window": "1m"}


# (fields, path, message); all refused on one database (a database per case would cost seconds).
BAD = [
    ({"rate_limit_per_min": -1}, f"{AT}.rate_limit_per_min", "must be at least 0"),
    ({"rate_limit_per_min": 1.5}, f"{AT}.rate_limit_per_min", "must be a whole number"),
    ({"rate_limit_per_min": "120"}, f"{AT}.rate_limit_per_min", "must be a whole number"),
    ({"rate_limit_per_min": True}, f"{AT}.rate_limit_per_min", "must be a whole number"),
    ({"rate_limit_per_min": 1_000_001}, f"{AT}.rate_limit_per_min", "must be at most 1000000"),
    ({"tool_rate_limits": "inherit"}, POLICIES, "must be an object"),
    ({"tool_rate_limits": {"defaults": {"mode": "inherit"}}}, f"{POLICIES}.defaults", "is not a known field"),
    ({"tool_rate_limits": {"default": None}}, f"{POLICIES}.default", "must be an object"),
    ({"tool_rate_limits": {"default": {}}}, f"{POLICIES}.default.mode", "is required"),
    ({"tool_rate_limits": {"default": {"mode": "sometimes"}}}, f"{POLICIES}.default.mode",
     "must be 'inherit', 'disabled' or 'custom'"),
    ({"tool_rate_limits": {"default": {"mode": "inherit", "count": 5}}}, f"{POLICIES}.default.count",
     "is not a known field"),
    ({"tool_rate_limits": {"default": {"mode": "disabled", "window": "1m"}}}, f"{POLICIES}.default.window",
     "is not a known field"),
    ({"tool_rate_limits": {"default": {"mode": "custom", "window": "1m"}}}, f"{POLICIES}.default.count",
     "is required"),
    ({"tool_rate_limits": {"default": {"mode": "custom", "count": 5}}}, f"{POLICIES}.default.window", "is required"),
    ({"tool_rate_limits": {"default": {**CUSTOM, "count": 0}}}, f"{POLICIES}.default.count", "must be at least 1"),
    ({"tool_rate_limits": {"default": {**CUSTOM, "count": 1_000_001}}}, f"{POLICIES}.default.count",
     "must be at most 1000000"),
    ({"tool_rate_limits": {"default": {**CUSTOM, "count": 2.0}}}, f"{POLICIES}.default.count",
     "must be a whole number"),
    ({"tool_rate_limits": {"default": {**CUSTOM, "window": "60s"}}}, f"{POLICIES}.default.window",
     "must be '1s', '1m', '1h' or '1d'"),
    ({"tool_rate_limits": {"default": {**CUSTOM, "burst": 2}}}, f"{POLICIES}.default.burst", "is not a known field"),
    ({"tool_rate_limits": {"overrides": []}}, f"{POLICIES}.overrides", "must be an object"),
    ({"tool_rate_limits": {"overrides": {"9lives": CUSTOM}}}, f"{POLICIES}.overrides.9lives",
     "must be a tool name (^[A-Za-z_][A-Za-z0-9_]{0,63}$)"),
    ({"tool_rate_limits": {"overrides": {"customer_get": "disabled"}}}, f"{POLICIES}.overrides.customer_get",
     "must be an object"),
    ({"tool_rate_limits": {"overrides": {"customer_get": {**CUSTOM, "window": "1w"}}}},
     f"{POLICIES}.overrides.customer_get.window", "must be '1s', '1m', '1h' or '1d'"),
    ({"tool_rate_limits": {"overrides": {f"t{i}": {"mode": "disabled"} for i in range(1001)}}},
     f"{POLICIES}.overrides", "must have at most 1000 entries"),
]


def test_a_bad_rate_limit_field_is_refused_by_its_path_and_writes_nothing(cli, sql, tmp_path):
    for fields, path, message in BAD:
        problems = refused(cli, tmp_path, **fields)
        assert {"path": path, "message": message} in problems, (fields, problems)
        assert stored(sql) == [], fields


def test_a_refused_change_leaves_the_stored_provider_as_it_was(cli, sql, tmp_path):
    apply_config(cli, tmp_path, {"tool_providers": [{**PROVIDER, "rate_limit_per_min": 30}]})
    before = sql("SELECT xmin::text, rate_limit_per_min, tool_rate_limits FROM bz_tool_providers")
    refused(cli, tmp_path, rate_limit_per_min=10, tool_rate_limits={"overrides": {"customer_get": {"mode": "off"}}})
    assert sql("SELECT xmin::text, rate_limit_per_min, tool_rate_limits FROM bz_tool_providers") == before


def test_the_fields_are_stored_defaulted_and_reported_when_changed(cli, sql, tmp_path):
    # Omitted: Core's 120 a minute, and the declarations as they are.
    report = apply_config(cli, tmp_path, {"tool_providers": [PROVIDER]})
    assert report["created"]["tool_providers"] == ["demo-crm"]
    assert stored(sql) == [("demo-crm", 120, None)]
    policies = {"default": {"mode": "disabled"},
                "overrides": {"customer_get": CUSTOM, "customer_export_csv": {"mode": "inherit"}}}
    report = apply_config(cli, tmp_path, {"tool_providers": [{**PROVIDER, "rate_limit_per_min": 0,
                                                              "tool_rate_limits": policies}]})
    assert report["changed"]["tool_providers"] == ["demo-crm (rate_limit_per_min, tool_rate_limits)"]
    assert stored(sql) == [("demo-crm", 0, policies)]
    # null: back to the declarations.
    report = apply_config(cli, tmp_path, {"tool_providers": [{**PROVIDER, "rate_limit_per_min": 0,
                                                              "tool_rate_limits": None}]})
    assert report["changed"]["tool_providers"] == ["demo-crm (tool_rate_limits)"]
    assert stored(sql) == [("demo-crm", 0, None)]


def test_an_invalid_declaration_is_no_limit_and_a_warning_not_a_refusal(cli, sql, tmp_path):
    doc = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    doc["paths"]["/customers/{customer_id}"]["get"]["x-agent-capability"]["execution"]["rate_limit"] = \
        {"count": -3, "window": "1m"}
    path = tmp_path / "crm-bad-limit.json"
    path.write_text(json.dumps(doc))
    report = apply_config(cli, tmp_path, {"tool_providers": [{**PROVIDER, "openapi": str(path)}]})
    assert {"provider": "demo-crm", "code": "rate_limit_declaration_invalid", "tool": "customer_get",
            "message": "execution.rate_limit is not {count: positive integer, window: 1s|1m|1h|1d}; "
                       "the tool has no declared rate limit"} in report["warnings"]
    assert stored(sql) == [("demo-crm", 120, None)]
