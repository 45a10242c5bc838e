"""Tool provider spec pull (BUSINESS_SIDE.md §B) against real business systems on loopback: one
that verifies signatures as the connect SDKs do (serving JSON and YAML), one public, one that
redirects, oversized ones, a slow one; the three policy outcomes; a failure keeps the stored
spec and says why; a changed spec moves the capability revision; the schedule pulls only due
providers; `config apply`, `provider refresh` and `provider show`; refusals write nothing."""
from __future__ import annotations

import json
import time
import uuid

import pytest

from admin_app import limits
from admin_app.providers import refresh as refresh_module
from admin_app.providers.spec_pull import pull_headers
from tests.business_side import SECRET, SECRET_ENV, Request, System, json_answer, signed_spec, tool_spec, verify
from tests.helpers import apply_config, bearer, cli_ok, cli_refused, row_counts

SPEC = "/.well-known/bailing/tools.json"


@pytest.fixture(scope="module")
def system():
    made = System()
    yield made
    made.stop()


@pytest.fixture
def shop(system, monkeypatch):
    """The business system with a fresh signed spec route, and the hub's secret for it."""
    system.reset()
    monkeypatch.setenv(SECRET_ENV, SECRET)
    state = {"spec": tool_spec()}
    system.routes[SPEC] = signed_spec(lambda: json.dumps(state["spec"]).encode())
    system.state = state
    return system


def provider(system: System, path: str = SPEC, **fields) -> dict:
    return {"name": fields.pop("name", "shop"), "base_url": system.url, "spec_url": system.url + path,
            "secret_env": SECRET_ENV, **fields}


def write(tmp_path, doc) -> str:
    path = tmp_path / f"hub-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def stored(sql, name: str = "shop") -> dict:
    rows = sql("SELECT openapi, spec_url, spec_access_policy, auto_refresh_min, spec_refreshed_at, "
               "spec_pull_status, spec_pull_error, spec_access_probe, updated_at, spec_pull_attempted_at "
               "FROM bz_tool_providers WHERE name = %s", (name,))
    keys = ("openapi", "spec_url", "policy", "auto_refresh_min", "refreshed_at", "status", "error", "access",
            "updated_at", "attempted_at")
    return dict(zip(keys, rows[0])) if rows else {}


TABLES = ("bz_tool_providers", "bz_routes", "bz_client_apps")


# ---------------------------------------------------------------- the request

def test_the_spec_pull_vector_of_the_contract():
    """A.4: ts 1718000000, GET /bailing/tools.json, empty body, subject and job."""
    headers = pull_headers(SECRET, "https://shop.example/bailing/tools.json", "1718000000")
    assert headers == {"X-Bailing-Timestamp": "1718000000", "X-Bailing-Signature":
                       "sha256=505ab99763cd20b50ba4066ee2ac315fe6af12a8638e7dabef63508abddedc74"}


def test_signed_required_pull_is_signed_over_the_full_path_and_probed_twice(shop, cli, sql, tmp_path):
    path = "/prefix/bailing/tools.json"
    shop.routes[path] = signed_spec(lambda: json.dumps(shop.state["spec"]).encode())
    out = apply_config(cli, tmp_path, {"tool_providers": [provider(shop, path + "?v=2&lang=en")]})

    assert out["created"]["tool_providers"] == ["shop"]
    assert out["spec_pulls"][0]["status"] == "changed"
    row = stored(sql)
    assert row["openapi"] == shop.state["spec"] and row["status"] == "changed" and row["error"] is None
    assert row["policy"] == "signed_required" and row["refreshed_at"] is not None
    access = row["access"]
    assert {k: access.get(k) for k in ("status", "signed_http", "unsigned_http", "invalid_http")} == {
        "status": "protected", "signed_http": 200, "unsigned_http": 401, "invalid_http": 401}
    signed, *negatives = shop.requests_to(path)
    # Signed over pathname + search, as sent; only the two signing headers of ours.
    assert signed.target == path + "?v=2&lang=en" and verify(signed)
    assert sorted(h for h in signed.headers if h.startswith("x-bailing-")) == [
        "x-bailing-signature", "x-bailing-timestamp"]
    assert signed.method == "GET" and signed.body == b""
    by_kind = {r.headers.get("x-bailing-signature", "none"): r for r in negatives}
    assert set(by_kind) == {"none", "sha256=" + "0" * 64}
    assert not any(h.startswith("x-bailing-") for h in by_kind["none"].headers)
    assert by_kind["sha256=" + "0" * 64].headers["x-bailing-timestamp"] == signed.headers["x-bailing-timestamp"]


