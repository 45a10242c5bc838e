"""Approvals of governed tool calls, their queue and decisions, tool job traces, and the demo
business system's own checks, all over real HTTP against the hub and the demo system on loopback.

The example CRM document caps a note's `body` at 4,000 characters, so a ~900 KiB snapshot cannot
be built from it as shipped: the `desk` fixture applies a copy of the document whose only change is
a larger `maxLength` on that field (the demo business system serves the same paths either way)."""
from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import requests

from admin_app.invocations import signing
from tests.conftest import DEMO_CONTROL, DEMO_SECRETS, EXAMPLES, governed_config
from tests.helpers import admin_token

PRINCIPAL = {"id": "user-42", "tenant": "tenant-7"}  # the `governed` session's
SUBJECT = "tenant-7:user-42"
FORCED = ["customer_note_add", "customer_export_csv"]
NOTE_MAX_CHARS = 1_000_000
LIST_MAX_BYTES = 20_000
SUMMARY_MAX = 260
MULTIBYTE = "aü€😀"  # 1 + 2 + 3 + 4 UTF-8 bytes


# ---------------------------------------------------------------- helpers

def canonical(arguments: dict) -> bytes:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def document(system: str) -> dict:
    return json.loads((EXAMPLES / f"{system}.openapi.json").read_text("utf-8"))


def acc(tool: str) -> dict:
    """The ACC of an operation in the example documents."""
    for system in ("crm", "erp"):
        for item in document(system)["paths"].values():
            for op in item.values():
                if isinstance(op, dict) and op.get("operationId") == tool:
                    return op["x-agent-capability"]
    raise KeyError(tool)


def note(text: str = "Call back on Monday", customer: str = "C-100234") -> dict:
    return {"customer_id": customer, "body": text}


