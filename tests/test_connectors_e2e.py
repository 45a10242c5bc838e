"""Core's connectors against the hub, end to end, every party its own process over HTTP
(CLIENT_API_AND_EXECUTOR.md §A.9, §B, §C, §D.1, §E): the peers of tests/peers/ were written from
the contract, not from the hub's code, so what they accept is what Dify, n8n, the connect SDK and
an OpenClaw executor accept.

The flow the issue asks to see: a client submits /run with a callback URL; an executor waiting in
its long-poll claims the job, reads a customer through /jobs/<id>/tools/invoke and asks for a
write that needs approval (a credit limit above 10,000: the CRM's `approval.when`); the job ends
`done` with the pending answer and the signed callback arrives; an approver approves in the
console; the job is queued again under the same id, the executor's next claim carries the
approval and runs the write exactly once in the demo CRM; the client sees `done` with the final
result and a second signed callback, the last one, carries it.

Beside it: Dify-like and n8n-like clients reading a job the executor finished; two executors
racing for one job; an executor killed mid-job whose lease runs out and whose job another
executor finishes once; SIGTERM, 401 and 403 as the runner treats them; and two executors sharing
200 jobs, each claimed exactly once."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests

from tests.helpers import LoopbackServer, apply_config, bearer, make_admin
from tests.jobs_world import TARGET, JobsWorld, jobs_config
from tests.peers.launch import Peer, Peers
from tests.test_console_server import csrf_of, signed_in

CUSTOMER = "C-100234"  # ACME Industrial GmbH, credit limit 5,000 EUR in the demo CRM
NEW_LIMIT = 25_000  # over the CRM's 10,000 threshold: the write needs an approver
SUBJECT = "tenant-7:user-42"
METADATA = {"principal": {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}, "on_behalf_of": SUBJECT}
READ = {"tool": "customer_get", "arguments": {"customer_id": CUSTOMER}}
WRITE = {"tool": "customer_update_credit_limit", "arguments": {"customer_id": CUSTOMER, "credit_limit": NEW_LIMIT}}

# The hub as these tests serve it: callbacks posted (the suite's apps post none by default) on a
# short schedule, and a reaper pass every half second. Core's lease (4 minutes) except where a
# test needs one to run out.
HUB = {"job_callbacks": True, "job_callback_retry_seconds": (0.3, 0.6), "job_callback_poll_seconds": 0.2,
       "job_reaper": True, "job_reaper_seconds": 0.5}
SHORT_LEASE_SECONDS = 2


@pytest.fixture
def peers(tmp_path):
    started = Peers(tmp_path)
    yield started
    started.stop_all(grace=0.5)  # what the test needed is checked: no waiting for long-polls to end


@pytest.fixture
def make_world(hub_app, cli, business, tmp_path):
    """`make_world(**settings)`: the jobs world (tests/jobs_world.py) on a hub served with HUB
    plus `settings` (hub_app stops its background threads at the end)."""
    def make(**settings: Any) -> JobsWorld:
        return JobsWorld(hub_app(**{**HUB, **settings}), cli, business, tmp_path)

    return make


def executor_env(world: JobsWorld, executor_id: str, plan: dict[str, Any] | None = None, *,
                 token: str | None = None, wait_ms: int = 2000, run_once: bool = False,
                 targets: str = TARGET) -> dict[str, str]:
    """The OpenClaw runner's environment (§E.1), with a 2 s long-poll so that a stopped runner
    ends within about 3 s, and the scripted brain's plan."""
    return {"BAILING_HUB_URL": world.url, "BAILING_EXECUTOR_TOKEN": token or world.executor_token,
            "BAILING_TARGET": targets, "BAILING_EXECUTOR_ID": executor_id, "BAILING_WAIT_MS": str(wait_ms),
            "BAILING_HEARTBEAT_MS": "5000", "BAILING_RUN_ONCE": "1" if run_once else "0",
            "BAILING_PEER_PLAN": json.dumps(plan or {})}


