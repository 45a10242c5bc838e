"""/agent-api/v1/tools and /agent-api/v1/tools/:name over real HTTP: the per-(session, route)
projection of the compiled catalog, its revision, usage guidance detail, and the 404/409 paths.

Configuration is written to tmp_path and applied with `bailing-admin config apply`; sessions are
issued with `bailing-admin sessions issue`. Documents: examples/crm.openapi.json and
examples/erp.openapi.json, plus small inline ones for the text bounds.
"""
from __future__ import annotations

import json

import pytest

from admin_app import limits
from admin_app.catalog import store
from tests.conftest import EXAMPLES
from tests.test_catalog_compiler import COMPILE_ERRORS, thing_doc

CRM_URL = "http://127.0.0.1:8100"
ERP_URL = "http://127.0.0.1:8200"
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
SUBJECT = "tenant-7:user-42"

CRM_READ = {"customer_search", "customer_get", "customer_contacts_list"}
CRM_WRITE = {"customer_update_credit_limit", "customer_note_add", "customer_update_email", "customer_merge"}
CRM_EXPORT = {"customer_export_csv"}
ERP_ORDER_READ = {"order_list", "order_get"}
ERP_ORDER_WRITE = {"order_create", "order_cancel", "order_update_shipping_address"}
ERP_INVENTORY_READ = {"inventory_get", "inventory_search", "warehouse_list"}
ERP_INVENTORY_WRITE = {"inventory_adjust", "inventory_reserve"}
SUBJECT_REQUIRED = CRM_WRITE | CRM_EXPORT | ERP_ORDER_WRITE | ERP_INVENTORY_WRITE


def example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.openapi.json").read_text())


def route(key: str, sources: list, *, write_tools=None, direct: bool = True, permission: str = "full",
          **direct_extra) -> dict:
    agent_direct = {"enabled": direct, **direct_extra}
    if write_tools is not None:
        agent_direct["write_tools"] = list(write_tools)
    return {"route_key": key, "name": key, "enabled": True, "audience": {"enabled": False},
            "agent_client": {"enabled": True}, "permission": permission,
            "tools": {"sources": sources, "agent_direct": agent_direct}}


class Hub:
    """The configuration under test (mutable), applied through the CLI; HTTP reads on the server."""

    def __init__(self, cli, server, sql, directory):
        self.cli, self.server, self.sql, self.dir = cli, server, sql, directory
        self.docs = {"crm": example("crm"), "erp": example("erp")}
        self.providers = {
            "crm": {"name": "crm", "base_url": CRM_URL, "openapi": "crm.openapi.json",
                    "secret_env": "CRM_SIGNING_SECRET", "timeout_ms": 10000},
            "erp": {"name": "erp", "base_url": ERP_URL, "openapi": "erp.openapi.json",
                    "secret_env": "ERP_SIGNING_SECRET", "timeout_ms": 10000},
        }
        self.routes: dict[str, dict] = {
            "desk": route("desk", [{"provider": "crm", "allow": ["customer.read", "customer.write"]},
                                   {"provider": "erp", "allow": ["order.read"]}],
                          write_tools=["customer_note_add"]),
        }
        self.client_routes: list[str] | None = None  # None: every route
        self.client_enabled = True

    def add_doc(self, name: str, doc: dict, **provider) -> None:
        self.docs[name] = doc
        self.providers[name] = {"name": name, "base_url": "http://127.0.0.1:8300",
                                "openapi": f"{name}.openapi.json", "secret_env": "OTHER_SECRET",
                                "timeout_ms": 10000, **provider}

    def config(self) -> dict:
        return {
            "tool_providers": list(self.providers.values()),
            "routes": list(self.routes.values()),
            "client_apps": [{"app_id": "desk-app", "name": "Desk", "enabled": self.client_enabled,
                             "allowed_routes": self.client_routes if self.client_routes is not None
                             else list(self.routes)}],
        }

    def apply_raw(self):
        for name, doc in self.docs.items():
            (self.dir / f"{name}.openapi.json").write_text(json.dumps(doc))
        path = self.dir / "hub.json"
        path.write_text(json.dumps(self.config()))
        return self.cli("config", "apply", str(path))

    def apply(self) -> dict:
        code, out, err = self.apply_raw()
        assert code == 0, err
        return out

    def session(self, *routes: str, subject: str | None = SUBJECT, principal: dict | None = PRINCIPAL) -> str:
        args = ["sessions", "issue", "--client", "desk-app", "--routes", ",".join(routes or ("desk",))]
        if principal is not None:
            args += ["--principal", json.dumps(principal)]
        if subject is not None:
            args += ["--on-behalf-of", subject]
        code, out, err = self.cli(*args)
        assert code == 0, err
        return out["access_token"]

    def get(self, token: str, path: str, **params):
        return self.server.get(path, params=params, headers={"Authorization": f"Bearer {token}"})

    def listing(self, token: str, route_key: str = "desk") -> dict:
        response = self.get(token, "/agent-api/v1/tools", route=route_key)
        assert response.status_code == 200, response.text
        return response.json()

    def tools(self, token: str, route_key: str = "desk") -> dict[str, dict]:
        return {t["name"]: t for t in self.listing(token, route_key)["tools"]}

    def revision(self, token: str, route_key: str = "desk") -> str:
        return self.listing(token, route_key)["capability_revision"]

    def detail(self, token: str, name: str, route_key: str = "desk", revision: str | None = None, **extra):
        params = {"route": route_key, **extra}
        if revision is not None:
            params["capability_revision"] = revision
        return self.get(token, f"/agent-api/v1/tools/{name}", **params)


