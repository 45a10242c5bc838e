"""Crash safety: hub workers killed with SIGKILL in the middle of requests, served by real gunicorn.

A. Event batches. Several clients append large batches to their archives while gunicorn workers
   are killed at random moments. A client whose request died retries the same batch, as the
   Conversation Audit spec says a host should. After each cut, and at the end, the database shows
   every batch entirely stored or entirely absent: never partial, sequences 1..n per archive, no
   event twice, every acknowledged batch stored, the archive header counting exactly what is
   stored.
B. Tool dispatch. A write call (direct, or approved then resumed) is held by the demo business
   system; the hub worker waiting on it is killed. The invocation then reads
   `reconciliation_required` at once (its dispatcher is gone), never re-sends, and the business
   system has executed it exactly once.
"""
from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time
import uuid

import psycopg
import pytest
import requests

from admin_app import limits
from tests.conftest import DEMO_SECRETS
from tests.helpers import admin_token, bearer, session_bearer
from tests.gunicorn_hub import GunicornHub

# What costs here is gunicorn workers killed mid-request; what they prove rests on
# PostgreSQL's all-or-nothing commit, the same on any server.
pytestmark = pytest.mark.any_server

AUDITS = "/agent-api/v1/conversation-audits"
INVOCATIONS = "/agent-api/v1/tool-invocations"
ACK = "bailing.agent-conversation-audit-ack.v1"

WRITERS = 4            # on 3 workers: every worker is nearly always mid-request
ARCHIVES_PER_WRITER = 3  # filled one after the other, so that the writers outlast the killer
MAX_BATCHES = 60       # per archive, within its 16 MiB of text (60 x 241 KB)
MESSAGES = limits.AUDIT_BATCH_MAX_EVENTS - 2  # per batch, between turn_start and turn_end: a full batch
CONTENT_CHARS = 5000   # 48 x 5 KB: near the 256 KiB batch limit, so a request takes a while
KILLS = 8
KILLING_S = 20         # at most this long, should the machine be too loaded to reach KILLS
ATTEMPTS = 10          # per batch: a client that never gets an answer fails the test, never hangs it