def test_yaml_spec_is_stored_as_json(shop, cli, sql, tmp_path):
    yaml_text = """
openapi: 3.1.0
info: {title: Shop, version: 1.0.0, released: 2024-05-01}
x-defaults: &read
  version: 1
  enabled: true
  scope: orders.read
  execution: {readonly: true, idempotent: true}
paths:
  /orders:
    get:
      operationId: orders_list
      summary: List orders
      responses: {"200": {description: ok}}
      x-agent-capability: *read
"""
    shop.routes["/tools.yaml"] = signed_spec(lambda: yaml_text.encode(), "application/yaml")
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop, "/tools.yaml")]})

    doc = stored(sql)["openapi"]
    assert doc["info"]["released"] == "2024-05-01"  # a date stays the text it was
    assert doc["paths"]["/orders"]["get"]["x-agent-capability"]["scope"] == "orders.read"
    assert cli_ok(cli("tools", "warnings", "--provider", "shop"))["warnings"] == []


def test_yaml_with_too_many_aliases_is_refused(shop, cli, sql, tmp_path):
    aliases = "\n".join(f"  a{i}: *x" for i in range(limits.SPEC_YAML_MAX_ALIASES + 1))
    text = f"openapi: 3.1.0\nbase: &x [1, 2]\npaths: {{}}\nmore:\n{aliases}\n"
    shop.routes["/aliases.yaml"] = signed_spec(lambda: text.encode(), "application/yaml")
    before = row_counts(sql, *TABLES)
    err = cli_refused(cli("config", "apply", write(tmp_path, {"tool_providers": [provider(shop, "/aliases.yaml")]})),
                      "invalid_request")
    assert "aliases" in err["message"]
    assert row_counts(sql, *TABLES) == before


def test_public_allowed_pull_sends_no_signature(shop, cli, sql, tmp_path):
    shop.routes["/public.json"] = lambda r: json_answer(shop.state["spec"])
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop, "/public.json",
                                                              spec_access_policy="public_allowed")]})
    (only,) = shop.requests_to("/public.json")
    assert not any(h.startswith("x-bailing-") for h in only.headers)
    row = stored(sql)
    assert row["policy"] == "public_allowed" and row["openapi"] == shop.state["spec"]
    assert row["access"]["status"] == "public" and row["access"]["unsigned_http"] == 200


def _refusal(shop, cli, sql, tmp_path, path: str, **fields) -> dict:
    before = row_counts(sql, *TABLES)
    err = cli_refused(cli("config", "apply", write(tmp_path, {"tool_providers": [provider(shop, path, **fields)]})),
                      "invalid_request")
    assert row_counts(sql, *TABLES) == before
    (problem,) = err["problems"]
    assert problem["path"] == "tool_providers[0].spec_url"
    return problem


def test_signed_required_refuses_a_spec_served_to_anyone(shop, cli, sql, tmp_path):
    shop.routes["/open.json"] = lambda r: json_answer(shop.state["spec"])
    problem = _refusal(shop, cli, sql, tmp_path, "/open.json")
    assert "not protected (public)" in problem["message"]
    assert len(shop.requests_to("/open.json")) == 3  # the signed pull and both negatives


def test_signed_required_refuses_when_negatives_are_not_refused_properly(shop, cli, sql, tmp_path):
    def odd(request: Request):
        return json_answer(shop.state["spec"]) if verify(request) else json_answer({"error": "oops"}, 500)
    shop.routes["/odd.json"] = odd
    problem = _refusal(shop, cli, sql, tmp_path, "/odd.json")
    assert "not protected (inconclusive)" in problem["message"]


@pytest.mark.parametrize("status", [403, 404])
def test_403_and_404_count_as_protected(shop, cli, sql, tmp_path, status):
    def guarded(request: Request):
        return json_answer(shop.state["spec"]) if verify(request) else json_answer({}, status)
    shop.routes["/guarded.json"] = guarded
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop, "/guarded.json")]})
    assert stored(sql)["access"]["status"] == "protected"


def test_redirect_is_not_followed(shop, cli, sql, tmp_path):
    shop.routes["/moved.json"] = lambda r: (302, {"Location": shop.url + SPEC}, b"")
    problem = _refusal(shop, cli, sql, tmp_path, "/moved.json")
    assert "HTTP 302" in problem["message"] and "redirect" in problem["message"]
    assert shop.requests_to(SPEC) == []