@pytest.fixture
def hub(cli, server, sql, tmp_path) -> Hub:
    return Hub(cli, server, sql, tmp_path)


def bz_tables(sql) -> list[str]:
    return [r[0] for r in sql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                              " AND tablename LIKE 'bz\\_%' ORDER BY tablename")]


def table_state(sql) -> dict:
    """Row count and every row's xmin per bz_ table: any insert, update or delete shows."""
    return {t: sql(f"SELECT count(*), coalesce(array_agg(xmin::text ORDER BY xmin::text), '{{}}')"
                   f" FROM {t}")[0] for t in bz_tables(sql)}


# ---------------------------------------------------------------- projection rules

# (sources, agent_direct extras, permission, subject, expected tool names)
PROJECTIONS = {
    "allow-one-scope": ([{"provider": "crm", "allow": ["customer.read"]}], {}, "full", SUBJECT, CRM_READ),
    "write-scope-without-write-tools": (
        [{"provider": "crm", "allow": ["customer.read", "customer.write"]}], {"write_tools": []}, "full",
        SUBJECT, CRM_READ),
    "write-named-in-write-tools": (
        [{"provider": "crm", "allow": ["customer.read", "customer.write"]}],
        {"write_tools": ["customer_note_add"]}, "full", SUBJECT, CRM_READ | {"customer_note_add"}),
    "star-allows-every-scope": (
        [{"provider": "crm", "allow": ["*"]}], {"write_tools": ["customer_merge"]}, "full", SUBJECT,
        CRM_READ | CRM_EXPORT | {"customer_merge"}),
    "readonly-route-hides-writes": (
        [{"provider": "crm", "allow": ["*"]}], {"write_tools": ["customer_merge"]}, "readonly", SUBJECT,
        CRM_READ | CRM_EXPORT),
    "no-subject-hides-subject-tools": (
        [{"provider": "crm", "allow": ["*"]}], {"write_tools": ["customer_merge"]}, "full", None, CRM_READ),
    "two-providers": (
        [{"provider": "crm", "allow": ["customer.read"]},
         {"provider": "erp", "allow": ["inventory.read", "inventory.write"]}],
        {"write_tools": ["inventory_reserve"]}, "full", SUBJECT,
        CRM_READ | ERP_INVENTORY_READ | {"inventory_reserve"}),
    "every-erp-write": (
        [{"provider": "erp", "allow": ["*"]}], {"write_tools": sorted(ERP_ORDER_WRITE | ERP_INVENTORY_WRITE)},
        "full", SUBJECT, ERP_ORDER_READ | ERP_ORDER_WRITE | ERP_INVENTORY_READ | ERP_INVENTORY_WRITE),
}