def big_note() -> tuple[dict, bytes]:
    """A note whose canonical snapshot is about 900 KiB of multi-byte text (under the 1 MiB budget)."""
    text = MULTIBYTE * (900 * 1024 // len(MULTIBYTE.encode("utf-8")))
    arguments = {"customer_id": "C-100234", "body": text, "visibility": "account_team", "pinned": True}
    snapshot = canonical(arguments)
    assert 900 * 1024 <= len(snapshot) < 1_048_576
    return arguments, snapshot


MERGE = {"source_customer_id": "C-100235", "target_customer_id": "C-100234",
         "reason": "Same company, registered twice"}
EXPORT = {"segment": "mid_market", "country": "DE", "fields": ["id", "name", "vat_id"],
          "include_contacts": True}


class Desk:
    """The hub (agent and admin faces) with the route `desk` over the demo business system."""

    def __init__(self, server, cli, sql, business, session: dict):
        self.server, self.cli, self.sql, self.business = server, cli, sql, business
        self.session = session
        self.tokens: dict[str, str] = {}
        self.counter = 0

    # ---- agent side
    def agent(self, token: str | None = None) -> dict:
        return {"Authorization": f"Bearer {token or self.session['access_token']}"}

    def revision(self, token: str | None = None) -> str:
        response = self.server.get("/agent-api/v1/tools", params={"route": "desk"}, headers=self.agent(token))
        assert response.status_code == 200, response.text
        return response.json()["capability_revision"]

    def invoke(self, tool: str, arguments: dict, invocation_id: str | None = None,
               token: str | None = None) -> dict:
        self.counter += 1
        envelope = {"invocation_id": invocation_id or uuid.uuid4().hex + uuid.uuid4().hex,
                    "route": "desk", "capability_revision": self.revision(token), "tool": tool,
                    "arguments": arguments}
        response = self.server.post(
            "/agent-api/v1/tool-invocations",
            data=json.dumps(envelope, ensure_ascii=False).encode("utf-8"),
            headers={**self.agent(token), "Content-Type": "application/json"})
        assert response.status_code == 200, response.text[:2000]
        return response.json()

    def await_approval(self, tool: str, arguments: dict, **kw) -> dict:
        out = self.invoke(tool, arguments, **kw)
        assert out["status"] == "awaiting_approval", out
        assert out["approval"]["state"] == "pending"
        return out

    def resume(self, invocation_id: str, token: str | None = None) -> requests.Response:
        return self.server.post(f"/agent-api/v1/tool-invocations/{invocation_id}/resume", json={},
                                headers=self.agent(token))

    def receipt(self, invocation_id: str) -> dict:
        response = self.server.get(f"/agent-api/v1/tool-invocations/{invocation_id}/receipt",
                                   headers=self.agent())
        assert response.status_code == 200, response.text
        return response.json()

    # ---- admin side
    def token(self, role: str, name: str | None = None) -> str:
        name = name or f"{role}-one"
        if name not in self.tokens:
            self.tokens[name] = admin_token(self.cli, name, role)
        return self.tokens[name]

    def admin_get(self, path: str, token: str | None = "admin", params=None) -> requests.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {self._bearer(token)}"}
        return self.server.get("/admin/api" + path, params=params, headers=headers)

    def _bearer(self, token: str) -> str:
        return self.token(token) if token in ("admin", "approver", "support", "auditor") else token

    def approvals(self, status: str = "all", **params) -> list[dict]:
        response = self.admin_get("/tool-approvals", params={"status": status, **params})
        assert response.status_code == 200, response.text
        return response.json()["items"]

    def approval(self, approval_id: str) -> dict:
        response = self.admin_get(f"/tool-approvals/{approval_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def decide(self, approval_id: str, decision: str, body, token: str | None = "approver") -> requests.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {self._bearer(token)}"}
        return self.server.post(f"/admin/api/tool-approvals/{approval_id}/{decision}", json=body, headers=headers)

    def approve(self, out: dict, reason: str | None = "Checked against the request") -> dict:
        body = {"args_hash": out["approval"]["args_hash"]}
        if reason is not None:
            body["reason"] = reason
        response = self.decide(out["approval"]["id"], "approve", body)
        assert response.status_code == 200, response.text
        return response.json()

    def job_id(self, invocation_id: str) -> str:
        rows = self.sql("SELECT id FROM bz_tool_invocations WHERE invocation_id = %s", (invocation_id,))
        assert len(rows) == 1
        return str(rows[0][0])

    def trace(self, invocation_id: str, token: str = "support") -> requests.Response:
        return self.admin_get(f"/tool-jobs/{self.job_id(invocation_id)}", token=token)


@pytest.fixture
def desk(governed, server, cli, sql, business, tmp_path) -> Desk:
    """`governed`, re-applied with notes and the sensitive export forced to approval and a CRM
    document that lets a note body be long enough for a ~900 KiB snapshot."""
    crm = document("crm")
    crm["components"]["schemas"]["NoteCreate"]["properties"]["body"]["maxLength"] = NOTE_MAX_CHARS
    crm_path = tmp_path / "crm-long-notes.openapi.json"
    crm_path.write_text(json.dumps(crm), "utf-8")
    config = governed_config(business.url)
    route = config["routes"][0]
    route["tools"]["agent_direct"]["force_approval_tools"] = FORCED
    config["tool_providers"][0]["openapi"] = str(crm_path)
    path = tmp_path / "desk.json"
    path.write_text(json.dumps(config), "utf-8")
    code, _, err = cli("config", "apply", str(path))
    assert code == 0, err
    return Desk(server, cli, sql, business, governed)


def error_of(response: requests.Response) -> str:
    return response.json()["error"]


# ================================================================ approval creation

def test_a_900_kib_multibyte_snapshot_is_frozen_whole_and_never_listed(desk, business):
    arguments, snapshot = big_note()
    out = desk.await_approval("customer_note_add", arguments)
    args_hash = sha256(snapshot)
    assert out["approval"]["args_hash"] == args_hash
    assert business.executions() == []

    listing = desk.admin_get("/tool-approvals", params={"status": "pending"})
    assert listing.status_code == 200
    assert len(listing.content) < LIST_MAX_BYTES
    assert listing.headers["Cache-Control"] == "no-store"
    [item] = listing.json()["items"]
    assert "snapshot" not in item
    assert arguments["body"][5000:5100] not in listing.content.decode("utf-8")
    assert item["id"] == out["approval"]["id"]
    assert item["args_hash"] == args_hash
    assert item["snapshot_bytes"] == len(snapshot)
    assert item["argument_keys"] == ["body", "customer_id", "pinned", "visibility"]
    assert len(item["summary"]) <= SUMMARY_MAX
    assert item["summary"].startswith("customer_note_add")

    single = desk.admin_get(f"/tool-approvals/{item['id']}")
    assert single.status_code == 200 and len(single.content) < LIST_MAX_BYTES
    assert single.json() == item

    raw = desk.admin_get(f"/tool-approvals/{item['id']}/snapshot")
    assert raw.status_code == 200
    assert raw.headers["Content-Type"].startswith("application/json")
    assert raw.headers["X-Bailing-Args-Hash"] == args_hash
    assert raw.headers["Cache-Control"] == "no-store"
    assert raw.content == snapshot
    assert sha256(raw.content) == item["args_hash"] == out["approval"]["args_hash"]
    assert json.loads(raw.content) == arguments
    # The approval's hash is the invocation's own argument hash (the one the idempotency key uses).
    assert desk.sql("SELECT args_hash FROM bz_tool_invocations WHERE invocation_id = %s",
                    (out["invocation_id"],)) == [(args_hash,)]


def test_snapshot_download_names_the_file_and_keeps_the_bytes(desk):
    arguments = note("Ünïcödé — 😀 and \"quotes\" \\ and a\nnewline")
    out = desk.await_approval("customer_note_add", arguments)
    response = desk.admin_get(f"/tool-approvals/{out['approval']['id']}/snapshot", params={"download": "1"})
    assert response.status_code == 200
    assert response.content == canonical(arguments)
    assert response.headers["Content-Disposition"] == \
        f'attachment; filename="approval-{out["approval"]["id"]}.json"'


POLICIES = {
    "approval_when": ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 20000},
                      ["approval_when"], [0]),
    "approval_when-two-rules": ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER",
                                                     "quantity_delta": -150, "reason": "write_off"},
                                ["approval_when"], [0, 1]),
    "approval_when-second-rule": ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER",
                                                       "quantity_delta": -5, "reason": "theft"},
                                  ["approval_when"], [1]),
    "risk_high": ("customer_merge", MERGE, ["risk_high"], []),
    "risk_high-and-required": ("order_cancel", {"order_id": "ORD-000001", "reason": "customer_request"},
                               ["risk_high"], []),
    "route_force_approval": ("customer_note_add", note(), ["route_force_approval"], []),
}


