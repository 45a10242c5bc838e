"""Approvals decided by the business system (BUSINESS_SIDE.md §F), over real HTTP on loopback:
the hub sends the signed `tool_approval_request` to the business system's approval endpoint (a
channel of kind `business_webhook`) through its notification outbox; the business system verifies
it as Core's connect SDK's `verify_callback` does and posts its decision back to
`POST /approvals/<number>/decision`; the agent's resume then dispatches the frozen snapshot to the
demo business system, whose executions are counted.

One hub, one business system and one agent session serve the whole module; each test makes the
approvals it needs. Every refusal checks its status and body, and that nothing was written."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler

import pytest
import requests

from admin_app import create_app
from admin_app.notifications.worker import deliver_due
from tests.conftest import DEMO_SECRETS, Business, cli_runner, governed_config, serve
from tests.helpers import LoopbackServer, admin_token, apply_config
from tests.test_console_server import signed_in

SECRET = "business-approvals-signing-secret"
SECRET_ENV = "BZ_TEST_BUSINESS_DECISION_SECRET"
OTHER_SECRET = "some-other-secret"
UNAUTHORIZED = "审批决策验签失败或 token 无权裁决该任务"
MERGE = {"source_customer_id": "C-100235", "target_customer_id": "C-100234",
         "reason": "Same company, registered twice"}
HEX64 = re.compile(r"[0-9a-f]{64}")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def sign(secret: str, ts: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()


def verify_callback(secret: str, ts: str, body: bytes, signature: str, window_ms: int = 300_000) -> bool:
    """As the connect SDK's verify_callback (§A.8): ms timestamp within the window (a difference
    equal to it refused), HMAC of `ts.body`, compared in constant time."""
    if not signature or abs(now_ms() - int(ts)) >= window_ms:
        return False
    return hmac.compare_digest(sign(secret, ts, body), signature)


# ================================================================ the business system's approvals

class ApprovalDesk:
    """The business system's approval endpoint: verifies each request, and for an approval it has
    a plan for, posts that decision back to the hub (signed) before answering 204."""

    def __init__(self, hub_url: str) -> None:
        self.hub_url = hub_url
        self.received: list[dict] = []
        self.plans: dict[int, dict] = {}
        self.answers: dict[int, tuple[int, dict]] = {}
        desk = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                verified = verify_callback(SECRET, self.headers.get("X-Bailing-Timestamp", "0"), body,
                                           self.headers.get("X-Bailing-Signature", ""))
                payload = json.loads(body)
                desk.received.append({"verified": verified, "payload": payload, "headers": dict(self.headers)})
                plan = desk.plans.get(payload.get("approval_id"))
                if verified and plan is not None:
                    desk.answers[payload["approval_id"]] = desk.decide(payload, **plan)
                self.send_response(401 if not verified else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/bailing/approvals"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def decide(self, payload: dict, decision: str, decision_id: str, approver: str = "biz-approver-7",
               comment: str | None = None) -> tuple[int, dict]:
        """The decision as the request's own contract describes it (`decision_contract.match`)."""
        envelope = {"kind": payload["decision_contract"]["kind"],
                    "schema_version": payload["decision_contract"]["schema_version"],
                    **payload["decision_contract"]["match"], "decision": decision, "decision_id": decision_id,
                    "approver": approver, **({"comment": comment} if comment else {})}
        body = json.dumps(envelope, ensure_ascii=False).encode()
        ts = str(now_ms())
        headers = {"Content-Type": "application/json", "X-Bailing-Timestamp": ts,
                   "X-Bailing-Signature": sign(SECRET, ts, body)}
        response = requests.post(self.hub_url + payload["decision_path"], data=body, timeout=30, headers=headers)
        return response.status_code, response.json()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class World:
    def __init__(self, app, hub, business, approvals, cli, sql_url: str) -> None:
        self.app, self.hub, self.business, self.approvals, self.cli = app, hub, business, approvals, cli
        self.sql_url = sql_url
        self.session: dict = {}
        self.tokens: dict[str, str] = {}

    def sql(self, query: str, params=None) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.sql_url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    # ---- the agent
    def agent(self) -> dict:
        return {"Authorization": f"Bearer {self.session['access_token']}"}

    def invoke(self, tool: str, arguments: dict) -> dict:
        revision = self.hub.get("/agent-api/v1/tools", params={"route": "desk"}, headers=self.agent())
        envelope = {"invocation_id": uuid.uuid4().hex + uuid.uuid4().hex, "route": "desk",
                    "capability_revision": revision.json()["capability_revision"], "tool": tool,
                    "arguments": arguments}
        out = self.hub.post("/agent-api/v1/tool-invocations", json=envelope, headers=self.agent()).json()
        assert out["status"] == "awaiting_approval", out
        return out

    def resume(self, invocation_id: str) -> dict:
        response = self.hub.post(f"/agent-api/v1/tool-invocations/{invocation_id}/resume", json={},
                                 headers=self.agent())
        assert response.status_code == 200, response.text
        return response.json()

    def deliver(self):
        bailing = self.app.extensions["bailing"]
        return deliver_due(bailing.db, bailing.settings)

    def request_of(self, number: int) -> dict:
        """The approval request the business system received for `number` (delivered now)."""
        self.deliver()
        found = [r for r in self.approvals.received if r["payload"]["approval_id"] == number]
        assert len(found) == 1, found
        assert found[0]["verified"], "the request's signature did not verify"
        return found[0]["payload"]

    # ---- the decision door
    def post(self, number: int | str, envelope: dict | bytes, *, secret: str | None = SECRET, ts: str | None = None,
             bearer: str | None = None, query_token: str | None = None) -> requests.Response:
        body = envelope if isinstance(envelope, bytes) else json.dumps(envelope).encode()
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            ts = ts or str(now_ms())
            headers |= {"X-Bailing-Timestamp": ts, "X-Bailing-Signature": sign(secret, ts, body)}
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        params = {"token": query_token} if query_token else None
        return self.hub.post(f"/approvals/{number}/decision", data=body, headers=headers, params=params)

    def state(self, number: int) -> list[tuple]:
        """Everything a decision could write: the approval's row, its invocation's, and the
        business executions."""
        return self.sql("""
            SELECT row_to_json(a)::text, row_to_json(i)::text,
                   (SELECT count(*) FROM bz_tool_approvals WHERE decision_id IS NOT NULL)
            FROM bz_tool_approvals a JOIN bz_tool_invocations i ON i.id = a.job_id WHERE a.number = %s
        """, (number,)) + [(len(self.business.executions()),)]

    def approval(self, number: int) -> dict:
        return json.loads(self.sql("SELECT row_to_json(a)::text FROM bz_tool_approvals a WHERE number = %s",
                                   (number,))[0][0])