def approval_counted(tool: dict) -> bool:
    """A tool that may stop for approval: always (required) or by its ACC when-rules; the
    projection's boolean says exactly that."""
    return tool["approval_required"] is True


# Tools of the example documents that carry an ACC `approval.when` rule.
WHEN_RULE_TOOLS = {"customer_update_credit_limit"}


@pytest.mark.parametrize("sources, extra, permission, subject, expected", PROJECTIONS.values(),
                         ids=PROJECTIONS.keys())
def test_projection_rule(hub, sources, extra, permission, subject, expected):
    hub.routes = {"rt": route("rt", sources, permission=permission, **extra)}
    hub.apply()
    body = hub.listing(hub.session("rt", subject=subject), "rt")

    tools = body["tools"]
    assert {t["name"] for t in tools} == expected
    assert body["schema_version"] == "bailing.agent-tool-catalog.v1" and body["route"] == "rt"
    assert [t["name"] for t in tools] == sorted(expected)
    assert body["authorized_total"] == len(tools) == len(expected)
    assert body["readonly"] == sum(t["readonly"] for t in tools)
    assert body["writes"] == sum(not t["readonly"] for t in tools)
    assert body["readonly"] + body["writes"] == body["authorized_total"]
    assert body["approval_required"] == sum(approval_counted(t) for t in tools)
    if subject is None:
        assert not expected & SUBJECT_REQUIRED


def test_listed_tool_carries_its_compiled_projection(hub):
    hub.apply()
    tools = hub.tools(hub.session("desk"))
    note = tools["customer_note_add"]
    # The eight fields, plus our spec's optional guidance flag; no policy detail beyond them.
    assert note == {
        "name": "customer_note_add",
        "scope": "customer.write",
        "description": "Add a note to a customer",
        "usage_guidance_available": True,
        "input_schema": note["input_schema"],
        "readonly": False,
        "idempotent": False,
        "risk": "low",
        "approval_required": False,
    }
    assert set(note["input_schema"]["properties"]) == {"customer_id", "body", "visibility", "pinned"}
    assert note["input_schema"]["type"] == "object"
    assert "$ref" not in json.dumps([t["input_schema"] for t in tools.values()])


# (write_tools, agent_direct approval fields, tools whose approval.required is true)
APPROVALS = {
    "acc-only": (["customer_note_add", "customer_merge", "customer_update_credit_limit"],
                 {"force_approval_tools": []}, {"customer_merge"}),
    "force-adds-to-write-and-read": (
        ["customer_note_add", "customer_merge", "customer_update_credit_limit"],
        {"force_approval_tools": ["customer_note_add", "customer_search"]},
        {"customer_merge", "customer_note_add", "customer_search"}),
    "deprecated-unattended": (
        ["customer_note_add", "customer_merge", "customer_update_credit_limit", "customer_update_email"],
        {"unattended_write_tools": ["customer_note_add", "customer_merge"]},
        # forced = write_tools - unattended; customer_merge stays required by its ACC risk: high
        {"customer_update_credit_limit", "customer_update_email", "customer_merge"}),
    "unattended-cannot-weaken-acc": (
        ["customer_merge", "customer_note_add", "customer_update_credit_limit"],
        {"unattended_write_tools": ["customer_merge", "customer_note_add", "customer_update_credit_limit"]},
        {"customer_merge"}),
}


@pytest.mark.parametrize("write_tools, fields, required", APPROVALS.values(), ids=APPROVALS.keys())
def test_route_approval_can_only_add_to_acc(hub, write_tools, fields, required):
    hub.routes = {"rt": route("rt", [{"provider": "crm", "allow": ["customer.read", "customer.write"]}],
                             write_tools=write_tools, **fields)}
    hub.apply()
    body = hub.listing(hub.session("rt"), "rt")
    tools = {t["name"]: t for t in body["tools"]}
    assert set(tools) == CRM_READ | set(write_tools)
    # An ACC when-rule keeps a tool approval-required whatever the route adds or omits.
    assert {n for n, t in tools.items() if t["approval_required"]} == required | (WHEN_RULE_TOOLS & set(tools))
    assert body["approval_required"] == sum(approval_counted(t) for t in tools.values())