@pytest.mark.parametrize("tool, arguments, reasons, rules", POLICIES.values(), ids=POLICIES.keys())
def test_approval_records_risk_policy_prompt_and_requester(desk, business, tool, arguments, reasons, rules):
    contract = acc(tool)
    out = desk.await_approval(tool, arguments)
    item = desk.approval(out["approval"]["id"])
    assert item["invocation_id"] == out["invocation_id"]
    assert item["tool"] == tool and item["route"] == "desk"
    assert item["status"] == "pending" and item["invocation_status"] == "awaiting_approval"
    assert item["risk"] == contract["risk"]["level"]
    assert item["policy"]["reasons"] == reasons
    assert item["policy"]["risk"] == contract["risk"]["level"]
    when = (contract.get("approval") or {}).get("when") or []
    assert item["policy"]["matched_rules"] == [when[i] for i in rules]
    assert item["prompt"] == (contract.get("approval") or {}).get("prompt")
    assert item["args_hash"] == sha256(canonical(arguments)) == out["approval"]["args_hash"]
    assert item["snapshot_bytes"] == len(canonical(arguments))
    assert item["argument_keys"] == sorted(arguments)
    assert item["requester"] == {"session_id": desk.session["session_id"], "client_app_id": "ops-app",
                                 "principal": PRINCIPAL, "on_behalf_of": SUBJECT}
    assert len(item["summary"]) <= SUMMARY_MAX
    assert item["decided_at"] is None and item["decided_by"] is None and item["consumed_at"] is None
    assert business.executions() == []


BELOW_THRESHOLD = {
    "credit-limit-at-10000": ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 10000}),
    "small-adjustment": ("inventory_adjust", {"sku": "ABC-1001", "warehouse_id": "WH-BER",
                                              "quantity_delta": -100, "reason": "damage"}),
}


@pytest.mark.parametrize("tool, arguments", BELOW_THRESHOLD.values(), ids=BELOW_THRESHOLD.keys())
def test_approval_when_that_does_not_match_creates_no_approval(desk, business, tool, arguments):
    out = desk.invoke(tool, arguments)
    assert out["status"] == "executed" and "approval" not in out
    assert [e["operation"] for e in business.executions()] == [tool]
    assert desk.approvals("all") == []


def test_sensitive_tool_summary_withholds_every_value(desk, business):
    out = desk.await_approval("customer_export_csv", EXPORT)
    [item] = desk.approvals("pending")
    assert item["id"] == out["approval"]["id"]
    assert item["policy"]["reasons"] == ["route_force_approval"]
    summary = item["summary"]
    assert len(summary) <= SUMMARY_MAX
    assert "values withheld" in summary
    for key in EXPORT:
        assert key in summary
    for value in ("mid_market", "DE", "vat_id", "true"):
        assert value not in summary, summary
    # The approver can still read exactly what would be sent.
    raw = desk.admin_get(f"/tool-approvals/{item['id']}/snapshot")
    assert raw.content == canonical(EXPORT)
    assert business.executions() == []


def test_each_approval_names_the_session_that_asked(desk, cli):
    other_principal = {"id": "user-77", "tenant": "tenant-9", "roles": ["buyer"]}
    code, other, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                           "--principal", json.dumps(other_principal), "--on-behalf-of", "tenant-9:user-77")
    assert code == 0, err
    mine = desk.await_approval("customer_merge", MERGE)
    theirs = desk.await_approval("customer_merge", MERGE, token=other["access_token"])
    by_id = {item["id"]: item["requester"] for item in desk.approvals("pending")}
    assert by_id[mine["approval"]["id"]] == {"session_id": desk.session["session_id"], "client_app_id": "ops-app",
                                             "principal": PRINCIPAL, "on_behalf_of": SUBJECT}
    assert by_id[theirs["approval"]["id"]]["session_id"] == other["session_id"]
    assert by_id[theirs["approval"]["id"]]["on_behalf_of"] == "tenant-9:user-77"
    assert by_id[theirs["approval"]["id"]]["principal"]["id"] == "user-77"
    assert by_id[theirs["approval"]["id"]]["principal"]["tenant"] == "tenant-9"


# ================================================================ the queue

def test_queue_lists_pending_first_then_by_creation(desk):
    first = desk.await_approval("customer_note_add", note("first"))
    second = desk.await_approval("customer_note_add", note("second"))
    third = desk.await_approval("customer_merge", MERGE)
    desk.approve(first)
    ids = lambda items: [i["id"] for i in items]  # noqa: E731
    expected_pending = [second["approval"]["id"], third["approval"]["id"]]
    assert ids(desk.approvals("pending")) == expected_pending
    default = desk.admin_get("/tool-approvals")
    assert default.status_code == 200 and ids(default.json()["items"]) == expected_pending
    everything = desk.approvals("all")
    assert ids(everything) == expected_pending + [first["approval"]["id"]]
    assert [i["status"] for i in everything] == ["pending", "pending", "approved"]
    created = [parse_time(i["created_at"]) for i in everything[:2]]
    assert created == sorted(created)
    page = desk.admin_get("/tool-approvals", params={"status": "all", "limit": "1", "offset": "1"}).json()
    assert ids(page["items"]) == [third["approval"]["id"]]
    assert page["has_more"] is True and page["next_offset"] == 2
    last = desk.admin_get("/tool-approvals", params={"status": "all", "limit": "100", "offset": "2"}).json()
    assert ids(last["items"]) == [first["approval"]["id"]]
    assert last["has_more"] is False and last["next_offset"] is None