def client_env(world: JobsWorld, token: str | None = None) -> dict[str, str]:
    return {"BAILINGHUB_CLIENT_TOKEN": token or world.client_token}


def event(name: str, **fields: Any):
    """A matcher of executor lines: event `name` whose fields equal `fields`."""
    return lambda line: line.get("event") == name and all(line.get(k) == v for k, v in fields.items())


def waiting(executor: Peer) -> None:
    """Wait until `executor` is in its long-poll: its claim request sent and, a moment later,
    still unanswered (a claim the hub answers at once, with an error or a job, fails here with
    what the hub said)."""
    executor.wait_for(event("claiming"))
    time.sleep(0.15)
    claims = [line for line in executor.events() if line.get("event") in ("claiming", "claim", "claimed", "stopped")]
    assert claims[-1]["event"] == "claiming", f"{executor.name}: the claim was answered at once: {claims[-3:]}"


def answer(finished_text: str) -> dict[str, Any]:
    """The scripted brain's answer document (openclaw_executor.py)."""
    doc = json.loads(finished_text)
    assert set(doc) == {"text", "calls", "looked_up", "approved_note"}, doc
    return doc


def eventually(read, expected: Any, timeout: float = 10) -> None:
    """`read()` returns `expected` within `timeout` seconds (polled), or the test fails with the
    last value read."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected:
        assert time.monotonic() < deadline, value
        time.sleep(0.02)


def job_events(sql, job_id: str) -> list[str]:
    return [row[0] for row in sql("SELECT event FROM bz_job_events WHERE job_id = %s ORDER BY id", (job_id,))]


def approve_in_console(world: JobsWorld, cli, job_id: str) -> dict[str, Any]:
    """An approver signs in to the console, finds the one pending approval in the queue, opens it
    and approves the snapshot shown, as a person does; returns what the page then says."""
    browser = signed_in(world.url, make_admin(cli, f"approver-{uuid.uuid4().hex[:6]}", "approver"))
    queue = browser.get("/console/approvals/")
    assert queue.status_code == 200, queue.text[:2000]
    ids = sorted(set(re.findall(r"/console/approvals/([0-9a-f-]{36})", queue.text)))
    assert len(ids) == 1, ids
    page = browser.get(f"/console/approvals/{ids[0]}")
    assert page.status_code == 200, page.text[:2000]
    assert job_id in page.text or "customer_update_credit_limit" in page.text
    args_hash = re.search(r'name="args_hash" value="([0-9a-f]{64})"', page.text)
    assert args_hash, "no args_hash in the approval's form"
    decided = browser.post(f"/console/approvals/{ids[0]}/decide",
                           data={"decision": "approve", "args_hash": args_hash.group(1),
                                 "csrf_token": csrf_of(page.text)})
    assert decided.status_code == 303, decided.text[:2000]
    return {"approval_id": ids[0], "args_hash": args_hash.group(1)}


# ================================================================ the flow the issue asks to see

def test_a_write_waits_for_the_approver_then_runs_once_and_the_client_hears_both_finishes(
        make_world, peers, cli, business, sql):
    world = make_world()
    receiver = peers("callback_receiver", env={"BAILING_CALLBACK_SECRET": world.client_token}, name="receiver")
    callback_url = receiver.wait_for(event("listening"))[0]["url"]
    executor = peers("openclaw_executor", env=executor_env(world, "openclaw-1", {"steps": [READ, WRITE],
                                                                                  "text": "credit limit"}),
                     name="executor")
    waiting(executor)

    # The client (an application on the connect SDK) submits, with a callback URL.
    submitted_at = time.time()
    client = peers("sdk_client", "submit", "--base-url", world.url, "--route", "desk",
                   "--input", f"Raise the credit limit of {CUSTOMER} to {NEW_LIMIT} EUR",
                   "--metadata", json.dumps(METADATA), "--callback-url", callback_url,
                   env=client_env(world), name="client-submit")
    code, summary = client.summary()
    assert code == 0, summary
    assert summary["calls"] == [{"method": "POST", "path": "/run", "status": 202}]
    submitted = summary["submitted"]
    job_id = submitted["job_id"]
    assert submitted["status"] == "queued" and submitted["route"] == "desk" and submitted["target"] == TARGET
    assert submitted["continue"] is False and isinstance(submitted["session_id"], str)

    # The waiting executor claims it, reads the customer, asks for the write: refused for approval.
    first = executor.wait_for(event("claimed", job_id=job_id))[0]
    assert first["replied_at"] - submitted_at < 10
    assert first["tools"]["invoke_url"] == f"/jobs/{job_id}/tools/invoke"
    assert first["tools"]["approved_note"] is False
    assert first["tools"]["mode"] == "catalog"  # the route's CRM and ERP tools: more than 12
    assert {"customer_get", "customer_update_credit_limit"} <= set(first["tools"]["names"])
    finished = executor.wait_for(event("finished", job_id=job_id))[0]
    assert finished["ok"] is True and finished["reported"] is True
    read, write = [line for line in executor.events() if line.get("event") == "tool" and line["job_id"] == job_id]
    assert (read["tool"], read["http_status"], read["ok"], read["status"]) == ("customer_get", 200, True, 200)
    assert json.loads(read["text"])["credit_limit"] == 5000
    assert (write["tool"], write["http_status"], write["ok"], write["status"]) == \
        ("customer_update_credit_limit", 200, False, 0)
    # Core's words (§C.5 step 6): the call went to a human approver (审批), the task should end.
    assert "customer_update_credit_limit" in write["text"] and "审批" in write["text"]
    report = executor.wait_for(event("report", job_id=job_id))[0]
    assert (report["status"], json.loads(report["body"])) == (200, {"ok": True})
    assert business.executions("customer_update_credit_limit") == []
    assert business.app.config["DEMO_STORE"].customers[CUSTOMER]["credit_limit"] == 5000

    # The client sees it done with the pending answer; the first signed callback says the same.
    code, summary = peers("sdk_client", "wait", "--base-url", world.url, "--job-id", job_id,
                          env=client_env(world), name="client-wait-1").summary()
    assert code == 0, summary
    assert summary["job"]["status"] == "done"
    pending = answer(summary["job"]["result"]["text"])
    assert [(c["tool"], c["ok"]) for c in pending["calls"]] == [("customer_get", True),
                                                              ("customer_update_credit_limit", False)]
    assert sorted(pending["looked_up"]) == ["customer_get", "customer_update_credit_limit"]  # catalog mode: §C.3
    one = receiver.wait_for(event("delivery", job_id=job_id))[0]
    assert one["verified"] is True and one["reason"] == "ok" and one["answered"] == 200
    assert one["status"] == "done" and one["body"]["result"] == summary["job"]["result"]
    assert one["content_type"].startswith("application/json")

    # The approver approves in the console: the job is queued again under the same id.
    approval = approve_in_console(world, cli, job_id)
    assert job_events(sql, job_id).count("rerun") == 1  # in the approval's transaction (§C.7)
    seen = world.job(job_id)
    assert seen.status_code == 200 and seen.json()["job_id"] == job_id
    assert seen.json()["status"] in ("queued", "dispatched", "done")  # done: the executor was quicker

    # The executor's next claim carries the approval and runs the write, once.
    second = executor.wait_for(event("claimed", job_id=job_id), count=2)[1]
    assert second["claim_token_sha"] != first["claim_token_sha"]
    assert second["tools"]["approved_note"] is True
    executor.wait_for(event("finished", job_id=job_id), count=2)
    calls = [line for line in executor.events() if line.get("event") == "tool" and line["job_id"] == job_id][2:]
    assert [(c["tool"], c["http_status"], c["ok"], c["status"]) for c in calls] == [
        ("customer_get", 200, True, 200), ("customer_update_credit_limit", 200, True, 200)]
    writes = business.executions("customer_update_credit_limit")
    assert len(writes) == 1 and writes[0]["job_id"] == job_id and writes[0]["on_behalf_of"] == SUBJECT
    assert business.app.config["DEMO_STORE"].customers[CUSTOMER]["credit_limit"] == NEW_LIMIT

    # The client's poll sees done with the final result; the last callback carries it.
    code, summary = peers("sdk_client", "wait", "--base-url", world.url, "--job-id", job_id,
                          env=client_env(world), name="client-wait-2").summary()
    assert code == 0, summary
    final = summary["job"]
    assert final["status"] == "done"
    assert [(c["tool"], c["ok"]) for c in answer(final["result"]["text"])["calls"]] == [
        ("customer_get", True), ("customer_update_credit_limit", True)]
    deliveries = receiver.wait_for(event("delivery", job_id=job_id), count=2)
    assert all(d["verified"] and d["answered"] == 200 for d in deliveries)
    assert deliveries[-1]["status"] == "done" and deliveries[-1]["body"]["result"] == final["result"]
    assert int(deliveries[-1]["timestamp"]) > int(deliveries[0]["timestamp"])
    # Once per finish (§D.1): two finishes, two callbacks, both delivered at the first attempt
    # (the hub records the second one's outcome just after the receiver answered).
    eventually(lambda: sql("SELECT state, attempts FROM bz_job_callbacks WHERE job_id = %s ORDER BY id",
                           (job_id,)), [("delivered", 1), ("delivered", 1)])
    assert len([line for line in receiver.events() if line.get("event") == "delivery"]) == 2
    timeline = job_events(sql, job_id)
    assert timeline.count("dispatched") == 2 and timeline.count("finished") == 2, timeline
    assert approval["approval_id"]

    executor.send(signal.SIGTERM)
    assert executor.finish(10) == 0
    assert executor.events()[-1]["event"] == "stopped" and executor.events()[-1]["exit"] == 0


# ================================================================ Dify and n8n

def test_dify_and_n8n_clients_read_jobs_the_openclaw_executor_finished(make_world, peers):
    world = make_world()
    executor = peers("openclaw_executor", env=executor_env(world, "openclaw-1", {"steps": [READ], "text": "read"}),
                     name="executor")
    waiting(executor)

    dify = peers("dify_client", "run", "--base-url", world.url, "--route", "desk", "--input",
                 f"Look up {CUSTOMER}", "--max-wait", "20", "--interval", "0.5", env=client_env(world), name="dify")
    n8n = peers("n8n_client", "run", "--base-url", world.url, "--route", "desk", "--input",
                f"Look up {CUSTOMER}", "--max-wait", "20", "--interval", "0.5", env=client_env(world), name="n8n")
    code, out = dify.summary()
    assert code == 0, out
    assert out["credentials"] == "valid"
    assert [(c["method"], c["status"]) for c in out["calls"][:3]] == [("GET", 200), ("GET", 404), ("POST", 202)]
    assert out["calls"][1]["path"] == "/jobs/00000000-0000-0000-0000-000000000000"
    assert out["submitted"]["status"] == "queued" and out["submitted"]["route"] == "desk"
    assert out["submitted"]["target"] == TARGET
    job = out["job"]
    assert job["status"] == "done" and job["terminal"] is True and job["wait_timed_out"] is False
    assert job["job_id"] == out["submitted"]["job_id"] and job["request_id"] == out["submitted"]["request_id"]
    assert [c["tool"] for c in answer(job["result"]["text"])["calls"]] == ["customer_get"]
    assert set(job) == {"job_id", "request_id", "status", "terminal", "route", "target", "result",
                        "wait_timed_out", "polls"}

    code, out = n8n.summary()
    assert code == 0, out
    assert out["calls"][:2] == [{"method": "GET", "path": "/health", "status": 200},
                                {"method": "POST", "path": "/run", "status": 202}]
    job = out["job"]
    assert job["status"] == "done" and job["wait_timed_out"] is False and job["poll_count"] in range(1, 41)
    assert job["route"] == "desk" and isinstance(job["created_at"], str) and isinstance(job["updated_at"], str)
    assert [c["ok"] for c in answer(job["result"]["text"])["calls"]] == [True]
    assert {line["job_id"] for line in executor.events() if line.get("event") == "finished"} == {
        out["job"]["job_id"], dify.events()[-1]["job"]["job_id"]}


def test_dify_refuses_a_rejected_token_and_n8n_accepts_any_as_their_checks_say(make_world, peers, sql):
    world = make_world()
    bogus = "f" * 32
    code, out = peers("dify_client", "check", "--base-url", world.url, env=client_env(world, bogus)).summary()
    assert code == 1 and out["ok"] is False and out["status_code"] == 401, out
    assert out["error"].startswith("token rejected")
    assert out["calls"] == [{"method": "GET", "path": "/health", "status": 200},
                            {"method": "GET", "path": "/jobs/00000000-0000-0000-0000-000000000000", "status": 401}]
    # An executor token is no client credential: 403 on /jobs, which the plugin reports as such.
    code, out = peers("dify_client", "check", "--base-url", world.url,
                      env=client_env(world, world.executor_token)).summary()
    assert code == 1 and out["status_code"] == 403, out
    # n8n's credential test is GET /health with the bearer: any token passes it...
    code, out = peers("n8n_client", "test", "--base-url", world.url, env=client_env(world, bogus)).summary()
    assert code == 0 and out["credentials"] == "valid", out
    # ...and the first real call is refused, with nothing written.
    code, out = peers("n8n_client", "submit", "--base-url", world.url, "--route", "desk", "--input", "x",
                      env=client_env(world, bogus)).summary()
    assert code == 1 and out["status_code"] == 401, out
    assert sql("SELECT count(*) FROM bz_jobs") == [(0,)]


# ================================================================ executors

def test_two_executors_race_for_one_job_and_exactly_one_gets_it(make_world, peers, sql):
    world = make_world()
    runners = [peers("openclaw_executor", env=executor_env(world, f"racer-{n}", run_once=True, wait_ms=1000),
                     name=f"racer-{n}") for n in (1, 2)]
    for runner in runners:
        waiting(runner)
    job_id = world.submit("One job for two executors").json()["job_id"]

    deadline = time.monotonic() + 15
    while not any(event("finished", job_id=job_id)(line) for r in runners for line in r.events()):
        assert time.monotonic() < deadline, [r.events()[-5:] for r in runners]
        time.sleep(0.02)
    winners = [r for r in runners if any(event("claimed", job_id=job_id)(line) for line in r.events())]
    assert len(winners) == 1
    assert winners[0].finish(10) == 0  # run once: one job, then exit
    loser = runners[1] if winners[0] is runners[0] else runners[0]
    loser.send(signal.SIGTERM)
    assert loser.finish(10) == 0
    assert [line for line in loser.events() if line.get("event") == "claimed"] == []
    assert job_events(sql, job_id).count("dispatched") == 1
    assert world.job(job_id).json()["status"] == "done"


def test_an_executor_killed_mid_job_loses_it_when_its_lease_runs_out_and_another_finishes_it_once(
        make_world, peers, sql):
    world = make_world(executor_lease_seconds=SHORT_LEASE_SECONDS)
    doomed = peers("openclaw_executor", env=executor_env(world, "doomed", {"hold_ms": 60_000}, run_once=True),
                   name="doomed")
    waiting(doomed)
    job_id = world.submit("Work that outlives its executor").json()["job_id"]
    first = doomed.wait_for(event("claimed", job_id=job_id))[0]
    doomed.wait_for(event("thinking", job_id=job_id))
    doomed.process.kill()
    doomed.process.wait(5)
    assert world.job(job_id).json()["status"] in ("dispatched", "queued")  # not finished: nobody reported

    rescuer = peers("openclaw_executor", env=executor_env(world, "rescuer", {"text": "rescued"}, run_once=True),
                    name="rescuer")
    try:
        second = rescuer.wait_for(event("claimed", job_id=job_id), timeout=SHORT_LEASE_SECONDS + 10)[0]
    except AssertionError as err:
        state = sql("SELECT status, executor_id, lease_until, now() FROM bz_jobs WHERE id = %s", (job_id,))
        raise AssertionError(f"{err}\njob: {state}; timeline: {job_events(sql, job_id)}") from None
    assert second["claim_token_sha"] != first["claim_token_sha"]
    assert rescuer.finish(15) == 0
    job = world.job(job_id).json()
    assert job["status"] == "done" and answer(job["result"]["text"])["text"] == "rescued"
    assert job["attempts"] == 0  # a reaped lease is no failed attempt (§A.5)
    timeline = job_events(sql, job_id)
    assert timeline.count("dispatched") == 2 and timeline.count("finished") == 1, timeline
    assert timeline.index("lease_expired") in range(timeline.index("dispatched") + 1, len(timeline))


def test_sigterm_lets_the_runner_finish_its_job_and_401_or_403_stop_it(make_world, peers, sql):
    world = make_world()
    runner = peers("openclaw_executor", env=executor_env(world, "graceful", {"hold_ms": 1500, "text": "finished"}),
                   name="graceful")
    waiting(runner)
    job_id = world.submit("Finish me before you go").json()["job_id"]
    runner.wait_for(event("thinking", job_id=job_id))
    runner.send(signal.SIGTERM)
    assert runner.finish(15) == 0
    ends = [line["event"] for line in runner.events() if line["event"] in ("signal", "report", "finished", "stopped")]
    assert ends == ["signal", "report", "finished", "stopped"]
    assert world.job(job_id).json()["status"] == "done"

    other = world.issue_executor_token("elsewhere", ["other-worker"])
    for token, status in (("0" * 32, 401), (other, 403)):
        stopped = peers("openclaw_executor", env=executor_env(world, f"refused-{status}", token=token),
                        name=f"refused-{status}")
        assert stopped.finish(15) == 1
        last = stopped.events()[-1]
        assert last["event"] == "stopped" and last["exit"] == 1 and f"rejected with {status}" in last["reason"]
    assert sql("SELECT executor_id FROM bz_executors WHERE executor_id LIKE 'refused-%%'") == []


# ================================================================ 200 jobs, two executors

JOBS = 200


def test_two_executors_share_200_jobs_each_claimed_exactly_once(make_world, peers, sql, cli, business, tmp_path):
    world = make_world()
    doc = jobs_config(business.url)
    doc["client_apps"][0]["rate_limit_per_min"] = 0  # 200 submissions in seconds: no client gate
    apply_config(cli, tmp_path, doc)
    runners = [peers("openclaw_executor", env=executor_env(world, f"worker-{n}"), name=f"worker-{n}")
               for n in (1, 2)]
    for runner in runners:
        waiting(runner)

    def submit(n: int) -> str:
        response = requests.post(f"{world.url}/run", headers=bearer(world.client_token), timeout=30,
                                 json={"request_id": f"bulk-{n}", "route": "desk", "input": f"job {n}"})
        assert response.status_code == 202, response.text
        return response.json()["job_id"]

    with ThreadPoolExecutor(max_workers=4) as pool:
        submitted = list(pool.map(submit, range(JOBS)))
    assert len(set(submitted)) == JOBS

    deadline = time.monotonic() + 60
    while sql("SELECT count(*) FROM bz_jobs WHERE status = 'done'")[0][0] < JOBS:
        assert time.monotonic() < deadline, sql("SELECT status, count(*) FROM bz_jobs GROUP BY status")
        time.sleep(0.1)
    for runner in runners:
        runner.send(signal.SIGTERM)
    for runner in runners:
        assert runner.finish(15) == 0

    claims = [line["job_id"] for r in runners for line in r.events() if line.get("event") == "claimed"]
    assert sorted(claims) == sorted(submitted)  # none lost, none twice
    assert all(any(line.get("event") == "claimed" for line in r.events()) for r in runners)  # both worked
    reports = [line for r in runners for line in r.events() if line.get("event") == "report"]
    assert len(reports) == JOBS and all((r["status"], json.loads(r["body"])) == (200, {"ok": True})
                                        for r in reports)
    assert sql("SELECT count(*) FROM bz_job_events WHERE event = 'dispatched'") == [(JOBS,)]
    assert sql("SELECT count(DISTINCT job_id) FROM bz_job_events WHERE event = 'dispatched'") == [(JOBS,)]
    assert sql("SELECT status, count(*) FROM bz_jobs GROUP BY status") == [("done", JOBS)]


# ================================================================ the peers' own checks can fail

GOOD_ID = "0b5ad7c6-3f0e-4c1e-9a55-2c1f6f0e8d11"
GOOD = {"job_id": GOOD_ID, "request_id": "r-1", "status": "done", "route": "desk", "target": TARGET,
        "result": {"text": "ok"}, "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z"}


class FakeHub:
    """A stand-in hub on loopback answering every GET /jobs/<id> with `job` (or raw bytes), and
    /health and /run as Core does: to show the client peers refuse what the contract forbids."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/health":
                    return self._send(200, b'{"status": "ok"}')
                return self._send(*hub.answers.get(self.headers.get("Authorization", ""), (404, b"{}")))

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                return self._send(*hub.answers.get(self.headers.get("Authorization", ""), (404, b"{}")))

        self.server = LoopbackServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def answer(self, name: str, status: int, body: Any) -> str:
        """A token under which the fake hub answers `status` and `body`; returns it."""
        token = f"token-{name}-{uuid.uuid4().hex}"
        self.answers[f"Bearer {token}"] = (status, body if isinstance(body, bytes) else json.dumps(body).encode())
        return token