def test_oversized_spec_is_refused_by_content_length(shop, cli, sql, tmp_path):
    shop.routes["/huge.json"] = lambda r: (200, {"Content-Length": str(limits.SPEC_PULL_MAX_BYTES + 1)}, b"{}")
    problem = _refusal(shop, cli, sql, tmp_path, "/huge.json", spec_access_policy="public_allowed")
    assert f"larger than {limits.SPEC_PULL_MAX_BYTES} bytes" in problem["message"]


def test_oversized_spec_is_refused_while_streamed(shop, cli, sql, tmp_path):
    padding = json.dumps({**shop.state["spec"], "x-pad": "a" * limits.SPEC_PULL_MAX_BYTES}).encode()
    # No Content-Length: the body ends when the connection closes, and is cut as it streams in.
    shop.routes["/stream.json"] = lambda r: (200, {"Content-Length": "none"}, padding)
    problem = _refusal(shop, cli, sql, tmp_path, "/stream.json", spec_access_policy="public_allowed")
    assert f"larger than {limits.SPEC_PULL_MAX_BYTES} bytes" in problem["message"]


def test_slow_business_system_hits_the_whole_call_deadline(shop, cli, sql, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "SPEC_PULL_SECONDS", 1)

    def slow(request: Request):
        time.sleep(3)  # the answer only after the deadline
        return json_answer(shop.state["spec"])
    shop.routes["/slow.json"] = slow
    started = time.monotonic()
    problem = _refusal(shop, cli, sql, tmp_path, "/slow.json", spec_access_policy="public_allowed")
    assert time.monotonic() - started < 2.5
    assert "no complete answer within 1 s" in problem["message"]


def test_unreadable_and_non_object_documents_are_refused(shop, cli, sql, tmp_path):
    shop.routes["/list.json"] = lambda r: json_answer([1, 2])
    assert "root is not an object" in _refusal(shop, cli, sql, tmp_path, "/list.json",
                                               spec_access_policy="public_allowed")["message"]
    shop.routes["/junk"] = lambda r: (200, {}, b"{not: [valid")
    assert "neither JSON nor valid YAML" in _refusal(shop, cli, sql, tmp_path, "/junk",
                                                     spec_access_policy="public_allowed")["message"]


def test_missing_secret_refuses_a_new_signed_provider(shop, cli, sql, tmp_path, monkeypatch):
    monkeypatch.delenv(SECRET_ENV)
    problem = _refusal(shop, cli, sql, tmp_path, SPEC)
    assert f"{SECRET_ENV} is not set" in problem["message"]
    assert shop.requests_to(SPEC) == []


# ---------------------------------------------------------------- configuration refusals

@pytest.mark.parametrize("change, path, message", [
    ({"openapi": {"openapi": "3.1.0", "paths": {}}}, "tool_providers[0].spec_url", "not both"),
    ({"spec_access_policy": "legacy_unverified"}, "tool_providers[0].spec_access_policy", "must be"),
    ({"auto_refresh_min": 1441}, "tool_providers[0].auto_refresh_min", "at most 1440"),
    ({"auto_refresh_min": -1}, "tool_providers[0].auto_refresh_min", "at least 0"),
    ({"auto_refresh_min": "5"}, "tool_providers[0].auto_refresh_min", "whole number"),
    ({"spec_url": "ftp://127.0.0.1/tools.json"}, "tool_providers[0].spec_url", "http(s)"),
], ids=["both-sources", "policy", "refresh-too-long", "refresh-negative", "refresh-text", "url-scheme"])
def test_bad_spec_fields_are_refused_and_nothing_is_written(shop, cli, sql, tmp_path, change, path, message):
    before = row_counts(sql, *TABLES)
    item = {**provider(shop), **change}
    err = cli_refused(cli("config", "apply", write(tmp_path, {"tool_providers": [item]})), "invalid_request")
    assert [p["path"] for p in err["problems"]] == [path]
    assert message in err["problems"][0]["message"]
    assert row_counts(sql, *TABLES) == before


