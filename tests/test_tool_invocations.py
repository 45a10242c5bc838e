"""Issue 6: governed tool invocations over real HTTP, against the demo business system on loopback.

POST /agent-api/v1/tool-invocations, /:id/resume and /:id/receipt; byte-exact argument and
envelope budgets; approvals decided through /admin/api/tool-approvals; the journal written before
dispatch; signed calls; reconciliation after a dropped response; resume revalidating the tool's
execution fingerprint; and what the hub keeps (key names, never sensitive values or business
response bodies in traces).

Fixtures from conftest: `business` (the demo business system), `governed` (route `desk` over all
CRM and ERP tools, client `ops-app`, an agent session acting for tenant-7:user-42), `server`,
`cli`, `sql`.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path

import psycopg
import pytest
import requests

from admin_app import limits
from admin_app.invocations import signing
from tests.conftest import DEMO_SECRETS, EXAMPLES, governed_config
from tests.helpers import admin_token, apply_config, assert_error, bearer, row_count, row_counts

BASE = "/agent-api/v1/tool-invocations"
ROUTE = "desk"
SUBJECT = "tenant-7:user-42"
SCHEMA = "bailing.agent-tool-invocation.v1"
RECEIPT_SCHEMA = "bailing.agent-invocation-receipt.v1"
ARGS_MAX = limits.INVOCATION_ARGUMENTS_MAX_BYTES
ENVELOPE_MAX = limits.INVOCATION_ENVELOPE_MAX_BYTES
STATUSES = {"executed", "business_rejected", "awaiting_approval", "denied", "rejected_before_dispatch",
            "reconciliation_required", "in_progress"}

CUSTOMER = {"customer_id": "C-100234"}
BIG_CREDIT = {"customer_id": "C-100234", "credit_limit": 50000}
SMALL_CREDIT = {"customer_id": "C-100234", "credit_limit": 500}
CANCEL = {"order_id": "ORD-000001", "reason": "duplicate"}


# ----------------------------------------------------------------------------- helpers

def iid(label: str) -> str:
    """The 64-hex invocation id a test names by a readable label."""
    if re.fullmatch(r"[0-9a-f]{64}", label):
        return label
    return hashlib.sha256(label.encode("utf-8")).hexdigest()


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_canonical(value) -> str:
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def js_size(value) -> int:
    """UTF-8 bytes of JavaScript's JSON.stringify(value) for the strings/objects used here,
    computed independently of the application: non-ASCII raw, JSON escapes counted."""
    if isinstance(value, dict):
        return 2 + sum(js_size(k) + 1 + js_size(v) for k, v in value.items()) + max(len(value) - 1, 0)
    if isinstance(value, str):
        size = 2
        for ch in value:
            if ch in '"\\\b\f\n\r\t':
                size += 2
            elif ord(ch) < 0x20:
                size += 6
            else:
                size += len(ch.encode("utf-8"))
        return size
    raise TypeError(type(value))


def node_size(value) -> int | None:
    """The same measure from a real JavaScript engine, when node is installed."""
    import shutil
    import subprocess

    if shutil.which("node") is None:
        return None
    script = ("let d='';process.stdin.setEncoding('utf8');process.stdin.on('data',c=>d+=c);"
              "process.stdin.on('end',()=>{process.stdout.write(String("
              "Buffer.byteLength(JSON.stringify(JSON.parse(d)),'utf8')))})")
    done = subprocess.run(["node", "-e", script], input=json.dumps(value).encode(), capture_output=True,
                          timeout=60, check=True)
    return int(done.stdout)


def text_of_size(total: int) -> dict:
    """{"text": ...} whose JSON.stringify is exactly `total` UTF-8 bytes, mostly multi-byte text
    and characters that JSON escapes."""
    unit = '€😀"\n'  # 3 + 4 + 2 (\") + 2 (\n) bytes
    overhead = js_size({"text": ""})
    count, rest = divmod(total - overhead, js_size(unit) - 2)
    value = {"text": unit * count + "a" * rest}
    assert js_size(value) == total
    return value


def dumps_utf8(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Agent:
    """An agent session on route `desk`, speaking to the hub over HTTP."""

    def __init__(self, server, session: dict):
        self.server = server
        self.session = session
        self.token = session["access_token"]
        self.counter = 0

    @property
    def headers(self) -> dict:
        return {**bearer(self.token), "Content-Type": "application/json"}

    def revision(self) -> str:
        response = self.server.get(f"/agent-api/v1/tools?route={ROUTE}", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()["capability_revision"]

    def tool_names(self) -> set[str]:
        response = self.server.get(f"/agent-api/v1/tools?route={ROUTE}", headers=self.headers)
        assert response.status_code == 200, response.text
        return {t["name"] for t in response.json()["tools"]}

    def body(self, tool: str, arguments, invocation_id: str | None = None, **extra) -> dict:
        if invocation_id is None:
            self.counter += 1
            invocation_id = f"inv-{tool}-{self.counter}"
        body = {"invocation_id": iid(invocation_id), "route": ROUTE, "capability_revision": self.revision(),
                "tool": tool, "arguments": arguments}
        body.update(extra)
        return body

    def post(self, body: dict) -> requests.Response:
        return self.server.post(BASE, data=dumps_utf8(body), headers=self.headers)

    def invoke_raw(self, tool: str, arguments, invocation_id: str | None = None, **extra) -> requests.Response:
        return self.post(self.body(tool, arguments, invocation_id, **extra))

    def invoke(self, tool: str, arguments, invocation_id: str | None = None, **extra) -> dict:
        response = self.invoke_raw(tool, arguments, invocation_id, **extra)
        return invocation(response)

    def resume_raw(self, invocation_id: str) -> requests.Response:
        return self.server.post(f"{BASE}/{iid(invocation_id)}/resume", json={}, headers=self.headers)

    def resume(self, invocation_id: str) -> dict:
        return invocation(self.resume_raw(invocation_id))

    def receipt_raw(self, invocation_id: str) -> requests.Response:
        return self.server.get(f"{BASE}/{iid(invocation_id)}/receipt", headers=self.headers)

    def receipt(self, invocation_id: str) -> dict:
        """The receipt, with the invocation it holds checked like any other answer."""
        response = self.receipt_raw(invocation_id)
        assert response.status_code == 200, response.text[:1000]
        body = response.json()
        assert body["schema_version"] == RECEIPT_SCHEMA
        assert body["read_only"] is True and body["business_operation_performed"] is False
        assert body["invocation_id"] == iid(invocation_id)
        checked_invocation(body["result"])
        return body


def invocation(response: requests.Response) -> dict:
    assert response.status_code == 200, response.text[:1000]
    return checked_invocation(response.json())


def checked_invocation(body: dict) -> dict:
    assert body["schema_version"] == SCHEMA
    assert body["status"] == body["state"] and body["state"] in STATUSES
    assert body["ok"] is (body["state"] == "executed")
    # Only a call still running elsewhere may be retried as it is.
    assert body["auto_retry_allowed"] is (body["state"] == "in_progress")
    return body


def stored(sql) -> dict:
    return row_counts(sql, "bz_tool_invocations", "bz_tool_approvals", "bz_tool_journal")


def job_id_of(sql, invocation_id: str) -> str:
    rows = sql("SELECT id::text FROM bz_tool_invocations WHERE invocation_id = %s", (iid(invocation_id),))
    assert len(rows) == 1
    return rows[0][0]


def issue(cli, *extra: str) -> dict:
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                         "--principal", '{"id": "user-42", "tenant": "tenant-7"}', *extra)
    assert code == 0, err
    return out


class Admin:
    def __init__(self, server, cli, username: str, role: str):
        self.server = server
        self.headers = bearer(admin_token(cli, username, role))

    def get(self, path: str) -> requests.Response:
        return self.server.get("/admin/api" + path, headers=self.headers)

    def approvals(self, status: str = "all") -> list[dict]:
        response = self.get(f"/tool-approvals?status={status}")
        assert response.status_code == 200, response.text
        return response.json()["items"]

    def decide(self, approval_id: str, decision: str, **body) -> requests.Response:
        return self.server.post(f"/admin/api/tool-approvals/{approval_id}/{decision}", json=body,
                                headers=self.headers)

    def approve(self, approval: dict) -> dict:
        response = self.decide(approval["id"], "approve", args_hash=approval["args_hash"])
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "approved"
        return response.json()

    def deny(self, approval: dict, reason: str = "Not without a payment history review.") -> dict:
        response = self.decide(approval["id"], "deny", args_hash=approval["args_hash"], reason=reason)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "denied"
        return response.json()


@pytest.fixture
def agent(server, governed) -> Agent:
    return Agent(server, governed)


@pytest.fixture
def approver(server, cli) -> Admin:
    return Admin(server, cli, "ann", "approver")


@pytest.fixture
def support(server, cli) -> Admin:
    return Admin(server, cli, "sam", "support")


def awaiting(agent: Agent, tool: str = "customer_update_credit_limit", arguments: dict = BIG_CREDIT,
             invocation_id: str = "inv-approval") -> dict:
    result = agent.invoke(tool, arguments, invocation_id)
    assert result["status"] == "awaiting_approval", result
    return result


def consumed_at(sql, approval_id: str):
    return sql("SELECT consumed_at FROM bz_tool_approvals WHERE id = %s", (approval_id,))[0][0]


# ============================================================================= budgets

@pytest.mark.parametrize("extra", [0, 1])
def test_argument_budget_is_exact_in_javascript_bytes(agent, business, sql, extra):
    arguments = text_of_size(ARGS_MAX + extra)
    measured = node_size(arguments)
    if measured is not None:
        assert measured == ARGS_MAX + extra  # the construction agrees with a real JSON.stringify
    text = arguments["text"]
    assert len(text.encode("utf-8")) < ARGS_MAX  # raw UTF-8 alone would pass: escaping must be counted
    assert "€" in text and "😀" in text and '"' in text and "\n" in text
    before = stored(sql)
    response = agent.invoke_raw("inventory_search", arguments, "inv-budget")
    if extra == 0:
        result = invocation(response)
        # past the budget check: the schema (text maxLength 200) refuses it, which only a
        # budget-accepted call reaches.
        assert result["status"] == "rejected_before_dispatch"
        assert result["reason"].startswith("invalid_arguments: text")
        assert row_count(sql, "bz_tool_invocations") == before["bz_tool_invocations"] + 1
    else:
        assert response.status_code == 413
        body = response.json()
        message = body.pop("message")
        assert isinstance(message, str) and message
        assert body == {"error": "arguments_too_large", "origin": "core", "dispatch": "not_dispatched",
                        "limit_scope": "arguments", "max_bytes": ARGS_MAX, "actual_bytes": ARGS_MAX + 1}
        assert stored(sql) == before
        assert "€" not in response.text and "😀" not in response.text and agent.token not in response.text
        assert len(response.content) < 1000
    assert row_count(sql, "bz_tool_journal") == before["bz_tool_journal"]
    assert business.executions() == []


def test_argument_budget_counts_escapes_not_raw_bytes(agent, business, sql):
    """Control characters are 6 bytes each in JSON.stringify (\\u0001): a text that is small as
    raw UTF-8 can still be over the budget."""
    arguments = {"text": "\x01" * (ARGS_MAX // 6)}
    assert js_size(arguments) == ARGS_MAX // 6 * 6 + 11 > ARGS_MAX
    before = stored(sql)
    body = assert_error(agent.invoke_raw("inventory_search", arguments), 413, "arguments_too_large")
    assert body["actual_bytes"] == js_size(arguments)
    assert stored(sql) == before
    assert business.executions() == []


# Python's JSON text for a number, and what JSON.stringify prints for the double a client holds
NUMBERS = [(1.0, "1"), (1e-07, "1e-7"), (1e20, "100000000000000000000"), (10**21, "1e+21"),
           (1e-06, "0.000001"), (1.5e300, "1.5e+300"), (-0.0, "0"), (2**53 + 1, "9007199254740992"),
           (0.1, "0.1"), (1.23e-18, "1.23e-18"), (-2.5, "-2.5"), (12345678901234567890, "12345678901234567000")]


@pytest.mark.parametrize("extra", [0, 1])
def test_argument_budget_formats_numbers_as_javascript_does(agent, business, sql, extra):
    numbers = [value for value, _ in NUMBERS]
    numbers_size = 2 + sum(len(js) for _, js in NUMBERS) + len(NUMBERS) - 1
    assert len(json.dumps(numbers, separators=(",", ":"))) != numbers_size  # Python would count otherwise
    # {"numbers":[...],"text":"..."}: text fills the rest with multi-byte characters and one escape
    fixed = len('{"numbers":') + numbers_size + len(',"text":""}') + len("\\\\")
    filler = ARGS_MAX + extra - fixed
    text = "\\" + "€" * (filler // 3) + "a" * (filler % 3)
    arguments = {"numbers": numbers, "text": text}
    measured = node_size(arguments)
    if measured is not None:
        assert measured == ARGS_MAX + extra
    response = agent.invoke_raw("inventory_search", arguments, "inv-numbers")
    if extra == 0:
        result = invocation(response)
        assert result["status"] == "rejected_before_dispatch"  # the schema has no `numbers`
    else:
        body = assert_error(response, 413, "arguments_too_large")
        assert body["actual_bytes"] == ARGS_MAX + 1
        assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


def padded(body: dict, size: int) -> bytes:
    """`body` as JSON preceded by JSON whitespace, exactly `size` bytes."""
    raw = dumps_utf8(body)
    assert len(raw) < size
    return b" " * (size - len(raw)) + raw


def send_envelope(agent: Agent, data: bytes, framing: str) -> requests.Response:
    if framing == "chunked":
        pieces = [data[i:i + 256 * 1024] for i in range(0, len(data), 256 * 1024)]
        return agent.server.post(BASE, data=iter(pieces), headers=agent.headers)
    return agent.server.post(BASE, data=data, headers=agent.headers)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_envelope_over_two_mib_is_refused_while_streaming(agent, business, sql, framing):
    marker = "envelope-marker-7f3a"
    data = padded(agent.body("customer_search", {"q": marker}, "inv-envelope"), ENVELOPE_MAX + 1)
    before = stored(sql)
    response = send_envelope(agent, data, framing)
    assert response.status_code == 413, response.text[:500]
    body = response.json()
    assert body["error"] == "arguments_too_large"
    assert body["origin"] == "core" and body["dispatch"] == "not_dispatched"
    assert body["limit_scope"] == "request_body"
    assert body["max_bytes"] == ENVELOPE_MAX
    assert isinstance(body["observed_bytes"], int) and 0 <= body["observed_bytes"] <= ENVELOPE_MAX + 1
    if framing == "chunked":  # no length was declared: reading stopped just past the limit
        assert body["observed_bytes"] > ENVELOPE_MAX
    assert "actual_bytes" not in body
    assert marker not in response.text and agent.token not in response.text
    assert stored(sql) == before
    assert business.executions() == []


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_envelope_of_exactly_two_mib_is_accepted(agent, business, sql, framing):
    data = padded(agent.body("customer_get", CUSTOMER, "inv-envelope-ok"), ENVELOPE_MAX)
    assert len(data) == ENVELOPE_MAX
    result = invocation(send_envelope(agent, data, framing))
    assert result["status"] == "executed"
    assert len(business.executions("customer_get")) == 1


# ============================================================================= invocation basics

def test_a_readonly_call_is_executed_once_and_replayed_for_the_same_invocation(agent, business, sql):
    first = agent.invoke("customer_get", CUSTOMER, "inv-read")
    assert first["invocation_id"] == iid("inv-read")
    assert first["tool"] == "customer_get"
    assert first["status"] == "executed"
    assert first["result"]["http_status"] == 200
    assert first["result"]["body"]["id"] == "C-100234"
    assert first["result"]["body"]["name"] == "ACME Industrial GmbH"
    assert "approval" not in first
    assert len(business.executions("customer_get")) == 1

    again = agent.invoke("customer_get", CUSTOMER, "inv-read")
    assert again == first
    assert len(business.executions()) == 1
    assert row_count(sql, "bz_tool_invocations") == 1


@pytest.mark.parametrize("tool, arguments", [
    ("customer_get", {"customer_id": "C-100235"}),
    ("customer_search", {"q": "acme"}),
])
def test_reusing_an_invocation_id_for_a_different_call_is_409(agent, business, sql, tool, arguments):
    agent.invoke("customer_get", CUSTOMER, "inv-reused")
    assert_error(agent.invoke_raw(tool, arguments, "inv-reused"), 409, "invocation_conflict")
    assert len(business.executions()) == 1
    assert row_count(sql, "bz_tool_invocations") == 1


@pytest.mark.parametrize("tool", ["customer_delete", "health_check", "no_such_tool", "Customer_Get"])
def test_a_tool_outside_the_projection_is_404(agent, business, sql, tool):
    response = agent.invoke_raw(tool, {"customer_id": "C-100234"})
    assert_error(response, 404, "tool_not_found")
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


def test_a_stale_capability_revision_is_409(agent, business, sql):
    current = agent.revision()
    body = agent.body("customer_get", CUSTOMER)
    body["capability_revision"] = "0" * 64
    error = assert_error(agent.post(body), 409, "capability_changed")
    assert error["capability_revision"] == current
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


@pytest.mark.parametrize("arguments", [[], ["customer_id", "C-100234"], "C-100234", 7, None, True])
def test_arguments_must_be_an_object(agent, business, sql, arguments):
    error = assert_error(agent.invoke_raw("customer_get", arguments), 400, "invalid_request")
    assert any(p["path"] == "arguments" for p in error["problems"])
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


@pytest.mark.parametrize("change", [
    {"unexpected": 1},
    {"remove": "invocation_id"}, {"remove": "route"}, {"remove": "capability_revision"},
    {"remove": "tool"}, {"remove": "arguments"},
    {"invocation_id": ""}, {"invocation_id": "a\nb"}, {"invocation_id": "x" * 192},
    {"invocation_id": "A" * 64}, {"invocation_id": "a" * 63}, {"invocation_id": "inv-readable"},
    {"tool": "customer.get"}, {"route": 7}, {"agent_run_id": "not-a-uuid"},
    {"capability_revision": "abc"}, {"run_id": "not-a-uuid"}, {"run_id": 5},
])
def test_malformed_invocation_requests_are_400(agent, business, sql, change):
    body = agent.body("customer_get", CUSTOMER)
    change = dict(change)
    if "remove" in change:
        del body[change.pop("remove")]
    body.update(change)
    assert_error(agent.post(body), 400, "invalid_request")
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


def test_an_invocation_without_a_json_object_body_is_refused(agent, business, sql):
    assert agent.server.post(BASE, data=b"[1]", headers=agent.headers).status_code == 400
    # The Content-Type is not checked (WIRE §1): `{}` as text/plain is read, and lacks every field.
    headers = dict(agent.headers, **{"Content-Type": "text/plain"})
    assert agent.server.post(BASE, data=b"{}", headers=headers).status_code == 400
    assert row_count(sql, "bz_tool_invocations") == 0


@pytest.mark.parametrize("tool, arguments", [
    ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": -1}),
    ("customer_update_credit_limit", {"customer_id": "C-100234"}),
    ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 5, "note": "x"}),
    ("inventory_search", {"limit": 1000}),
    ("order_cancel", {"order_id": "ORD-1", "reason": "duplicate"}),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": 0,
                          "reason": "correction"}),
])
def test_arguments_violating_the_input_schema_are_rejected_before_dispatch(agent, business, sql, tool,
                                                                         arguments):
    result = agent.invoke(tool, arguments)
    assert result["status"] == "rejected_before_dispatch"
    assert result["reason"].startswith("invalid_arguments")
    assert "result" not in result and "approval" not in result
    assert row_count(sql, "bz_tool_journal") == 0
    assert row_count(sql, "bz_tool_approvals") == 0
    assert business.executions() == []


@pytest.mark.parametrize("tool, arguments", [
    ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": "50000"}),
    ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": True}),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": "-500",
                          "reason": "correction"}),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": 5, "reason": 7}),
])
def test_an_approval_when_type_mismatch_is_rejected_before_dispatch(agent, business, sql, tool, arguments):
    """JSON types are kept: "50000" is not a number over 10000, neither "no match" (run unapproved)
    nor a match; the call is refused and nothing is sent or queued for approval."""
    result = agent.invoke(tool, arguments)
    assert result["status"] == "rejected_before_dispatch"
    assert "approval" not in result
    assert row_count(sql, "bz_tool_approvals") == 0
    assert row_count(sql, "bz_tool_journal") == 0
    assert business.executions() == []


def test_a_session_without_on_behalf_of_cannot_see_or_call_subject_tools(server, cli, governed, business,
                                                                         sql):
    anonymous = Agent(server, issue(cli))
    names = anonymous.tool_names()
    assert "customer_get" in names
    assert not names & {"customer_update_credit_limit", "customer_export_csv", "order_cancel",
                        "customer_note_add"}
    assert_error(anonymous.invoke_raw("customer_note_add", {"customer_id": "C-100234", "body": "hi"}),
                 404, "tool_not_found")
    assert_error(anonymous.invoke_raw("customer_update_credit_limit", SMALL_CREDIT), 404, "tool_not_found")
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []
    assert anonymous.invoke("customer_get", CUSTOMER)["status"] == "executed"


def test_invocation_ids_belong_to_one_session(server, cli, agent, business):
    other = Agent(server, issue(cli, "--on-behalf-of", "tenant-7:user-99"))
    agent.invoke("customer_get", CUSTOMER, "inv-shared")
    assert_error(other.resume_raw("inv-shared"), 404, "invocation_not_found")
    assert_error(other.receipt_raw("inv-shared"), 404, "invocation_not_found")
    # the same id in another session is another invocation, not a replay or a conflict
    assert other.invoke("customer_get", {"customer_id": "C-100235"}, "inv-shared")["status"] == "executed"
    assert len(business.executions("customer_get")) == 2


def test_an_unauthenticated_invocation_is_401_and_reads_nothing(agent, business, sql):
    body = agent.body("customer_get", CUSTOMER)
    for headers in ({}, {"Authorization": "Bearer nope"}):
        response = agent.server.post(BASE, data=dumps_utf8(body), headers={"Content-Type": "application/json",
                                                                             **headers})
        assert_error(response, 401, "unauthorized")
    assert row_count(sql, "bz_tool_invocations") == 0
    assert business.executions() == []


def race(agent: Agent, n: int, send) -> list[tuple[int, dict]]:
    """Run `send(http)` from n threads released together, each with its own connection."""
    barrier = threading.Barrier(n)
    results: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def run() -> None:
        with requests.Session() as http:
            barrier.wait(timeout=30)
            response = send(http)
            with lock:
                results.append((response.status_code, response.json()))

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(results) == n
    return results


def test_the_same_write_sent_by_five_clients_at_once_runs_once(agent, business, sql):
    body = agent.body("customer_note_add", {"customer_id": "C-100234", "body": "Once only."}, "inv-once")
    business.fault("customer_note_add", "delay", 1, delay_ms=300)
    results = race(agent, 5, lambda http: http.post(agent.server.url + BASE, data=dumps_utf8(body),
                                                    headers=agent.headers, timeout=60))
    assert all(status == 200 for status, _ in results), results
    statuses = [r["status"] for _, r in results]
    assert set(statuses) <= {"executed", "in_progress"} and "executed" in statuses, statuses
    assert len(business.executions("customer_note_add")) == 1
    assert row_count(sql, "bz_tool_invocations") == 1
    assert agent.resume("inv-once")["status"] == "executed"
    assert len(business.executions()) == 1


# ============================================================================= signed dispatch

def test_signed_headers_reach_the_business_system(agent, business, sql):
    arguments = {"customer_id": "C-100234", "body": "Called about the Q3 invoice — prefers e-mail ✉."}
    result = agent.invoke("customer_note_add", arguments, "inv-note")
    assert result["status"] == "executed"
    assert result["result"]["http_status"] == 201
    assert result["result"]["body"]["body"] == arguments["body"]
    job_id = job_id_of(sql, "inv-note")
    args_hash = sha256_canonical(arguments)
    key = sha256_canonical({"job_id": job_id, "tool": "customer_note_add", "args_hash": args_hash,
                            "on_behalf_of": SUBJECT})
    [execution] = business.executions("customer_note_add")  # recorded only after the signature verified
    assert execution == {"system": "crm", "operation": "customer_note_add", "job_id": job_id,
                         "idempotency_key": key, "on_behalf_of": SUBJECT, "status": 201}
    [(state, journal_key, method, path, http_status)] = sql(
        "SELECT state, idempotency_key, method, path, http_status FROM bz_tool_journal WHERE job_id = %s",
        (job_id,))
    assert (state, journal_key, method, path, http_status) == (
        "completed", key, "POST", "/customers/{customer_id}/notes", 201)  # the template: no values


@pytest.mark.parametrize("forgery", ["none", "wrong_secret", "stale", "future", "tampered_body",
                                     "other_subject", "missing"])
def test_the_demo_system_refuses_forged_or_stale_signatures(business, forgery):
    body = json.dumps({"body": "signed note"}).encode()
    path = "/crm/customers/C-100234/notes"
    now = int(time.time())
    secret = DEMO_SECRETS["crm"]
    # Outside the allowed skew by a margin: `now` is truncated to the second and the request takes
    # time, so a timestamp one second ahead could be inside the window when it is checked.
    outside = limits.SIGNATURE_MAX_CLOCK_SKEW_SECONDS + 5
    timestamp = {"stale": now - outside, "future": now + outside}.get(forgery, now)
    headers = signing.headers("not-the-secret" if forgery == "wrong_secret" else secret,
                              timestamp=str(timestamp), method="POST", path_with_query=path.removeprefix("/crm"),
                              body=body,
                              on_behalf_of=SUBJECT, job_id="job-1", scope="customer.write",
                              idempotency_key="k" * 64)
    if forgery == "tampered_body":
        body = json.dumps({"body": "another note"}).encode()
    if forgery == "other_subject":
        headers["X-Bailing-On-Behalf-Of"] = "tenant-7:user-1"
    if forgery == "missing":
        del headers["X-Bailing-Signature"]
    headers["Content-Type"] = "application/json"
    response = requests.post(business.url + path, data=body, headers=headers, timeout=10)
    if forgery == "none":
        assert response.status_code == 201, response.text
        assert len(business.executions("customer_note_add")) == 1
    else:
        assert response.status_code == 401
        assert response.json()["error"] == "invalid_signature"
        assert business.executions() == []


# ============================================================================= approvals

@pytest.mark.parametrize("tool, arguments, needs_approval, reason", [
    ("customer_update_credit_limit", BIG_CREDIT, True, "approval_when"),
    ("customer_update_credit_limit", SMALL_CREDIT, False, None),
    ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 10000}, False, None),
    ("order_cancel", CANCEL, True, "risk_high"),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": -150,
                          "reason": "correction"}, True, "approval_when"),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": -2,
                          "reason": "write_off"}, True, "approval_when"),
    ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": 5,
                          "reason": "cycle_count"}, False, None),
])
def test_approval_comes_from_the_acc(agent, business, sql, approver, tool, arguments, needs_approval, reason):
    result = agent.invoke(tool, arguments, "inv-policy")
    if not needs_approval:
        assert result["status"] == "executed", result
        assert "approval" not in result
        assert len(business.executions(tool)) == 1
        assert row_count(sql, "bz_tool_approvals") == 0
        return
    assert result["status"] == "awaiting_approval"
    assert "result" not in result
    approval = result["approval"]
    assert approval["state"] == "pending"
    assert approval["args_hash"] == sha256_canonical(arguments)
    assert business.executions() == []
    assert row_count(sql, "bz_tool_journal") == 0
    [item] = approver.approvals("pending")
    assert item["id"] == approval["id"] and item["invocation_id"] == iid("inv-policy") and item["tool"] == tool
    assert reason in item["policy"]["reasons"]
    assert "snapshot" not in item
    snapshot = approver.get(f"/tool-approvals/{approval['id']}/snapshot")
    assert snapshot.status_code == 200
    assert json.loads(snapshot.content) == arguments
    assert hashlib.sha256(snapshot.content).hexdigest() == approval["args_hash"]


def test_an_approved_write_runs_once_after_approval(agent, business, sql, approver):
    pending = awaiting(agent)
    approval = pending["approval"]
    # resuming while pending sends nothing
    assert agent.resume("inv-approval")["status"] == "awaiting_approval"
    assert business.executions() == []
    decided = approver.approve(approval)
    assert decided["decided_by"] == "ann" and decided["consumed_at"] is None
    assert business.executions() == []  # a decision alone sends nothing

    done = agent.resume("inv-approval")
    assert done["status"] == "executed"
    assert done["result"]["http_status"] == 200
    assert done["result"]["body"]["credit_limit"] == 50000
    assert done["approval"] == {"id": approval["id"], "state": "approved", "args_hash": approval["args_hash"]}
    assert len(business.executions("customer_update_credit_limit")) == 1
    assert consumed_at(sql, approval["id"]) is not None

    for _ in range(3):
        assert agent.resume("inv-approval") == done
    assert agent.invoke("customer_update_credit_limit", BIG_CREDIT, "inv-approval") == done
    assert len(business.executions()) == 1
    # a second decision on the consumed approval is refused
    assert_error(approver.decide(approval["id"], "approve", args_hash=approval["args_hash"]), 409,
                 "approval_not_pending")


@pytest.mark.parametrize("delay_ms", [0, 400])
def test_five_concurrent_resumes_of_an_approved_write_run_it_once(agent, business, sql, approver, delay_ms):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    if delay_ms:
        business.fault("customer_update_credit_limit", "delay", 1, delay_ms=delay_ms)
    results = race(agent, 5, lambda http: http.post(f"{agent.server.url}{BASE}/{iid('inv-approval')}/resume", json={},
                                                    headers=agent.headers, timeout=60))
    assert all(status == 200 for status, _ in results), results
    statuses = [body["status"] for _, body in results]
    assert set(statuses) <= {"executed", "in_progress"}, statuses
    assert statuses.count("executed") >= 1
    assert len(business.executions("customer_update_credit_limit")) == 1
    assert len(business.executions()) == 1

    final = agent.resume("inv-approval")
    assert final["status"] == "executed"
    assert final["result"]["body"]["credit_limit"] == 50000
    assert len(business.executions()) == 1
    assert sql("SELECT state FROM bz_tool_journal")[0][0] == "completed"


def test_a_denied_approval_never_reaches_the_business_system(agent, business, sql, approver):
    pending = awaiting(agent)
    approval = pending["approval"]
    # a denial needs a reason; a stale hash is refused
    assert_error(approver.decide(approval["id"], "deny", args_hash=approval["args_hash"]), 400,
                 "invalid_request")
    assert_error(approver.decide(approval["id"], "deny", args_hash="f" * 64, reason="no"), 409,
                 "approval_snapshot_changed")
    decided = approver.deny(approval, "Credit limit too high for this customer.")
    assert decided["decided_by"] == "ann"
    assert decided["decision_reason"] == "Credit limit too high for this customer."

    for _ in range(3):
        result = agent.resume("inv-approval")
        assert result["status"] == "denied"
        assert result["approval"]["state"] == "denied"
        assert "result" not in result
    assert agent.receipt("inv-approval")["result"]["status"] == "denied"
    assert_error(approver.decide(approval["id"], "approve", args_hash=approval["args_hash"]), 409,
                 "approval_not_pending")
    assert agent.resume("inv-approval")["status"] == "denied"
    assert business.executions() == []
    assert row_count(sql, "bz_tool_journal") == 0
    assert consumed_at(sql, approval["id"]) is None


def test_order_cancel_always_needs_approval_and_runs_once_when_approved(agent, business, approver):
    first = agent.invoke("order_cancel", CANCEL, "inv-cancel")
    assert first["status"] == "awaiting_approval"
    # another order_cancel with the same arguments is another invocation and needs its own approval
    second = agent.invoke("order_cancel", CANCEL, "inv-cancel-2")
    assert second["status"] == "awaiting_approval"
    assert second["approval"]["id"] != first["approval"]["id"]
    approver.approve(first["approval"])
    assert agent.resume("inv-cancel")["status"] == "executed"
    assert agent.resume("inv-cancel-2")["status"] == "awaiting_approval"
    assert len(business.executions("order_cancel")) == 1


# ============================================================================= reconciliation

@pytest.mark.parametrize("tool, arguments, fault", [
    ("customer_get", CUSTOMER, {"mode": "drop_response"}),
    ("warehouse_list", {}, {"mode": "delay", "delay_ms": 4500}),  # warehouse_list times out at 3000 ms
])
def test_a_lost_response_needs_reconciliation_and_is_never_resent(agent, business, sql, tool, arguments,
                                                                  fault):
    business.fault(tool, fault.pop("mode"), 1, **fault)
    result = agent.invoke(tool, arguments, "inv-lost")
    assert result["status"] == "reconciliation_required", result
    assert result["auto_retry_allowed"] is False
    assert "result" not in result
    assert len(business.executions(tool)) == 1  # the business system did act
    for _ in range(3):
        again = agent.resume("inv-lost")
        assert again["status"] == "reconciliation_required"
        assert again["auto_retry_allowed"] is False
    assert agent.invoke(tool, arguments, "inv-lost")["status"] == "reconciliation_required"
    receipt = agent.receipt("inv-lost")
    assert receipt["result"]["status"] == "reconciliation_required"
    assert receipt["journal_state"] == "uncertain" and receipt["dispatch_state"] == "unknown"
    assert len(business.executions()) == 1
    [(state, failure)] = sql("SELECT state, failure FROM bz_tool_journal")
    assert state == "uncertain" and failure


def test_an_approved_write_whose_response_is_lost_is_never_resent(agent, business, sql, approver):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    business.fault("customer_update_credit_limit", "drop_response")
    result = agent.resume("inv-approval")
    assert result["status"] == "reconciliation_required"
    assert result["auto_retry_allowed"] is False
    assert len(business.executions("customer_update_credit_limit")) == 1
    for _ in range(4):
        assert agent.resume("inv-approval")["status"] == "reconciliation_required"
    assert len(business.executions()) == 1
    assert agent.receipt("inv-approval")["journal_state"] == "uncertain"


@pytest.mark.parametrize("age_s, dispatcher_alive, expected", [
    (3600, True, "reconciliation_required"), (0, True, "in_progress"), (0, False, "reconciliation_required")])
def test_a_dispatch_without_a_recorded_outcome_is_never_resent(agent, business, sql, db_url, age_s,
                                                               dispatcher_alive, expected):
    """A hub that died between sending and recording leaves a `dispatching` journal row: while its
    dispatcher still holds the row's lock and the row is fresh it reads in_progress; once the
    holder is gone or the row is stale, reconciliation_required; never resent."""
    agent.invoke("customer_note_add", {"customer_id": "C-100234", "body": "Crash test."}, "inv-crash")
    job_id = job_id_of(sql, "inv-crash")
    sql("UPDATE bz_tool_invocations SET status = 'in_progress', business_status = NULL, result_body = NULL "
        "WHERE id = %s", (job_id,))
    sql("UPDATE bz_tool_journal SET state = 'dispatching', http_status = NULL, finished_at = NULL, "
        "started_at = now() - make_interval(secs => %s) WHERE job_id = %s", (age_s, job_id))
    with psycopg.connect(db_url, autocommit=True) as dispatcher:
        if dispatcher_alive:  # the lock a live dispatcher holds (admin_app.invocations.service.Dispatcher)
            dispatcher.execute("SELECT pg_advisory_lock(hashtextextended(%s, 7))", (job_id,))
        for _ in range(3):
            result = agent.resume("inv-crash")
            assert result["status"] == expected
            assert "result" not in result
    assert agent.receipt("inv-crash")["journal_state"] == ("dispatching" if expected == "in_progress"
                                                           else "uncertain")
    assert len(business.executions("customer_note_add")) == 1


# ============================================================================= resume revalidation

def crm_variant(tmp_path: Path, change, method: str = "patch") -> str:
    doc = json.loads((EXAMPLES / "crm.openapi.json").read_text())
    change(doc["paths"]["/customers/{customer_id}"][method])
    path = tmp_path / f"crm-{time.monotonic_ns()}.openapi.json"
    path.write_text(json.dumps(doc))
    return str(path)


def changed_config(kind: str, business, tmp_path: Path) -> dict:
    config = governed_config(business.url)
    crm = config["tool_providers"][0]
    if kind == "base_url":
        crm["base_url"] = business.url + "/crm/v2"
    elif kind == "risk":
        crm["openapi"] = crm_variant(tmp_path, lambda op: op["x-agent-capability"]["risk"].update(level="low"))
    elif kind == "timeout":
        crm["openapi"] = crm_variant(tmp_path, lambda op: op["x-agent-capability"]["execution"].update(
            timeout_ms=20000))
    elif kind == "removed":
        config["routes"][0]["tools"]["agent_direct"]["write_tools"].remove("customer_update_credit_limit")
    elif kind == "description":  # guidance only: not part of the execution fingerprint
        crm["openapi"] = crm_variant(tmp_path, lambda op: op.update(description="Sets a new credit limit."))
    return config


@pytest.mark.parametrize("kind", ["base_url", "risk", "timeout", "removed"])
def test_resume_after_the_tool_changed_is_409_and_sends_nothing(agent, business, sql, approver, cli,
                                                                 tmp_path, kind):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    apply_config(cli, tmp_path, changed_config(kind, business, tmp_path))
    for _ in range(2):
        assert_error(agent.resume_raw("inv-approval"), 409, "capability_changed")
    assert business.executions() == []
    assert consumed_at(sql, pending["approval"]["id"]) is None
    assert row_count(sql, "bz_tool_journal") == 0
    # restoring the tool as approved lets the original approval continue, once
    apply_config(cli, tmp_path, governed_config(business.url))
    assert agent.resume("inv-approval")["status"] == "executed"
    assert len(business.executions()) == 1


def test_a_guidance_only_change_does_not_block_the_approved_call(agent, business, approver, cli, tmp_path):
    pending = awaiting(agent)
    before = agent.revision()
    approver.approve(pending["approval"])
    apply_config(cli, tmp_path, changed_config("description", business, tmp_path))
    assert agent.revision() != before  # discovery sees a change ...
    assert agent.resume("inv-approval")["status"] == "executed"  # ... the frozen execution does not
    assert len(business.executions()) == 1


def test_resume_and_receipt_after_the_session_is_revoked_are_401(agent, business, sql, approver, cli):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    code, _out, err = cli("sessions", "revoke", agent.session["session_id"])
    assert code == 0, err
    assert_error(agent.resume_raw("inv-approval"), 401, "unauthorized")
    assert_error(agent.receipt_raw("inv-approval"), 401, "unauthorized")
    response = agent.server.post(BASE, json={"invocation_id": "x"}, headers=agent.headers)
    assert_error(response, 401, "unauthorized")
    assert business.executions() == []
    assert consumed_at(sql, pending["approval"]["id"]) is None


def test_resume_of_an_unknown_invocation_is_404(agent, business):
    assert_error(agent.resume_raw("inv-never"), 404, "invocation_not_found")
    assert_error(agent.receipt_raw("inv-never"), 404, "invocation_not_found")
    assert business.executions() == []


def test_resume_takes_an_empty_object(agent, business, approver):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    response = agent.server.post(f"{BASE}/{iid('inv-approval')}/resume", json={"force": True},
                                 headers=agent.headers)
    assert_error(response, 400, "invalid_request")
    assert business.executions() == []


# ============================================================================= receipt

def test_the_receipt_never_dispatches_or_consumes_an_approval(agent, business, sql, approver):
    pending = awaiting(agent)
    approval = pending["approval"]
    receipt = agent.receipt("inv-approval")
    assert receipt["result"]["status"] == "awaiting_approval"
    assert receipt["approval"] == {"status": "pending", "approval_id": pending["approval_id"]}
    assert receipt["journal_state"] == "absent" and receipt["dispatch_state"] == "not_dispatched"
    approver.approve(approval)
    for _ in range(3):
        receipt = agent.receipt("inv-approval")
        assert receipt["result"]["status"] == "awaiting_approval"
        assert receipt["approval"] == {"status": "approved", "approval_id": pending["approval_id"]}
        assert receipt["result"]["approval"] == {"id": approval["id"], "state": "approved",
                                                 "args_hash": approval["args_hash"]}
        assert receipt["journal_state"] == "absent"
    assert consumed_at(sql, approval["id"]) is None
    assert business.executions() == []
    assert row_count(sql, "bz_tool_journal") == 0

    agent.resume("inv-approval")
    receipt = agent.receipt("inv-approval")
    assert receipt["result"]["status"] == "executed"
    assert receipt["journal_state"] == "completed" and receipt["dispatch_state"] == "attempted"
    assert receipt["result"]["result"]["body"]["credit_limit"] == 50000
    assert receipt["result_source"] == "job"
    assert len(business.executions()) == 1


# ============================================================================= journal before dispatch

@pytest.mark.parametrize("tool, arguments, http_status", [
    ("customer_get", CUSTOMER, 200),
    ("customer_get", {"customer_id": "C-999999"}, 404),
    ("order_cancel", CANCEL, 200),
])
def test_every_dispatch_leaves_a_completed_journal_row(agent, business, sql, approver, tool, arguments,
                                                       http_status):
    result = agent.invoke(tool, arguments, "inv-journal")
    if result["status"] == "awaiting_approval":
        approver.approve(result["approval"])
        result = agent.resume("inv-journal")
    assert result["status"] == ("executed" if http_status < 300 else "business_rejected")
    assert result["result"]["http_status"] == http_status
    job_id = job_id_of(sql, "inv-journal")
    [(state, status, started, finished)] = sql(
        "SELECT state, http_status, started_at, finished_at FROM bz_tool_journal WHERE job_id = %s", (job_id,))
    assert (state, status) == ("completed", http_status)
    assert finished >= started
    [execution] = business.executions(tool)
    assert execution["job_id"] == job_id


JOURNAL_FAILS = """
CREATE FUNCTION test_refuse_journal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'journal-write-refused-by-test'; END $$;
CREATE TRIGGER test_refuse_journal BEFORE INSERT ON bz_tool_journal
FOR EACH ROW EXECUTE FUNCTION test_refuse_journal();
"""


def test_nothing_is_sent_when_the_journal_cannot_be_written(agent, business, sql):
    sql(JOURNAL_FAILS)
    response = agent.invoke_raw("customer_get", CUSTOMER, "inv-nojournal")
    assert_error(response, 503, "invocation_storage_unavailable")
    assert "journal-write-refused-by-test" not in response.text
    assert business.executions() == []
    assert row_count(sql, "bz_tool_invocations") == 0  # the whole reservation rolled back
    sql("DROP TRIGGER test_refuse_journal ON bz_tool_journal")
    assert agent.invoke("customer_get", CUSTOMER, "inv-nojournal")["status"] == "executed"
    assert len(business.executions()) == 1


def test_an_approved_call_is_not_sent_nor_consumed_when_the_journal_fails(agent, business, sql, approver):
    pending = awaiting(agent)
    approver.approve(pending["approval"])
    sql(JOURNAL_FAILS)
    for _ in range(2):
        response = agent.resume_raw("inv-approval")
        assert_error(response, 503, "invocation_storage_unavailable")
        assert "journal-write-refused-by-test" not in response.text
    assert business.executions() == []
    assert consumed_at(sql, pending["approval"]["id"]) is None
    assert agent.receipt("inv-approval")["result"]["status"] == "awaiting_approval"
    sql("DROP TRIGGER test_refuse_journal ON bz_tool_journal")
    assert agent.resume("inv-approval")["status"] == "executed"
    assert len(business.executions()) == 1


# ============================================================================= what the hub records

EXPORT = {"segment": "mid_market", "status": "suspended", "country": "ZQ", "created_after": "2019-07-23",
          "fields": ["vat_id", "account_owner"], "include_contacts": True}
EXPORT_VALUES = ["mid_market", "suspended", "ZQ", "2019-07-23", "vat_id", "account_owner"]


def rows_text(sql, table: str) -> str:
    return json.dumps(sql(f"SELECT to_jsonb(t)::text FROM {table} t"))


def test_sensitive_argument_values_are_recorded_nowhere(agent, business, sql, support):
    result = agent.invoke("customer_export_csv", EXPORT, "inv-export")
    assert result["status"] == "executed"
    assert len(business.executions("customer_export_csv")) == 1
    job_id = job_id_of(sql, "inv-export")
    trace = support.get(f"/tool-jobs/{job_id}")
    assert trace.status_code == 200, trace.text
    job = trace.json()["job"]
    assert job["argument_keys"] == sorted(EXPORT)
    assert job["status"] == "executed" and job["business_status"] == 200
    stores = {"bz_tool_invocations": rows_text(sql, "bz_tool_invocations"),
              "bz_tool_journal": rows_text(sql, "bz_tool_journal"), "job trace": trace.text}
    for where, text in stores.items():
        for value in EXPORT_VALUES:
            assert value not in text, f"{value!r} recorded in {where}"
    for key in EXPORT:
        assert key in stores["bz_tool_invocations"]


def test_a_sensitive_call_refused_by_its_schema_records_no_values(agent, business, sql, support):
    secret = "ZZ-secret-customer-segment"
    result = agent.invoke("customer_export_csv", {"segment": secret}, "inv-export-bad")
    assert result["status"] == "rejected_before_dispatch"
    assert result["reason"].startswith("invalid_arguments: segment")
    assert business.executions() == []
    trace = support.get(f"/tool-jobs/{job_id_of(sql, 'inv-export-bad')}")
    assert trace.status_code == 200
    assert secret not in rows_text(sql, "bz_tool_invocations")
    assert secret not in trace.text


def test_a_sensitive_approval_summary_withholds_values(agent, business, sql, approver, cli, tmp_path):
    config = governed_config(business.url)
    config["routes"][0]["tools"]["agent_direct"]["force_approval_tools"] = ["customer_export_csv"]
    apply_config(cli, tmp_path, config)
    result = agent.invoke("customer_export_csv", EXPORT, "inv-export-approval")
    assert result["status"] == "awaiting_approval"
    [item] = approver.approvals("pending")
    assert "route_force_approval" in item["policy"]["reasons"]
    listing = json.dumps(item)
    for value in EXPORT_VALUES:
        assert value not in listing
    assert item["argument_keys"] == sorted(EXPORT)
    # the approver still reads the complete snapshot on demand
    snapshot = approver.get(f"/tool-approvals/{item['id']}/snapshot")
    assert json.loads(snapshot.content) == EXPORT
    assert business.executions() == []


def test_traces_never_carry_the_business_response_body(agent, business, sql, support):
    turn = agent.server.post(f"/agent-api/v1/workspaces/{ROUTE}/turns", headers=agent.headers, json={
        "client_conversation_id": "conv-1", "client_turn_id": "turn-1", "user_message_id": "msg-1",
        "user_input": "What is the credit limit of our Berlin customer?"})
    assert turn.status_code == 200, turn.text
    run_id = turn.json()["run_id"]
    result = agent.invoke("customer_get", CUSTOMER, "inv-traced", run_id=run_id)
    assert result["status"] == "executed"
    body = result["result"]["body"]
    assert body["email"] == "billing@acme.example"
    job_id = job_id_of(sql, "inv-traced")

    job_trace = support.get(f"/tool-jobs/{job_id}")
    run_trace = support.get(f"/agent-runs/{run_id}")
    assert job_trace.status_code == 200 and run_trace.status_code == 200, (job_trace.text, run_trace.text)
    assert [job["job_id"] for job in run_trace.json()["jobs"]] == [job_id]
    for trace in (job_trace, run_trace):
        text = trace.text
        assert iid("inv-traced") in text and "customer_get" in text
        for value in ("ACME Industrial", "billing@acme.example", "DE123456789", "+49 30 1234567"):
            assert value not in text
        assert '"business_status": 200' in json.dumps(trace.json()) or '"business_status":200' in text
    assert support.get("/tool-approvals").status_code == 403  # support cannot read approvals


def test_an_unknown_job_trace_is_404(support):
    assert support.get("/tool-jobs/not-a-uuid").status_code == 404
    assert support.get("/tool-jobs/00000000-0000-0000-0000-000000000000").status_code == 404



# ============================================================================= values never recorded, encoded paths

@pytest.mark.parametrize("customer_id", ["C 100234", "Ç-100234", "C-100234?x=1"])
def test_path_parameters_needing_percent_encoding_verify_at_the_business_system(agent, business, sql,
                                                                                customer_id):
    result = agent.invoke("customer_get", {"customer_id": customer_id}, "inv-encoded")
    assert result["status"] == "business_rejected"
    assert result["result"] == {"http_status": 404,
                                "body": {"error": "not_found", "message": f"No customer {customer_id}."}}
    [execution] = business.executions("customer_get")
    assert execution["status"] == 404 and execution["job_id"] == job_id_of(sql, "inv-encoded")


def test_a_sensitive_tool_with_a_path_parameter_records_no_values(agent, business, sql, cli, tmp_path):
    config = governed_config(business.url)
    config["tool_providers"][0]["openapi"] = crm_variant(
        tmp_path, lambda op: op["x-agent-capability"].update(audit={"sensitive": True}), method="get")
    apply_config(cli, tmp_path, config)
    result = agent.invoke("customer_get", {"customer_id": "C-100236"}, "inv-sensitive-path")
    assert result["status"] == "executed"
    assert len(business.executions("customer_get")) == 1
    invocations = json.dumps(sql("SELECT to_jsonb(t) - 'result_body' FROM bz_tool_invocations t"))
    assert "C-100236" not in invocations  # the invocation row keeps key names only ...
    assert "C-100236" not in rows_text(sql, "bz_tool_journal")  # ... and so must the journal
