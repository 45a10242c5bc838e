"""The admin API's reads of Client API jobs (CLIENT_API_AND_EXECUTOR.md §F): Core's list, record,
audit, trace and trace search under /admin/api/runs, and the rerun of a finished job; with their
refusals (permissions, unknown jobs, a rerun in flight), over real HTTP on a live server. Jobs are
written by SQL (tests/jobs_world.py) in the states an executor would leave them."""
from __future__ import annotations

import uuid

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from admin_app.openapi import document

from tests.helpers import admin_token, assert_error, assert_ok, bearer, row_counts
from tests.jobs_world import JobsWorld, seed_call, seed_callback, seed_event, seed_job

LIST_KEYS = {"job_id", "request_id", "status", "target", "route", "profile", "project", "source", "client_app_id",
             "session_id", "input_preview", "visitor_uid", "thread_id", "severity", "summary", "created_at",
             "updated_at"}
EVENT_KEYS = {"ts", "event", "stage", "severity", "title", "summary", "detail"}
SUMMARY_KEYS = {"job_id", "request_id", "status", "stage_count", "event_count", "error_count", "warning_count",
                "tool_calls", "tool_results", "approvals", "deliveries", "llm_requests", "perceptions",
                "knowledge_events", "message_count", "duration_ms"}
MATCH_KEYS = {"job_id", "request_id", "status", "target", "profile", "project", "source", "client_app_id",
              "thread_id", "session_id", "input_preview", "route_key", "route_name", "principal", "created_at",
              "updated_at"}
WRITES = ("bz_jobs", "bz_job_events", "bz_access_log")
DOC = document("/admin/api")


def conforms(body, schema: dict) -> None:
    """`body` is what the published document says the operation answers."""
    Draft202012Validator({**schema, "components": DOC["components"]}, format_checker=FormatChecker()).validate(body)


