"""The hub signs business calls exactly as BailingHub Core does, so that business systems
verifying with Core's connect SDKs accept them (BUSINESS_SIDE.md §A).

The frozen vectors of §A.4 pin the canonical string; a real governed call, dispatched by the hub
to a capturing business system on loopback whose base URL has a path of its own, is then checked
by a verifier written here from §A.3 and §A.8, as the connect SDKs verify: the dot-joined six
fields over the operation's path as the spec declares it (never the base URL's own path), a
seconds timestamp within 300 s, `sha256=` and lowercase hex.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from types import SimpleNamespace

import pytest
from flask import Flask, request

from admin_app.catalog.compiler import compile_provider
from admin_app.invocations import dispatch, signing
from tests.conftest import EXAMPLES, LiveServer, governed_config
from tests.helpers import admin_token, apply_config, assert_ok, bearer

SECRET = "bailing-test-secret"


@pytest.mark.parametrize(("timestamp", "method", "path", "body", "subject", "job", "expected"), [
    ("1718000000", "POST", "/goods/create", b'{"title":"test","price":9.9}', "179:1", "job-test-001",
     "sha256=6deb8dbd54268eee4631129b442acbc9797431642473326a10a5b0826431aae5"),
    ("1718000000", "GET", "/bailing/tools.json", b"", "", "",
     "sha256=505ab99763cd20b50ba4066ee2ac315fe6af12a8638e7dabef63508abddedc74"),
], ids=["tool-call", "spec-pull"])
def test_the_frozen_vectors_of_core(timestamp, method, path, body, subject, job, expected):
    message = signing.canonical_request(timestamp, method, path, body, subject, job)
    assert signing.signature(SECRET, message) == expected


def test_an_empty_subject_and_job_keep_their_dots():
    message = signing.canonical_request("1", "get", "/a", b"", "", "")
    assert message == b"1.GET./a." + hashlib.sha256(b"").hexdigest().encode() + b".."


def core_sdk_verify(secret: str, headers: dict, method: str, path_with_query: str, body: bytes) -> bool:
    """What every connect SDK checks (§A.8), written from the contract, not from the hub."""
    timestamp = headers.get("X-Bailing-Timestamp", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) >= 300:
        return False
    canonical = ".".join([timestamp, method.upper(), path_with_query, hashlib.sha256(body).hexdigest(),
                          headers.get("X-Bailing-On-Behalf-Of", ""), headers.get("X-Bailing-Job-Id", "")])
    mac = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest("sha256=" + mac, headers.get("X-Bailing-Signature", ""))


class Capture:
    """A business system on loopback that records each request as received and answers 201."""

    def __init__(self):
        self.requests: list[dict] = []
        app = Flask(__name__)

        @app.route("/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
        def anything(rest):
            self.requests.append({"method": request.method, "target": request.environ["RAW_URI"],
                                  "headers": dict(request.headers), "body": request.get_data()})
            return {"id": "N-1"}, 201

        self.live = LiveServer(app)


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setenv("DEMO_CRM_SECRET", SECRET)
    monkeypatch.setenv("DEMO_ERP_SECRET", SECRET)
    made = Capture()
    yield made
    made.live.stop()


def invoke(server, token: str, tool: str, arguments: dict) -> dict:
    headers = bearer(token)
    revision = assert_ok(server.get("/agent-api/v1/tools?route=desk", headers=headers))["capability_revision"]
    body = {"invocation_id": hashlib.sha256(tool.encode()).hexdigest(), "route": "desk",
            "capability_revision": revision, "tool": tool, "arguments": arguments}
    return assert_ok(server.post("/agent-api/v1/tool-invocations", json=body, headers=headers))


def test_governed_calls_pass_the_connect_sdks_check(server, cli, capture, tmp_path):
    # The provider's base URL has a path of its own (/crm): it is not part of what is signed.
    apply_config(cli, tmp_path, governed_config(capture.live.url))
    code, session, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                             "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                             "--on-behalf-of", "tenant-7:user-42")
    assert code == 0, err
    token = session["access_token"]
    note = {"customer_id": "C-100234", "body": "Signed as Core signs ✉"}
    assert invoke(server, token, "customer_note_add", note)["state"] == "executed"
    # A query with spaces, `&`, `?` and non-ASCII text.
    assert invoke(server, token, "customer_search", {"q": "Müller & Co? ok"})["state"] == "executed"
    # A write approved by a person, then resumed: signed when it is finally sent.
    waiting = invoke(server, token, "customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 50000})
    assert waiting["state"] == "awaiting_approval"
    approver = bearer(admin_token(cli, "ann", "approver"))
    approval = waiting["approval"]
    assert_ok(server.post(f"/admin/api/tool-approvals/{approval['id']}/approve", headers=approver,
                          json={"args_hash": approval["args_hash"]}))
    resumed = assert_ok(server.post(f"/agent-api/v1/tool-invocations/{waiting['invocation_id']}/resume",
                                    headers=bearer(token)))
    assert resumed["state"] == "executed"

    write, read, approved = capture.requests
    assert (write["method"], write["target"]) == ("POST", "/crm/customers/C-100234/notes")
    assert json.loads(write["body"]) == {"body": note["body"]}
    assert (read["method"], read["target"], read["body"]) == (
        "GET", "/crm/customers?q=M%C3%BCller+%26+Co%3F+ok", b"")
    assert (approved["method"], approved["target"]) == ("PATCH", "/crm/customers/C-100234")
    calls = ((write, "customer_note_add", note), (read, "customer_search", {"q": "Müller & Co? ok"}),
             (approved, "customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 50000}))
    for sent, tool, arguments in calls:
        headers, operation = sent["headers"], sent["target"].removeprefix("/crm")
        assert core_sdk_verify(SECRET, headers, sent["method"], operation, sent["body"]), sent["target"]
        # Signed over the target as received (with the base URL's path) it would not verify.
        assert not core_sdk_verify(SECRET, headers, sent["method"], sent["target"], sent["body"])
        assert headers["X-Bailing-Client"] == "ops-app"
        assert headers["X-Bailing-On-Behalf-Of"] == "tenant-7:user-42"
        assert headers["X-Bailing-Tool-Scope"]
        # Core's idempotency key (§A.6), from the job id the call carries.
        key = {"args_hash": canonical_sha256(arguments), "job_id": headers["X-Bailing-Job-Id"],
               "on_behalf_of": "tenant-7:user-42", "tool": tool}
        assert headers["X-Bailing-Idempotency-Key"] == canonical_sha256(key)


def canonical_sha256(value: dict) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_without_a_subject_the_header_is_absent_and_signed_as_empty():
    headers = signing.headers(SECRET, timestamp=str(int(time.time())), method="GET", path_with_query="/x?a=1",
                              body=b"", on_behalf_of="", job_id="job-1", scope="crm.read", idempotency_key="k",
                              client="")
    assert "X-Bailing-On-Behalf-Of" not in headers
    assert headers["X-Bailing-Client"] == ""
    assert core_sdk_verify(SECRET, headers, "GET", "/x?a=1", b"")
    assert not core_sdk_verify(SECRET, {**headers, "X-Bailing-On-Behalf-Of": "someone"}, "GET", "/x?a=1", b"")


@pytest.fixture(scope="module")
def crm_tools():
    document = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    return compile_provider("demo-crm", document, "https://crm.example.com/api/", 10000).tools


def test_arguments_are_placed_as_core_places_them(crm_tools):
    """§A.5: a null argument is left out, a GET has no body, any other method at least `{}`."""
    search = dispatch.prepare(crm_tools["customer_search"], "https://crm.example.com/api/", {"q": None})
    assert (search.url, search.path_with_query, search.body) == (
        "https://crm.example.com/api/customers", "/customers", b"")
    read = dispatch.prepare(crm_tools["customer_get"], "https://crm.example.com/api", {"customer_id": "C 1/é"})
    assert (read.method, read.path_with_query, read.body) == ("GET", "/customers/C%201%2F%C3%A9", b"")
    # An operation with no body parameters: Core still sends `{}` for any method but GET.
    bare = SimpleNamespace(method="DELETE", path="/customers/{customer_id}", locations={"customer_id": "path"})
    delete = dispatch.prepare(bare, "https://crm.example.com/api", {"customer_id": "C-1"})
    assert (delete.path_with_query, delete.body) == ("/customers/C-1", b"{}")
    note = dispatch.prepare(crm_tools["customer_note_add"], "https://crm.example.com/api",
                            {"customer_id": "C-1", "body": "x"})
    assert (note.url, note.path_with_query, note.body) == (
        "https://crm.example.com/api/customers/C-1/notes", "/customers/C-1/notes", b'{"body":"x"}')


def test_values_are_formatted_as_javascript_formats_them():
    """§A.5: path and query values are String(value) (arrays comma-joined, objects `[object
    Object]`, numbers in JavaScript's shortest form), the query form-encoded as URLSearchParams
    does, integer-like argument names first, the body JSON.stringify's bytes."""
    read = SimpleNamespace(method="GET", path="/items/{id}/{id}", locations={
        "id": "path", "tags": "query", "big": "query", "on": "query", "obj": "query", "12": "query", "3": "query",
        "tilde": "query"})
    call = dispatch.prepare(read, "https://b.example/api", {
        "id": "a b/~!*'()", "tags": ["x y", 1.0, None, [2, 0.1]], "big": 1e21, "on": False, "obj": {"k": 1},
        "12": 12.5, "3": 3.0, "tilde": "~*-._"})
    assert call.path_with_query == (
        "/items/a%20b%2F~!*'()/a%20b%2F~!*'()?3=3&12=12.5&tags=x+y%2C1%2C%2C2%2C0.1&big=1e%2B21&on=false"
        "&obj=%5Bobject+Object%5D&tilde=%7E*-._")
    assert call.url == "https://b.example/api" + call.path_with_query
    write = SimpleNamespace(method="POST", path="/items", locations={"b": "body", "7": "body", "n": "body"})
    posted = dispatch.prepare(write, "https://b.example", {"b": {"z": 1.0, "10": [1e-7, "é"]}, "7": 5.0, "n": None})
    assert posted.body == '{"7":5,"b":{"10":[1e-7,"é"],"z":1}}'.encode()