BAD_QUERIES = {
    "unknown-status": {"status": "approve"},
    "empty-status": {"status": ""},
    "upper-status": {"status": "ALL"},
    "limit-0": {"limit": "0"},
    "limit-101": {"limit": "101"},
    "limit-negative": {"limit": "-1"},
    "limit-not-a-number": {"limit": "ten"},
    "offset-negative": {"offset": "-1"},
    "unknown-parameter": {"sort": "created_at"},
    "repeated-status": [("status", "all"), ("status", "pending")],
}


@pytest.mark.parametrize("params", BAD_QUERIES.values(), ids=BAD_QUERIES.keys())
def test_bad_queue_queries_are_400(desk, params):
    desk.await_approval("customer_merge", MERGE)
    response = desk.admin_get("/tool-approvals", params=params)
    assert response.status_code == 400, response.text
    assert error_of(response) == "invalid_request"
    assert response.json()["problems"]
    assert response.headers["Cache-Control"] == "no-store"


ROLE_STATUS = {"admin": 200, "approver": 200, "support": 403, "auditor": 403, None: 401,
               "bzadm_not-a-real-token": 401}


@pytest.mark.parametrize("endpoint", ["list", "item", "snapshot"])
def test_reading_approvals_needs_approvals_read(desk, endpoint):
    out = desk.await_approval("customer_merge", MERGE)
    path = {"list": "/tool-approvals", "item": f"/tool-approvals/{out['approval']['id']}",
            "snapshot": f"/tool-approvals/{out['approval']['id']}/snapshot"}[endpoint]
    seen = {}
    for role, expected in ROLE_STATUS.items():
        response = desk.admin_get(path, token=role)
        seen[role] = response.status_code
        assert response.headers["Cache-Control"] == "no-store"
        if expected == 403:
            assert error_of(response) == "forbidden"
            assert MERGE["reason"] not in response.text
        if expected == 401:
            assert error_of(response) == "unauthorized"
    assert seen == ROLE_STATUS


# ================================================================ decisions

@pytest.mark.parametrize("reason", ["Limit matches the signed contract", None], ids=["with-reason", "no-reason"])
def test_approving_with_the_reviewed_hash_records_who_when_and_why(desk, business, reason):
    out = desk.await_approval("customer_merge", MERGE)
    before = datetime.now(UTC) - timedelta(seconds=5)
    body = {"args_hash": out["approval"]["args_hash"], **({"reason": reason} if reason else {})}
    response = desk.decide(out["approval"]["id"], "approve", body)
    assert response.status_code == 200, response.text
    decided = response.json()
    assert decided["status"] == "approved"
    assert decided["decided_by"] == "approver-one"
    assert decided["decision_reason"] == reason
    assert before <= parse_time(decided["decided_at"]) <= datetime.now(UTC) + timedelta(seconds=5)
    assert parse_time(decided["decided_at"]) >= parse_time(decided["created_at"])
    assert decided["consumed_at"] is None
    # The decision answers as upstream does (`ok`, `rerun`) beside the approval as it now stands.
    assert decided.pop("ok") is True and decided.pop("rerun") is False
    assert desk.approval(out["approval"]["id"]) == decided
    # Approval alone sends nothing; the agent's resume does.
    assert business.executions() == []
    receipt = desk.receipt(out["invocation_id"])
    assert receipt["result"]["status"] == "awaiting_approval"
    assert receipt["approval"] == {"status": "approved", "approval_id": out["approval_id"]}
    assert receipt["journal_state"] == "absent"


def _other_hash(out: dict) -> str:
    return sha256(canonical({**MERGE, "reason": MERGE["reason"] + "!"}))


STALE = {
    "zeros": lambda out: "0" * 64,
    "hash-of-other-arguments": _other_hash,
    "uppercase-of-the-right-hash": lambda out: out["approval"]["args_hash"].upper(),
}


@pytest.mark.parametrize("decision", ["approve", "deny"])
@pytest.mark.parametrize("stale", STALE.values(), ids=STALE.keys())
def test_a_stale_hash_is_409_and_leaves_the_approval_pending(desk, business, decision, stale):
    out = desk.await_approval("customer_merge", MERGE)
    response = desk.decide(out["approval"]["id"], decision, {"args_hash": stale(out), "reason": "Looks fine"})
    assert response.status_code == 409, response.text
    assert error_of(response) == "approval_snapshot_changed"
    item = desk.approval(out["approval"]["id"])
    assert item["status"] == "pending" and item["decided_by"] is None and item["decided_at"] is None
    assert desk.receipt(out["invocation_id"])["result"]["status"] == "awaiting_approval"
    assert business.executions() == []


BAD_BODIES = {
    "missing-hash": {"reason": "ok"},
    "short-hash": {"args_hash": "abc123", "reason": "ok"},
    "numeric-hash": {"args_hash": 12345, "reason": "ok"},
    "null-hash": {"args_hash": None},
    "unknown-field": {"args_hash": "HASH", "reason": "ok", "note": "extra"},
    "unknown-field-only-extra": {"args_hash": "HASH", "approved": True},
    "reason-not-a-string": {"args_hash": "HASH", "reason": 7},
    "reason-too-long": {"args_hash": "HASH", "reason": "x" * 2001},
}


@pytest.mark.parametrize("decision", ["approve", "deny"])
@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_malformed_decisions_are_400_and_change_nothing(desk, decision, body):
    out = desk.await_approval("customer_merge", MERGE)
    body = {k: (out["approval"]["args_hash"] if v == "HASH" else v) for k, v in body.items()}
    response = desk.decide(out["approval"]["id"], decision, body)
    assert response.status_code == 400, response.text
    assert error_of(response) == "invalid_request"
    assert desk.approval(out["approval"]["id"])["status"] == "pending"


