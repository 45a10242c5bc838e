"""Core's executor protocol (CLIENT_API_AND_EXECUTOR.md §B, §E): the channel gate, claims (targets,
pause, long-poll, FIFO, per-thread order, run_after, concurrent claimers), the work item,
heartbeats and leases, results (every row of §B.7), retries, the reaper, and the executors' admin
API. Real server, real PostgreSQL; jobs come from POST /run (tests/jobs_world.py)."""
from __future__ import annotations

import json
import socket
import statistics
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from admin_app.jobs import reaper
from admin_app.jobs.claims import WAIT_MAX_MS, wait_ms_of
from admin_app.jobs.dispatch_status import dispatch_status
from tests.helpers import admin_token, bearer, row_count
from tests.jobs_world import TARGET, JobsWorld


@pytest.fixture
def jw(server, cli, business, tmp_path) -> JobsWorld:
    return JobsWorld(server, cli, business, tmp_path)


def submitted(jw: JobsWorld, **fields: Any) -> str:
    response = jw.submit(**fields)
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def claimed(jw: JobsWorld, **fields: Any) -> dict[str, Any]:
    response = jw.claim(**fields)
    assert response.status_code == 200, response.text
    job = response.json()["job"]
    assert job is not None, response.text
    return dict(job)


def job_row(sql, job_id: str) -> dict[str, Any]:
    rows = sql("SELECT status, attempts, executor_id, executor_token, claim_token::text, lease_until, session_id, "
               "result, usage, error, finished_at FROM bz_jobs WHERE id = %s", (job_id,))
    keys = ("status", "attempts", "executor_id", "executor_token", "claim_token", "lease_until", "session_id",
            "result", "usage", "error", "finished_at")
    return dict(zip(keys, rows[0], strict=True))


def job_events(sql, job_id: str) -> list[str]:
    return [r[0] for r in sql("SELECT event FROM bz_job_events WHERE job_id = %s ORDER BY id", (job_id,))]


def post(jw: JobsWorld, path: str, token: str | None, body: Any = None, data: bytes | None = None,
         method: str = "POST") -> requests.Response:
    headers = bearer(token) if token else {}
    if data is None and body is not None:
        data = json.dumps(body).encode()
    return requests.request(method, f"{jw.url}{path}", data=data, headers=headers, timeout=30)


# ---------------------------------------------------------------- the gate (§B.3)

ENDPOINTS = ("/executor/claim", "/executor/heartbeat", "/executor/result")


def test_the_gate_answers_401_for_unknown_tokens_and_403_for_client_tokens_and_other_methods(jw, sql, cli):
    admin = admin_token(cli, "ada", "admin")
    for path in ENDPOINTS:
        for token in (None, "f" * 32, "short", admin):
            response = post(jw, path, token, {"executor_id": "x", "targets": [TARGET]})
            assert (response.status_code, response.json()) == (401, {"error": "unauthorized"}), (path, token)
            assert "WWW-Authenticate" not in response.headers
        response = post(jw, path, jw.client_token, {"executor_id": "x", "targets": [TARGET]})
        assert response.status_code == 403 and set(response.json()) == {"error"}
        for method in ("GET", "PUT", "DELETE"):
            response = post(jw, path, jw.executor_token, method=method)
            assert response.status_code == 403, (path, method)
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-store"
    response = post(jw, "/executor/elsewhere", jw.executor_token, {})
    assert (response.status_code, response.json()) == (404, {"error": "not found"})
    assert row_count(sql, "bz_executors") == 0
    assert sql("SELECT last_seen_at FROM bz_executor_tokens") == [(None,)]


def test_the_token_may_come_in_the_query(jw):
    response = requests.post(f"{jw.url}/executor/heartbeat?token={jw.executor_token}",
                             json={"executor_id": "q", "targets": [TARGET]}, timeout=30)
    assert (response.status_code, response.json()) == (200, {"ok": True})


