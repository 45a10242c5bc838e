"""A business system written from the contract accepts every kind of call the hub makes
(BUSINESS_SIDE §A, "What a compatible hub must do", item 9).

`verify` below is one verifier with the rules every connect SDK of §A.8 shares (Python, Node,
PHP/CRMEB, Java, Go, .NET): the six fields of §A.3 joined by dots, a timestamp in seconds accepted
only while |now - ts| < 300 (equal is too old), `sha256=` and lowercase hex compared in constant
time, an empty signature refused, and the path the *business* gives: the operation's path as its
spec declares it (its mount point removed) with the query as received. The peer serves it on a
real loopback server behind the hub, and must accept: reads whose query holds spaces, `&`, `?`,
non-ASCII text and arrays (sent as Core sends them, §A.5), writes with JSON bodies, path
parameters, a write resumed after its approval, and task-managed calls, whose idempotency key is
checked against §A.6 and whose job id stays the same across the resume.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time

import pytest
from flask import Flask, request

from tests.conftest import EXAMPLES, LiveServer, governed_config
from tests.helpers import admin_token, apply_config, assert_ok
from tests.task_world import BIG, READ, WRITE, World, approve, binding, iid

# The same work on any server (the bytes the hub sends; the calls' SQL runs in tests/test_tool_invocations.py).
pytestmark = pytest.mark.any_server

SECRET = "business-peer-secret"
WINDOW = 300
LOOKUP = "customer_lookup"


# ================================================================ the verifier, from §A.3 and §A.8

def verify(secret: str, headers, method: str, path_with_query: str, body: bytes, now: float) -> bool:
    timestamp = headers.get("X-Bailing-Timestamp") or ""
    signature = headers.get("X-Bailing-Signature") or ""
    if not signature or not timestamp.isascii() or not timestamp.isdigit():
        return False
    if not abs(now - int(timestamp)) < WINDOW:
        return False
    canonical = ".".join([timestamp, method.upper(), path_with_query, hashlib.sha256(body).hexdigest(),
                          headers.get("X-Bailing-On-Behalf-Of") or "", headers.get("X-Bailing-Job-Id") or ""])
    expected = "sha256=" + hmac.new(secret.encode("utf-8"), canonical.encode("utf-8"), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))


def signed(secret: str, ts: int, method: str, path: str, body: bytes, subject: str, job: str) -> dict:
    canonical = f"{ts}.{method}.{path}.{hashlib.sha256(body).hexdigest()}.{subject}.{job}"
    mac = hmac.new(secret.encode(), canonical.encode(), hashlib.sha256).hexdigest()
    headers = {"X-Bailing-Timestamp": str(ts), "X-Bailing-Signature": "sha256=" + mac, "X-Bailing-Job-Id": job}
    if subject:
        headers["X-Bailing-On-Behalf-Of"] = subject
    return headers


def test_the_verifier_holds_the_sdks_rules():
    # Core's frozen tool-call vector (§A.4).
    body = b'{"title":"test","price":9.9}'
    headers = signed("bailing-test-secret", 1718000000, "POST", "/goods/create", body, "179:1", "job-test-001")
    assert headers["X-Bailing-Signature"] == \
        "sha256=6deb8dbd54268eee4631129b442acbc9797431642473326a10a5b0826431aae5"
    assert verify("bailing-test-secret", headers, "post", "/goods/create", body, 1718000000 + 299)
    assert verify("bailing-test-secret", headers, "POST", "/goods/create", body, 1718000000 - 299)
    # Exactly the window, on either side, is refused.
    assert not verify("bailing-test-secret", headers, "POST", "/goods/create", body, 1718000000 + 300)
    assert not verify("bailing-test-secret", headers, "POST", "/goods/create", body, 1718000000 - 300)
    # Every signed field counts; the path is the one the business gives.
    now = 1718000001
    for changed in ({"path": "/api/goods/create"}, {"body": body + b" "}, {"method": "PUT"}):
        args = {"path": "/goods/create", "body": body, "method": "POST", **changed}
        assert not verify("bailing-test-secret", headers, args["method"], args["path"], args["body"], now)
    assert not verify("bailing-test-secret", {**headers, "X-Bailing-On-Behalf-Of": "179:2"}, "POST",
                      "/goods/create", body, now)
    assert not verify("bailing-test-secret", {**headers, "X-Bailing-Job-Id": "job-test-002"}, "POST",
                      "/goods/create", body, now)
    # Empty, upper-case or non-numeric: refused.
    assert not verify("bailing-test-secret", {**headers, "X-Bailing-Signature": ""}, "POST", "/goods/create", body, now)
    upper = "sha256=" + headers["X-Bailing-Signature"][7:].upper()
    assert not verify("bailing-test-secret", {**headers, "X-Bailing-Signature": upper}, "POST", "/goods/create",
                      body, now)
    assert not verify("bailing-test-secret", {**headers, "X-Bailing-Timestamp": "1718000000.0"}, "POST",
                      "/goods/create", body, now)
    # An empty subject and job are empty fields, their dots kept (the spec-pull vector).
    pull = signed("bailing-test-secret", 1718000000, "GET", "/bailing/tools.json", b"", "", "")
    assert pull["X-Bailing-Signature"] == \
        "sha256=505ab99763cd20b50ba4066ee2ac315fe6af12a8638e7dabef63508abddedc74"
    assert verify("bailing-test-secret", pull, "GET", "/bailing/tools.json", b"", 1718000000)


# ================================================================ the peer on loopback

class Peer:
    """The business system: CRM under /crm and ERP under /erp (its mount points, which are not
    part of any operation's path); refuses with 401 what `verify` refuses."""

    def __init__(self):
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        app = Flask(__name__)

        @app.route("/<system>/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
        def operation(system, rest):
            target = request.environ["RAW_URI"]
            declared = target.removeprefix(f"/{system}")
            body = request.get_data()
            accepted = verify(SECRET, request.headers, request.method, declared, body, time.time())
            with self.lock:
                self.requests.append({"method": request.method, "target": target, "declared": declared,
                                      "headers": dict(request.headers), "body": body, "accepted": accepted,
                                      "args": request.args.to_dict(flat=False)})
            if not accepted:
                return {"error": "bad_signature"}, 401
            return {"ok": True}, 200

        self.live = LiveServer(app)
        self.url = self.live.url

    def last(self) -> dict:
        with self.lock:
            return self.requests[-1]


def crm_document() -> dict:
    """The example CRM with one more read: a lookup whose query takes arrays, a boolean and a number."""
    document = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    capability = dict(document["paths"]["/customers"]["get"]["x-agent-capability"])
    document["paths"]["/customer-lookups"] = {"get": {
        "operationId": LOOKUP, "summary": "Look customers up by tags and ids",
        "description": "Customers matching any of the tags or ids.",
        "parameters": [
            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
            {"name": "tags", "in": "query", "schema": {"type": ["array", "null"], "items": {"type": "string"}}},
            {"name": "ids", "in": "query", "schema": {"type": "array", "items": {"type": "number"}}},
            {"name": "active", "in": "query", "schema": {"type": "boolean"}},
            {"name": "score", "in": "query", "schema": {"type": "number"}},
            {"name": "filter", "in": "query", "schema": {"type": "object"}},
        ],
        "responses": {"200": {"description": "Matches"}},
        "x-agent-capability": capability,
    }}
    return document


class PeerWorld(World):
    """The task world (tests/task_world.py) over the peer instead of the demo business system."""

    def __init__(self, server, cli, peer, sql, tmp_path):
        self.server, self.cli, self.business, self.sql = server, cli, peer, sql
        document = tmp_path / "crm-peer.openapi.json"
        document.write_text(json.dumps(crm_document()))
        config = governed_config(peer.url)
        config["tool_providers"][0]["openapi"] = str(document)
        config["client_apps"][0]["agent_authorize_url"] = "http://127.0.0.1:9/authorize"
        apply_config(cli, tmp_path, config)
        self.admin = admin_token(cli, "peer-admin", "admin")
        self.requests = 0


@pytest.fixture
def peer_world(server, cli, sql, tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_CRM_SECRET", SECRET)
    monkeypatch.setenv("DEMO_ERP_SECRET", SECRET)
    peer = Peer()
    yield PeerWorld(server, cli, peer, sql, tmp_path)
    peer.live.stop()


def canonical_sha256(value) -> str:
    """§A.6's canonical JSON (sorted keys, no whitespace) of string and integer values."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                     ensure_ascii=False).encode()).hexdigest()


def core_key(tool: str, arguments: dict, job_id: str, subject: str) -> str:
    return canonical_sha256({"args_hash": canonical_sha256(arguments), "job_id": job_id, "on_behalf_of": subject,
                             "tool": tool})


def job_of(world, name: str) -> str:
    return str(world.sql("SELECT id FROM bz_tool_invocations WHERE invocation_id = %s", (iid(name),))[0][0])


SUBJECT = "tenant-7:user-42"


def test_the_peer_accepts_every_kind_of_call_the_hub_makes(peer_world):
    world, peer = peer_world, peer_world.business
    agent = world.member("plain")

    def call(tool: str, arguments: dict, name: str) -> dict:
        count = len(peer.requests)
        result = agent.invoke(tool, arguments, name, None)
        assert len(peer.requests) == count + 1, (name, result.get("reason"))
        sent = peer.last()
        assert sent["accepted"], sent["target"]
        assert result["status"] == "executed", (name, result.get("reason"), result.get("text"))
        return sent

    # Reads: spaces, `&`, `?`, `~`, non-ASCII text, arrays, a boolean and a number, as Core sends them.
    lookup = {"q": "Müller & Co? ok ~*", "tags": ["vip", "b c", "x,y"], "ids": [1, 2.5, 3], "active": True,
              "score": 5.0}
    sent = call(LOOKUP, lookup, "lookup")
    assert sent["target"] == ("/crm/customer-lookups?q=M%C3%BCller+%26+Co%3F+ok+%7E*"
                              "&tags=vip%2Cb+c%2Cx%2Cy&ids=1%2C2.5%2C3&active=true&score=5")
    assert sent["args"] == {"q": ["Müller & Co? ok ~*"], "tags": ["vip,b c,x,y"], "ids": ["1,2.5,3"],
                            "active": ["true"], "score": ["5"]}
    assert sent["body"] == b"" and "X-Bailing-On-Behalf-Of" in sent["headers"]
    # A null argument is left out; an object is `[object Object]`, as JavaScript's String() has it.
    sent = call(LOOKUP, {"q": "x", "tags": None, "ids": [], "filter": {"a": 1}}, "lookup-sparse")
    assert sent["target"] == "/crm/customer-lookups?q=x&ids=&filter=%5Bobject+Object%5D"
    # Path parameters: encodeURIComponent, `!~*'()` left bare.
    sent = call(READ, {"customer_id": "C 1/é~!*'()"}, "path")
    assert sent["target"] == "/crm/customers/C%201%2F%C3%A9~!*'()"
    # Writes with JSON bodies, JSON.stringify's bytes (`500.0` is `500`, text unescaped).
    sent = call("customer_note_add", {"customer_id": "C-100234", "body": "Signed ✉ \"quoted\"\nline"}, "note")
    assert (sent["method"], sent["declared"]) == ("POST", "/customers/C-100234/notes")
    assert sent["body"] == '{"body":"Signed ✉ \\"quoted\\"\\nline"}'.encode()
    assert sent["headers"]["Content-Type"] == "application/json"
    sent = call(WRITE, {"customer_id": "C-100234", "credit_limit": 500.0}, "small")
    assert (sent["method"], sent["body"]) == ("PATCH", b'{"credit_limit":500}')
    # A write held for approval, then resumed: signed when it is finally sent, its job id and
    # idempotency key those of the invocation made before the approval.
    waiting = agent.invoke(WRITE, BIG, "approved", None)
    assert waiting["status"] == "awaiting_approval"
    job = job_of(world, "approved")
    approve(world, waiting)
    count = len(peer.requests)
    assert assert_ok(agent.resume_raw("approved"))["status"] == "executed"
    assert len(peer.requests) == count + 1
    sent = peer.last()
    assert sent["accepted"] and sent["headers"]["X-Bailing-Job-Id"] == job
    assert sent["headers"]["X-Bailing-Idempotency-Key"] == core_key(WRITE, BIG, job, SUBJECT)
    assert all(r["accepted"] for r in peer.requests)


def test_the_peer_accepts_task_managed_calls_with_core_keys_and_a_stable_job_id(peer_world):
    world, peer = peer_world, peer_world.business
    member = world.member("tasked")
    task = world.create([member], tools=[WRITE, READ, LOOKUP], max_write_calls=3)
    run = member.turn(binding(task))["run_id"]

    # A task-managed read (GET): it carries Core's idempotency key (§A.2: `sideEffecting || taskControl`).
    customer = {"customer_id": "C-100234"}
    assert member.invoke(READ, customer, "task-read", run)["status"] == "executed"
    sent = peer.last()
    assert sent["accepted"] and (sent["method"], sent["declared"]) == ("GET", "/customers/C-100234")
    job = sent["headers"]["X-Bailing-Job-Id"]
    assert job == job_of(world, "task-read")
    assert sent["headers"]["X-Bailing-Idempotency-Key"] == core_key(READ, customer, job, SUBJECT)
    assert sent["headers"]["X-Bailing-On-Behalf-Of"] == SUBJECT and task["task_id"] not in json.dumps(sent["headers"])
    lookup = {"q": "a&b", "tags": ["x", "y"]}
    assert member.invoke(LOOKUP, lookup, "task-lookup", run)["status"] == "executed"
    sent = peer.last()
    assert sent["accepted"] and sent["target"] == "/crm/customer-lookups?q=a%26b&tags=x%2Cy"
    assert sent["headers"]["X-Bailing-Idempotency-Key"] == core_key(LOOKUP, lookup, job_of(world, "task-lookup"),
                                                                     SUBJECT)

    # A task-managed write held for approval: the job id the task records before the approval is
    # the one sent when the call is resumed, and its key is derived from it.
    waiting = member.invoke(WRITE, BIG, "task-big", run)
    assert waiting["status"] == "awaiting_approval"
    [row] = [r for r in world.detail(task["task_id"])["invocations"] if r["tool"] == WRITE]
    before = row["job_id"]
    approve(world, waiting)
    assert assert_ok(member.resume_raw("task-big"))["status"] == "executed"
    sent = peer.last()
    assert sent["accepted"] and (sent["method"], sent["declared"]) == ("PATCH", "/customers/C-100234")
    assert sent["headers"]["X-Bailing-Job-Id"] == before == job_of(world, "task-big")
    assert sent["headers"]["X-Bailing-Idempotency-Key"] == core_key(WRITE, BIG, before, SUBJECT)
    # A second resume is answered from the record: nothing more reaches the business system.
    count = len(peer.requests)
    assert assert_ok(member.resume_raw("task-big"))["status"] == "executed"
    assert len(peer.requests) == count
    assert all(r["accepted"] for r in peer.requests)


def test_the_peer_refuses_a_call_signed_over_another_path(peer_world):
    """The peer can fail: a call whose signed path is not the one it was sent to is refused (401),
    which the hub reports as the business system's rejection."""
    world, peer = peer_world, peer_world.business
    agent = world.member("forged")
    now = int(time.time())
    headers = signed(SECRET, now, "GET", "/customers/C-1", b"", SUBJECT, "job-x")
    response = peer.live.request("GET", "/crm/customers/C-2", headers=headers)
    assert response.status_code == 401 and not peer.last()["accepted"]
    response = peer.live.request("GET", "/crm/customers/C-1", headers=headers)
    assert response.status_code == 200 and peer.last()["accepted"]
    # Past the window the same request is refused.
    stale = signed(SECRET, now - WINDOW, "GET", "/customers/C-1", b"", SUBJECT, "job-x")
    assert peer.live.request("GET", "/crm/customers/C-1", headers=stale).status_code == 401
    assert agent.invoke(READ, {"customer_id": "C-1"}, "still-fine", None)["status"] == "executed"