def test_force_approval_and_unattended_together_are_refused_and_nothing_is_written(hub, sql):
    hub.routes["desk"]["tools"]["agent_direct"].update(
        force_approval_tools=["customer_note_add"], unattended_write_tools=[])
    before = table_state(sql)
    code, out, err = hub.apply_raw()
    assert code == 1 and out == ""
    assert err["error"] == "invalid_request"
    assert "routes[0].tools.agent_direct.unattended_write_tools" in [p["path"] for p in err["problems"]]
    assert table_state(sql) == before


# ---------------------------------------------------------------- workspace gates

def test_agent_client_disabled_does_not_close_the_tools_surface(hub):
    hub.routes["desk"]["agent_client"] = {"enabled": False}
    hub.apply()
    token = hub.session("desk")
    tools = hub.tools(token)
    assert set(tools) == CRM_READ | ERP_ORDER_READ | {"customer_note_add"}
    revision = hub.revision(token)
    assert hub.detail(token, "customer_get", revision=revision).status_code == 200


def test_route_audience_that_matches_the_principal_is_served(hub):
    hub.routes["desk"]["audience"] = {"enabled": True, "tenants": ["tenant-7"], "roles": ["clerk"]}
    hub.apply()
    assert "customer_get" in hub.tools(hub.session("desk"))


def closed_routes_session(hub) -> str:
    """desk is open; every other route is closed to the session for a different reason."""
    sources = [{"provider": "crm", "allow": ["customer.read"]}]
    hub.routes.update({
        "elsewhere": route("elsewhere", sources),                 # not in the session's routes
        "disabled": {**route("disabled", sources), "enabled": False},
        "audience": {**route("audience", sources), "audience": {"enabled": True, "tenants": ["other"]}},
        "nodirect": route("nodirect", sources, direct=False),
    })
    hub.apply()
    return hub.session("desk", "disabled", "audience", "nodirect")


# Each closed route answers with the gate step that closes it (WIRE_CONTRACT §2.1).
CLOSED = {"elsewhere": (403, "route_not_allowed"), "disabled": (404, "route_unavailable"),
          "audience": (403, "audience_not_allowed"), "nodirect": (403, "agent_direct_disabled"),
          "no-such-route": (403, "route_not_allowed"), "auto": (400, "invalid_route"),
          "Bad.Key": (400, "invalid_route")}


def test_every_closed_route_gives_its_gate_code(hub):
    token = closed_routes_session(hub)
    revision = hub.revision(token)
    for key, (status, code) in CLOSED.items():
        listing = hub.get(token, "/agent-api/v1/tools", route=key)
        detail = hub.detail(token, "customer_get", key, revision)
        for response in (listing, detail):
            assert response.status_code == status, (key, response.text)
            assert response.headers["Cache-Control"] == "no-store"
            assert response.json()["error"] == code, (key, response.text)
    assert "customer_get" in hub.tools(token)  # the open route still works for the same session


def test_shrinking_the_client_allowlist_closes_the_route_for_existing_sessions(hub):
    hub.routes["spare"] = route("spare", [{"provider": "crm", "allow": ["customer.read"]}])
    hub.apply()
    token = hub.session("desk")
    revision = hub.revision(token)
    hub.client_routes = ["spare"]
    hub.apply()
    for response in (hub.get(token, "/agent-api/v1/tools", route="desk"),
                     hub.detail(token, "customer_get", revision=revision)):
        assert response.status_code == 403
        assert response.json()["error"] == "route_not_allowed"


def revoke(hub, session_id):
    assert hub.cli("sessions", "revoke", session_id)[0] == 0


def disable_client(hub, _session_id):
    hub.client_enabled = False
    hub.apply()