def test_bodies_over_1_mib_are_413_and_malformed_ones_400(jw, sql):
    big = b'{"executor_id": "' + b"x" * (1024 * 1024) + b'"}'
    for path in ENDPOINTS:
        response = post(jw, path, jw.executor_token, data=big)
        assert (response.status_code, response.json()) == (413, {"error": "payload too large", "max_bytes": 1048576})
        for bad in (b"{nope", b"[1, 2]", b'{"a": 1, "a": 2}', b'{"executor_id": "a\\u0000"}'):
            response = post(jw, path, jw.executor_token, data=bad)
            assert response.status_code == 400 and set(response.json()) == {"error"}, (path, bad)
    assert row_count(sql, "bz_executors") == 0


def test_a_revoked_token_is_refused_at_once(jw, cli):
    assert jw.claim().status_code == 200
    code, _, err = cli("executors", "token", "revoke", "desk-runner")
    assert code == 0, err
    assert jw.claim().status_code == 401


# ---------------------------------------------------------------- claim (§B.4, §B.5)

def test_targets_none_registered_is_400_none_allowed_is_403(jw, sql):
    response = jw.claim(targets=["nowhere", "elsewhere"])
    assert response.status_code == 400 and set(response.json()) == {"error"}
    response = jw.claim(targets="desk-worker")  # type: ignore[arg-type]
    assert response.status_code == 400
    other = jw.issue_executor_token("other-runner", ["other-worker"])
    response = jw.claim(token=other, targets=[TARGET, "nowhere"])
    assert response.status_code == 403
    assert response.json()["blocked_targets"] == [TARGET] and TARGET in response.json()["error"]
    assert row_count(sql, "bz_executors") == 0


def test_the_work_item_has_cores_fields(jw, sql):
    job_id = submitted(jw, input_text="Look up customer C-1001", metadata={"user": "u-1"})
    response = jw.claim(capabilities={"runtime": "openclaw", "labels": ["openclaw"]})
    assert response.status_code == 200
    job = response.json()["job"]
    assert set(job) >= {"job_id", "request_id", "target", "profile", "project", "project_path", "input", "metadata",
                        "source", "target_config", "user_images", "user_audio", "user_files", "session",
                        "claim_token"}
    assert (job["job_id"], job["target"], job["profile"], job["project"], job["project_path"]) == (
        job_id, TARGET, "default", "", None)
    assert job["input"] == "Look up customer C-1001" and job["source"] == "ops-app"
    assert job["metadata"]["user"] == "u-1"
    assert job["target_config"] == {"system_prompt": "You help the operations desk."}
    assert (job["user_images"], job["user_audio"], job["user_files"]) == ([], [], [])
    assert set(job["session"]) == {"sessionId", "isContinue"} and job["session"]["isContinue"] is False
    row = job_row(sql, job_id)
    assert (row["status"], row["executor_id"], row["executor_token"], row["claim_token"]) == (
        "dispatched", "runner-1", "desk-runner", job["claim_token"])
    assert str(uuid.UUID(job["claim_token"])) == job["claim_token"]
    assert row["session_id"] == job["session"]["sessionId"]
    assert job_events(sql, job_id)[-1] == "dispatched"
    assert sql("SELECT executor_id, token_name, targets, capabilities FROM bz_executors") == [
        ("runner-1", "desk-runner", [TARGET], {"runtime": "openclaw", "labels": ["openclaw"]})]
    assert sql("SELECT last_seen_at IS NOT NULL FROM bz_executor_tokens") == [(True,)]
    # The job as its client sees it: dispatched, the live claim token not shown.
    seen = jw.job(job_id).json()
    assert seen["status"] == "dispatched" and "claim_token" not in seen