def established(*, local_port: int | None = None, remote_port: int | None = None) -> set[str]:
    """Established loopback TCP sockets with this local or remote port, as /proc/<pid>/fd links."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(f.split(":")[1], 16) for f in fields[1:3])
            if fields[3] == "01" and local_port in (None, local) and remote_port in (None, remote):
                found.add(f"socket:[{fields[9]}]")
    return found


def workers_holding(hub: GunicornHub, sockets: set[str]) -> list[int]:
    """The gunicorn workers that have one of these sockets open."""
    found = []
    for pid in hub.worker_pids():
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:  # exited meanwhile
            continue
        if links & sockets:
            found.append(pid)
    return found


class Job:
    """A function on a daemon thread: a stuck client fails the test instead of hanging the run."""

    def __init__(self, target, *args):
        self.outcome: dict = {}
        self.thread = threading.Thread(target=self._run, args=(target, *args), daemon=True)
        self.thread.start()

    def _run(self, target, *args) -> None:
        try:
            self.outcome["value"] = target(*args)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            self.outcome["error"] = err

    def result(self, timeout: float):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "still running after its time"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["value"]


# ============================================================================= A. event batches

def batch(archive: int, number: int, first_seq: int) -> list[dict]:
    """One whole turn: turn_start, MESSAGES messages, turn_end; ids unique across the test."""
    turn = f"a{archive}-turn-{number}"
    events = [{"kind": "turn_start"}]
    for i in range(MESSAGES):
        kind = "user_message" if i % 2 == 0 else "assistant_message"
        events.append({"kind": kind, "content": f"{turn} message {i} " + "x" * CONTENT_CHARS})
    events.append({"kind": "turn_end", "status": "completed"})
    return [{"event_id": f"{turn}-ev-{i}", "sequence": first_seq + i, "client_turn_id": turn, **e}
            for i, e in enumerate(events)]


def stored_count(db_url: str, cid: str, event_ids: list[str]) -> int:
    """How many of these events are stored, once any transaction on the archive has ended: the
    archive row stays locked by the killed worker's backend until PostgreSQL has committed or
    rolled back its transaction."""
    with psycopg.connect(db_url, connect_timeout=10) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute("SELECT 1 FROM bz_agent_conversation_archives WHERE id = %s FOR UPDATE", (cid,))
        return conn.execute("SELECT count(*) FROM bz_agent_conversation_events "
                            "WHERE archive_id = %s AND event_id = ANY(%s)", (cid, event_ids)).fetchone()[0]


def test_killed_workers_never_leave_a_partial_event_batch(db_url, issue_session, sql):
    sessions = [issue_session() for _ in range(WRITERS)]
    archives = WRITERS * ARCHIVES_PER_WRITER  # writer n fills n * ARCHIVES_PER_WRITER + 0, 1, ...
    cut_absent: list[str] = []   # turns whose cut request had stored nothing
    cut_stored: list[str] = []   # turns whose cut request had committed before the kill
    acked: dict[str, tuple[str, int, int]] = {}  # turn -> (archive, first, last sequence) acknowledged
    written = [0] * archives     # batches acknowledged per archive
    done = threading.Event()

    with GunicornHub(db_url, workers=3) as hub:
        cids = []
        for a in range(archives):
            who = sessions[a // ARCHIVES_PER_WRITER]
            response = requests.post(hub.url + AUDITS, headers=session_bearer(who), timeout=30, json={
                "client_archive_id": str(uuid.uuid4()), "client_conversation_id": f"crash-{a}",
                "route": "customers", "member_session_ids": [who["session_id"]]})
            assert response.status_code == 200, response.text
            assert response.json()["conversation"]["state"] == "ready"
            cids.append(response.json()["conversation"]["conversation_id"])

        def writer(n: int) -> None:
            for a in range(n * ARCHIVES_PER_WRITER, (n + 1) * ARCHIVES_PER_WRITER):
                if not fill(a, sessions[n]["access_token"]):
                    return

        def fill(a: int, token: str) -> bool:
            """Batches into archive `a` until it is full (True) or the killer is done (False)."""
            cid, seq = cids[a], 1
            for number in range(MAX_BATCHES):
                if done.is_set():
                    return False
                events = batch(a, number, seq)
                ids, turn = [e["event_id"] for e in events], events[0]["client_turn_id"]
                for _ in range(ATTEMPTS):
                    try:
                        response = requests.post(f"{hub.url}{AUDITS}/{cid}/events", json={"events": events},
                                                 headers=bearer(token), timeout=60)
                        break
                    except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                        # The worker died under this request (or while its answer was on the
                        # wire): all or nothing is stored, and the unchanged batch is sent again.
                        present = stored_count(db_url, cid, ids)
                        assert present in (0, len(ids)), f"{turn}: {present} of {len(ids)} events stored"
                        (cut_stored if present else cut_absent).append(turn)
                else:
                    raise AssertionError(f"{turn}: no answer in {ATTEMPTS} attempts")
                assert response.status_code == 200, (response.text, hub.log()[-6000:])
                last = seq + len(events) - 1
                assert response.json() == {"schema": ACK, "conversation_id": cid, "last_sequence": last}
                acked[turn] = (cid, seq, last)
                written[a] += 1
                seq = last + 1
            return True

        def killer() -> int:
            rng = random.Random()
            killed: set[int] = set()
            deadline = time.monotonic() + KILLING_S
            try:
                # Until enough kills, or the deadline, or the writers are done (with nothing
                # left to cut, waiting on would only outlast the test's patience).
                while len(killed) < KILLS and time.monotonic() < deadline and not done.is_set():
                    time.sleep(rng.uniform(0.01, 0.08))
                    # A worker holding an accepted connection is mid-request right now.
                    busy = [pid for pid in workers_holding(hub, established(local_port=hub.port))
                             if pid not in killed]  # a killed worker lingers until gunicorn reaps it
                    if busy:
                        victim = rng.choice(busy)
                        os.kill(victim, signal.SIGKILL)
                        killed.add(victim)
            finally:
                done.set()
            return len(killed)

        started = time.monotonic()
        kill_job = Job(killer)
        writers = [Job(writer, n) for n in range(WRITERS)]
        try:
            for job in writers:
                job.result(timeout=KILLING_S + 60)
        finally:
            done.set()
        kills = kill_job.result(timeout=10)
        elapsed = time.monotonic() - started

    cuts = len(cut_absent) + len(cut_stored)
    print(f"\n{kills} kills, {cuts} requests cut ({len(cut_absent)} before commit, "
          f"{len(cut_stored)} after), {sum(written)} batches in {elapsed:.1f} s")
    # The kills really landed mid-request, or this test would prove nothing.
    assert cuts >= 3, (kills, cuts)
    assert len(acked) == sum(written) and all(written[n * ARCHIVES_PER_WRITER] for n in range(WRITERS))

    per_batch = MESSAGES + 2
    for a, cid in enumerate(cids):
        rows = sql("SELECT sequence, event_id, client_turn_id, kind FROM bz_agent_conversation_events "
                   "WHERE archive_id = %s ORDER BY sequence", (cid,))
        assert [r[0] for r in rows] == list(range(1, written[a] * per_batch + 1))
        assert len({r[1] for r in rows}) == len(rows)
        # Each batch whole, contiguous and in order, where its acknowledgement placed it.
        for number in range(written[a]):
            turn = f"a{a}-turn-{number}"
            ack_cid, first, last = acked[turn]
            assert ack_cid == cid and (first, last) == (number * per_batch + 1, (number + 1) * per_batch)
            expected = [(first + i, e["event_id"], turn, e["kind"])
                        for i, e in enumerate(batch(a, number, first))]
            assert [tuple(r) for r in rows[first - 1:last]] == expected
        header = sql("SELECT last_sequence, turn_count, message_count, running_turn_id, last_turn_status, "
                     "text_bytes FROM bz_agent_conversation_archives WHERE id = %s", (cid,))
        text_bytes = sql("SELECT coalesce(sum(octet_length(content)), 0) FROM bz_agent_conversation_events "
                         "WHERE archive_id = %s", (cid,))[0][0]
        assert header == [(written[a] * per_batch, written[a], written[a] * MESSAGES, None,
                           "completed" if written[a] else None, text_bytes)]
    assert sql("SELECT count(*) FROM bz_agent_conversation_events")[0][0] == sum(written) * per_batch


# ============================================================================= B. tool dispatch

CREDIT_TOOL = "customer_update_credit_limit"   # a write, timeout 10 s; approval above 10000
SMALL_CREDIT = {"customer_id": "C-100234", "credit_limit": 500}
BIG_CREDIT = {"customer_id": "C-100234", "credit_limit": 50000}
HOLD_MS = 8000  # the business system's delay before answering: the hub worker waits inside it
INV = hashlib.sha256(b"inv-crash").hexdigest()  # invocation ids are 64 lowercase hex digits


class HubAgent:
    def __init__(self, hub: GunicornHub, session: dict):
        self.url = hub.url
        self.headers = session_bearer(session)

    def invoke_body(self, invocation_id: str, arguments: dict) -> dict:
        response = requests.get(f"{self.url}/agent-api/v1/tools?route=desk", headers=self.headers, timeout=30)
        assert response.status_code == 200, response.text
        return {"invocation_id": invocation_id, "route": "desk", "tool": CREDIT_TOOL, "arguments": arguments,
                "capability_revision": response.json()["capability_revision"]}

    def invoke(self, body: dict) -> requests.Response:
        return requests.post(self.url + INVOCATIONS, json=body, headers=self.headers, timeout=30)

    def resume(self, invocation_id: str) -> requests.Response:
        return requests.post(f"{self.url}{INVOCATIONS}/{invocation_id}/resume", json={}, headers=self.headers,
                             timeout=30)

    def receipt(self, invocation_id: str) -> requests.Response:
        return requests.get(f"{self.url}{INVOCATIONS}/{invocation_id}/receipt", headers=self.headers,
                            timeout=30)


def status_of(response: requests.Response) -> str:
    assert response.status_code == 200, response.text
    body = response.json()
    if body.get("read_only") is True:  # a receipt: the result as stored, nested
        body = body["result"]
    # Only a call still running elsewhere may be asked again as it is.
    assert body["auto_retry_allowed"] is (body["status"] == "in_progress")
    assert "result" not in body or body["status"] not in ("in_progress", "reconciliation_required")
    return body["status"]


@pytest.mark.parametrize("path", ["direct", "approved"])
def test_a_worker_killed_during_a_dispatch_leaves_it_reconciliation_required(
        path, db_url, governed, business, cli, sql):
    env = {"DEMO_CRM_SECRET": DEMO_SECRETS["crm"], "DEMO_ERP_SECRET": DEMO_SECRETS["erp"]}
    with GunicornHub(db_url, workers=2, env=env) as hub:
        agent = HubAgent(hub, governed)
        body = agent.invoke_body(INV, SMALL_CREDIT if path == "direct" else BIG_CREDIT)
        if path == "approved":
            assert status_of(agent.invoke(body)) == "awaiting_approval"
            token = admin_token(cli, "ann", "approver")
            [approval] = requests.get(hub.url + "/admin/api/tool-approvals?status=pending", timeout=30,
                                      headers=bearer(token)).json()["items"]
            decided = requests.post(f"{hub.url}/admin/api/tool-approvals/{approval['id']}/approve",
                                    headers=bearer(token), json={"args_hash": approval["args_hash"]},
                                    timeout=30)
            assert decided.status_code == 200, decided.text
            assert business.executions() == []

        business.fault(CREDIT_TOOL, "delay", 1, delay_ms=HOLD_MS)
        outcome: dict = {}

        def client() -> None:
            try:
                outcome["response"] = agent.invoke(body) if path == "direct" else agent.resume(INV)
            except requests.ConnectionError as err:
                outcome["error"] = err

        caller = threading.Thread(target=client, daemon=True)
        caller.start()
        deadline = time.monotonic() + 15
        while not business.executions(CREDIT_TOOL):  # recorded before the business system waits
            assert time.monotonic() < deadline, "the call never reached the business system"
            time.sleep(0.02)
        job_id = sql("SELECT id::text FROM bz_tool_invocations WHERE invocation_id = %s", (INV,))[0][0]
        assert sql("SELECT state FROM bz_tool_journal WHERE job_id = %s", (job_id,)) == [("dispatching",)]

        # While its dispatcher is alive and waiting, the call reads in_progress (the other worker
        # answers): no false alarm for a slow business system.
        assert status_of(agent.resume(INV)) == "in_progress"
        assert sql("SELECT state FROM bz_tool_journal WHERE job_id = %s", (job_id,)) == [("dispatching",)]

        [dispatcher] = workers_holding(hub, established(remote_port=int(business.url.rsplit(":", 1)[1])))
        os.kill(dispatcher, signal.SIGKILL)
        caller.join(timeout=15)
        assert "error" in outcome and "response" not in outcome, outcome  # the client's request died with it
        deadline = time.monotonic() + 15  # gunicorn reaps the dead worker and starts another
        while dispatcher in hub.worker_pids() or len(hub.worker_pids()) < hub.workers:
            assert time.monotonic() < deadline, hub.worker_pids()
            time.sleep(0.05)

        # Known interrupted at once, not after the tool's timeout and grace. PostgreSQL releases
        # the dead worker's lock as soon as it sees the connection closed: allow it a moment.
        deadline = time.monotonic() + 5
        while (state := status_of(agent.resume(INV))) == "in_progress":
            assert time.monotonic() < deadline, "still in_progress with its dispatcher gone"
            time.sleep(0.05)
        assert state == "reconciliation_required"
        for _ in range(3):
            assert status_of(agent.resume(INV)) == "reconciliation_required"
        assert status_of(agent.invoke(body)) == "reconciliation_required"  # the client's own retry
        receipt = agent.receipt(INV)
        assert status_of(receipt) == "reconciliation_required"
        assert receipt.json()["journal_state"] == "uncertain"

    assert sql("SELECT status, reason, business_status FROM bz_tool_invocations WHERE id = %s",
               (job_id,)) == [("reconciliation_required", "no_outcome_recorded", None)]
    assert sql("SELECT state, failure, http_status, finished_at IS NOT NULL FROM bz_tool_journal") == [
        ("uncertain", "no_outcome_recorded", None, True)]
    if path == "approved":
        assert sql("SELECT status, consumed_at IS NOT NULL FROM bz_tool_approvals") == [("approved", True)]
    # Executed exactly once (it was held after executing), and never sent again.
    [execution] = business.executions()
    assert (execution["operation"], execution["job_id"], execution["on_behalf_of"], execution["status"]) == (
        CREDIT_TOOL, job_id, "tenant-7:user-42", 200)