@pytest.mark.parametrize("end", [revoke, disable_client], ids=["revoked-session", "disabled-client"])
def test_every_read_revalidates_session_and_client(hub, end):
    hub.apply()
    code, out, err = hub.cli("sessions", "issue", "--client", "desk-app", "--routes", "desk",
                             "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", SUBJECT)
    assert code == 0, err
    token = out["access_token"]
    revision = hub.revision(token)
    assert hub.detail(token, "customer_get", revision=revision).status_code == 200
    end(hub, out["session_id"])
    for response in (hub.get(token, "/agent-api/v1/tools", route="desk"),
                     hub.detail(token, "customer_get", revision=revision)):
        assert (response.status_code, response.json()["error"]) == (401, "unauthorized")


def test_reads_without_a_bearer_are_401(hub):
    hub.apply()
    for path in ("/agent-api/v1/tools?route=desk",
                 "/agent-api/v1/tools/customer_get?route=desk&capability_revision=" + "0" * 64):
        response = hub.server.get(path)
        assert (response.status_code, response.json()["error"]) == (401, "unauthorized")


# ---------------------------------------------------------------- detail

def test_detail_returns_the_projection_and_bounded_guidance(hub):
    hub.apply()
    token = hub.session("desk")
    listing = hub.listing(token)
    response = hub.detail(token, "customer_search", revision=listing["capability_revision"])
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    body = response.json()
    assert list(body) == ["schema_version", "schema", "route", "capability_revision", "tool", "usage_guidance"]
    assert body["schema_version"] == body["schema"] == "bailing.agent-tool-detail.v1"
    assert body["route"] == "desk"
    assert body["capability_revision"] == listing["capability_revision"]
    assert body["tool"] == next(t for t in listing["tools"] if t["name"] == "customer_search")

    op = hub.docs["crm"]["paths"]["/customers"]["get"]
    guidance = op["x-agent-capability"]["guidance"]
    usage = body["usage_guidance"]
    assert set(usage) == {"text", "truncated", "source_chars", "max_chars", "source_bytes", "max_bytes"}
    assert (usage["truncated"], usage["max_chars"], usage["max_bytes"]) == (False, 32768, 65536)
    assert usage["source_chars"] == len(usage["text"])
    assert usage["source_bytes"] == len(usage["text"].encode("utf-8"))
    for part in (op["summary"], op["description"], guidance["when_to_use"], guidance["returns"],
                 json.dumps(guidance["examples"][0])):
        assert part in usage["text"]
    assert json.dumps(guidance["examples"][1]["q"]) not in usage["text"]


def test_stale_revision_is_409_capability_changed(hub):
    hub.apply()
    token = hub.session("desk")
    revision = hub.revision(token)
    stale = "0" * 64
    response = hub.detail(token, "customer_get", revision=stale)
    assert response.status_code == 409
    assert response.json()["error"] == "capability_changed"
    assert response.headers["Cache-Control"] == "no-store"

    hub.routes["desk"]["tools"]["agent_direct"]["write_tools"] = []
    hub.apply()
    assert hub.revision(token) != revision
    response = hub.detail(token, "customer_get", revision=revision)
    assert response.status_code == 409
    assert response.json()["error"] == "capability_changed"


@pytest.mark.parametrize("name", [
    "customer_export_csv",      # in the provider, scope customer.export not allowed on the route
    "inventory_get",            # other provider's scope not allowed
    "customer_merge",           # allowed scope, but a write not named in write_tools
    "customer_delete",          # ACC disabled
    "health_check",             # no ACC
    "no_such_tool",
])
def test_tool_outside_the_projection_is_404_tool_not_found(hub, name):
    hub.apply()
    token = hub.session("desk")
    response = hub.detail(token, name, revision=hub.revision(token))
    assert response.status_code == 404
    assert response.json()["error"] == "tool_not_found"
    assert response.headers["Cache-Control"] == "no-store"


def test_subject_tool_detail_is_404_for_a_session_without_subject(hub):
    hub.apply()
    token = hub.session("desk", subject=None)
    revision = hub.revision(token)
    assert hub.detail(token, "customer_get", revision=revision).status_code == 200
    response = hub.detail(token, "customer_note_add", revision=revision)
    assert (response.status_code, response.json()["error"]) == (404, "tool_not_found")