def test_the_openclaw_runners_exact_bodies_work(jw, sql):
    """§E.2: heartbeat, claim and result exactly as the runner sends them."""
    job_id = submitted(jw)
    caps = {"runtime": "openclaw", "labels": ["openclaw", "agent-governance", "outbound-executor"]}
    response = post(jw, "/executor/heartbeat", jw.executor_token,
                    {"executor_id": "host-1", "targets": [TARGET], "capabilities": caps})
    assert (response.status_code, response.json()) == (200, {"ok": True})
    response = post(jw, "/executor/claim", jw.executor_token,
                    {"executor_id": "host-1", "targets": [TARGET], "wait_ms": 12000, "capabilities": caps})
    job = response.json()["job"]
    assert job["job_id"] == job_id
    response = post(jw, "/executor/result", jw.executor_token,
                    {"job_id": job_id, "ok": True, "output": {"text": "C-1001 is Acme"},
                     "claim_token": job["claim_token"]})
    assert (response.status_code, response.json()) == (200, {"ok": True})
    record = jw.job(job_id).json()
    assert (record["status"], record["result"]) == ("done", {"text": "C-1001 is Acme"})


def test_claim_answers_null_at_the_deadline_and_paused_while_paused(jw, cli):
    started = time.monotonic()
    response = jw.claim(wait_ms=300)
    elapsed = time.monotonic() - started
    assert response.json() == {"job": None}
    assert 0.3 <= elapsed < 2.0, elapsed
    code, _, err = cli("pause", "--reason", "maintenance")
    assert code == 0, err
    submitted_while_paused = jw.submit()
    assert submitted_while_paused.status_code == 503
    response = jw.claim(wait_ms=5000)
    assert (response.status_code, response.json()) == (200, {"job": None, "paused": True})


def test_wait_ms_is_clamped_and_non_numbers_are_zero():
    assert [wait_ms_of(v) for v in (None, -5, 0, 1500.7, "800", 10**9, "soon", [], {}, float("nan"))] == [
        25000, 0, 0, 1500, 800, WAIT_MAX_MS, 0, 0, 0, 0]


def test_jobs_are_claimed_oldest_first(jw):
    ids = [submitted(jw) for _ in range(3)]
    assert [claimed(jw, executor_id=f"r{i}")["job_id"] for i in range(3)] == ids
    assert jw.claim().json() == {"job": None}


def test_a_thread_runs_one_job_at_a_time_in_order(server, app, cli, business, tmp_path, sql):
    jw = JobsWorld(server, cli, business, tmp_path, session_policy="passthrough")
    first = submitted(jw, metadata={"session_id": "conv-1"})
    second = submitted(jw, metadata={"session_id": "conv-1"})
    other = submitted(jw, metadata={"session_id": "conv-2"})
    job = claimed(jw, executor_id="a")
    assert job["job_id"] == first and job["session"] == {"sessionId": "conv-1", "isContinue": True}
    # conv-1's second job waits for its first; conv-2's goes ahead.
    assert claimed(jw, executor_id="b")["job_id"] == other
    assert jw.claim(executor_id="c").json() == {"job": None}
    with app.extensions["bailing"].db.session() as db:
        status = dispatch_status(db)
    assert status["summary"]["blocked_threads"] == 1
    assert [(t["thread_id"], t["queued"], t["inflight"], t["inflight_jobs"]) for t in status["blocked_threads"]] == [
        ("session:ops-app:desk:conv-1", 1, 1, [first])]
    assert jw.report(job).json() == {"ok": True}
    assert claimed(jw, executor_id="c")["job_id"] == second


def test_an_earlier_queued_job_of_the_thread_goes_first_even_when_younger_ones_are_due(
        server, cli, business, tmp_path, sql):
    jw = JobsWorld(server, cli, business, tmp_path, session_policy="passthrough")
    first = submitted(jw, metadata={"session_id": "conv-1"})
    second = submitted(jw, metadata={"session_id": "conv-1"})
    sql("UPDATE bz_jobs SET target = 'elsewhere' WHERE id = %s", (first,))  # nobody here may claim it
    assert jw.claim().json() == {"job": None}
    sql("UPDATE bz_jobs SET target = %s WHERE id = %s", (TARGET, first))
    assert claimed(jw)["job_id"] == first
    assert second != first