@pytest.mark.parametrize("key, value", [("auto_refresh_min", 5), ("spec_access_policy", "public_allowed")])
def test_pull_fields_without_spec_url_are_refused(shop, cli, sql, tmp_path, key, value):
    item = {"name": "shop", "base_url": shop.url, "secret_env": SECRET_ENV, "openapi": tool_spec(), key: value}
    before = row_counts(sql, *TABLES)
    err = cli_refused(cli("config", "apply", write(tmp_path, {"tool_providers": [item]})), "invalid_request")
    assert err["problems"] == [{"path": f"tool_providers[0].{key}",
                                "message": "is only for a provider whose spec is pulled from spec_url"}]
    assert row_counts(sql, *TABLES) == before


# ---------------------------------------------------------------- keeping the last good spec

def test_failed_refresh_keeps_the_spec_and_says_why(shop, cli, sql, tmp_path):
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop)]})
    good = stored(sql)
    shop.routes[SPEC] = lambda r: json_answer({"error": "down"}, 503)

    err = cli_refused(cli("provider", "refresh", "shop"), "spec_pull_failed")
    assert "HTTP 503" in err["message"] and err["provider"] == "shop"
    row = stored(sql)
    assert row["openapi"] == good["openapi"] and row["updated_at"] == good["updated_at"]
    assert row["status"] == "failed" and row["error"] == "HTTP 503"
    assert row["attempted_at"] > good["attempted_at"] and row["refreshed_at"] == good["refreshed_at"]
    shown = cli_ok(cli("provider", "show", "shop"))
    assert shown["last_pull"]["status"] == "failed" and shown["last_pull"]["error"] == "HTTP 503"
    assert "the last spec pull failed; the stored spec is kept" in shown["warnings"]

    # Applying the configuration again while the system is down keeps the spec too, with a warning.
    out = apply_config(cli, tmp_path, {"tool_providers": [provider(shop)]})
    assert out["unchanged"]["tool_providers"] == ["shop"]
    assert out["spec_pulls"] == [{"provider": "shop", "status": "failed", "error": "HTTP 503",
                                  "kept": "the stored spec is kept", "spec_access_probe": out["spec_pulls"][0][
                                      "spec_access_probe"]}]
    assert [w["code"] for w in out["warnings"]] == ["spec_pull_failed"]
    assert stored(sql)["openapi"] == good["openapi"]


def test_a_failed_pull_for_a_changed_spec_url_refuses_the_apply(shop, cli, sql, tmp_path):
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop)]})
    before = stored(sql)
    problem = _refusal(shop, cli, sql, tmp_path, "/nowhere.json")
    assert "HTTP 404" in problem["message"]
    assert stored(sql)["spec_url"] == before["spec_url"]


def test_a_spec_that_does_not_compile_is_not_taken(shop, cli, sql, tmp_path):
    apply_config(cli, tmp_path, {"tool_providers": [provider(shop)]})
    good = stored(sql)["openapi"]
    shop.state["spec"] = {"openapi": "3.1.0", "paths": {"/x": {"get": {
        "operationId": "bad", "x-agent-capability": {"version": 1, "enabled": True, "scope": 5}}}}}
    err = cli_refused(cli("provider", "refresh", "shop"), "spec_pull_failed")
    assert "does not compile" in err["message"]
    assert stored(sql)["openapi"] == good


# ---------------------------------------------------------------- refresh and the capability revision

def _route_config(shop) -> dict:
    return {"tool_providers": [provider(shop)],
            "routes": [{"route_key": "orders", "name": "Orders", "agent_client": {"enabled": True},
                        "tools": {"sources": [{"provider": "shop", "allow": ["*"]}],
                                  "agent_direct": {"enabled": True}}}],
            "client_apps": [{"app_id": "shop-app", "name": "Shop", "allowed_routes": ["orders"]}]}


def test_changed_spec_moves_the_revision_and_unchanged_only_the_refresh_time(shop, cli, sql, server, tmp_path):
    apply_config(cli, tmp_path, _route_config(shop))
    session = cli_ok(cli("sessions", "issue", "--client", "shop-app", "--routes", "orders",
                         "--on-behalf-of", "user-1"))

    def revision() -> tuple[str, list[str]]:
        answer = server.get("/agent-api/v1/tools?route=orders", headers=bearer(session["access_token"]))
        assert answer.status_code == 200, answer.text
        return answer.json()["capability_revision"], sorted(t["name"] for t in answer.json()["tools"])

    first, names = revision()
    assert names == ["orders_list"]
    before = stored(sql)

    report = cli_ok(cli("provider", "refresh", "shop"))
    assert report["ok"] and report["status"] == "unchanged" and report["tools"] == 1
    row = stored(sql)
    assert row["updated_at"] == before["updated_at"] and row["refreshed_at"] > before["refreshed_at"]
    assert revision()[0] == first

    shop.state["spec"] = tool_spec(tools={"orders_list": {}, "orders_get_latest": {"path": "/orders/latest"}})
    report = cli_ok(cli("provider", "refresh", "shop"))
    assert report["status"] == "changed" and report["added"] == ["orders_get_latest"] and report["removed"] == []
    assert report["authz_probe"]["status"] in ("pass", "suspect", "inconclusive", "skipped")
    second, names = revision()
    assert second != first and names == ["orders_get_latest", "orders_list"]

    shop.state["spec"] = tool_spec(tools={"orders_list": {"summary": "Every order"},
                                          "orders_get_latest": {"path": "/orders/latest"}})
    report = cli_ok(cli("provider", "refresh", "shop"))
    assert report["status"] == "changed" and report["changed"] == []  # wording only
    assert revision()[0] != second


