"""Governed tools inside a job (CLIENT_API_AND_EXECUTOR.md §C): the work item's `tools` block and
its `tool_token`, `GET /jobs/<id>/tools/defs` and `POST /jobs/<id>/tools/invoke` with every
refusal of §C.3/§C.4, and the agent path's governance around a job's call (§C.5): signed calls
that name the job, deduplication of side effects, the journal's freeze, rate limits, `max_calls`,
approvals in the shared queue and the rerun of a finished job when one is granted (§C.7).

Everything goes over HTTP to a real hub (`/run`, `/executor/claim`, `/executor/result`, the
admin API, the business decision) on a real PostgreSQL, with the demo business system verifying
each signature and recording what reached it."""
from __future__ import annotations

import json
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from sqlalchemy.exc import OperationalError

from admin_app.canonical import sha256_json
from admin_app.invocations import signing
from admin_app.jobs import tool_calls
from admin_app.jobs.tools import tool_token
from admin_app.notifications import request as approval_request
from tests.helpers import admin_token, apply_config, bearer, row_counts
from tests.jobs_world import JobsWorld, jobs_config
from tests.test_console_server import signed_in

SUBJECT = "tenant-7:user-42"
NOTE, MERGE, GET = "customer_note_add", "customer_merge", "customer_get"
MERGE_ARGS = {"source_customer_id": "C-100235", "target_customer_id": "C-100234",
              "reason": "Same VAT number and billing address."}
TABLES = ("bz_tool_invocations", "bz_tool_journal", "bz_tool_approvals", "bz_tool_deferred_calls", "bz_job_events",
          "bz_approval_deliveries")