@pytest.mark.parametrize("params, path", [
    ({"route": "desk"}, "capability_revision"),
    ({"route": "desk", "capability_revision": "REV", "verbose": "1"}, "verbose"),
    ({"capability_revision": "REV"}, "route"),
    ({"route": "desk", "capability_revision": "abc"}, "capability_revision"),
    ({"route": "desk", "capability_revision": "REV", "extra": ""}, "extra"),
], ids=["missing-revision", "unknown-parameter", "missing-route", "malformed-revision", "empty-unknown"])
def test_bad_detail_query_is_400(hub, params, path):
    hub.apply()
    token = hub.session("desk")
    revision = hub.revision(token)
    params = {k: revision if v == "REV" else v for k, v in params.items()}
    response = hub.get(token, "/agent-api/v1/tools/customer_get", **params)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "invalid_request"
    assert path in [p["path"] for p in body["problems"]]


def test_repeated_or_unknown_listing_parameters_are_400(hub):
    hub.apply()
    token = hub.session("desk")
    for params in ({"route": ["desk", "desk"]}, {"route": "desk", "q": "x"}, {}):
        response = hub.get(token, "/agent-api/v1/tools", **params)
        assert response.status_code == 400, (params, response.text)
        assert response.json()["error"] == "invalid_request"


def test_reads_expose_no_provider_internals(hub):
    hub.routes["desk"] = route("desk", [{"provider": "crm", "allow": ["*"]}, {"provider": "erp", "allow": ["*"]}],
                               write_tools=sorted(CRM_WRITE | ERP_ORDER_WRITE | ERP_INVENTORY_WRITE))
    hub.apply()
    token = hub.session("desk")
    listing = hub.get(token, "/agent-api/v1/tools", route="desk")
    revision = listing.json()["capability_revision"]
    names = [t["name"] for t in listing.json()["tools"]]
    assert len(names) == 18
    texts = [listing.text] + [hub.detail(token, n, revision=revision).text for n in names]
    forbidden = [CRM_URL, ERP_URL, "127.0.0.1:8100", "CRM_SIGNING_SECRET", "ERP_SIGNING_SECRET",
                 "x-agent-capability", "openapi", "operationId", "components/schemas"]
    forbidden += [p for doc in hub.docs.values() for p in doc["paths"]]
    for text in texts:
        for needle in forbidden:
            assert needle not in text, needle


def test_reads_create_and_change_no_rows(hub, sql):
    hub.apply()
    token = hub.session("desk")
    before = table_state(sql)
    assert {"bz_tool_providers", "bz_routes", "bz_client_apps", "bz_agent_sessions"} <= set(before)
    revision = hub.revision(token)
    for name in ("customer_get", "customer_note_add", "customer_merge", "nope"):
        hub.detail(token, name, revision=revision)
    hub.detail(token, "customer_get", revision="f" * 64)
    hub.get(token, "/agent-api/v1/tools", route="closed")
    hub.listing(token)
    assert table_state(sql) == before


# ---------------------------------------------------------------- capability revision

def test_revision_is_stable_across_reads_and_sessions_with_the_same_view(hub):
    hub.apply()
    first, second = hub.session("desk"), hub.session("desk")
    revision = hub.revision(first)
    assert len(revision) == 64 and int(revision, 16) >= 0
    assert hub.revision(first) == revision
    assert hub.revision(second) == revision
    assert hub.detail(second, "customer_get", revision=revision).status_code == 200
    # another view (no subject: the write is hidden) has another revision
    other = hub.session("desk", subject=None)
    assert hub.revision(other) != revision
    assert hub.detail(other, "customer_get", revision=revision).status_code == 409


def _acc(hub, doc, path, method):
    return hub.docs[doc]["paths"][path][method]["x-agent-capability"]


