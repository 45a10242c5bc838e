"""The authorization probe (BUSINESS_SIDE.md §C) against a real business system on loopback:
the request exactly (method, URL, body, headers, signature) in both modes, every row of the
classification table, when it is skipped, where its result is stored and shown (`provider show`,
the console, /metrics), and that it runs after a URL provider is saved."""
from __future__ import annotations

import json
import time

import pytest

from tests.business_side import SECRET, SECRET_ENV, Request, System, json_answer, signed_spec, tool_spec, verify
from tests.helpers import apply_config, cli_ok, cli_refused

# The same work on any server (requests to a business system and their classification; the
# stored result's SQL runs in tests/test_spec_pull.py).
pytestmark = pytest.mark.any_server

PROBE = "/bailing/authz-probe"
SUBJECT = "__bailing_authz_probe__:nobody"
DEDICATED = {"x-bailing-authz-probe": {"method": "POST", "path": PROBE}}


@pytest.fixture(scope="module")
def system():
    made = System()
    yield made
    made.stop()


@pytest.fixture
def shop(system, monkeypatch):
    system.reset()
    monkeypatch.setenv(SECRET_ENV, SECRET)
    return system


def configure(cli, tmp_path, shop, spec: dict, *, base_url: str | None = None, timeout_ms: int = 10000) -> None:
    apply_config(cli, tmp_path, {"tool_providers": [{
        "name": "shop", "base_url": base_url or shop.url, "secret_env": SECRET_ENV, "openapi": spec,
        "timeout_ms": timeout_ms}]})


def probe(cli) -> dict:
    out = cli_ok(cli("provider", "probe", "shop"))
    assert out["provider"] == "shop"
    return out["authz_probe"]


def stored(sql) -> dict:
    return sql("SELECT authz_probe FROM bz_tool_providers WHERE name = 'shop'")[0][0]


# ---------------------------------------------------------------- the request

def test_dedicated_post_request_is_exact(shop, cli, sql, tmp_path):
    shop.routes["/api" + PROBE] = lambda r: json_answer({"authorized": False})
    # The base URL's own path prefixes the URL but is not signed (the declared path is).
    configure(cli, tmp_path, shop, tool_spec(root=DEDICATED), base_url=shop.url + "/api/")

    result = probe(cli)

    (request,) = shop.requests_to("/api" + PROBE)
    assert request.method == "POST"
    assert request.body == (b'{"subject":"__bailing_authz_probe__:nobody","reason":"bailing-authz-probe",'
                            b'"expect":"deny"}')
    ours = {k: v for k, v in request.headers.items() if k.startswith("x-bailing-") or k == "content-type"}
    assert ours == {"content-type": "application/json", "x-bailing-timestamp": ours["x-bailing-timestamp"],
                    "x-bailing-signature": ours["x-bailing-signature"], "x-bailing-job-id": "probe",
                    "x-bailing-client": "__probe__", "x-bailing-on-behalf-of": SUBJECT,
                    "x-bailing-tool-scope": "__probe__.authz"}
    assert abs(int(ours["x-bailing-timestamp"]) - time.time()) < 5
    assert verify(request, signed_path=PROBE)
    assert not verify(request, signed_path="/api" + PROBE)
    assert result == {**result, "status": "pass", "mode": "dedicated", "tool": "authz_probe",
                      "requires_subject": True, "http": 200}
    assert stored(sql) == result


def test_dedicated_get_declared_on_an_operation(shop, cli, tmp_path):
    shop.routes["/check"] = lambda r: json_answer({"allow": False})
    spec = tool_spec(tools={"orders_list": {},
                            "probe_me": {"path": "/check", "extra": {"x-bailing-authz-probe": True}}})
    configure(cli, tmp_path, shop, spec)

    result = probe(cli)

    (request,) = shop.requests_to("/check")
    assert request.method == "GET" and request.body == b""
    assert request.headers["content-type"] == "application/json"  # also for GET
    assert request.headers["x-bailing-tool-scope"] == "__probe__.authz"
    assert verify(request)
    assert (result["status"], result["tool"], result["mode"]) == ("pass", "probe_me", "dedicated")