def test_run_after_in_the_future_is_skipped_until_due(jw, sql):
    job_id = submitted(jw)
    sql("UPDATE bz_jobs SET run_after = now() + interval '1 hour' WHERE id = %s", (job_id,))
    assert jw.claim().json() == {"job": None}
    sql("UPDATE bz_jobs SET run_after = now() - interval '1 second' WHERE id = %s", (job_id,))
    assert claimed(jw)["job_id"] == job_id
    assert sql("SELECT run_after FROM bz_jobs WHERE id = %s", (job_id,)) == [(None,)]


def test_concurrent_claimers_never_get_the_same_job(jw, sql):
    job_ids = {submitted(jw) for _ in range(3)}
    barrier = threading.Barrier(6)
    got: list[dict[str, Any]] = []

    def claimer(n: int) -> None:
        barrier.wait()
        body = jw.claim(executor_id=f"racer-{n}").json()
        got.append(body)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jobs = [b["job"]["job_id"] for b in got if b["job"] is not None]
    assert sorted(jobs) == sorted(job_ids)  # each job exactly once
    assert sum(1 for b in got if b["job"] is None) == 3
    assert sql("SELECT count(*) FROM bz_job_events WHERE event = 'dispatched'") == [(3,)]


def test_a_waiting_claim_wakes_as_soon_as_a_job_is_submitted(jw):
    latencies = []
    for _ in range(3):
        answer: dict[str, Any] = {}

        def wait(answer: dict[str, Any] = answer) -> None:
            answer["response"] = jw.claim(wait_ms=10000)
            answer["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)  # the claim is waiting
        job_id = submitted(jw)
        submitted_at = time.monotonic()
        waiter.join(timeout=15)
        assert answer["response"].json()["job"]["job_id"] == job_id
        latencies.append(answer["at"] - submitted_at)
        jw.report(answer["response"].json()["job"])
    assert statistics.median(latencies) < 0.25, latencies  # Core polls every 1.2 s; wait_ms is 10 s


def _raw_claim(jw: JobsWorld, wait_ms: int) -> socket.socket:
    parts = urlsplit(jw.url)
    body = json.dumps({"executor_id": "gone", "targets": [TARGET], "wait_ms": wait_ms}).encode()
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(b"POST /executor/claim HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {jw.executor_token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    return sock


def test_a_claim_whose_executor_hung_up_does_not_take_the_job(jw, sql):
    sock = _raw_claim(jw, 8000)
    time.sleep(0.3)
    sock.close()
    time.sleep(0.1)
    job_id = submitted(jw)
    time.sleep(0.5)  # the abandoned claim woke, picked the job, saw nobody there and put it back
    assert job_row(sql, job_id)["status"] == "queued"
    assert "dispatched" not in job_events(sql, job_id)
    assert claimed(jw)["job_id"] == job_id


# ---------------------------------------------------------------- heartbeats and leases (§B.6, §B.8)

def test_heartbeat_renews_the_leases_of_its_own_token_only(jw, sql):
    job_id = submitted(jw)
    claimed(jw, executor_id="runner-1")
    sql("UPDATE bz_jobs SET lease_until = now() + interval '5 seconds' WHERE id = %s", (job_id,))
    # Another token under the same executor_id renews nothing.
    other = jw.issue_executor_token("other-runner", [TARGET])
    response = post(jw, "/executor/heartbeat", other, {"executor_id": "runner-1", "targets": [TARGET]})
    assert response.json() == {"ok": True}
    assert sql("SELECT lease_until < now() + interval '10 seconds' FROM bz_jobs WHERE id = %s", (job_id,)) == [(True,)]
    response = post(jw, "/executor/heartbeat", jw.executor_token,
                    {"executor_id": "runner-1", "targets": [TARGET, "nowhere"], "capabilities": "bad"})
    assert response.json() == {"ok": True}
    assert sql("SELECT lease_until > now() + interval '230 seconds' FROM bz_jobs WHERE id = %s", (job_id,)) == [
        (True,)]
    assert sql("SELECT token_name, targets, capabilities FROM bz_executors") == [("desk-runner", [TARGET], None)]


def test_the_reaper_requeues_expired_leases_and_heartbeats_keep_them(hub_app, cli, business, tmp_path, sql):
    live = hub_app(executor_lease_seconds=1, job_reaper=True, job_reaper_seconds=0.2)
    try:
        _leases_kept_by_heartbeats(JobsWorld(live, cli, business, tmp_path), sql)
    finally:
        live.server.app.extensions["bailing.job_reaper"].stop()


def _leases_kept_by_heartbeats(jw: JobsWorld, sql) -> None:
    kept, dropped = submitted(jw), submitted(jw)
    claimed(jw, executor_id="steady")
    claimed(jw, executor_id="silent")
    end = time.monotonic() + 1.8
    while time.monotonic() < end:
        assert post(jw, "/executor/heartbeat", jw.executor_token,
                    {"executor_id": "steady", "targets": [TARGET]}).json() == {"ok": True}
        time.sleep(0.3)
    assert job_row(sql, kept)["status"] == "dispatched"
    row = job_row(sql, dropped)
    assert (row["status"], row["attempts"], row["executor_id"], row["claim_token"], row["lease_until"]) == (
        "queued", 0, None, None, None)
    assert job_events(sql, dropped)[-1] == "lease_expired"
    assert claimed(jw, executor_id="next")["job_id"] == dropped


def test_the_reaper_expires_old_queued_jobs_and_enforces_the_hard_cap(jw, app, sql):
    stuck = submitted(jw)
    assert claimed(jw)["job_id"] == stuck
    waiting = submitted(jw, callback_url="https://example.com/cb")
    sql("UPDATE bz_jobs SET created_at = now() - interval '31 minutes' WHERE id = %s", (waiting,))
    sql("UPDATE bz_jobs SET dispatched_at = now() - interval '3 hours' WHERE id = %s", (stuck,))
    hub = app.extensions["bailing"]
    assert reaper.reap(hub.db, hub.settings) == {"expired": 1, "requeued": 1}
    row = job_row(sql, waiting)
    assert (row["status"], row["error"]) == ("error", reaper.QUEUE_TIMEOUT_TEXT)
    assert row["finished_at"] is not None
    assert job_events(sql, waiting)[-1] == "expired"
    assert row_count(sql, "bz_job_callbacks") == 0  # Core sends no callback for the queue timeout
    assert job_row(sql, stuck)["status"] == "queued"
    assert sql("SELECT detail->>'reason' FROM bz_job_events WHERE job_id = %s AND event = 'lease_expired'",
               (stuck,)) == [("hard_cap",)]
    assert reaper.reap(hub.db, hub.settings) == {"expired": 0, "requeued": 0}


# ---------------------------------------------------------------- results (§B.7)

def test_result_refusals_and_ignored_reports(jw, sql):
    queued = submitted(jw)
    response = post(jw, "/executor/result", jw.executor_token, {"ok": True})
    assert response.status_code == 400 and set(response.json()) == {"error"}
    for unknown in (str(uuid.uuid4()), "not-a-job"):
        response = post(jw, "/executor/result", jw.executor_token, {"job_id": unknown, "ok": True})
        assert (response.status_code, response.json()) == (404, {"error": "not found"})
    response = post(jw, "/executor/result", jw.executor_token, {"job_id": queued, "ok": True})
    assert response.status_code == 200
    assert response.json()["ok"] is True and response.json()["status"] == "queued" and response.json()["note"]
    assert job_row(sql, queued)["status"] == "queued"
    job = claimed(jw)
    stale = {**job, "claim_token": str(uuid.uuid4())}
    response = jw.report(stale)
    assert response.status_code == 200 and response.json()["status"] == "dispatched" and "note" in response.json()
    other = jw.issue_executor_token("other-runner", [TARGET])
    response = jw.report(job, token=other)
    assert response.status_code == 200 and response.json()["status"] == "dispatched" and "note" in response.json()
    response = post(jw, "/executor/result", other, {"job_id": job["job_id"], "ok": True})  # no claim token
    assert response.json()["status"] == "dispatched"
    assert job_row(sql, job["job_id"])["status"] == "dispatched"
    assert job_events(sql, job["job_id"])[-3:] == ["result_ignored", "result_refused", "result_refused"]


def test_a_successful_result_finishes_the_job_once(jw, sql):
    job = claimed(jw) if submitted(jw) else {}
    response = jw.report(job, output={"text": "Acme"}, usage={"duration_ms": 1200, "tokens": 40},
                         session_id="sess-from-executor", executor_id="runner-1")
    assert (response.status_code, response.json()) == (200, {"ok": True})
    row = job_row(sql, job["job_id"])
    assert (row["status"], row["result"], row["usage"], row["session_id"], row["error"]) == (
        "done", {"text": "Acme"}, {"duration_ms": 1200, "tokens": 40}, "sess-from-executor", None)
    assert (row["claim_token"], row["lease_until"]) == (None, None) and row["finished_at"] is not None
    again = jw.report(job)
    assert again.status_code == 200 and again.json()["status"] == "done" and "note" in again.json()
    assert job_row(sql, job["job_id"])["result"] == {"text": "Acme"}
    assert job_events(sql, job["job_id"])[-2:] == ["finished", "result_ignored"]


def test_a_failure_without_retries_ends_in_error(jw, sql):
    job = claimed(jw) if submitted(jw) else {}
    response = post(jw, "/executor/result", jw.executor_token,
                    {"job_id": job["job_id"], "claim_token": job["claim_token"], "ok": False, "output": {},
                     "error": "openclaw timed out"})
    assert response.json() == {"ok": True}
    row = job_row(sql, job["job_id"])
    assert (row["status"], row["error"], row["result"]) == ("error", "openclaw timed out", {})
    job2 = claimed(jw) if submitted(jw) else {}
    assert post(jw, "/executor/result", jw.executor_token, {"job_id": job2["job_id"], "ok": False}).json() == {
        "ok": True}
    row = job_row(sql, job2["job_id"])
    assert row["status"] == "error" and row["error"] and row["result"] == {}
    # A truthy error fails the job even with ok: true.
    job3 = claimed(jw) if submitted(jw) else {}
    assert jw.report(job3, ok=True, error={"code": 1}).json() == {"ok": True}
    assert job_row(sql, job3["job_id"])["status"] == "error"


def test_failures_with_retries_left_are_requeued_at_once(jw, sql):
    job_id = submitted(jw)
    sql("UPDATE bz_jobs SET max_retries = 1 WHERE id = %s", (job_id,))
    job = claimed(jw)
    before = job_row(sql, job_id)["session_id"]
    response = jw.report(job, ok=False, error="flaky")
    assert (response.status_code, response.json()) == (200, {"ok": True, "retried": True})
    row = job_row(sql, job_id)
    assert (row["status"], row["attempts"], row["executor_id"], row["claim_token"], row["error"]) == (
        "queued", 1, None, None, None)
    assert row["session_id"] != before
    assert job_events(sql, job_id)[-1] == "retry_scheduled"
    again = claimed(jw)
    assert again["job_id"] == job_id and again["claim_token"] != job["claim_token"]
    assert jw.report(job).json()["status"] == "dispatched"  # the first claim's report is stale now
    assert jw.report(again, ok=False, error="flaky again").json() == {"ok": True}
    assert job_row(sql, job_id)["status"] == "error"


# ---------------------------------------------------------------- admin API (§F)

def test_admin_api_tokens_executors_targets_and_dispatch_status(jw, cli, sql):
    admin, support = admin_token(cli, "ada", "admin"), admin_token(cli, "sam", "support")
    api = f"{jw.url}/admin/api"
    created = requests.post(f"{api}/executor-tokens", headers=bearer(admin), timeout=30,
                            json={"name": "night-runner", "allowed_targets": ["*"], "description": "nights"})
    assert created.status_code == 200, created.text
    token = created.json()["token"]
    assert created.json()["ok"] is True and len(token) == 32
    listed = requests.get(f"{api}/executor-tokens", headers=bearer(support), timeout=30).json()
    assert {t["name"]: t["token"] for t in listed} == {"desk-runner": "…" + jw.executor_token[-4:],
                                                       "night-runner": "…" + token[-4:]}
    updated = requests.post(f"{api}/executor-tokens", headers=bearer(admin), timeout=30,
                            json={"name": "night-runner", "allowed_targets": [TARGET]})
    assert updated.json()["token"] is None
    rotated = requests.post(f"{api}/executor-tokens", headers=bearer(admin), timeout=30,
                            json={"name": "night-runner", "allowed_targets": [TARGET], "rotate_token": True})
    assert rotated.json()["token"] not in (None, token)
    assert jw.claim(token=token).status_code == 401
    assert jw.claim(token=rotated.json()["token"]).status_code == 200
    refused = requests.post(f"{api}/executor-tokens", headers=bearer(support), timeout=30,
                            json={"name": "x-runner", "allowed_targets": ["*"]})
    assert refused.status_code == 403
    bad = requests.post(f"{api}/executor-tokens", headers=bearer(admin), timeout=30,
                        json={"name": "x-runner", "allowed_targets": [], "extra": 1})
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    assert sql("SELECT count(*) FROM bz_executor_tokens WHERE name = 'x-runner'") == [(0,)]

    job_id = submitted(jw)
    claimed(jw, executor_id="runner-9")
    executors = requests.get(f"{api}/executors", headers=bearer(support), timeout=30).json()
    assert [(e["executor_id"], e["online"], e["targets"]) for e in executors] == [
        ("runner-9", True, [TARGET]), ("runner-1", True, [TARGET])]  # most recently seen first
    targets = requests.get(f"{api}/targets", headers=bearer(support), timeout=30).json()
    assert [(t["name"], t["kind"], t["enabled"]) for t in targets] == [(TARGET, "executor", True)]
    status = requests.get(f"{api}/dispatch-status", headers=bearer(support), timeout=30).json()
    assert status["summary"]["dispatched"] == 1 and status["summary"]["queued"] == 0
    assert status["by_target"] == [{"target": TARGET, "queued": 0, "running": 0, "dispatched": 1}]
    assert [lease["job_id"] for lease in status["leases"]] == [job_id]
    assert status["leases"][0]["executor_id"] == "runner-9" and 200 < status["leases"][0]["lease_ttl_sec"] <= 240

    assert requests.delete(f"{api}/executors/runner-9", headers=bearer(admin), timeout=30).json() == {"ok": True}
    assert requests.delete(f"{api}/executors/runner-9", headers=bearer(admin), timeout=30).status_code == 404
    assert requests.delete(f"{api}/executor-tokens/night-runner", headers=bearer(admin),
                           timeout=30).json() == {"ok": True}
    assert jw.claim(token=rotated.json()["token"]).status_code == 401
    # Every write is in the configuration-change log, by path: token names, never a token.
    log = sql("SELECT method, path FROM bz_config_audit WHERE method IN ('POST', 'DELETE') ORDER BY id")
    assert log == [("POST", "executor-tokens"), ("POST", "executor-tokens"), ("POST", "executor-tokens"),
                   ("DELETE", "executors/runner-9"), ("DELETE", "executor-tokens/night-runner")]
    everything = json.dumps(sql("SELECT * FROM bz_config_audit"), default=str)
    assert token not in everything and rotated.json()["token"] not in everything