@pytest.mark.parametrize("reason", [None, "", "   \n\t "], ids=["missing", "empty", "blank"])
def test_deny_needs_a_reason(desk, business, reason):
    out = desk.await_approval("customer_merge", MERGE)
    body = {"args_hash": out["approval"]["args_hash"], **({} if reason is None else {"reason": reason})}
    response = desk.decide(out["approval"]["id"], "deny", body)
    assert response.status_code == 400, response.text
    assert error_of(response) == "invalid_request"
    assert [p["path"] for p in response.json()["problems"]] == ["reason"]
    assert desk.approval(out["approval"]["id"])["status"] == "pending"
    assert desk.receipt(out["invocation_id"])["result"]["status"] == "awaiting_approval"


SECOND_DECISIONS = [("approve", "approve"), ("approve", "deny"), ("deny", "approve"), ("deny", "deny")]


@pytest.mark.parametrize("first, second", SECOND_DECISIONS, ids=["-then-".join(p) for p in SECOND_DECISIONS])
def test_a_second_decision_is_409_and_the_first_stands(desk, first, second):
    out = desk.await_approval("customer_merge", MERGE)
    body = {"args_hash": out["approval"]["args_hash"], "reason": "First look"}
    assert desk.decide(out["approval"]["id"], first, body, token="approver").status_code == 200
    decided = desk.approval(out["approval"]["id"])
    again = desk.decide(out["approval"]["id"], second, {**body, "reason": "Second look"}, token="admin")
    assert again.status_code == 409, again.text
    assert error_of(again) == "approval_not_pending"
    assert desk.approval(out["approval"]["id"]) == decided
    assert decided["decided_by"] == "approver-one" and decided["decision_reason"] == "First look"
    assert decided["status"] == {"approve": "approved", "deny": "denied"}[first]