def test_fallback_get_tool_request_is_exact(shop, cli, tmp_path):
    shop.routes["/orders/mine"] = lambda r: json_answer({}, 403)
    spec = tool_spec(tools={
        "orders_find": {"path": "/orders/find", "params": [
            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}], "subject": True},
        "orders_note": {"method": "post", "path": "/orders/note", "subject": True},
        "orders_all": {"path": "/orders/all", "scope": "orders.all"},
        "orders_mine": {"path": "/orders/mine", "scope": "orders.mine", "subject": True},
    })
    configure(cli, tmp_path, shop, spec)

    result = probe(cli)

    # No required parameter guessed, no write sent; the subject-requiring GET preferred.
    assert [r.target for r in shop.seen] == ["/orders/mine"]
    (request,) = shop.seen
    ours = {k: v for k, v in request.headers.items() if k.startswith("x-bailing-") or k == "content-type"}
    assert set(ours) == {"x-bailing-timestamp", "x-bailing-signature", "x-bailing-job-id", "x-bailing-client",
                         "x-bailing-on-behalf-of", "x-bailing-tool-scope"}
    assert (ours["x-bailing-job-id"], ours["x-bailing-client"], ours["x-bailing-on-behalf-of"],
            ours["x-bailing-tool-scope"]) == ("probe", "__probe__", SUBJECT, "orders.mine")
    assert request.method == "GET" and request.body == b"" and verify(request)
    assert result == {**result, "status": "pass", "mode": "tool", "tool": "orders_mine", "requires_subject": True,
                      "http": 403}


# ---------------------------------------------------------------- classification (§C.3)

def _answer(kind):
    if kind == "slow":
        def slow(request: Request):
            time.sleep(1.6)
            return json_answer({"authorized": False})
        return slow
    status, body = kind
    if isinstance(body, bytes):
        return lambda r: (status, {"Content-Type": "text/plain"}, body)
    return lambda r: json_answer(body, status)


DEDICATED_ROWS = [
    pytest.param((401, {"authorized": False, "error": "bad_signature"}), "pass", id="401"),
    pytest.param((403, {}), "pass", id="403"),
    pytest.param((200, {"authorized": False}), "pass", id="authorized-false"),
    pytest.param((200, {"allow": False}), "pass", id="allow-false"),
    pytest.param((204, b""), "inconclusive", id="2xx-empty"),
    pytest.param((200, {"authorized": True}), "suspect", id="authorized-true"),
    pytest.param((200, {"allowed": True}), "suspect", id="allowed-true"),
    pytest.param((200, {"ok": True}), "suspect", id="ok-true"),
    pytest.param((200, {"authorized": "no"}), "inconclusive", id="no-boolean"),
    pytest.param((200, [False]), "inconclusive", id="not-an-object"),
    pytest.param((200, b"denied"), "inconclusive", id="not-json"),
    pytest.param((500, {"authorized": False}), "inconclusive", id="500"),
    pytest.param((404, {}), "inconclusive", id="404"),
    pytest.param((302, {}), "inconclusive", id="redirect"),
    pytest.param("slow", "inconclusive", id="timeout"),
]


@pytest.mark.parametrize("answer, status", DEDICATED_ROWS)
def test_dedicated_classification(shop, cli, sql, tmp_path, answer, status):
    shop.routes[PROBE] = _answer(answer)
    configure(cli, tmp_path, shop, tool_spec(root=DEDICATED), timeout_ms=1000)
    started = time.monotonic()
    result = probe(cli)
    assert time.monotonic() - started < 3
    assert result["status"] == status, result
    assert result["mode"] == "dedicated" and result["reason"]
    if answer == "slow":
        assert "http" not in result and "failed" in result["reason"]
    else:
        assert result["http"] == answer[0]
    assert stored(sql)["status"] == status


FALLBACK_ROWS = [
    pytest.param((401, {}), True, "pass", id="401"),
    pytest.param((403, {}), False, "pass", id="403"),
    pytest.param((200, {"authorized": False}), True, "suspect", id="2xx-subject-required"),
    pytest.param((200, {"items": []}), False, "inconclusive", id="2xx-no-subject"),
    pytest.param((500, {}), True, "inconclusive", id="500"),
    pytest.param((404, {}), True, "inconclusive", id="404"),
]