BODIES = {  # name: (a job answer, Dify accepts it, n8n accepts it)
    "good": (GOOD, True, True),
    "extra-fields": ({**GOOD, "dispatch": {"x": 1}, "claim_token": None}, True, True),
    "unknown-status": ({**GOOD, "status": "cancelled"}, False, False),
    "not-a-uuid": ({**GOOD, "job_id": "job-1"}, False, False),
    "list-result": ({**GOOD, "result": ["text"]}, False, False),
    "number-error": ({**GOOD, "error": 500}, False, False),
    "long-request-id": ({**GOOD, "request_id": "r" * 129}, False, False),
    "long-route": ({**GOOD, "route": "r" * 301}, False, True),  # n8n drops a route over 64; Dify refuses >300
    "string-usage": ({**GOOD, "usage": "1 token"}, True, False),  # only n8n reads usage
    "long-created-at": ({**GOOD, "created_at": "2" * 101}, True, False),  # only n8n reads timestamps
}


@pytest.mark.any_server
def test_the_client_peers_read_job_answers_as_the_contract_says():
    """The peers' readings of a job answer (the same functions their processes run), one by one."""
    from tests.peers import dify_client, n8n_client

    for name, (body, dify_ok, n8n_ok) in BODIES.items():
        for module, accepted in ((dify_client, dify_ok), (n8n_client, n8n_ok)):
            try:
                module.normalize_job(body)
                outcome = True
            except module.HubError:
                outcome = False
            assert outcome is accepted, (name, module.__name__)
    assert "route" not in n8n_client.normalize_job(BODIES["long-route"][0])
    assert dify_client.normalize_job({**GOOD, "request_id": ""})["request_id"] == ""  # a get needs none...
    with pytest.raises(dify_client.HubError, match="without request_id"):  # ...a submit does
        dify_client.normalize_job({**GOOD, "request_id": ""}, require_request_id=True)