# Changes to the configuration or a document; True when the desk projection (crm read+note_add,
# erp order.read, subject present) sees the difference.
REVISION_CHANGES = {
    "add-a-scope": (lambda h: h.routes["desk"]["tools"]["sources"][0]["allow"].append("customer.export"),
                    True),
    "add-a-write-tool": (lambda h: h.routes["desk"]["tools"]["agent_direct"]["write_tools"].append(
        "customer_update_email"), True),
    "force-approval": (lambda h: h.routes["desk"]["tools"]["agent_direct"].update(
        force_approval_tools=["customer_get"]), True),
    "visible-summary": (lambda h: h.docs["crm"]["paths"]["/customers"]["get"].update(
        summary="Find customers by name or email"), True),
    "visible-guidance-only": (lambda h: _acc(h, "crm", "/customers", "get")["guidance"].update(
        returns="Customer summaries."), True),
    "visible-risk": (lambda h: _acc(h, "erp", "/orders", "get")["risk"].update(level="medium"), True),
    "provider-timeout-used-by-a-visible-tool": (lambda h: h.providers["crm"].update(timeout_ms=12000), True),
    "provider-base-url": (lambda h: h.providers["crm"].update(base_url="http://127.0.0.1:8101"), False),
    "provider-secret-env": (lambda h: h.providers["crm"].update(secret_env="CRM_NEW_SECRET"), False),
    "provider-timeout-every-tool-overrides": (lambda h: h.providers["erp"].update(timeout_ms=20000), False),
    "summary-outside-allow": (lambda h: h.docs["erp"]["paths"]["/inventory/{sku}"]["get"].update(
        summary="Stock of one SKU"), False),
    "summary-of-unlisted-write": (lambda h: h.docs["crm"]["paths"]["/customer-merges"]["post"].update(
        summary="Merge duplicates"), False),
    "summary-of-disabled-acc": (lambda h: h.docs["crm"]["paths"]["/customers/{customer_id}"]["delete"].update(
        summary="Remove a customer"), False),
    "operation-without-acc": (lambda h: h.docs["crm"]["paths"]["/health"]["get"].update(
        description="Always 200."), False),
}


@pytest.mark.parametrize("change, visible", REVISION_CHANGES.values(), ids=REVISION_CHANGES.keys())
def test_revision_changes_exactly_when_the_visible_projection_changes(hub, change, visible):
    hub.apply()
    token = hub.session("desk")
    before_tools, revision = hub.tools(token), hub.revision(token)
    change(hub)
    report = hub.apply()
    assert any(report["changed"].values()), report  # the change did land
    after_tools, after = hub.tools(token), hub.revision(token)
    assert (after != revision) is visible
    assert visible or after_tools == before_tools
    expected_status = 409 if visible else 200
    assert hub.detail(token, "customer_get", revision=revision).status_code == expected_status
    assert hub.detail(token, "customer_get", revision=after).status_code == 200


def test_a_compiler_change_alters_the_revision_without_a_new_document(hub, sql, monkeypatch):
    hub.apply()
    token = hub.session("desk")
    revision, tools = hub.revision(token), hub.tools(token)
    stored = sql("SELECT xmin::text, updated_at FROM bz_tool_providers ORDER BY name")
    try:
        monkeypatch.setattr(limits, "TOOL_DESCRIPTION_MAX", 10)
        store._cache.clear()
        changed_tools, changed = hub.tools(token), hub.revision(token)
        assert changed != revision
        assert changed_tools["customer_get"]["description"] == "Read one customer"[:10]
        assert changed_tools["customer_get"]["description_truncated"] is True
        assert hub.detail(token, "customer_get", revision=revision).status_code == 409
        monkeypatch.undo()
        store._cache.clear()
        assert hub.revision(token) == revision
        assert hub.tools(token) == tools
    finally:
        monkeypatch.undo()
        store._cache.clear()
    assert sql("SELECT xmin::text, updated_at FROM bz_tool_providers ORDER BY name") == stored


# ---------------------------------------------------------------- text bounds end to end

EURO = "\u20ac"


def bounds_doc() -> dict:
    def op(op_id, **fields):
        return {"get": {"operationId": op_id, "responses": {"200": {"description": "ok"}}, **fields,
                        "x-agent-capability": {"version": 1, "enabled": True, "scope": "bounds.read"}}}

    return {"openapi": "3.1.0", "info": {"title": "Bounds", "version": "1"}, "paths": {
        "/d500": op("desc_500", summary="d" * 500),
        "/d501": op("desc_501", summary="e" * 501),
        "/long": op("guide_long", summary="Long guide", description=EURO * 30000),
        "/plain": op("summary_only", summary="Just a summary"),
    }}


