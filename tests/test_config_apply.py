"""`bailing-admin config apply FILE`: creates, reports, is idempotent, and refuses any bad field
by its path while writing nothing at all."""
from __future__ import annotations

import json
import shutil
import tomllib

import pytest

from tests.conftest import EXAMPLES
from tests.helpers import row_counts

TABLES = ("bz_tool_providers", "bz_routes", "bz_client_apps")
SECTIONS = ("tool_providers", "routes", "client_apps")
OPENAPI_FILE = "crm.openapi.json"


# ---------------------------------------------------------------- helpers

def hub_config() -> dict:
    """A fresh copy of examples/hub.json (its openapi is the relative path crm.openapi.json)."""
    return json.loads((EXAMPLES / "hub.json").read_text())


def crm_openapi() -> dict:
    return json.loads((EXAMPLES / OPENAPI_FILE).read_text())


def write_config(directory, doc: dict, name: str = "hub.json"):
    """Write doc as JSON into directory, next to a copy of the example OpenAPI document."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLES / OPENAPI_FILE, directory / OPENAPI_FILE)
    path = directory / name
    path.write_text(json.dumps(doc))
    return path


def write_text(directory, name: str, content: str):
    shutil.copy(EXAMPLES / OPENAPI_FILE, directory / OPENAPI_FILE)
    path = directory / name
    path.write_text(content)
    return path


def apply(cli, path):
    return cli("config", "apply", str(path))


def applied(cli, path) -> dict:
    """Apply a file that must be accepted; return its report's created/changed/unchanged
    buckets (other report keys, such as compile warnings, are not this file's concern)."""
    code, out, err = apply(cli, path)
    assert code == 0, err
    return {bucket: out[bucket] for bucket in ("created", "changed", "unchanged")}


def refused(cli, path) -> dict:
    """Apply a file that must be refused; return the JSON error from stderr."""
    code, out, err = apply(cli, path)
    assert code == 1, (out, err)
    assert out == ""
    assert isinstance(err, dict), err
    assert err["error"] == "invalid_request"
    return err


def problem_paths(err: dict) -> list[str]:
    return [problem["path"] for problem in err["problems"]]


def report(created=None, changed=None, unchanged=None) -> dict:
    """The full report shape, every section present in every bucket."""
    buckets = {"created": created or {}, "changed": changed or {}, "unchanged": unchanged or {}}
    return {bucket: {s: names.get(s, []) for s in SECTIONS} for bucket, names in buckets.items()}


def snapshot(sql) -> dict:
    """Every row of the configuration tables with its xmin, so any write (even one that
    rewrites identical values) shows up as a difference."""
    return {table: sql(f"SELECT xmin::text, to_jsonb(t) FROM {table} AS t ORDER BY id")
            for table in TABLES}


def counts(sql) -> dict:
    return row_counts(sql, *TABLES)


def setting(keys: tuple, value):
    """A mutation that sets doc[k1][k2]... = value."""

    def mutate(doc: dict, _directory) -> None:
        target = doc
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return mutate


def openapi_file(name: str, content: str):
    """A mutation pointing the provider at a file written with content."""

    def mutate(doc: dict, directory) -> None:
        (directory / name).write_text(content)
        doc["tool_providers"][0]["openapi"] = name

    return mutate


def duplicate_route(doc: dict, _directory) -> None:
    doc["routes"].append({**doc["routes"][0], "name": "Customer desk again"})


EXPECTED_CREATED = report(created={"tool_providers": ["demo-crm"], "routes": ["customers"],
                                   "client_apps": ["crm-demo"]})
EXPECTED_UNCHANGED = report(unchanged={"tool_providers": ["demo-crm"], "routes": ["customers"],
                                       "client_apps": ["crm-demo"]})


# ---------------------------------------------------------------- applying

def test_apply_example_creates_provider_route_and_client(cli, sql):
    assert counts(sql) == dict.fromkeys(TABLES, 0)

    assert applied(cli, EXAMPLES / "hub.json") == EXPECTED_CREATED

    assert sql("SELECT name, base_url, openapi, secret_env, timeout_ms FROM bz_tool_providers") == [
        ("demo-crm", "http://127.0.0.1:8100", crm_openapi(), "DEMO_CRM_SECRET", 10000)]
    route = hub_config()["routes"][0]
    assert sql("SELECT route_key, name, description, enabled, audience, target_config, agent_client,"
               " tools, permission FROM bz_routes") == [
        ("customers", "Customer desk", "", True, route["audience"], route["target_config"],
         route["agent_client"], route["tools"], "full")]
    assert sql("SELECT app_id, name, allowed_routes, enabled, agent_authorize_url, client_token_hash"
               " FROM bz_client_apps") == [
        ("crm-demo", "CRM", ["customers"], True, "http://127.0.0.1:8100/authorize", None)]


def test_applying_again_reports_unchanged_and_writes_nothing(cli, sql, configured):
    assert configured["created"] == EXPECTED_CREATED["created"]
    before = snapshot(sql)

    assert applied(cli, EXAMPLES / "hub.json") == EXPECTED_UNCHANGED
    assert snapshot(sql) == before


def test_changing_one_field_reports_it_under_changed(cli, sql, configured, tmp_path):
    doc = hub_config()
    doc["tool_providers"][0]["timeout_ms"] = 20000
    before = snapshot(sql)

    assert applied(cli, write_config(tmp_path, doc)) == report(
        changed={"tool_providers": ["demo-crm (timeout_ms)"]},
        unchanged={"routes": ["customers"], "client_apps": ["crm-demo"]})

    ((timeout, touched),) = sql("SELECT timeout_ms, updated_at > created_at FROM bz_tool_providers")
    assert (timeout, touched) == (20000, True)
    after = snapshot(sql)
    assert after["bz_routes"] == before["bz_routes"]
    assert after["bz_client_apps"] == before["bz_client_apps"]


HUB_TOML = """\
[[tool_providers]]
name = "demo-crm"
base_url = "http://127.0.0.1:8100"
openapi = "crm.openapi.json"
secret_env = "DEMO_CRM_SECRET"
timeout_ms = 10000

[[routes]]
route_key = "customers"
name = "Customer desk"
enabled = true
audience = { enabled = false }
target_config = { system_prompt = "You help the customer desk." }

[routes.agent_client]
enabled = true
instructions = "Be brief."
memory = { recent_messages = 12 }
knowledge = { enabled = false }

[routes.tools]
sources = [{ provider = "demo-crm", allow = ["customer.read", "customer.write"] }]

[routes.tools.agent_direct]
enabled = true
write_tools = ["customer_update_credit_limit"]
force_approval_tools = []

[[client_apps]]
app_id = "crm-demo"
name = "CRM"
allowed_routes = ["customers"]
enabled = true
agent_authorize_url = "http://127.0.0.1:8100/authorize"
"""


def test_toml_file_applies_the_same_configuration(cli, sql, tmp_path):
    assert tomllib.loads(HUB_TOML) == hub_config()  # the test's own premise
    path = write_text(tmp_path, "hub.toml", HUB_TOML)

    assert applied(cli, path) == EXPECTED_CREATED
    # The JSON example then finds nothing to change: both files described the same records.
    assert applied(cli, EXAMPLES / "hub.json") == EXPECTED_UNCHANGED


def test_inline_openapi_document(cli, sql, tmp_path):
    doc = hub_config()
    doc["tool_providers"][0]["openapi"] = crm_openapi()
    path = tmp_path / "inline.json"
    path.write_text(json.dumps(doc))  # no OpenAPI file next to it

    assert applied(cli, path) == EXPECTED_CREATED
    assert sql("SELECT openapi FROM bz_tool_providers") == [(crm_openapi(),)]


def test_openapi_path_is_relative_to_the_config_file(cli, sql, tmp_path):
    config_dir = tmp_path / "conf"
    (config_dir / "specs").mkdir(parents=True)
    shutil.copy(EXAMPLES / OPENAPI_FILE, config_dir / "specs" / "crm.json")
    doc = hub_config()
    doc["tool_providers"][0]["openapi"] = "specs/crm.json"
    path = config_dir / "hub.json"
    path.write_text(json.dumps(doc))
    assert not (tmp_path / "specs").exists()

    assert applied(cli, path) == EXPECTED_CREATED
    assert sql("SELECT openapi FROM bz_tool_providers") == [(crm_openapi(),)]


# ---------------------------------------------------------------- cross references

def test_client_may_reference_a_route_already_in_the_database(cli, sql, tmp_path):
    doc = hub_config()
    clients = doc.pop("client_apps")
    assert applied(cli, write_config(tmp_path, doc, "routes.json")) == report(
        created={"tool_providers": ["demo-crm"], "routes": ["customers"]})

    assert applied(cli, write_config(tmp_path, {"client_apps": clients}, "clients.json")) == report(
        created={"client_apps": ["crm-demo"]})
    assert sql("SELECT app_id, allowed_routes FROM bz_client_apps") == [("crm-demo", ["customers"])]


def test_route_may_reference_a_provider_already_in_the_database(cli, sql, tmp_path):
    doc = hub_config()
    applied(cli, write_config(tmp_path, {"tool_providers": doc["tool_providers"]}, "providers.json"))

    # sources, allow scopes and write_tools are all checked against the stored OpenAPI document
    assert applied(cli, write_config(tmp_path, {"routes": doc["routes"]}, "routes.json")) == report(
        created={"routes": ["customers"]})
    assert sql("SELECT tools FROM bz_routes") == [(doc["routes"][0]["tools"],)]


# ---------------------------------------------------------------- one bad field changes nothing

BAD_WRITE_TOOL = "routes[2].tools.agent_direct.write_tools[0]"


def three_routes_the_last_writing_a_missing_operation() -> dict:
    """hub.json, a changed route name, a second provider, a second client, two more routes:
    all valid except routes[2]'s write tool, which no source of that route offers."""
    doc = hub_config()
    doc["routes"][0]["name"] = "Customer desk (renamed)"
    doc["tool_providers"].append({"name": "billing-api", "base_url": "https://billing.example.com",
                                  "openapi": crm_openapi(), "secret_env": "BILLING_SECRET"})
    doc["routes"] += [
        {"route_key": "orders", "name": "Orders"},
        {"route_key": "billing", "name": "Billing",
         "tools": {"sources": [{"provider": "billing-api", "allow": ["customer.read"]}],
                   "agent_direct": {"enabled": True, "write_tools": ["customer_delete"]}}},
    ]
    doc["client_apps"].append({"app_id": "billing-desk", "name": "Billing desk",
                               "allowed_routes": ["orders"],
                               "agent_authorize_url": "https://billing.example.com/authorize"})
    return doc


@pytest.mark.parametrize("preconfigured", [False, True], ids=["empty-database", "configured-database"])
def test_a_missing_write_tool_in_the_third_route_changes_nothing(request, cli, sql, tmp_path,
                                                                 preconfigured):
    if preconfigured:
        request.getfixturevalue("configured")
    before, rows_before = snapshot(sql), counts(sql)

    err = refused(cli, write_config(tmp_path, three_routes_the_last_writing_a_missing_operation()))

    assert problem_paths(err) == [BAD_WRITE_TOOL]
    assert "customer_delete" in err["problems"][0]["message"]
    assert BAD_WRITE_TOOL in err["message"]
    assert counts(sql) == rows_before
    assert snapshot(sql) == before


def test_the_same_file_without_the_bad_field_applies(cli, sql, tmp_path):
    """Control for the test above: the bad write tool is the only thing wrong with that file."""
    doc = three_routes_the_last_writing_a_missing_operation()
    doc["routes"][2]["tools"]["agent_direct"]["write_tools"] = ["customer_update_credit_limit"]
    doc["routes"][2]["tools"]["sources"][0]["allow"].append("customer.write")

    assert applied(cli, write_config(tmp_path, doc)) == report(created={
        "tool_providers": ["demo-crm", "billing-api"],
        "routes": ["customers", "orders", "billing"],
        "client_apps": ["crm-demo", "billing-desk"]})
    assert counts(sql) == {"bz_tool_providers": 2, "bz_routes": 3, "bz_client_apps": 2}


REFUSALS = [
    pytest.param(setting(("extras",), []), "extras", id="unknown-top-level-key"),
    pytest.param(setting(("routes", 0, "colour"), "blue"), "routes[0].colour", id="unknown-route-field"),
    pytest.param(setting(("client_apps", 0, "app_id"), "CRM_Demo"), "client_apps[0].app_id",
                 id="app-id-pattern"),
    pytest.param(setting(("routes", 0, "route_key"), "auto"), "routes[0].route_key", id="route-key-auto"),
    pytest.param(duplicate_route, "routes[1].route_key", id="duplicate-route-key"),
    pytest.param(setting(("client_apps", 0, "allowed_routes"), ["customers", "billing"]),
                 "client_apps[0].allowed_routes[1]", id="allowed-route-missing"),
    pytest.param(setting(("client_apps", 0, "agent_authorize_url"), "http://crm.example.com:8100/authorize"),
                 "client_apps[0].agent_authorize_url", id="http-authorize-url-not-loopback"),
    pytest.param(setting(("client_apps", 0, "agent_authorize_url"), "https://ops:pw@crm.example.com/authorize"),
                 "client_apps[0].agent_authorize_url", id="authorize-url-with-credentials"),
    pytest.param(setting(("tool_providers", 0, "base_url"), "http://ops:pw@127.0.0.1:8100"),
                 "tool_providers[0].base_url", id="base-url-with-credentials"),
    pytest.param(setting(("client_apps", 0, "agent_authorize_url"), "http://127.0.0.1/authorize"),
                 "client_apps[0].agent_authorize_url", id="loopback-http-without-port"),
    pytest.param(setting(("routes", 0, "enabled"), 1), "routes[0].enabled", id="route-enabled-1"),
    pytest.param(setting(("client_apps", 0, "enabled"), 1), "client_apps[0].enabled", id="client-enabled-1"),
    pytest.param(setting(("tool_providers", 0, "timeout_ms"), 0), "tool_providers[0].timeout_ms",
                 id="timeout-0"),
    pytest.param(setting(("tool_providers", 0, "timeout_ms"), 600001), "tool_providers[0].timeout_ms",
                 id="timeout-600001"),
    pytest.param(setting(("tool_providers", 0, "secret_env"), "demo_crm_secret"),
                 "tool_providers[0].secret_env", id="secret-env-lowercase"),
    pytest.param(setting(("tool_providers", 0, "openapi"), "missing.openapi.json"),
                 "tool_providers[0].openapi", id="openapi-file-missing"),
    pytest.param(openapi_file("crm.yaml.json", "openapi: 3.1.0\npaths: {}\n"),
                 "tool_providers[0].openapi", id="openapi-file-not-json"),
    pytest.param(openapi_file("swagger.json", json.dumps({"swagger": "2.0", "paths": {}})),
                 "tool_providers[0].openapi.openapi", id="openapi-not-3x"),
    pytest.param(setting(("routes", 0, "tools", "sources", 0, "provider"), "ghost-crm"),
                 "routes[0].tools.sources[0].provider", id="source-provider-unknown"),
    pytest.param(setting(("routes", 0, "tools", "sources", 0, "allow"), ["customer.read", "customer.delete"]),
                 "routes[0].tools.sources[0].allow[1]", id="allow-scope-undeclared"),
    pytest.param(setting(("routes", 0, "tools", "agent_direct", "unattended_write_tools"), []),
                 "routes[0].tools.agent_direct.unattended_write_tools",
                 id="force-approval-with-unattended-write"),
]


@pytest.mark.parametrize("mutate, path", REFUSALS)
def test_refused_field_is_named_and_nothing_is_written(cli, sql, tmp_path, mutate, path):
    doc = hub_config()
    mutate(doc, tmp_path)
    before = snapshot(sql)

    err = refused(cli, write_config(tmp_path, doc))

    assert path in problem_paths(err)
    assert snapshot(sql) == before


HUB_JSON = (EXAMPLES / "hub.json").read_text()

FILE_REFUSALS = [
    pytest.param("hub.json", HUB_JSON.rstrip()[:-1], "not valid JSON", id="invalid-json"),
    pytest.param("hub.yaml", HUB_JSON, ".json or .toml", id="wrong-extension"),
]


@pytest.mark.parametrize("name, content, message", FILE_REFUSALS)
def test_unreadable_file_is_refused_whole(cli, sql, tmp_path, name, content, message):
    before = snapshot(sql)

    err = refused(cli, write_text(tmp_path, name, content))

    assert problem_paths(err) == [""]
    assert message in err["problems"][0]["message"]
    assert snapshot(sql) == before



def test_duplicate_json_key_is_refused_by_its_path(cli, sql, tmp_path):
    before = snapshot(sql)

    err = refused(cli, write_text(tmp_path, "hub.json", HUB_JSON.replace(
        '"name": "CRM"', '"name": "CRM", "name": "CRM 2"')))

    assert err["problems"] == [{"path": "client_apps[0].name",
                                "message": "is given more than once (duplicate key)"}]
    assert snapshot(sql) == before


def test_toml_nested_too_deep_is_refused_whole(cli, sql, tmp_path):
    """tomllib parses nesting recursively: a deep file would exhaust its stack."""
    before = snapshot(sql)

    err = refused(cli, write_text(tmp_path, "deep.toml", "x = " + "[" * 2000 + "]" * 2000 + "\n"))

    assert problem_paths(err) == [""]
    assert "nested deeper than 128 levels" in err["message"]
    assert snapshot(sql) == before


PROMPT_TOML = 'target_config = { system_prompt = "You help the customer desk." }'
UNSTORABLE_VALUES = [
    pytest.param("hub.json", HUB_JSON.replace('"name": "Customer desk"',
                                              '"name": "Customer desk", "description": "a\\u0000b"'),
                 "routes[0].description", id="json-nul-character"),
    pytest.param("hub.toml", HUB_TOML.replace('name = "Customer desk"',
                                              'name = "Customer desk"\ndescription = "a\\u0000b"'),
                 "routes[0].description", id="toml-nul-character"),
    pytest.param("hub.toml", HUB_TOML.replace(PROMPT_TOML, PROMPT_TOML[:-2] + ", since = 1979-05-27 }"),
                 "routes[0].target_config.since", id="toml-date"),
    pytest.param("hub.toml", HUB_TOML.replace(PROMPT_TOML, PROMPT_TOML[:-2] + ", ratio = nan }"),
                 "routes[0].target_config.ratio", id="toml-nan"),
    pytest.param("hub.toml", HUB_TOML.replace(PROMPT_TOML, PROMPT_TOML[:-2] + ', "a\\u0000b" = 1 }'),
                 "routes[0].target_config.a\x00b", id="toml-nul-in-a-key"),
    pytest.param("hub.json", HUB_JSON.replace('"system_prompt"', '"a\\u0000b": 1, "system_prompt"'),
                 "routes[0].target_config.a\x00b", id="json-nul-in-a-key"),
]


@pytest.mark.parametrize("name, content, path", UNSTORABLE_VALUES)
def test_value_the_database_cannot_store_is_refused(cli, sql, tmp_path, name, content, path):
    """Refused as a whole file ("") or by the field's path, but refused, with nothing written."""
    before = snapshot(sql)

    err = refused(cli, write_text(tmp_path, name, content))

    assert {path, ""} & set(problem_paths(err))
    assert snapshot(sql) == before


# ---------------------------------------------------------------- missing keys, --check

def without(keys: tuple):
    def mutate(doc: dict, _directory) -> None:
        target = doc
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


MISSING = [
    pytest.param(("client_apps", 0, "app_id"), id="client-app-id"),
    pytest.param(("client_apps", 0, "name"), id="client-name"),
    pytest.param(("routes", 0, "route_key"), id="route-key"),
    pytest.param(("routes", 0, "name"), id="route-name"),
    pytest.param(("tool_providers", 0, "name"), id="provider-name"),
    pytest.param(("tool_providers", 0, "openapi"), id="provider-openapi"),
    pytest.param(("routes", 0, "audience", "enabled"), id="audience-enabled"),
    pytest.param(("routes", 0, "tools", "sources", 0, "allow"), id="source-allow"),
]


@pytest.mark.parametrize("keys", MISSING)
@pytest.mark.parametrize("preconfigured", [False, True], ids=["empty-database", "configured-database"])
def test_missing_required_key_is_named_and_nothing_is_written(request, cli, sql, tmp_path, keys,
                                                              preconfigured):
    """Once KeyError: 'app_id' and KeyError: 'route_key' tracebacks."""
    if preconfigured:
        request.getfixturevalue("configured")
    doc = hub_config()
    without(keys)(doc, tmp_path)
    before = snapshot(sql)

    err = refused(cli, write_config(tmp_path, doc))

    path = ".".join(f"[{k}]" if isinstance(k, int) else k for k in keys).replace(".[", "[")
    assert {"path": path, "message": "is required"} in err["problems"]
    assert snapshot(sql) == before


@pytest.mark.parametrize("null_key", ["memory", "knowledge"])
def test_null_for_an_optional_object_is_refused(cli, sql, tmp_path, null_key):
    doc = hub_config()
    doc["routes"][0]["agent_client"][null_key] = None
    before = snapshot(sql)

    err = refused(cli, write_config(tmp_path, doc))

    assert problem_paths(err) == [f"routes[0].agent_client.{null_key}"]
    assert snapshot(sql) == before


def test_openapi_the_compiler_cannot_read_is_refused_by_operation(cli, sql, tmp_path):
    doc = hub_config()
    openapi = crm_openapi()
    openapi["paths"]["/customers/{customer_id}/notes"]["post"]["parameters"][0]["schema"] = 1
    doc["tool_providers"][0]["openapi"] = openapi
    before = snapshot(sql)

    err = refused(cli, write_config(tmp_path, doc))

    (problem,) = [p for p in err["problems"] if p["path"] == "tool_providers[0].openapi"]
    assert problem["message"].startswith("paths./customers/{customer_id}/notes.post: has a value")
    assert snapshot(sql) == before


def check(cli, path):
    return cli("config", "apply", str(path), "--check")


def test_check_on_an_empty_database_reports_what_would_be_created_and_writes_nothing(cli, sql):
    before = snapshot(sql)

    code, out, err = check(cli, EXAMPLES / "hub.json")

    assert code == 0, err
    assert out == {"checked": True, **EXPECTED_CREATED, "warnings": []}
    assert snapshot(sql) == before
    assert counts(sql) == dict.fromkeys(TABLES, 0)


def test_check_reports_what_apply_then_does(cli, sql, configured, tmp_path):
    doc = three_routes_the_last_writing_a_missing_operation()
    doc["routes"][2]["tools"]["agent_direct"]["write_tools"] = ["customer_update_credit_limit"]
    doc["routes"][2]["tools"]["sources"][0]["allow"].append("customer.write")
    path = write_config(tmp_path, doc)
    before = snapshot(sql)

    code, planned, err = check(cli, path)

    assert code == 0, err
    assert planned["checked"] is True
    assert planned["changed"]["routes"] == ["customers (name)"]
    assert snapshot(sql) == before
    code, out, err = apply(cli, path)
    assert code == 0, err
    assert {"checked": True, **out} == planned
    assert snapshot(sql) != before


@pytest.mark.parametrize("preconfigured", [False, True], ids=["empty-database", "configured-database"])
def test_check_of_a_bad_file_exits_1_with_every_path(request, cli, sql, tmp_path, preconfigured):
    if preconfigured:
        request.getfixturevalue("configured")
    doc = three_routes_the_last_writing_a_missing_operation()
    del doc["client_apps"][1]["app_id"]
    before = snapshot(sql)

    code, out, err = check(cli, write_config(tmp_path, doc))

    assert (code, out) == (1, "")
    assert err["error"] == "invalid_request"
    assert problem_paths(err) == [BAD_WRITE_TOOL, "client_apps[1].app_id"]
    assert snapshot(sql) == before


def test_check_cannot_write_even_if_asked_to(app, configured):
    """The check's transaction is READ ONLY: the server itself refuses a write in it."""
    from sqlalchemy import text
    from sqlalchemy.exc import InternalError

    from admin_app.config_apply import check as check_config

    hub = app.extensions["bailing"]
    with pytest.raises(InternalError, match="read-only transaction"):  # noqa: PT012 - leaving the session is what raises
        with hub.db.session() as session:
            check_config(session, {}, EXAMPLES)
            session.execute(text("UPDATE bz_routes SET name = 'written'"))