@pytest.mark.any_server
def test_the_client_peer_processes_fail_closed_on_answers_outside_the_contract(peers):
    fake = FakeHub()
    cases = {  # name: (command, status, body, Dify's exit, n8n's exit)
        "good": ("get", 200, GOOD, 0, 0),
        "unknown-status": ("get", 200, {**GOOD, "status": "cancelled"}, 1, 1),
        "over-1-mib": ("get", 200, {**GOOD, "padding": "x" * (1024 * 1024)}, 1, 1),
        "run-200": ("submit", 200, GOOD, 1, 0),  # Dify wants exactly 202, n8n any 2xx
    }
    started = {}
    for name, (command, status, body, _, _) in cases.items():
        token = fake.answer(name, status, body)
        for peer in ("dify_client", "n8n_client"):
            started[(name, peer)] = peers(peer, command, "--base-url", fake.url, "--job-id", GOOD_ID,
                                          "--route", "desk", "--input", "x",
                                          env={"BAILINGHUB_CLIENT_TOKEN": token}, name=f"{peer}-{name}")
    outcomes = {key: peer.summary(30) for key, peer in started.items()}
    fake.server.shutdown()
    for (name, peer), (code, summary) in outcomes.items():
        expected = cases[name][3] if peer == "dify_client" else cases[name][4]
        assert code == expected, (name, peer, summary)
        assert summary["ok"] is (expected == 0), (name, peer, summary)
    assert outcomes[("good", "dify_client")][1]["job"]["result"] == {"text": "ok"}
    assert "1 MiB" in outcomes[("over-1-mib", "dify_client")][1]["error"]
    # Configuration the connectors refuse before any request: plain http to a remote host.
    code, summary = peers("dify_client", "check", "--base-url", "http://hub.example.com",
                          env={"BAILINGHUB_CLIENT_TOKEN": "t" * 32}).summary()
    assert code == 2 and "calls" not in summary, summary  # refused before a client (and a request) existed
    assert summary["error"] == "Use HTTPS for non-loopback BailingHub connections."