def test_truncation_is_flagged_warned_and_served(hub):
    hub.add_doc("bounds", bounds_doc())
    hub.routes["bounds"] = route("bounds", [{"provider": "bounds", "allow": ["*"]}])
    report = hub.apply()
    expected = {("bounds", "tool_description_truncated", "desc_501"),
                ("bounds", "tool_usage_guidance_truncated", "guide_long")}
    assert {(w["provider"], w["code"], w["tool"]) for w in report["warnings"]} == expected

    stored = hub.sql("SELECT name, compile_warnings FROM bz_tool_providers ORDER BY name")
    assert {(name, w["code"], w["tool"]) for name, ws in stored for w in ws} == expected

    code, out, err = hub.cli("tools", "warnings")
    assert code == 0, err
    assert {(w["provider"], w["code"], w["tool"]) for w in out["warnings"]} == expected
    assert all(w["message"] for w in out["warnings"])
    code, out, err = hub.cli("tools", "warnings", "--provider", "crm")
    assert (code, out["warnings"]) == (0, [])

    token = hub.session("bounds")
    tools = hub.tools(token, "bounds")
    assert tools["desc_500"]["description"] == "d" * 500 and "description_truncated" not in tools["desc_500"]
    assert tools["desc_501"]["description"] == "e" * 500 and tools["desc_501"]["description_truncated"] is True
    assert "usage_guidance_available" not in tools["summary_only"]
    assert "usage_guidance_available" not in tools["desc_500"]
    assert tools["desc_501"]["usage_guidance_available"] is True  # the guidance keeps all 501
    assert tools["guide_long"]["usage_guidance_available"] is True
    assert "description_truncated" not in tools["guide_long"]

    revision = hub.revision(token, "bounds")
    usage = hub.detail(token, "guide_long", "bounds", revision).json()["usage_guidance"]
    source = "Long guide\n\n" + EURO * 30000
    assert usage["truncated"] is True
    assert (usage["source_chars"], usage["source_bytes"]) == (len(source), len(source.encode()))
    assert usage["text"] == source[:12 + (65536 - 12) // 3]
    assert len(usage["text"].encode()) <= 65536 < len(usage["text"].encode()) + 3
    full = hub.detail(token, "desc_501", "bounds", revision).json()["usage_guidance"]
    assert (full["text"], full["truncated"], full["source_chars"]) == ("e" * 501, False, 501)


def only_things(hub, doc: dict, **route_extra) -> None:
    """A configuration with just the `things` provider and a route over it."""
    hub.docs, hub.providers = {}, {}
    hub.add_doc("things", doc)
    hub.routes = {"things": route("things", [{"provider": "things", "allow": ["*"]}], **route_extra)}


@pytest.mark.parametrize("case", [k for k in COMPILE_ERRORS if k != "ref-cycle"])
def test_config_apply_refuses_a_provider_that_does_not_compile(hub, sql, case):
    mutate, where, word = COMPILE_ERRORS[case]
    doc = thing_doc()
    mutate(doc)
    only_things(hub, doc)
    code, out, err = hub.apply_raw()
    assert (code, out) == (1, "")
    assert err["error"] == "invalid_request"
    problems = [(p["path"], p["message"]) for p in err["problems"]]
    assert any(path == "tool_providers[0].openapi" and where in message and word in message
               for path, message in problems), problems
    assert sql("SELECT count(*) FROM bz_tool_providers")[0][0] == 0
    assert sql("SELECT count(*) FROM bz_routes")[0][0] == 0
    assert sql("SELECT count(*) FROM bz_client_apps")[0][0] == 0


def test_the_valid_things_document_applies(hub):
    """The control for the refusals above: without the mutation the same configuration lands."""
    only_things(hub, thing_doc(), write_tools=["thing_update"])
    hub.apply()
    tools = hub.tools(hub.session("things"), "things")
    assert set(tools) == {"thing_update"}
    assert tools["thing_update"]["approval_required"] is True  # by its when-rule