def schema_of(path: str, method: str = "get") -> dict:
    return DOC["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]


@pytest.fixture
def tokens(cli):
    return {role: bearer(admin_token(cli, f"{role}-1", role)) for role in ("admin", "support", "approver")}


def reads_of(sql, job_id: str) -> int:
    return sql("SELECT count(*) FROM bz_access_log WHERE action = 'job_trace_view' AND target = %s", (job_id,))[0][0]


# ================================================================ the list


def test_the_list_is_cores_rows_newest_first_paged_by_limit_and_offset(server, sql, tokens):
    old = seed_job(sql, status="done", created_at="2026-01-01T10:00:00Z", input_text="x" * 300,
                   metadata={"visitor_uid": "v-7", "thread_id": 42},
                   result={"text": "t" * 300, "report": {"severity": "high", "summary": "Refund approved"}})
    middle = seed_job(sql, status="error", created_at="2026-01-02T10:00:00Z", result={"text": "short answer"},
                      error="the executor failed")
    new = seed_job(sql, status="queued", created_at="2026-01-03T10:00:00Z", result=["not", "an", "object"])

    rows = assert_ok(server.get("/admin/api/runs", headers=tokens["support"]))
    assert [r["job_id"] for r in rows] == [new, middle, old]
    conforms(rows, schema_of("/runs"))
    assert all(set(r) == LIST_KEYS for r in rows)
    first = rows[2]
    assert (first["input_preview"], first["visitor_uid"], first["thread_id"]) == ("x" * 200, "v-7", 42)
    assert (first["severity"], first["summary"]) == ("high", "Refund approved")
    assert (first["profile"], first["project"], first["source"], first["client_app_id"]) == (
        "default", "", "ops-app", "ops-app")
    assert first["created_at"] == "2026-01-01T10:00:00.000Z"
    assert (rows[1]["summary"], rows[1]["severity"]) == ("short answer", None)
    assert (rows[0]["summary"], rows[0]["visitor_uid"], rows[0]["thread_id"]) == (None, None, None)

    paged = assert_ok(server.get("/admin/api/runs", params={"limit": 1, "offset": 1}, headers=tokens["support"]))
    assert [r["job_id"] for r in paged] == [middle]
    # Core clamps paging numbers into range; anything not a plain number is refused.
    assert len(assert_ok(server.get("/admin/api/runs", params={"limit": 0}, headers=tokens["support"]))) == 1
    assert assert_ok(server.get("/admin/api/runs", params={"offset": 99}, headers=tokens["support"])) == []
    for params in ({"limit": "ten"}, {"offset": "-1"}, {"order": "asc"}):
        assert_error(server.get("/admin/api/runs", params=params, headers=tokens["support"]), 400, "invalid_request")


def test_the_job_reads_need_runs_read_and_record_nothing_when_refused(server, sql, tokens):
    job_id = seed_job(sql, status="done")
    before = row_counts(sql, *WRITES)
    for path in ("/admin/api/runs", f"/admin/api/runs/{job_id}", f"/admin/api/runs/{job_id}/audit",
                 f"/admin/api/runs/{job_id}/trace", f"/admin/api/runs/trace?job_id={job_id}"):
        assert_error(server.get(path), 401, "unauthorized")
        assert_error(server.get(path, headers=tokens["approver"]), 403, "forbidden")
    assert row_counts(sql, *WRITES) == before


# ================================================================ one job


def test_a_job_record_is_the_full_record_with_its_raw_input_and_the_read_is_recorded(server, sql, tokens):
    job_id = seed_job(sql, status="dispatched", executor_id="runner-1", input_text="Refund order 7",
                      metadata={"order": 7}, principal={"id": "user-42", "tenant": "t-1"},
                      callback_url="https://receiver.example/hook")
    record = assert_ok(server.get(f"/admin/api/runs/{job_id}", headers=tokens["support"]))
    assert (record["job_id"], record["status"], record["raw_input"], record["input"]) == (
        job_id, "dispatched", "Refund order 7", "Refund order 7")
    assert (record["executor_id"], record["executor_token"], record["has_claim_token"]) == (
        "runner-1", "desk-runner", True)
    assert record["metadata"] == {"order": 7} and record["principal"] == {"id": "user-42", "tenant": "t-1"}
    assert record["dispatch"] == {"route_key": "desk", "is_continue": False, "retry": {"max": 0}}
    assert "claim_token" not in record  # the live claim token is never shown
    conforms(record, schema_of("/runs/{job_id}"))
    [(claim,)] = sql("SELECT claim_token::text FROM bz_jobs WHERE id = %s", (job_id,))
    assert claim not in server.get(f"/admin/api/runs/{job_id}", headers=tokens["support"]).text
    assert reads_of(sql, job_id) == 2


@pytest.mark.parametrize("suffix", ["", "/audit", "/trace"])
def test_an_unknown_job_is_404_not_found(server, sql, tokens, suffix):
    seed_job(sql)
    before = row_counts(sql, *WRITES)
    for ref in (str(uuid.uuid4()), "not-a-job", "00000000-0000-0000-0000-000000000000"):
        assert_error(server.get(f"/admin/api/runs/{ref}{suffix}", headers=tokens["support"]), 404, "not_found")
    assert row_counts(sql, *WRITES) == before


def timeline_job(sql) -> tuple[str, dict, int]:
    """A finished job with events, a tool call that needed an approval, and a callback retried."""
    job_id = seed_job(sql, status="done", created_at="2026-02-01T09:00:00Z", result={"text": "ok"},
                      usage={"duration_ms": 4200, "tokens": 10}, principal={"id": "user-42"})
    seed_event(sql, job_id, "received", at="2026-02-01T09:00:00Z")
    seed_event(sql, job_id, "dispatched", "runner-1", {"executor_id": "runner-1"}, at="2026-02-01T09:00:01Z")
    call = seed_call(sql, job_id, "customer_update_credit_limit", "awaiting_approval", approval="approved",
                     at="2026-02-01T09:00:02Z")
    seed_event(sql, job_id, "finished", "runner-1", {"status": "done", "attempts": 0}, at="2026-02-01T09:00:05Z")
    callback = seed_callback(sql, job_id, state="delivered", attempts=((503, "HTTP 503"), (200, None)),
                             at="2026-02-01T09:00:06Z")
    seed_event(sql, job_id, "callback", detail={"callback_id": callback, "url": "https://receiver.example/…",
                                               "ok": False, "attempt": 1, "status": 503}, at="2026-02-01T09:00:07Z")
    seed_event(sql, job_id, "callback", detail={"callback_id": callback, "url": "https://receiver.example/…",
                                               "ok": True, "attempt": 2, "status": 200}, at="2026-02-01T09:00:08Z")
    return job_id, call, callback


def test_the_trace_of_a_job_is_cores_payload_with_its_events_in_order(server, sql, tokens):
    job_id, call, _ = timeline_job(sql)
    body = assert_ok(server.get(f"/admin/api/runs/{job_id}/trace", headers=tokens["support"]))
    assert set(body) == {"job", "trace", "approvals", "messages", "lookup", "debug_bundle", "debug_report"}
    conforms(body, schema_of("/runs/{job_id}/trace"))
    assert body["job"]["job_id"] == job_id and body["job"]["raw_input"] == "Look up customer C-1001"
    events = body["trace"]["events"]
    assert all(EVENT_KEYS <= set(e) for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    names = [e["event"] for e in events]
    assert names[:2] == ["received", "dispatched"] and names[-3:] == ["finished", "callback", "callback"]
    # The tool call, rebuilt from its rows (no job event names it), with its approval.
    assert "agent_tool_invocation_created" in names and "tool_approval_pending" in names
    assert "tool_approved" in names
    failed = next(e for e in events if e["event"] == "callback" and e["detail"]["attempt"] == 1)
    assert failed["severity"] == "warning" and failed["stage"] == "delivery"
    summary = body["trace"]["summary"]
    assert set(summary) == SUMMARY_KEYS
    assert (summary["status"], summary["approvals"], summary["deliveries"], summary["duration_ms"]) == (
        "done", 1, 2, 4200)
    assert summary["event_count"] == len(events) == sum(summary["stage_count"].values())
    assert summary["warning_count"] == sum(e["severity"] == "warning" for e in events) and summary["warning_count"] >= 2
    [approval] = body["approvals"]
    assert (approval["id"], approval["status"], approval["invocation_id"]) == (
        call["approval_number"], "approved", call["invocation_id"])
    assert body["messages"] == []
    assert body["lookup"] == {"job_id": job_id, "request_id": f"req-{job_id}", "client_app_id": "ops-app",
                              "thread_id": body["job"]["thread_key"], "route_key": "desk",
                              "principal": {"id": "user-42"}}
    assert reads_of(sql, job_id) == 1

    audit = assert_ok(server.get(f"/admin/api/runs/{job_id}/audit", headers=tokens["support"]))
    assert [set(row) for row in audit] == [EVENT_KEYS] * len(events)
    assert [row["event"] for row in audit] == names
    conforms(audit, schema_of("/runs/{job_id}/audit"))


def test_the_tool_events_the_job_recorded_stand_for_their_calls(server, sql, tokens):
    """The job's own tool events (as the tool proxy records them: the tool, the approval's number)
    are its audit rows; a call none of them is about is rebuilt from its rows."""
    job_id = seed_job(sql, status="done")
    read = seed_call(sql, job_id, "customer_get", "executed", at="2026-03-01T10:00:00Z")
    write = seed_call(sql, job_id, "customer_update_credit_limit", "awaiting_approval", approval="pending",
                      at="2026-03-01T10:00:01Z")
    seed_call(sql, job_id, "order_cancel", "rejected_before_dispatch", at="2026-03-01T10:00:02Z")
    seed_event(sql, job_id, "tool_call", "tool-proxy", {"tool": "customer_get", "scope": "crm.customers"},
               at="2026-03-01T10:00:00Z")
    seed_event(sql, job_id, "tool_result", "tool-proxy", {"tool": "customer_get", "status": 200, "ok": True},
               at="2026-03-01T10:00:00.5Z")
    seed_event(sql, job_id, "tool_approval_pending", "tool-proxy",
               {"tool": "customer_update_credit_limit", "approval_id": write["approval_number"], "risk": "high"},
               at="2026-03-01T10:00:01Z")
    body = assert_ok(server.get(f"/admin/api/runs/{job_id}/trace", headers=tokens["support"]))
    events = body["trace"]["events"]
    assert [e["event"] for e in events if e["source"] == "job"] == ["tool_call", "tool_result",
                                                                    "tool_approval_pending"]
    rebuilt = {e["tool_job_id"] for e in events if e["source"] == "hub_governance"}
    [(refused,)] = sql("SELECT id::text FROM bz_tool_invocations WHERE tool = 'order_cancel'")
    assert rebuilt == {refused} and read["call_id"] not in rebuilt
    assert body["trace"]["summary"]["tool_calls"] == 1 and body["trace"]["summary"]["approvals"] == 1


# ================================================================ the trace search


def test_the_trace_search_finds_jobs_by_request_client_principal_and_thread(server, sql, tokens):
    one = seed_job(sql, request_id="order-7", principal={"id": "user-1"}, thread_key="desk:conv-1")
    two = seed_job(sql, app="crm-app", principal={"id": "user-1"}, thread_key="desk:conv-1")
    three = seed_job(sql, app="crm-app", principal={"id": "user-2"})

    def search(**params):
        return server.get("/admin/api/runs/trace", params=params, headers=tokens["support"])

    by_request = assert_ok(search(request_id="order-7"))  # one match: its trace and the match
    assert by_request["job"]["job_id"] == one and [m["job_id"] for m in by_request["matches"]] == [one]
    assert set(by_request["matches"][0]) == MATCH_KEYS
    conforms(by_request, schema_of("/runs/trace"))
    assert by_request["matches"][0]["route_name"] is None  # no such route configured
    listed = assert_ok(search(request_id="order-7", list="1"))
    assert listed == {"matches": by_request["matches"], "count": 1}
    clients = assert_ok(search(client_id="crm-app"))
    assert (clients["count"], {m["job_id"] for m in clients["matches"]}) == (2, {two, three})
    conforms(clients, schema_of("/runs/trace"))
    assert assert_ok(search(client_app_id="crm-app"))["count"] == 2
    assert {m["job_id"] for m in assert_ok(search(principal_id="user-1"))["matches"]} == {one, two}
    assert assert_ok(search(principal_id="user-1", limit="1", list="1"))["count"] == 1
    assert {m["job_id"] for m in assert_ok(search(thread_id="desk:conv-1"))["matches"]} == {one, two}
    assert assert_ok(search(job_id=three))["job"]["job_id"] == three
    assert reads_of(sql, one) == 1 and reads_of(sql, three) == 1

    before = row_counts(sql, *WRITES)
    assert_error(search(request_id="nobody"), 404, "not_found")
    assert assert_ok(search(request_id="nobody", list="1")) == {"matches": [], "count": 0}
    assert_error(search(job_id=str(uuid.uuid4())), 404, "not_found")
    for params in ({}, {"request_id": "order-7", "client_id": "crm-app"}, {"request_id": " "},
                   {"request_id": "x" * 513}, {"client_id": "crm-app", "list": "yes"}, {"session_id": "s"},
                   {"principal_id": "user\x00-1"}):
        assert_error(search(**params), 400, "invalid_request")
    assert row_counts(sql, *WRITES) == before


# ================================================================ rerun


def test_a_rerun_requeues_a_finished_job_under_the_same_id(server, sql, tokens):
    job_id = seed_job(sql, status="error", executor_id="runner-1", attempts=2, result={"text": "half done"},
                      usage={"tokens": 5}, error="the executor crashed")
    [(session,)] = sql("SELECT session_id FROM bz_jobs WHERE id = %s", (job_id,))
    body = assert_ok(server.post(f"/admin/api/runs/{job_id}/rerun", headers=tokens["admin"]))
    assert body == {"ok": True, "job_id": job_id, "status": "queued"}
    conforms(body, schema_of("/runs/{job_id}/rerun", "post"))
    row = sql("SELECT status, attempts, error, executor_id, executor_token, finished_at, result, usage, session_id, "
              "input FROM bz_jobs WHERE id = %s", (job_id,))[0]
    assert row == ("queued", 0, None, None, None, None, {"text": "half done"}, {"tokens": 5}, session,
                   "Look up customer C-1001")
    assert sql("SELECT event, actor, detail FROM bz_job_events WHERE job_id = %s", (job_id,)) == [
        ("rerun", "admin-1", {"from": "error", "via": "admin_api"})]
    record = assert_ok(server.get(f"/admin/api/runs/{job_id}", headers=tokens["support"]))
    assert record["status"] == "queued" and "error" not in record and record["result"] == {"text": "half done"}


@pytest.mark.parametrize("status", ["queued", "dispatched"])
def test_a_rerun_is_refused_while_the_job_is_in_flight_and_changes_nothing(server, sql, tokens, status):
    job_id = seed_job(sql, status=status, executor_id="runner-1" if status == "dispatched" else None)
    before = sql("SELECT * FROM bz_jobs WHERE id = %s", (job_id,))
    counts = row_counts(sql, *WRITES)
    body = assert_error(server.post(f"/admin/api/runs/{job_id}/rerun", headers=tokens["admin"]), 400,
                        "invalid_request")
    assert body["message"].startswith(f"The job is {status}: only a finished job")
    assert sql("SELECT * FROM bz_jobs WHERE id = %s", (job_id,)) == before
    assert row_counts(sql, *WRITES) == counts


def test_a_rerun_needs_runs_write_and_a_known_job(server, sql, tokens):
    job_id = seed_job(sql, status="done")
    counts = row_counts(sql, *WRITES)
    assert_error(server.post(f"/admin/api/runs/{job_id}/rerun"), 401, "unauthorized")
    assert_error(server.post(f"/admin/api/runs/{job_id}/rerun", headers=tokens["support"]), 403, "forbidden")
    assert_error(server.post(f"/admin/api/runs/{uuid.uuid4()}/rerun", headers=tokens["admin"]), 404, "not_found")
    assert_error(server.post("/admin/api/runs/nope/rerun", headers=tokens["admin"]), 404, "not_found")
    assert row_counts(sql, *WRITES) == counts
    assert sql("SELECT status FROM bz_jobs WHERE id = %s", (job_id,)) == [("done",)]


def test_a_job_made_through_the_client_api_is_read_and_rerun_end_to_end(server, cli, business, tmp_path, sql, tokens):
    world = JobsWorld(server, cli, business, tmp_path)
    submitted = world.submit("Look up <b>C-1001</b>")
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["job_id"]
    work = world.claim().json()["job"]
    assert work["job_id"] == job_id and world.report(work).status_code == 200

    [row] = assert_ok(server.get("/admin/api/runs", headers=tokens["support"]))
    assert (row["job_id"], row["status"], row["summary"], row["input_preview"]) == (
        job_id, "done", "done", "Look up <b>C-1001</b>")
    trace = assert_ok(server.get(f"/admin/api/runs/{job_id}/trace", headers=tokens["support"]))
    conforms(trace, schema_of("/runs/{job_id}/trace"))
    assert [e["event"] for e in trace["trace"]["events"]] == ["received", "awaiting_executor", "dispatched",
                                                              "finished"]
    assert trace["trace"]["events"][-1]["summary"] == "status done · attempts 0 · by runner-1"
    assert trace["job"]["dispatch"]["route_name"] == "Operations desk"

    assert assert_ok(server.post(f"/admin/api/runs/{job_id}/rerun", headers=tokens["admin"]))["status"] == "queued"
    again = world.claim().json()["job"]  # claimable again, under the same id, with a new claim
    assert again["job_id"] == job_id and again["claim_token"] != work["claim_token"]