def envelope(payload: dict, **changes) -> dict:
    out = {"kind": "tool_approval_decision", "schema_version": "bailing.approval-decision.v1",
           **payload["decision_contract"]["match"], "decision": "approved",
           "decision_id": f"dec-{uuid.uuid4().hex[:12]}", "approver": "biz-approver-7"}
    out.update(changes)
    return {k: v for k, v in out.items() if v is not DROP}


DROP = object()


@pytest.fixture(scope="module")
def world(databases, migrated_template, tmp_path_factory):
    url = databases.copy(migrated_template)
    tmp = tmp_path_factory.mktemp("decisions")
    patch = pytest.MonkeyPatch()
    patch.setenv("DEMO_CRM_SECRET", DEMO_SECRETS["crm"])
    patch.setenv("DEMO_ERP_SECRET", DEMO_SECRETS["erp"])
    patch.setenv(SECRET_ENV, SECRET)
    app = create_app({"database_url": url, "data_dir": tmp / "var", "notifications": False})
    hub = serve(app)
    business = Business()
    approvals = ApprovalDesk(hub.url)
    cli = cli_runner(app)
    doc = governed_config(business.url)
    doc["routes"][0]["tools"]["agent_direct"]["force_approval_tools"] = ["customer_note_add"]
    doc["client_apps"].append({"app_id": "other-app", "name": "Other", "allowed_routes": ["desk"], "enabled": True})
    doc["approval_notifications"] = [{"name": "biz-approvals", "kind": "business_webhook", "url": approvals.url,
                                      "secret_env": SECRET_ENV, "routes": ["desk"]}]
    apply_config(cli, tmp, doc)
    w = World(app, hub, business, approvals, cli, url)
    code, w.session, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                               "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                               "--on-behalf-of", "tenant-7:user-42")
    assert code == 0, err
    for app_id in ("ops-app", "other-app"):
        code, out, err = cli("clients", "token", app_id)
        assert code == 0, err
        w.tokens[app_id] = out["client_token"]
    w.tokens["approver"] = admin_token(cli, "approver-one", "approver")
    w.tokens["support"] = admin_token(cli, "support-one", "support")
    yield w
    approvals.stop()
    business.live.stop()
    hub.stop()
    app.extensions["bailing"].db.dispose()
    databases.release(url)
    patch.undo()