@pytest.mark.parametrize("answer, subject, status", FALLBACK_ROWS)
def test_fallback_classification(shop, cli, tmp_path, answer, subject, status):
    shop.routes["/orders/list"] = _answer(answer)
    configure(cli, tmp_path, shop, tool_spec(tools={"orders_list": {"subject": subject}}))
    result = probe(cli)
    assert (result["status"], result["mode"], result["tool"], result["requires_subject"], result["http"]) == (
        status, "tool", "orders_list", subject, answer[0])


@pytest.mark.parametrize("spec", [tool_spec(root=DEDICATED), tool_spec()], ids=["dedicated", "tool"])
def test_network_error_is_inconclusive(shop, cli, tmp_path, spec):
    import socket

    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{placeholder.getsockname()[1]}"
    configure(cli, tmp_path, shop, spec, base_url=closed)
    result = probe(cli)
    assert result["status"] == "inconclusive" and "http" not in result and "failed" in result["reason"]


def test_skipped_without_secret_or_suitable_tool(shop, cli, tmp_path, monkeypatch):
    configure(cli, tmp_path, shop, tool_spec(tools={
        "orders_note": {"method": "post", "path": "/orders/note"},
        "orders_find": {"path": "/orders/find", "params": [
            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}]}}))
    result = probe(cli)
    assert result["status"] == "skipped" and "no GET tool" in result["reason"]
    monkeypatch.delenv(SECRET_ENV)
    assert probe(cli)["status"] == "skipped"
    assert shop.seen == []


def test_probe_refusal_for_an_unknown_provider(cli):
    cli_refused(cli("provider", "probe", "nobody"), "provider_not_found")


# ---------------------------------------------------------------- where it shows, when it runs

def test_suspect_is_a_warning_in_show_console_and_metrics(shop, cli, server, tmp_path):
    from tests.helpers import PASSWORD, make_admin

    shop.routes[PROBE] = lambda r: json_answer({"authorized": True})
    configure(cli, tmp_path, shop, tool_spec(root=DEDICATED))
    assert probe(cli)["status"] == "suspect"

    shown = cli_ok(cli("provider", "show", "shop"))
    assert shown["authz_probe"]["status"] == "suspect"
    assert "authorization probe: suspect" in shown["warnings"]
    assert cli_ok(cli("provider", "show"))["providers"][0]["name"] == "shop"

    metrics = server.get("/metrics").text
    assert 'bailing_provider_authz_probe{provider="shop",status="suspect"} 1.0' in metrics

    import re
    import requests

    make_admin(cli, "root-admin", "admin")
    http = requests.Session()
    token = re.search(r'name="csrf_token" value="([^"]+)"', http.get(server.url + "/console/login").text).group(1)
    http.post(server.url + "/console/login", data={"username": "root-admin", "password": PASSWORD,
                                                   "csrf_token": token})
    page = http.get(server.url + "/console/providers/")
    assert "Warning: authorization probe: suspect" in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)  # the signed-in session's
    shop.routes[PROBE] = lambda r: json_answer({}, 401)
    answer = http.post(server.url + "/console/providers/shop/probe", data={"csrf_token": token})
    assert "Authorization probe of shop: pass." in answer.text
    assert 'status="pass"} 1.0' in server.get("/metrics").text


def test_probe_runs_after_a_url_provider_is_saved(shop, cli, tmp_path):
    spec = tool_spec(root=DEDICATED)
    shop.routes["/tools.json"] = signed_spec(lambda: json.dumps(spec).encode())
    shop.routes[PROBE] = lambda r: json_answer({"authorized": False})
    doc = {"tool_providers": [{"name": "shop", "base_url": shop.url, "spec_url": shop.url + "/tools.json",
                               "secret_env": SECRET_ENV}]}
    out = apply_config(cli, tmp_path, doc)
    assert out["authz_probes"]["shop"]["status"] == "pass"
    assert len(shop.requests_to(PROBE)) == 1
    out = apply_config(cli, tmp_path, doc)  # nothing saved: no probe
    assert "authz_probes" not in out and len(shop.requests_to(PROBE)) == 1