class Desk:
    """JobsWorld (route `desk`, target `desk-worker`, client app `ops-app`) with helpers for a
    job's tools; `edit` changes the configuration before it is applied again."""

    def __init__(self, server: Any, cli: Any, business: Any, tmp_path: Any, sql: Any, app: Any,
                 edit: Any = None) -> None:
        self.world = JobsWorld(server, cli, business, tmp_path)
        if edit is not None:
            config = jobs_config(business.url)
            edit(config)
            apply_config(cli, tmp_path, config)
        self.url, self.sql, self.business, self.app = server.url, sql, business, app
        self.admin = admin_token(cli, "ana", "admin")

    def start(self, subject: str | None = SUBJECT) -> dict[str, Any]:
        """A job submitted with /run and claimed with /executor/claim: its work item."""
        metadata = {"on_behalf_of": subject} if subject else {}
        submitted = self.world.submit(metadata=metadata)
        assert submitted.status_code == 202, submitted.text
        return self.claim(submitted.json()["job_id"])

    def claim(self, job_id: str) -> dict[str, Any]:
        claimed = self.world.claim()
        assert claimed.status_code == 200, claimed.text
        job = claimed.json()["job"]
        assert job is not None and job["job_id"] == job_id, claimed.text
        return job

    def token(self, job: dict[str, Any]) -> str:
        return job["tools"]["tool_token"]

    def invoke(self, job: dict[str, Any], tool: Any = None, arguments: Any = None, token: str | None = None,
               **kwargs: Any) -> requests.Response:
        body = kwargs.pop("json", {"tool": tool, **({} if arguments is None else {"arguments": arguments})})
        return requests.post(f"{self.url}/jobs/{job['job_id']}/tools/invoke", json=body,
                             headers=bearer(token or self.token(job)), timeout=30, **kwargs)

    def defs(self, job: dict[str, Any], names: str, token: str | None = None) -> requests.Response:
        return requests.get(f"{self.url}/jobs/{job['job_id']}/tools/defs", params={"names": names},
                            headers=bearer(token or self.token(job)), timeout=30)

    def ok(self, job: dict[str, Any], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A call answered 200 with Core's `{ok, text, status}`."""
        response = self.invoke(job, tool, arguments)
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-store"
        return response.json()

    def counts(self) -> dict[str, int]:
        return row_counts(self.sql, *TABLES)

    def events(self, job: dict[str, Any], event: str) -> list[dict[str, Any]]:
        return [row[0] for row in self.sql("SELECT detail FROM bz_job_events WHERE job_id = %s AND event = %s "
                                           "ORDER BY id", (job["job_id"], event))]

    def admin_api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return requests.request(method, f"{self.url}/admin/api{path}", headers=bearer(self.admin), timeout=30,
                                **kwargs)

    def approval(self, number: int) -> dict[str, Any]:
        response = self.admin_api("GET", f"/tool-approvals/{number}")
        assert response.status_code == 200, response.text
        return response.json()

    def decide(self, number: int, decision: str, reason: str | None = None) -> dict[str, Any]:
        body = {"args_hash": self.approval(number)["args_hash"], **({"reason": reason} if reason else {})}
        response = self.admin_api("POST", f"/tool-approvals/{number}/{decision}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    def finish(self, job: dict[str, Any], text: str = "asked for approval") -> None:
        reported = self.world.report(job, output={"text": text})
        assert reported.status_code == 200 and reported.json() == {"ok": True}, reported.text

    def status(self, job: dict[str, Any]) -> dict[str, Any]:
        response = self.world.job(job["job_id"])
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def desk(server, cli, business, tmp_path, sql, app):
    return Desk(server, cli, business, tmp_path, sql, app)


def approval_number(text: str) -> int:
    match = re.search(r"编号 (\d+)", text)
    assert match, text
    return int(match.group(1))


# ============================================================================= the tools block

def test_work_item_tools_block_and_token(desk, app):
    anonymous = desk.start(subject=None)
    block = anonymous["tools"]
    assert block["invoke_url"] == f"/jobs/{anonymous['job_id']}/tools/invoke"
    assert block["tool_token"] == tool_token(anonymous["job_id"], anonymous["claim_token"], app.secret_key)
    assert re.fullmatch(r"[0-9a-f]{64}", block["tool_token"])
    assert block["max_calls"] == 5
    assert "approved_note" not in block
    # No subject: the writes (all need one) are hidden; the reads are few enough to be inline.
    assert block["mode"] == "inline" and "catalog" not in block and "defs_url" not in block
    names = [d["name"] for d in block["defs"]]
    assert names == sorted(names) and GET in names and NOTE not in names and MERGE not in names
    get = next(d for d in block["defs"] if d["name"] == GET)
    assert get == {"name": GET, "description": "Read one customer", "parameters": get["parameters"],
                   "scope": "customer.read", "risk": "low", "confirm_required": False, "confirm_when": [],
                   "readonly": True, "idempotent": True}
    assert get["parameters"]["required"] == ["customer_id"]

    # With a subject every write of the allowlist is there too (no `agent_direct` list gates a
    # job): more than 12 tools, so a catalog.
    acting = desk.start()
    block = acting["tools"]
    assert block["tool_token"] == tool_token(acting["job_id"], acting["claim_token"], app.secret_key)
    assert block["tool_token"] != anonymous["tools"]["tool_token"]
    assert block["mode"] == "catalog" and "defs" not in block
    assert block["defs_url"] == f"/jobs/{acting['job_id']}/tools/defs"
    catalog = {entry["name"]: entry for entry in block["catalog"]}
    assert len(catalog) in range(13, 40) and {NOTE, MERGE, "order_cancel", "order_import"} <= set(catalog)
    assert catalog[MERGE] == {"name": MERGE, "summary": catalog[MERGE]["summary"], "scope": "customer.write",
                              "risk": "high", "confirm_required": True, "confirm_when": []}
    assert catalog["customer_update_credit_limit"]["confirm_when"] == [
        {"param": "credit_limit", "op": ">", "value": 10000, "label": "Large credit limit"}]
    assert catalog[NOTE]["confirm_required"] is False


def test_readonly_route_and_route_without_tools(server, cli, business, tmp_path, sql, app):
    def readonly(config: dict[str, Any]) -> None:
        config["routes"][0]["permission"] = "readonly"
        config["routes"][0]["tools"]["max_calls"] = 7
    desk = Desk(server, cli, business, tmp_path, sql, app, readonly)
    job = desk.start()
    assert job["tools"]["max_calls"] == 7
    assert job["tools"]["mode"] == "inline"
    assert all(d["readonly"] for d in job["tools"]["defs"])

    def no_tools(config: dict[str, Any]) -> None:
        config["routes"][0]["tools"] = {}
    config = jobs_config(business.url)
    no_tools(config)
    apply_config(cli, tmp_path, config)
    bare = desk.start()
    assert "tools" not in bare
    before = desk.counts()
    token = tool_token(bare["job_id"], bare["claim_token"], app.secret_key)
    refused = desk.invoke(bare, GET, {"customer_id": "C-100234"}, token=token)
    assert (refused.status_code, refused.json()) == (400, {"error": tool_calls.NO_TOOLS})
    refused = desk.defs(bare, GET, token=token)
    assert (refused.status_code, refused.json()) == (400, {"error": tool_calls.NO_TOOLS})
    assert desk.counts() == before


# ============================================================================= refusals (§C.3, §C.4)

def test_refusals_write_nothing(desk, app):
    job = desk.start()
    other = desk.start()
    unknown = {"job_id": str(uuid.uuid4())}
    before = desk.counts()

    def refused(response: requests.Response, status: int, body: dict[str, Any]) -> None:
        assert (response.status_code, response.json()) == (status, body), response.text
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-store"
        assert "WWW-Authenticate" not in response.headers

    refused(desk.invoke(unknown, GET, {}, token=desk.token(job)), 404, {"error": tool_calls.JOB_NOT_FOUND})
    refused(desk.defs(unknown, GET, token=desk.token(job)), 404, {"error": tool_calls.JOB_NOT_FOUND})
    refused(desk.invoke(job, GET, {}, token=desk.token(other)), 401, {"error": tool_calls.TOKEN_INVALID})
    refused(desk.defs(job, GET, token="0" * 64), 401, {"error": tool_calls.TOKEN_INVALID})
    refused(requests.post(f"{desk.url}/jobs/{job['job_id']}/tools/invoke", json={"tool": GET}, timeout=30),
            401, {"error": tool_calls.TOKEN_INVALID})
    # Client and executor tokens never open these paths.
    refused(desk.invoke(job, GET, {}, token=desk.world.client_token), 401, {"error": tool_calls.TOKEN_INVALID})
    refused(desk.invoke(job, GET, {}, token=desk.world.executor_token), 401, {"error": tool_calls.TOKEN_INVALID})
    # A path that is not a job id is the rest of /jobs/: unauthorized, or not found for a client.
    bad = {"job_id": "not-a-job"}
    refused(desk.invoke(bad, GET, {}, token=desk.token(job)), 401, {"error": "unauthorized"})
    refused(desk.invoke(bad, GET, {}, token=desk.world.client_token), 404, {"error": "not found"})
    refused(requests.get(f"{desk.url}/jobs/{job['job_id']}/tools/invoke", headers=bearer(desk.token(job)),
                         timeout=30), 401, {"error": "unauthorized"})
    # No tool: missing, empty, a body that is no JSON or is too large (Core reads it as {}).
    refused(desk.invoke(job, json={"arguments": {}}), 400, {"error": tool_calls.TOOL_REQUIRED})
    refused(desk.invoke(job, json={"tool": ""}), 400, {"error": tool_calls.TOOL_REQUIRED})
    refused(desk.invoke(job, json=["not", "an", "object"]), 400, {"error": tool_calls.TOOL_REQUIRED})
    for raw in (b"{not json", b'{"tool": "' + b"x" * (1024 * 1024) + b'"}'):
        refused(requests.post(f"{desk.url}/jobs/{job['job_id']}/tools/invoke", data=raw,
                              headers=bearer(desk.token(job)), timeout=30), 400, {"error": tool_calls.TOOL_REQUIRED})
    refused(desk.invoke(job, "send_message", {"text": "hi"}), 400, {"error": tool_calls.NO_SEND_CHANNEL})
    refused(desk.defs(job, "no_such_tool,another"), 400, {"error": tool_calls.NO_TOOLS})
    refused(desk.defs(job, ""), 400, {"error": tool_calls.NO_TOOLS})
    assert desk.counts() == before

    # Refusals before dispatch (200, status 0) of a tool outside the allowlist or arguments that are
    # no object write nothing either.
    assert desk.ok(job, "no_such_tool", {}) == {"ok": False, "status": 0,
                                                "text": tool_calls.NOT_ALLOWED.format(tool="no_such_tool")}
    assert desk.ok(job, GET, ["C-100234"]) == {"ok": False, "status": 0,
                                               "text": tool_calls.NOT_OBJECT.format(tool=GET)}
    assert desk.counts() == before
    assert desk.business.executions() == []

    # The token dies with the dispatch: a finished job's token is expired.
    desk.finish(job)
    before = desk.counts()
    refused(desk.invoke(job, GET, {"customer_id": "C-100234"}), 401, {"error": tool_calls.TOKEN_EXPIRED})
    refused(desk.defs(job, GET), 401, {"error": tool_calls.TOKEN_EXPIRED})
    assert desk.counts() == before


def test_max_calls_counts_every_admitted_call_across_reruns(server, cli, business, tmp_path, sql, app):
    desk = Desk(server, cli, business, tmp_path, sql, app,
                lambda config: config["routes"][0]["tools"].update(max_calls=2))
    job = desk.start()
    assert job["tools"]["max_calls"] == 2
    for customer in ("C-100234", "C-100235"):
        assert desk.ok(job, GET, {"customer_id": customer})["status"] == 200
    looked = desk.defs(job, f"{GET},{NOTE},{GET}")  # a lookup is no call
    assert looked.status_code == 200
    assert [d["name"] for d in looked.json()["defs"]] == [GET, NOTE]
    assert looked.json()["defs"][0]["description"] == "Read one customer（scope:customer.read，只读）"  # noqa: RUF001
    assert desk.events(job, "tool_lookup") == [{"asked": 2, "found": [GET, NOTE]}]
    before = desk.counts()
    over = desk.invoke(job, GET, {"customer_id": "C-100236"})
    assert (over.status_code, over.json()) == (429, {"error": tool_calls.MAX_CALLS.format(n=2)})
    assert desk.counts() == before
    assert len(desk.business.executions(GET)) == 2
    # Rerun under the same id: the count goes on.
    desk.finish(job)
    rerun = desk.admin_api("POST", f"/runs/{job['job_id']}/rerun", json={})
    assert rerun.status_code == 200, rerun.text
    again = desk.claim(job["job_id"])
    over = desk.invoke(again, GET, {"customer_id": "C-100236"})
    assert (over.status_code, over.json()) == (429, {"error": tool_calls.MAX_CALLS.format(n=2)})


# ============================================================================= dispatch

def test_read_call_is_signed_for_the_job(desk, monkeypatch):
    sent: list[dict[str, str]] = []
    original = signing.headers

    def recording(*args: Any, **kwargs: Any) -> dict[str, str]:
        headers = original(*args, **kwargs)
        sent.append(headers)
        return headers

    monkeypatch.setattr(signing, "headers", recording)
    job = desk.start()
    answer = desk.ok(job, GET, {"customer_id": "C-100234"})
    assert answer["ok"] is True and answer["status"] == 200
    assert json.loads(answer["text"])["id"] == "C-100234"
    [execution] = desk.business.executions(GET)  # recorded only after the signature verified
    assert execution == {"system": "crm", "operation": GET, "job_id": job["job_id"], "idempotency_key": "",
                         "on_behalf_of": SUBJECT, "status": 200}
    [headers] = sent
    assert headers["X-Bailing-Job-Id"] == job["job_id"]
    assert headers["X-Bailing-Client"] == "ops-app"
    assert headers["X-Bailing-On-Behalf-Of"] == SUBJECT
    assert headers["X-Bailing-Tool-Scope"] == "customer.read"
    assert "X-Bailing-Idempotency-Key" not in headers  # not side-effecting: none, as Core sends it
    [(session_id, owner, status)] = desk.sql("SELECT session_id, job_id, status FROM bz_tool_invocations")
    assert (session_id, str(owner), status) == (None, job["job_id"], "executed")
    assert desk.events(job, "tool_call") == [{"tool": GET, "scope": "customer.read"}]
    assert desk.events(job, "tool_result") == [{"tool": GET, "status": 200, "ok": True}]
    # A business refusal is the business status, not a hub error.
    missing = desk.ok(job, GET, {"customer_id": "C-999999"})
    assert missing["ok"] is False and missing["status"] == 404


def test_side_effecting_call_runs_once_and_replays(desk):
    job = desk.start()
    arguments = {"customer_id": "C-100234", "body": "Prefers e-mail ✉."}
    first = desk.ok(job, NOTE, arguments)
    assert first["ok"] is True and first["status"] == 201
    key = sha256_json({"args_hash": sha256_json(arguments), "job_id": job["job_id"], "on_behalf_of": SUBJECT,
                       "tool": NOTE})
    [execution] = desk.business.executions(NOTE)
    assert (execution["job_id"], execution["idempotency_key"], execution["status"]) == (job["job_id"], key, 201)
    before = desk.counts()
    again = desk.ok(job, NOTE, arguments)
    assert again == first
    assert len(desk.business.executions(NOTE)) == 1
    assert desk.events(job, "tool_call_deduped") == [{"tool": NOTE, "status": 201}]
    after = desk.counts()
    assert after == {**before, "bz_job_events": before["bz_job_events"] + 1}  # the deduped event only
    # Other arguments are another call; while it is in flight, the same call is refused, not sent twice.
    pinned = {**arguments, "pinned": True}
    desk.business.fault(NOTE, "delay", delay_ms=1500)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(desk.ok, job, NOTE, pinned)
        deadline = time.monotonic() + 10
        while not desk.sql("SELECT 1 FROM bz_tool_journal WHERE state = 'dispatching'"):
            assert time.monotonic() < deadline, "the first call never started"
            time.sleep(0.02)
        assert desk.ok(job, NOTE, pinned) == {"ok": False, "status": 0,
                                              "text": tool_calls.IN_FLIGHT.format(tool=NOTE)}
        assert slow.result()["status"] == 201
    assert len(desk.business.executions(NOTE)) == 2
    # Invalid arguments: refused before dispatch, the refusal kept on the ledger.
    invalid = desk.ok(job, NOTE, {"customer_id": "C-100234"})
    assert invalid == {"ok": False, "status": 0,
                       "text": tool_calls.INVALID.format(tool=NOTE, where="arguments: required")}
    assert desk.sql("SELECT count(*) FROM bz_tool_invocations WHERE status = 'rejected_before_dispatch'")[0][0] == 1


def test_unknown_outcome_freezes_the_job(desk, monkeypatch):
    job = desk.start()
    desk.business.fault(NOTE, "drop_response")
    arguments = {"customer_id": "C-100234", "body": "Called twice?"}
    answer = desk.ok(job, NOTE, arguments)
    key = sha256_json({"args_hash": sha256_json(arguments), "job_id": job["job_id"], "on_behalf_of": SUBJECT,
                       "tool": NOTE})
    assert answer["ok"] is False and answer["governance_state"] == "reconciliation_required"
    assert answer["auto_retry_allowed"] is False and answer["tool_execution"]["idempotency_key"] == key
    assert len(desk.business.executions(NOTE)) == 1
    before = desk.counts()
    frozen = desk.ok(job, GET, {"customer_id": "C-100234"})  # any call, even a read
    assert frozen == {"ok": False, "text": tool_calls.RECONCILE.format(tool=NOTE, key=key),
                      "governance_state": "reconciliation_required", "auto_retry_allowed": False,
                      "tool_execution": {"state": "uncertain", "tool": NOTE, "scope": "customer.write",
                                         "idempotency_key": key, "reason": frozen["tool_execution"]["reason"],
                                         "message": tool_calls.RECONCILE.format(tool=NOTE, key=key)}}
    assert desk.counts() == before and desk.business.executions(GET) == []

    # The journal's storage failing: 503, nothing sent.
    def failing(*_args: Any) -> None:
        raise OperationalError("SELECT", {}, Exception("the journal is gone"))

    monkeypatch.setattr(tool_calls, "_frozen", failing)
    down = desk.invoke(job, GET, {"customer_id": "C-100234"})
    assert down.status_code == 503
    assert down.json() == {"ok": False, "error": "execution_journal_unavailable",
                           "text": tool_calls.JOURNAL_DOWN.format(reason="OperationalError"),
                           "auto_retry_allowed": False}
    assert desk.counts() == before


def test_a_read_whose_answer_was_lost_is_answered_as_unknown_and_freezes_nothing(desk):
    job = desk.start()
    desk.business.fault(GET, "drop_response")  # once
    answer = desk.ok(job, GET, {"customer_id": "C-100234"})
    assert (answer["ok"], answer["status"]) == (False, 0)
    assert answer["text"].startswith(tool_calls.UNKNOWN_READ.split("（")[0].format(tool=GET))  # noqa: RUF001
    assert "governance_state" not in answer
    assert desk.ok(job, GET, {"customer_id": "C-100234"})["status"] == 200  # a read freezes nothing


def test_rate_limit_is_status_429(server, cli, business, tmp_path, sql, app):
    desk = Desk(server, cli, business, tmp_path, sql, app,
                lambda config: config["tool_providers"][0].update(rate_limit_per_min=1))
    job = desk.start()
    assert desk.ok(job, GET, {"customer_id": "C-100234"})["status"] == 200
    limited = desk.ok(job, GET, {"customer_id": "C-100235"})
    assert limited["ok"] is False and limited["status"] == 429
    assert limited["text"].startswith(f"工具 {GET} 触发限流")
    assert len(desk.business.executions(GET)) == 1
    assert len(desk.events(job, "tool_call")) == 1  # a limited call is no call (max_calls)
    assert desk.sql("SELECT status, reason FROM bz_tool_invocations ORDER BY created_at") == [
        ("executed", None), ("rejected_before_dispatch", "rate_limited")]
    assert desk.sql("SELECT count(*) FROM bz_tool_deferred_calls")[0][0] == 0  # a job's brain calls again


# ============================================================================= approvals (§C.7)

def test_approval_of_a_finished_job_reruns_it(desk, app):
    job = desk.start()
    asked = desk.ok(job, MERGE, MERGE_ARGS)
    number = approval_number(asked["text"])
    assert asked == {"ok": False, "status": 0, "text": tool_calls.ASKED.format(tool=MERGE, id=number)}
    assert desk.business.executions() == []
    assert desk.events(job, "tool_approval_pending") == [{"tool": MERGE, "approval_id": number, "risk": "high"}]
    listed = desk.admin_api("GET", "/tool-approvals", params={"status": "pending"}).json()["items"]
    [item] = [i for i in listed if i["approval_id"] == number]
    request_id = desk.status(job)["request_id"]
    assert (item["job_id"], item["request_id"], item["tool"], item["status"]) == (
        job["job_id"], request_id, MERGE, "pending")
    assert item["requester"] == {"session_id": None, "job_id": job["job_id"], "client_app_id": "ops-app",
                                 "principal": None, "on_behalf_of": SUBJECT}
    # The same call again: the pending approval, not a new one.
    before = desk.counts()
    assert desk.ok(job, MERGE, MERGE_ARGS) == {"ok": False, "status": 0,
                                               "text": tool_calls.PENDING.format(id=number)}
    assert desk.counts() == before

    desk.finish(job)
    assert desk.invoke(job, MERGE, MERGE_ARGS).status_code == 401  # the token died with the dispatch
    decided = desk.decide(number, "approve")
    assert decided["rerun"] is True and decided["status"] == "approved"
    record = desk.status(job)
    assert (record["status"], record["attempts"], record["result"]) == ("queued", 0, {"text": "asked for approval"})
    assert [e["approval_id"] for e in desk.events(job, "rerun")] == [number]
    assert desk.events(job, "tool_approved") == [{"approval_id": number, "tool": MERGE}]

    again = desk.claim(job["job_id"])
    note = again["tools"]["approved_note"]
    assert f"- {MERGE} 参数 {json.dumps(MERGE_ARGS, sort_keys=True, separators=(',', ':'))}（审批单 {number}）" in note  # noqa: RUF001
    assert again["tools"]["tool_token"] == tool_token(job["job_id"], again["claim_token"], app.secret_key)
    stale = desk.invoke(job, GET, {"customer_id": "C-100234"})  # the first claim's token
    assert (stale.status_code, stale.json()) == (401, {"error": tool_calls.TOKEN_INVALID})
    # Other arguments: told to use the approved ones, nothing sent.
    before = desk.counts()
    drifted = desk.ok(again, MERGE, {**MERGE_ARGS, "reason": "Same VAT number, other words."})
    assert drifted["ok"] is False and drifted["status"] == 0
    assert drifted["text"].startswith(f"该工具已有人工批准的调用（审批单 {number}）")  # noqa: RUF001
    assert desk.counts() == before
    # The approved call, once.
    done = desk.ok(again, MERGE, MERGE_ARGS)
    assert done["ok"] is True and done["status"] == 200
    [execution] = desk.business.executions(MERGE)
    assert execution["job_id"] == job["job_id"]
    assert desk.approval(number)["consumed_at"] is not None
    assert desk.events(again, "tool_call")[-1] == {"tool": MERGE, "scope": "customer.write", "approval_id": number}
    assert desk.ok(again, MERGE, MERGE_ARGS) == done  # replayed, not sent
    assert len(desk.business.executions(MERGE)) == 1


def test_approval_while_dispatched_and_denial(desk):
    job = desk.start()
    number = approval_number(desk.ok(job, MERGE, MERGE_ARGS)["text"])
    decided = desk.decide(number, "approve")
    assert decided["rerun"] is False
    assert desk.status(job)["status"] == "dispatched"  # nothing requeued: the brain calls again
    done = desk.ok(job, MERGE, MERGE_ARGS)
    assert done["ok"] is True and len(desk.business.executions(MERGE)) == 1

    # `approval.when`: a rule that matches asks for approval, the same tool below it runs.
    small = {"sku": "ABC-1001", "warehouse_id": "WH-BER", "quantity_delta": -5, "reason": "damage"}
    assert desk.ok(job, "inventory_adjust", small)["ok"] is True
    large = {**small, "quantity_delta": -500}
    assert desk.ok(job, "inventory_adjust", large)["text"].startswith("工具 inventory_adjust 属于需人工审批的操作")
    assert len(desk.business.executions("inventory_adjust")) == 1

    other = {**MERGE_ARGS, "source_customer_id": "C-100236"}
    denied_number = approval_number(desk.ok(job, MERGE, other)["text"])
    # The console's queue and page show the job where an agent's show its session.
    browser = signed_in(desk.url, "ana")
    queue = browser.get("/console/approvals/")
    assert queue.status_code == 200 and f"#{denied_number}" in queue.text and "ops-app" in queue.text
    page = browser.get(f"/console/approvals/{denied_number}")
    assert page.status_code == 200
    assert f"<dt>Job</dt><dd><code class=\"small\">{job['job_id']}</code>" in page.text
    assert "Agent session" not in page.text
    desk.finish(job)
    decided = desk.decide(denied_number, "deny", reason="Not the same customer.")
    assert decided["rerun"] is False and decided["status"] == "denied"
    assert desk.status(job)["status"] == "done"  # a denial reruns nothing
    assert desk.events(job, "tool_denied") == [{"approval_id": denied_number, "tool": MERGE}]
    assert len(desk.business.executions(MERGE)) == 1


def test_business_decision_reruns_a_finished_job(desk):
    job = desk.start()
    number = approval_number(desk.ok(job, MERGE, MERGE_ARGS)["text"])
    desk.finish(job)
    item = desk.approval(number)
    # The business system's approval request names the job as Core does, and so must its decision.
    with desk.app.extensions["bailing"].db.session() as db:
        sent = approval_request.payload(db, uuid.UUID(item["id"]))
    match = {"approval_id": number, "job_id": job["job_id"], "request_id": item["request_id"],
             "args_hash": item["args_hash"]}
    assert sent["decision_contract"]["match"] == match
    assert (sent["job_id"], sent["subject"], sent["intent"]["source"]) == (job["job_id"], SUBJECT, "ops-app")
    assert sent["metadata"]["job_id"] == job["job_id"]
    body = {"kind": "tool_approval_decision", "schema_version": "bailing.approval-decision.v1",
            "approval_id": number, "job_id": job["job_id"], "request_id": item["request_id"],
            "args_hash": item["args_hash"], "decision": "approved", "decision_id": f"biz-{number}-1",
            "approver": "erp-user-9"}
    wrong = requests.post(f"{desk.url}/approvals/{number}/decision", json={**body, "job_id": str(uuid.uuid4())},
                          headers=bearer(desk.world.client_token), timeout=30)
    assert wrong.status_code == 400 and desk.status(job)["status"] == "done"
    response = requests.post(f"{desk.url}/approvals/{number}/decision", json=body,
                             headers=bearer(desk.world.client_token), timeout=30)
    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True, "id": number, "status": "approved", "decision_id": f"biz-{number}-1",
                               "idempotent": False, "rerun": True}
    assert desk.status(job)["status"] == "queued"
    assert desk.approval(number)["decided_credential"] == "client_token:ops-app"