def merges(world: World) -> int:
    return len(world.business.executions("customer_merge"))


# ================================================================ the request the business receives

def test_the_business_system_receives_cores_signed_approval_request(world):
    out = world.invoke("customer_merge", MERGE)
    number = out["approval_id"]
    payload = world.request_of(number)
    inv = world.sql("SELECT id, invocation_id, args_hash FROM bz_tool_invocations WHERE invocation_id = %s",
                    (out["invocation_id"],))[0]
    assert payload["kind"] == "tool_approval_request"
    assert payload["approval_id"] == number and isinstance(number, int)
    assert payload["job_id"] == str(inv[0]) and payload["request_id"] == inv[1]
    assert payload["route"] == "Operations desk" and payload["subject"] == "tenant-7:user-42"
    assert (payload["provider"], payload["tool"], payload["risk"], payload["policy"]) == \
        ("demo-crm", "customer_merge", "high", "risk_high")
    assert (payload["method"], payload["path"]) == ("POST", "/customer-merges")
    assert payload["args"] == MERGE  # the JSON text fits in 1,000 characters: an object
    assert HEX64.fullmatch(payload["args_hash"]) and payload["args_hash"] == inv[2]
    assert payload["decision_path"] == f"/approvals/{number}/decision"
    contract = payload["decision_contract"]
    assert contract["kind"] == "tool_approval_decision"
    assert contract["schema_version"] == "bailing.approval-decision.v1"
    assert contract["decision_values"] == ["approved", "denied"] and contract["idempotency"] == "decision_id"
    assert contract["match"] == {"approval_id": number, "job_id": payload["job_id"],
                                 "request_id": payload["request_id"], "args_hash": payload["args_hash"]}
    intent = payload["intent"]
    assert intent["kind"] == "tool_approval_intent" and intent["schema_version"] == "bailing.approval-intent.v1"
    assert (intent["approval_id"], intent["route_key"], intent["args"], intent["method"]) == \
        (number, "desk", MERGE, "POST")
    assert payload["metadata"]["client_app_id"] == "ops-app"
    headers = world.approvals.received[-1]["headers"]
    assert len(headers["X-Bailing-Timestamp"]) == 13  # milliseconds


def test_arguments_longer_than_1000_characters_arrive_as_their_truncated_text(world):
    arguments = {"customer_id": "C-100234", "body": "Long note. " * 150}
    out = world.invoke("customer_note_add", arguments)
    payload = world.request_of(out["approval_id"])
    assert isinstance(payload["args"], str) and len(payload["args"]) == 1000
    snapshot = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert payload["args"] == snapshot[:1000]
    assert payload["args_hash"] == hashlib.sha256(snapshot.encode()).hexdigest()
    assert payload["policy"] == "confirm_required"


# ================================================================ decided by the business system