def test_refresh_refusals(shop, cli, sql, tmp_path):
    cli_refused(cli("provider", "refresh", "nobody"), "provider_not_found")
    apply_config(cli, tmp_path, {"tool_providers": [{"name": "inline", "base_url": shop.url,
                                                     "secret_env": SECRET_ENV, "openapi": tool_spec()}]})
    cli_refused(cli("provider", "refresh", "inline"), "provider_not_pulled")
    assert shop.seen == []
    cli_refused(cli("provider", "show", "nobody"), "provider_not_found")


# ---------------------------------------------------------------- the schedule

def test_schedule_pulls_due_providers_only(shop, cli, sql, app, tmp_path):
    apply_config(cli, tmp_path, {"tool_providers": [
        provider(shop, name="every-five", auto_refresh_min=5), provider(shop, name="every-day", auto_refresh_min=1440),
        provider(shop, name="manual-only")]})
    database = app.extensions["bailing"].db
    shop.seen.clear()

    assert refresh_module.refresh_due(database) == []  # all were attempted just now, by the apply
    assert shop.requests_to(SPEC) == []

    sql("UPDATE bz_tool_providers SET spec_pull_attempted_at = now() - interval '6 minutes'")
    reports = refresh_module.refresh_due(database)
    assert [(r["provider"], r["via"], r["status"]) for r in reports] == [("every-five", "auto", "unchanged")]
    assert stored(sql, "every-five")["attempted_at"] > stored(sql, "every-day")["attempted_at"]

    assert refresh_module.refresh_due(database) == []  # measured from the attempt just made
    sql("UPDATE bz_tool_providers SET spec_pull_attempted_at = now() - interval '2 days'")
    shop.routes[SPEC] = lambda r: json_answer({}, 500)
    reports = refresh_module.refresh_due(database)
    assert sorted((r["provider"], r["ok"]) for r in reports) == [("every-day", False), ("every-five", False)]
    assert stored(sql, "every-day")["status"] == "failed"  # a failure counts as an attempt too
    assert refresh_module.refresh_due(database) == []


# ---------------------------------------------------------------- the console

def test_console_lists_providers_and_pulls_for_admins_only(shop, cli, sql, server, tmp_path):
    from tests.helpers import PASSWORD, make_admin

    apply_config(cli, tmp_path, {"tool_providers": [provider(shop)]})
    shop.routes[SPEC] = lambda r: json_answer({}, 502)
    make_admin(cli, "root-admin", "admin")
    make_admin(cli, "an-auditor", "auditor")

    def signed_in(name: str):
        import re
        import requests

        http = requests.Session()
        page = http.get(server.url + "/console/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        answer = http.post(server.url + "/console/login", data={"username": name, "password": PASSWORD,
                                                                "csrf_token": token})
        assert answer.status_code in (200, 303), answer.text[:500]
        return http

    auditor = signed_in("an-auditor")
    assert auditor.get(server.url + "/console/providers/").status_code == 403
    admin = signed_in("root-admin")
    page = admin.get(server.url + "/console/providers/")
    assert page.status_code == 200 and "shop" in page.text and SPEC in page.text
    token = __import__("re").search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    assert admin.post(server.url + "/console/providers/shop/refresh", allow_redirects=False).status_code in (400, 403)
    answer = admin.post(server.url + "/console/providers/shop/refresh", data={"csrf_token": token})
    assert answer.status_code == 200 and "could not be pulled: HTTP 502" in answer.text
    assert "Warning: the last spec pull failed" in answer.text
    assert stored(sql)["status"] == "failed"