DENIABLE = {
    "forced-note": ("customer_note_add", note("Please ignore the dunning letter")),
    "risk-high-merge": ("customer_merge", MERGE),
    "approval-when-credit": ("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 50000}),
}


@pytest.mark.parametrize("tool, arguments", DENIABLE.values(), ids=DENIABLE.keys())
def test_a_denied_call_never_reaches_the_business_system(desk, business, tool, arguments):
    out = desk.await_approval(tool, arguments)
    response = desk.decide(out["approval"]["id"], "deny",
                           {"args_hash": out["approval"]["args_hash"], "reason": "Not what the customer asked"})
    assert response.status_code == 200, response.text
    denied = response.json()
    assert denied["status"] == "denied" and denied["invocation_status"] == "denied"
    assert denied["decision_reason"] == "Not what the customer asked"
    assert denied["decided_by"] == "approver-one"
    for _ in range(3):
        resumed = desk.resume(out["invocation_id"])
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["status"] == "denied"
        assert resumed.json()["approval"]["state"] == "denied"
        assert "result" not in resumed.json()
    # The same call again (same invocation id) is the same denied invocation, not a new request.
    again = desk.invoke(tool, arguments, invocation_id=out["invocation_id"])
    assert again["status"] == "denied" and again["approval"]["id"] == out["approval"]["id"]
    receipt = desk.receipt(out["invocation_id"])
    assert receipt["result"]["status"] == "denied" and receipt["journal_state"] == "absent"
    assert receipt["approval"] == {"status": "denied", "approval_id": out["approval_id"]}
    assert desk.approval(out["approval"]["id"])["consumed_at"] is None
    assert business.executions() == []


@pytest.mark.parametrize("decisions", [("approve", "approve"), ("approve", "deny"), ("deny", "deny")],
                         ids=lambda d: "-vs-".join(d))
def test_racing_approvers_exactly_one_wins(desk, decisions):
    tokens = [desk.token("approver", "racer-a"), desk.token("approver", "racer-b")]
    for _ in range(4):
        out = desk.await_approval("customer_merge", MERGE)
        url = f"{desk.server.url}/admin/api/tool-approvals/{out['approval']['id']}"
        barrier = threading.Barrier(2)
        results: list[tuple[str, int, dict]] = [None, None]  # type: ignore[list-item]

        def decide(i: int) -> None:
            barrier.wait()
            response = requests.post(f"{url}/{decisions[i]}", timeout=30,
                                     headers={"Authorization": f"Bearer {tokens[i]}"},
                                     json={"args_hash": out["approval"]["args_hash"], "reason": f"racer {i}"})
            results[i] = (decisions[i], response.status_code, response.json())

        threads = [threading.Thread(target=decide, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(r[1] for r in results) == [200, 409], results
        winner = next(i for i, r in enumerate(results) if r[1] == 200)
        loser = results[1 - winner]
        assert loser[2]["error"] == "approval_not_pending"
        final = desk.approval(out["approval"]["id"])
        assert final["decided_by"] == f"racer-{'ab'[winner]}"
        assert final["decision_reason"] == f"racer {winner}"
        assert final["status"] == {"approve": "approved", "deny": "denied"}[decisions[winner]]


BAD_IDS = [str(uuid.UUID(int=0)), "4c3e7bf0-9e0a-4a8b-9b1e-5b0f3f2f0e11", "nope", "123", "4c3e7bf0-9e0a"]


@pytest.mark.parametrize("approval_id", BAD_IDS)
def test_unknown_or_malformed_approval_is_404(desk, approval_id):
    out = desk.await_approval("customer_merge", MERGE)
    body = {"args_hash": out["approval"]["args_hash"], "reason": "Checked"}
    responses = [desk.decide(approval_id, "approve", body), desk.decide(approval_id, "deny", body),
                 desk.admin_get(f"/tool-approvals/{approval_id}"),
                 desk.admin_get(f"/tool-approvals/{approval_id}/snapshot")]
    assert [r.status_code for r in responses] == [404] * 4
    assert {error_of(r) for r in responses} == {"approval_not_found"}
    assert desk.approval(out["approval"]["id"])["status"] == "pending"


@pytest.mark.parametrize("decision", ["approve", "deny"])
@pytest.mark.parametrize("token, status", [("auditor", 403), ("support", 403), (None, 401),
                                           ("bzadm_forged", 401)], ids=["auditor", "support", "none", "forged"])
def test_deciding_needs_approvals_decide(desk, business, decision, token, status):
    out = desk.await_approval("customer_merge", MERGE)
    response = desk.decide(out["approval"]["id"], decision,
                           {"args_hash": out["approval"]["args_hash"], "reason": "Looks right"}, token=token)
    assert response.status_code == status, response.text
    assert error_of(response) == ("forbidden" if status == 403 else "unauthorized")
    item = desk.approval(out["approval"]["id"])
    assert item["status"] == "pending" and item["decided_by"] is None
    assert business.executions() == []


def expected_idempotency_key(job_id: str, tool: str, args_hash: str) -> str:
    return sha256(canonical({"args_hash": args_hash, "job_id": job_id, "on_behalf_of": SUBJECT, "tool": tool}))


@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential-resumes", "concurrent-resumes"])
def test_an_approval_is_consumed_once(desk, business, concurrent):
    arguments = note("Customer confirmed the new delivery window — ✓")
    out = desk.await_approval("customer_note_add", arguments)
    desk.approve(out)
    if concurrent:
        barrier = threading.Barrier(5)
        statuses: list[tuple[int, str]] = []

        def resume() -> None:
            barrier.wait()
            r = requests.post(f"{desk.server.url}/agent-api/v1/tool-invocations/{out['invocation_id']}/resume",
                              json={}, headers=desk.agent(), timeout=30)
            statuses.append((r.status_code, r.json().get("status")))

        threads = [threading.Thread(target=resume) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(statuses) == 5 and all(code == 200 for code, _ in statuses), statuses
        assert {s for _, s in statuses} <= {"executed", "in_progress"}
    else:
        first = desk.resume(out["invocation_id"])
        assert first.status_code == 200, first.text
        assert first.json()["status"] == "executed"
        assert first.json()["result"]["http_status"] == 201
        assert first.json()["result"]["body"] == {"id": "N-00001", "body": arguments["body"]}
    consumed = desk.approval(out["approval"]["id"])
    assert consumed["consumed_at"] is not None
    assert parse_time(consumed["consumed_at"]) >= parse_time(consumed["decided_at"])
    for _ in range(2):
        later = desk.resume(out["invocation_id"])
        assert later.status_code == 200 and later.json()["status"] == "executed"
    assert desk.approval(out["approval"]["id"])["consumed_at"] == consumed["consumed_at"]
    same = desk.invoke("customer_note_add", arguments, invocation_id=out["invocation_id"])
    assert same["status"] == "executed" and same["approval"]["id"] == out["approval"]["id"]
    assert len(desk.approvals("all")) == 1
    [execution] = business.executions()
    job_id = desk.job_id(out["invocation_id"])
    assert execution["operation"] == "customer_note_add" and execution["job_id"] == job_id
    assert execution["on_behalf_of"] == SUBJECT
    assert execution["idempotency_key"] == expected_idempotency_key(job_id, "customer_note_add",
                                                                     out["approval"]["args_hash"])
    assert business.app.config["DEMO_STORE"].notes["C-100234"] == [{"id": "N-00001", "body": arguments["body"]}]


# ================================================================ tool job traces

def test_job_trace_follows_the_approval_without_values_or_bodies(desk, business):
    marker = "MARKER-ba1f7c-never-in-traces"
    arguments = {"customer_id": "C-100234", "body": marker, "visibility": "account_team"}
    out = desk.await_approval("customer_note_add", arguments)
    response = desk.trace(out["invocation_id"])
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    trace = response.json()
    assert trace["schema"] == "bailing.tool-job-trace.v1"
    job = trace["job"]
    assert job["job_id"] == desk.job_id(out["invocation_id"])
    assert job["invocation_id"] == out["invocation_id"] and job["tool"] == "customer_note_add"
    assert job["route_key"] == "desk" and job["session_id"] == desk.session["session_id"]
    assert job["status"] == "awaiting_approval"
    assert job["argument_keys"] == ["body", "customer_id", "visibility"]
    assert job["args_hash"] == out["approval"]["args_hash"]
    assert job["approval"]["id"] == out["approval"]["id"] and job["approval"]["state"] == "pending"
    assert job["approval"]["decided_at"] is None and job["approval"]["consumed_at"] is None
    assert job["journal"] is None and job["business_status"] is None
    assert job["created_at"] is not None
    assert marker not in response.text and "account_team" not in response.text

    desk.approve(out)
    resumed = desk.resume(out["invocation_id"])
    assert resumed.json()["status"] == "executed"
    assert marker in resumed.text  # the agent gets the business reply ...
    response = desk.trace(out["invocation_id"], token="auditor")
    assert response.status_code == 200
    job = response.json()["job"]
    assert marker not in response.text and "N-00001" not in response.text  # ... the trace never does
    assert job["status"] == "executed" and job["business_status"] == 201
    assert job["approval"]["state"] == "approved" and job["approval"]["decided_by"] == "approver-one"
    assert job["approval"]["decided_at"] is not None and job["approval"]["consumed_at"] is not None
    journal = job["journal"]
    assert journal["state"] == "completed" and journal["http_status"] == 201 and journal["method"] == "POST"
    assert parse_time(journal["started_at"]) <= parse_time(journal["finished_at"])
    assert parse_time(job["approval"]["consumed_at"]) <= parse_time(journal["finished_at"])
    assert "arguments" not in job and "result" not in job and "body" not in job


def test_job_trace_of_a_denied_call(desk):
    out = desk.await_approval("customer_merge", MERGE)
    desk.decide(out["approval"]["id"], "deny",
                {"args_hash": out["approval"]["args_hash"], "reason": "Different VAT ids"})
    job = desk.trace(out["invocation_id"]).json()["job"]
    assert job["status"] == "denied" and job["reason"] == "approval_denied"
    assert job["approval"]["state"] == "denied" and job["approval"]["consumed_at"] is None
    assert job["journal"] is None and job["business_status"] is None
    assert job["argument_keys"] == sorted(MERGE)


def test_job_trace_of_a_sensitive_call_shows_key_names_only(desk, business):
    out = desk.await_approval("customer_export_csv", EXPORT)
    desk.approve(out)
    resumed = desk.resume(out["invocation_id"])
    assert resumed.json()["status"] == "executed"
    assert "ACME Industrial GmbH" in resumed.text and "text/csv" in resumed.text  # the agent's result
    response = desk.trace(out["invocation_id"])
    job = response.json()["job"]
    assert job["argument_keys"] == sorted(EXPORT) and job["business_status"] == 200
    for value in ("mid_market", "vat_id", "ACME Industrial GmbH", "C-100234", "text/csv", "id,name"):
        assert value not in response.text


# Rejected arguments: the reason recorded on the invocation quotes the offending value.
LEAKS = {
    "sensitive-export": ("customer_export_csv", {"country": "zz-Confidential-9F3"}, "zz-Confidential-9F3"),
    "note-visibility": ("customer_note_add", {"customer_id": "C-100234", "body": "hi",
                                              "visibility": "Confidential-7Q2"}, "Confidential-7Q2"),
}


@pytest.mark.parametrize("tool, arguments, value", LEAKS.values(), ids=LEAKS.keys())
def test_rejected_arguments_leave_no_values_in_the_trace(desk, business, tool, arguments, value):
    out = desk.invoke(tool, arguments)
    assert out["status"] == "rejected_before_dispatch"
    assert business.executions() == []
    response = desk.trace(out["invocation_id"])
    assert response.status_code == 200
    assert response.json()["job"]["status"] == "rejected_before_dispatch"
    assert value not in response.text


@pytest.mark.parametrize("job_id", ["5b0d7e3c-9a61-4f2e-8c47-1d2f3a4b5c6d", "nope", "1234"])
def test_unknown_job_is_404(desk, job_id):
    desk.await_approval("customer_merge", MERGE)
    response = desk.admin_get(f"/tool-jobs/{job_id}", token="support")
    assert response.status_code == 404
    assert error_of(response) == "job_not_found"


def test_job_traces_need_runs_read(desk):
    out = desk.await_approval("customer_merge", MERGE)
    path = f"/tool-jobs/{desk.job_id(out['invocation_id'])}"
    seen = {role: desk.admin_get(path, token=role).status_code
            for role in ("admin", "support", "auditor", "approver", None)}
    assert seen == {"admin": 200, "support": 200, "auditor": 200, "approver": 403, None: 401}


# ================================================================ the demo business system

NOTE_PATH = "/crm/customers/C-100234/notes"
NOTE_BODY = json.dumps({"body": "Signed by the hub"}).encode()


def demo_call(business, method: str = "POST", path: str = NOTE_PATH, body: bytes = NOTE_BODY, *,
              secret: str = DEMO_SECRETS["crm"], skew: int = 0, on_behalf_of: str = SUBJECT,
              job_id: str = "job-1", key: str | None = None, sign: dict | None = None,
              override: dict | None = None, drop: tuple = ()) -> requests.Response:
    """A call to the demo system as the hub makes it; `sign` replaces what the signature covers,
    `override`/`drop` change the headers actually sent, so each can be tampered with alone."""
    signed = {"method": method, "path_with_query": path, "body": body, "on_behalf_of": on_behalf_of,
              "job_id": job_id, **(sign or {})}
    # The operation's path as the spec declares it: without the system's base path (/crm).
    signed["path_with_query"] = signed["path_with_query"].removeprefix("/crm")
    headers = signing.headers(secret, timestamp=str(int(time.time()) + skew), scope="crm.test",
                              idempotency_key=key or uuid.uuid4().hex, **signed)
    headers["X-Bailing-On-Behalf-Of"] = on_behalf_of
    headers["X-Bailing-Job-Id"] = job_id
    headers.update(override or {})
    for name in drop:
        headers.pop(name)
    if body:
        headers["Content-Type"] = "application/json"
    return requests.request(method, business.url + path, data=body or None, headers=headers, timeout=30)


FORGERIES = {
    "forged-signature": dict(override={"X-Bailing-Signature": "sha256=" + "0" * 64}),
    "signature-without-prefix": dict(override={"X-Bailing-Signature": "f" * 64}),
    "another-secret": dict(secret=DEMO_SECRETS["erp"]),
    "tampered-body": dict(sign={"body": json.dumps({"body": "Something else"}).encode()}),
    "tampered-path": dict(sign={"path_with_query": "/crm/customers/C-100235/notes"}),
    "tampered-query": dict(method="GET", path="/crm/customers?q=acme", body=b"",
                           sign={"path_with_query": "/crm/customers?q=north"}),
    "added-query": dict(method="GET", path="/crm/customers?q=acme", body=b"",
                        sign={"path_with_query": "/crm/customers"}),
    "tampered-method": dict(method="GET", path="/crm/customers/C-100234", body=b"", sign={"method": "DELETE"}),
    "changed-on-behalf-of": dict(sign={"on_behalf_of": "tenant-7:user-99"}),
    "changed-job-id": dict(sign={"job_id": "job-2"}),
    "timestamp-301s-old": dict(skew=-301),
    "timestamp-301s-ahead": dict(skew=301),
    "timestamp-not-a-number": dict(override={"X-Bailing-Timestamp": "soon"}),
    "missing-signature": dict(drop=("X-Bailing-Signature",)),
    "missing-timestamp": dict(drop=("X-Bailing-Timestamp",)),
}


@pytest.mark.parametrize("case", FORGERIES.values(), ids=FORGERIES.keys())
def test_demo_system_refuses_what_the_hub_did_not_sign(business, case):
    store = business.app.config["DEMO_STORE"]
    response = demo_call(business, **case)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "invalid_signature"
    assert business.executions() == []
    assert store.notes == {}


ACCEPTED = {
    "write-now": dict(),
    "write-290s-old": dict(skew=-290),
    "write-290s-ahead": dict(skew=290),
    "read-with-query": dict(method="GET", path="/crm/customers?q=acme", body=b""),
    "read-without-subject": dict(method="GET", path="/crm/customers/C-100235", body=b"", on_behalf_of=""),
}


@pytest.mark.parametrize("case", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_demo_system_answers_a_correctly_signed_call(business, case):
    response = demo_call(business, job_id="job-ok", **case)
    assert response.status_code in (200, 201), response.text
    [execution] = business.executions()
    assert execution["job_id"] == "job-ok" and execution["status"] == response.status_code
    if case.get("method", "POST") == "POST":
        assert response.json() == {"id": "N-00001", "body": "Signed by the hub"}
    elif "?q=acme" in case["path"]:
        assert [c["id"] for c in response.json()["items"]] == ["C-100234"]


@pytest.mark.parametrize("drop_header", [False, True], ids=["empty-subject", "no-subject-header"])
def test_demo_system_refuses_a_write_without_a_subject(business, drop_header):
    response = demo_call(business, on_behalf_of="", drop=("X-Bailing-On-Behalf-Of",) if drop_header else ())
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "subject_required"
    assert business.executions() == []
    assert business.app.config["DEMO_STORE"].notes == {}


def test_demo_system_runs_a_write_once_per_idempotency_key(business):
    first = demo_call(business, key="key-1", job_id="job-a")
    time.sleep(1.1)  # a fresh timestamp and so a fresh signature
    second = demo_call(business, key="key-1", job_id="job-a")
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert first.json() == {"id": "N-00001", "body": "Signed by the hub"}
    assert len(business.executions("customer_note_add")) == 1
    other = demo_call(business, key="key-2", job_id="job-b")
    assert other.status_code == 201 and other.json()["id"] == "N-00002"
    assert [e["idempotency_key"] for e in business.executions()] == ["key-1", "key-2"]
    assert len(business.app.config["DEMO_STORE"].notes["C-100234"]) == 2


CONTROL = {
    "executions-no-token": ("GET", "/_demo/executions", {}, None),
    "executions-wrong-token": ("GET", "/_demo/executions", {"X-Demo-Control": "guess"}, None),
    "executions-empty-token": ("GET", "/_demo/executions", {"X-Demo-Control": ""}, None),
    "executions-signing-secret": ("GET", "/_demo/executions", {"X-Demo-Control": DEMO_SECRETS["crm"]}, None),
    "faults-no-token": ("POST", "/_demo/faults", {}, {"operation": "customer_get", "mode": "drop_response"}),
    "faults-wrong-token": ("POST", "/_demo/faults", {"X-Demo-Control": DEMO_CONTROL + "x"},
                           {"operation": "customer_get", "mode": "drop_response"}),
}


@pytest.mark.parametrize("method, path, headers, body", CONTROL.values(), ids=CONTROL.keys())
def test_demo_control_endpoints_need_the_control_token(business, method, path, headers, body):
    demo_call(business, job_id="seen")
    response = requests.request(method, business.url + path, headers=headers, json=body, timeout=30)
    assert response.status_code == 401, response.text
    assert response.json()["error"] == "unauthorized"
    assert "seen" not in response.text
    # No fault was installed: a signed read still comes back whole.
    read = demo_call(business, method="GET", path="/crm/customers/C-100234", body=b"", job_id="after")
    assert read.status_code == 200 and read.json()["id"] == "C-100234"
    assert [e["job_id"] for e in business.executions()] == ["seen", "after"]