def test_an_approved_write_runs_exactly_once_when_the_agent_resumes(world):
    out = world.invoke("customer_merge", MERGE)
    number = out["approval_id"]
    world.approvals.plans[number] = {"decision": "approved", "decision_id": f"biz-{number}-a",
                                     "comment": "Checked with the account team"}
    before = merges(world)
    world.request_of(number)
    status, answer = world.approvals.answers[number]
    assert (status, answer) == (200, {"ok": True, "id": number, "status": "approved",
                                      "decision_id": f"biz-{number}-a", "idempotent": False, "rerun": False})
    row = world.approval(number)
    assert (row["status"], row["decided_by"], row["decision_id"], row["decision_reason"],
            row["decided_via"], row["decided_credential"]) == \
        ("approved", "biz-approver-7", f"biz-{number}-a", "Checked with the account team",
         "business_system", "signature")
    assert merges(world) == before, "a decision alone never runs the call"
    assert world.resume(out["invocation_id"])["status"] == "executed"
    assert world.resume(out["invocation_id"])["status"] == "executed"
    assert merges(world) == before + 1

    # The same decision again: 200, idempotent, nothing changes.
    state = world.state(number)
    payload = world.approvals.received[-1]["payload"]
    replay = world.post(number, envelope(payload, decision="APPROVED ", decision_id=f"biz-{number}-a"))
    assert replay.status_code == 200
    assert replay.json() == {"ok": True, "id": number, "status": "approved", "decision_id": f"biz-{number}-a",
                             "idempotent": True, "rerun": False}
    assert replay.headers["Cache-Control"] == "no-store"
    assert world.state(number) == state

    # A different decision, or another id, on a decided approval: 409, nothing changes.
    for changes in ({"decision": "denied", "decision_id": f"biz-{number}-a"},
                    {"decision": "approved", "decision_id": f"biz-{number}-b"}):
        conflict = world.post(number, envelope(payload, **changes))
        assert conflict.status_code == 409
        assert conflict.json() == {"error": conflict.json()["error"], "status": "approved",
                                   "decision_id": f"biz-{number}-a"}
        assert world.state(number) == state


def test_a_denied_write_is_answered_denied_on_resume_and_never_sent(world):
    out = world.invoke("customer_merge", MERGE)
    number = out["approval_id"]
    world.approvals.plans[number] = {"decision": "denied", "decision_id": f"biz-{number}-d",
                                     "comment": "Not the same company"}
    before = merges(world)
    world.request_of(number)
    assert world.approvals.answers[number][0] == 200
    resumed = world.resume(out["invocation_id"])
    assert (resumed["status"], resumed["reason"]) == ("denied", "approval_denied")
    assert merges(world) == before


def test_the_owning_clients_token_and_an_approvers_admin_token_open_the_door_too(world):
    for bearer, query, credential in ((world.tokens["ops-app"], None, "client_token:ops-app"),
                                      (None, world.tokens["ops-app"], "client_token:ops-app"),
                                      (world.tokens["approver"], None, "admin_token:approver-one")):
        out = world.invoke("customer_merge", MERGE)
        payload = world.request_of(out["approval_id"])
        response = world.post(out["approval_id"], envelope(payload, approver={"id": 7}), secret=None,
                              bearer=bearer, query_token=query)
        assert response.status_code == 200, response.text
        row = world.approval(out["approval_id"])
        # A non-string approver is stringified as Core does.
        assert (row["decided_credential"], row["decided_by"]) == (credential, "[object Object]")


def test_a_decision_id_decides_one_approval_only(world):
    first = world.invoke("customer_merge", MERGE)
    second = world.invoke("customer_merge", MERGE)
    p1, p2 = world.request_of(first["approval_id"]), world.request_of(second["approval_id"])
    assert world.post(first["approval_id"], envelope(p1, decision_id="shared-id")).status_code == 200
    state = world.state(second["approval_id"])
    reused = world.post(second["approval_id"], envelope(p2, decision_id="shared-id"))
    assert reused.status_code == 409
    assert reused.json() == {"error": "decision_id 已用于其他审批单", "decision_id": "shared-id",
                             "approval_id": first["approval_id"]}
    assert world.state(second["approval_id"]) == state