@pytest.mark.any_server
def test_the_callback_receiver_refuses_what_verify_callback_refuses(peers):
    secret = "c" * 32
    receiver = peers("callback_receiver", env={"BAILING_CALLBACK_SECRET": secret}, name="receiver")
    url = receiver.wait_for(event("listening"))[0]["url"]
    body = json.dumps({"job_id": GOOD_ID, "status": "done"}).encode()

    def post(ts: str, signature: str) -> int:
        headers = {"Content-Type": "application/json", "X-Bailing-Timestamp": ts, "X-Bailing-Signature": signature}
        return requests.post(url, data=body, timeout=10, headers=headers).status_code

    def sign(key: str, ts: str) -> str:
        return "sha256=" + hmac.new(key.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()

    now = str(time.time_ns() // 1_000_000)
    stale = str(int(now) - 300_000)  # exactly the window: refused, as the SDK refuses it
    cases = [(now, sign(secret, now), 200, "ok"), (now, sign("other-secret", now), 401, "bad signature"),
             (stale, sign(secret, stale), 401, "timestamp outside the 5-minute window"),
             (now, "", 401, "no signature"), ("soon", sign(secret, "soon"), 401, "timestamp not an integer"),
             (str(int(now) // 1000), sign(secret, str(int(now) // 1000)), 401,  # seconds, not milliseconds
              "timestamp outside the 5-minute window")]
    assert [post(ts, signature) for ts, signature, _, _ in cases] == [status for _, _, status, _ in cases]
    deliveries = receiver.wait_for(event("delivery"), count=len(cases))
    assert [(d["verified"], d["reason"]) for d in deliveries] == [(s == 200, r) for _, _, s, r in cases]