def test_an_approval_decided_in_the_console_or_expired_is_not_decided_again(world):
    out = world.invoke("customer_merge", MERGE)
    payload = world.request_of(out["approval_id"])
    decided = world.hub.post(f"/admin/api/tool-approvals/{out['approval_id']}/approve",
                             json={"args_hash": payload["args_hash"]},
                             headers={"Authorization": f"Bearer {world.tokens['approver']}"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_via"] == "admin_api"
    state = world.state(out["approval_id"])
    response = world.post(out["approval_id"], envelope(payload))
    assert response.status_code == 409
    assert response.json()["status"] == "approved" and response.json()["decision_id"] is None
    assert world.state(out["approval_id"]) == state

    late = world.invoke("customer_merge", MERGE)
    payload = world.request_of(late["approval_id"])
    world.sql("UPDATE bz_tool_approvals SET expires_at = created_at + interval '1 millisecond' WHERE number = %s",
              (late["approval_id"],))
    state = world.state(late["approval_id"])
    response = world.post(late["approval_id"], envelope(payload))
    assert (response.status_code, response.json()["status"]) == (409, "expired")
    assert world.state(late["approval_id"]) == state


# ================================================================ forged and malformed decisions

@pytest.fixture
def pending(world):
    """A fresh pending approval and the request the business system received for it."""
    out = world.invoke("customer_merge", MERGE)
    return out["approval_id"], world.request_of(out["approval_id"])


@pytest.mark.parametrize("how", ["bad_signature", "no_credential", "stale_ts", "future_ts", "ts_not_numeric",
                                 "signature_without_prefix", "unknown_client_token", "other_clients_token",
                                 "support_admin_token", "malformed_bearer"])
def test_a_forged_decision_is_refused_and_nothing_is_written(world, pending, how):
    number, payload = pending
    body = envelope(payload)
    raw = json.dumps(body).encode()
    kwargs: dict = {
        "bad_signature": {"secret": OTHER_SECRET},
        "no_credential": {"secret": None},
        "stale_ts": {"ts": str(now_ms() - 300_001)},
        "future_ts": {"ts": str(now_ms() + 310_000)},
        "ts_not_numeric": {"ts": "12e5"},
        "unknown_client_token": {"secret": None, "bearer": "bzct_" + "A" * 43},
        "other_clients_token": {"secret": None, "bearer": world.tokens["other-app"]},
        "support_admin_token": {"secret": None, "bearer": world.tokens["support"]},
        "malformed_bearer": {"secret": None, "bearer": SECRET},
    }.get(how, {})
    state = world.state(number)
    if how == "signature_without_prefix":
        ts = str(now_ms())
        response = world.hub.post(f"/approvals/{number}/decision", data=raw, headers={
            "X-Bailing-Timestamp": ts, "X-Bailing-Signature": sign(SECRET, ts, raw).removeprefix("sha256=")})
    else:
        response = world.post(number, body, **kwargs)
    assert response.status_code == 401
    assert response.json() == {"error": UNAUTHORIZED}
    assert world.state(number) == state


def test_a_signature_within_the_window_is_accepted(world, pending):
    number, payload = pending
    assert world.post(number, envelope(payload), ts=str(now_ms() - 290_000)).status_code == 200


@pytest.mark.parametrize("changes, says", [
    ({"args_hash": "0" * 64}, "args_hash 与审批单不一致"),
    ({"job_id": str(uuid.uuid4())}, "job_id 与审批单不一致"),
    ({"request_id": "agent-tool:" + "0" * 64}, "request_id 与审批单不一致"),
    ({"approval_id": 999999}, "approval_id"),
    ({"kind": "tool_approval"}, "kind"),
    ({"schema_version": "bailing.approval-decision.v2"}, "schema_version"),
    ({"decision": "approve"}, "decision"),
    ({"decision_id": "has space"}, "decision_id"),
    ({"decision_id": "x" * 129}, "decision_id"),
    ({"approver": "   "}, "approver"),
    ({"approver": DROP}, "approver"),
    ({"kind": DROP}, "kind"),
])
def test_a_decision_with_a_bad_envelope_is_refused_and_nothing_is_written(world, pending, changes, says):
    number, payload = pending
    state = world.state(number)
    response = world.post(number, envelope(payload, **changes))
    assert response.status_code == 400
    assert list(response.json()) == ["error"] and says in response.json()["error"]
    assert world.state(number) == state


def test_the_schema_files_shape_is_refused_as_core_refuses_it(world, pending):
    """F.5: a body shaped like the stale approval-decision.schema.json gets a 400."""
    number, payload = pending
    state = world.state(number)
    response = world.post(number, {"decision": "approve", "args_hash": payload["args_hash"], "decided_by": "x"})
    assert response.status_code == 400
    assert world.state(number) == state


def test_bodies_that_are_not_json_or_too_large_are_refused(world, pending):
    number, _payload = pending
    state = world.state(number)
    for raw in (b"{not json", b"[1,", b'{"a": 1, "a": 2}', b"{" + b" " * (64 * 1024) + b"}"):
        response = world.post(number, raw)
        assert response.status_code == 400
        assert response.json()["error"].startswith("请求体不是合法 JSON：")  # noqa: RUF001 - Core's text
    assert world.state(number) == state


def test_the_checks_come_in_cores_order(world, pending):
    number, _payload = pending
    state = world.state(number)
    # An unknown approval is 404 before the body is looked at, or any credential.
    missing = world.post(10**12, b"{not json", secret=None)
    assert (missing.status_code, missing.json()) == (404, {"error": "审批单不存在"})
    # A bad body is 400 before the credential is checked.
    assert world.post(number, b"{not json", secret=None).status_code == 400
    # A missing credential is 401 before the envelope is checked.
    assert world.post(number, {"kind": "nope"}, secret=None).status_code == 401
    # Only digits match the route at all.
    assert world.hub.post("/approvals/abc/decision", data=b"{}").status_code == 404
    assert world.state(number) == state


# ================================================================ who decided, and through which door

def test_the_console_shows_who_decided_and_through_which_door(world):
    out = world.invoke("customer_merge", MERGE)
    number = out["approval_id"]
    world.approvals.plans[number] = {"decision": "denied", "decision_id": f"biz-{number}-x",
                                     "approver": "<script>alert(1)</script>", "comment": "<b>no</b>"}
    world.request_of(number)
    assert world.approvals.answers[number][0] == 200
    uuid_of = world.approval(number)["id"]
    browser = signed_in(world.hub.url, "approver-one")
    page = browser.get(f"/console/approvals/{uuid_of}").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "via the business system (signed request)" in page and f"biz-{number}-x" in page
    history = browser.get("/console/approvals/history").text
    assert "via the business system (signed request)" in history and "<b>no</b>" not in history

    # An approver's decision in the console is recorded as made there.
    other = world.invoke("customer_merge", MERGE)
    row = world.approval(other["approval_id"])
    decided = browser.post(f"/console/approvals/{row['id']}/decide", data={
        "decision": "approve", "args_hash": row["args_hash"], "csrf_token": browser.token()})
    assert decided.status_code == 303
    assert (world.approval(other["approval_id"])["decided_via"], world.approval(other["approval_id"])["decided_by"]) \
        == ("console", "approver-one")
    assert "via the console" in browser.get(f"/console/approvals/{row['id']}").text

    api = world.hub.get(f"/admin/api/tool-approvals/{number}",
                        headers={"Authorization": f"Bearer {world.tokens['approver']}"}).json()
    assert (api["decided_via"], api["decided_credential"], api["decision_id"]) == \
        ("business_system", "signature", f"biz-{number}-x")


def test_racing_decisions_first_one_wins_and_the_write_runs_once(world):
    out = world.invoke("customer_merge", MERGE)
    number = out["approval_id"]
    payload = world.request_of(number)
    bodies = [envelope(payload, decision="approved", decision_id=f"race-{number}-a"),
              envelope(payload, decision="denied", decision_id=f"race-{number}-d")] * 3
    barrier = threading.Barrier(len(bodies))
    answers: list[tuple[int, dict]] = []

    def post(body: dict) -> None:
        barrier.wait()
        response = world.post(number, body)
        answers.append((response.status_code, response.json()))

    threads = [threading.Thread(target=post, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [a for s, a in answers if s == 200 and not a["idempotent"]]
    assert len(won) == 1, answers
    row = world.approval(number)
    assert (row["status"], row["decision_id"]) == (won[0]["status"], won[0]["decision_id"])
    # The others: a replay of the winner (200 idempotent) or a 409, never a second decision.
    assert all(a is won[0] or s == 409 or (s == 200 and a["idempotent"] and a["decision_id"] == row["decision_id"])
               for s, a in answers)
    before = merges(world)
    world.resume(out["invocation_id"])
    assert merges(world) == before + (1 if row["status"] == "approved" else 0)
