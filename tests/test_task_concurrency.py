"""Task limits under real concurrency and real crashes, served by gunicorn as in production.

A. Fifty members' calls at once on a task with a write budget of 5 and 2 permits: the business
   system never sees more than 2 calls of the task at a time, exactly 5 writes ever run, and the
   stored counters equal the records.
B. A worker killed while its call waits in the business system: the task keeps that call's permit
   and reservation (its outcome is unknown), a resume marks it unknown without sending it again,
   and a task of one permit admits nothing more.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest
import requests

from tests.conftest import DEMO_CONTROL, DEMO_SECRETS, Business, LiveServer
from tests.gunicorn_hub import GunicornHub
from tests.task_world import CUSTOMER, INVOCATIONS, READ, SMALL, WRITE, World, binding, iid
from tests.test_crash import established, workers_holding

# What costs here is gunicorn workers and 50 callers; what they prove rests on PostgreSQL row locks,
# the same on any server.
pytestmark = pytest.mark.any_server

CALLERS = 50
BUDGET = 5
PERMITS = 2
HOLD_S = 0.15  # each business call takes this long, so that calls overlap
ENV = {"DEMO_CRM_SECRET": DEMO_SECRETS["crm"], "DEMO_ERP_SECRET": DEMO_SECRETS["erp"]}


class MeteredBusiness(Business):
    """The demo business system, holding each call a moment and counting how many it serves at
    once: the evidence of the permits, taken outside the hub."""

    def __init__(self):  # replaces Business.__init__, to wrap the app
        from admin_app.demo.business import create_business_app

        self.app = create_business_app(DEMO_SECRETS, control_token=DEMO_CONTROL)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.live = LiveServer(self._metered)
        self.url = self.live.url

    def _metered(self, environ, start_response):
        business_call = not environ["PATH_INFO"].startswith("/_demo/")
        if business_call:
            with self.lock:
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
            time.sleep(HOLD_S)
        try:
            return self.app(environ, start_response)
        finally:
            if business_call:
                with self.lock:
                    self.in_flight -= 1


@pytest.fixture
def metered(monkeypatch):
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    biz = MeteredBusiness()
    yield biz
    biz.live.stop()


def assert_counters_match_records(sql, task_id: str) -> dict:
    """I-09: the stored counters are the counts of the records, within the policy."""
    [(reserved, consumed, permits, revision, ledger, policy)] = sql(
        "SELECT write_reserved, write_consumed, active_permits, revision, ledger_sequence, policy "
        "FROM bz_agent_tasks WHERE task_id = %s", (task_id,))
    records = dict(sql("SELECT coalesce(budget_state, 'read'), count(*) FROM bz_agent_task_invocations "
                       "WHERE task_id = %s GROUP BY 1", (task_id,)))
    held = sql("SELECT count(*) FROM bz_agent_task_invocations WHERE task_id = %s "
               "AND permit_state IN ('held', 'unknown')", (task_id,))[0][0]
    assert reserved == records.get("reserved", 0) and consumed == records.get("consumed", 0)
    assert permits == held
    assert reserved + consumed <= policy["max_write_calls"] and permits <= policy["max_concurrent"]
    assert ledger >= revision >= 1
    events = sql("SELECT count(*) FROM bz_agent_task_events WHERE task_id = %s", (task_id,))[0][0]
    assert events == ledger  # one event per fact, numbered 1..ledger_sequence
    return {"write_reserved": reserved, "write_consumed": consumed, "active_permits": permits}


def most_permits_in_ledger(sql, task_id: str) -> int:
    """The most permits the task's own ledger ever shows held at once."""
    held = most = 0
    for (event,) in sql("SELECT event FROM bz_agent_task_events WHERE task_id = %s ORDER BY sequence", (task_id,)):
        held += {"dispatch_permitted": 1, "settled_confirmed_dispatched": -1}.get(event, 0)
        most = max(most, held)
    return most


def test_fifty_calls_at_once_never_exceed_the_budget_or_the_permits(server, cli, metered, sql, tmp_path, db_url):
    world = World(server, cli, metered, sql, tmp_path)
    members = [world.member(f"conv-{n}") for n in range(CALLERS)]
    task = world.create(members, max_write_calls=BUDGET, max_concurrent=PERMITS)
    runs = [m.turn(binding(task))["run_id"] for m in members]
    revision = members[0].revision()
    outcomes: Counter = Counter()
    refused_for_permits = Counter()
    start = threading.Barrier(CALLERS)

    with GunicornHub(db_url, workers=2, threads=16, env=ENV) as hub:
        def caller(n: int) -> None:
            body = members[n].invoke_body(WRITE, SMALL, f"load-{n}", runs[n], revision)
            start.wait()
            for _ in range(400):  # a full task answers at once; its caller asks again a moment later
                response = requests.post(hub.url + INVOCATIONS, json=body, headers=members[n].headers, timeout=60)
                answer = response.json()
                outcome = answer.get("status") if response.status_code == 200 else answer["error"]
                if outcome != "TASK_CONCURRENCY_EXHAUSTED":
                    outcomes[outcome] += 1
                    return
                refused_for_permits[n] += 1
                time.sleep(0.02)
            outcomes["gave up"] += 1

        threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        elapsed = time.monotonic() - started

    print(f"\n{dict(outcomes)}; {sum(refused_for_permits.values())} refusals for permits; "
          f"at most {metered.most} business calls at once; {elapsed:.1f} s")
    assert outcomes == {"executed": BUDGET, "TASK_WRITE_BUDGET_EXHAUSTED": CALLERS - BUDGET}
    assert len(metered.executions(WRITE)) == BUDGET
    assert metered.most <= PERMITS
    assert sum(refused_for_permits.values()) > 0  # the permit limit really bit
    assert most_permits_in_ledger(sql, task["task_id"]) == PERMITS
    assert assert_counters_match_records(sql, task["task_id"]) == {
        "write_reserved": 0, "write_consumed": BUDGET, "active_permits": 0}
    # Refused calls left nothing: one invocation, one journal row per executed call.
    assert sql("SELECT count(*) FROM bz_tool_invocations")[0][0] == BUDGET
    assert sql("SELECT count(*) FROM bz_tool_journal")[0][0] == BUDGET


def test_a_worker_killed_mid_dispatch_keeps_the_permit_and_the_reservation(server, cli, business, sql,
                                                                         tmp_path, db_url):
    world = World(server, cli, business, sql, tmp_path)
    member = world.member()
    task = world.create([member], max_write_calls=BUDGET, max_concurrent=1)
    run = member.turn(binding(task))["run_id"]
    body = member.invoke_body(WRITE, SMALL, "held", run, member.revision())
    business.fault(WRITE, "delay", 1, delay_ms=8000)
    outcome: dict = {}

    with GunicornHub(db_url, workers=2, env=ENV) as hub:
        def client() -> None:
            try:
                outcome["response"] = requests.post(hub.url + INVOCATIONS, json=body, headers=member.headers,
                                                    timeout=30)
            except requests.ConnectionError as err:
                outcome["error"] = err

        caller = threading.Thread(target=client, daemon=True)
        caller.start()
        deadline = time.monotonic() + 15
        while not business.executions(WRITE):
            assert time.monotonic() < deadline, "the call never reached the business system"
            time.sleep(0.02)
        assert assert_counters_match_records(sql, task["task_id"]) == {
            "write_reserved": 1, "write_consumed": 0, "active_permits": 1}
        [dispatcher] = workers_holding(hub, established(remote_port=int(business.url.rsplit(":", 1)[1])))
        os.kill(dispatcher, signal.SIGKILL)
        caller.join(timeout=15)
        assert "error" in outcome and "response" not in outcome, outcome

        # Killed: the permit and the reservation stay; nothing says the call did not happen.
        [record] = sql("SELECT budget_state, permit_state, outcome, is_terminal, attempt "
                       "FROM bz_agent_task_invocations WHERE invocation_id = %s", (iid("held"),))
        assert record == ("reserved", "held", None, False, 1)
        deadline = time.monotonic() + 10
        while True:  # PostgreSQL frees the dead worker's lock once it sees the connection gone
            resumed = requests.post(f"{hub.url}{INVOCATIONS}/{iid('held')}/resume", headers=member.headers,
                                    timeout=30)
            assert resumed.status_code == 200, resumed.text
            if resumed.json()["status"] != "in_progress":
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert resumed.json()["status"] == "reconciliation_required"
        [record] = sql("SELECT budget_state, permit_state, outcome, is_terminal, attempt "
                       "FROM bz_agent_task_invocations WHERE invocation_id = %s", (iid("held"),))
        assert record == ("reserved", "unknown", "unknown", False, 1)
        assert assert_counters_match_records(sql, task["task_id"]) == {
            "write_reserved": 1, "write_consumed": 0, "active_permits": 1}

        # Resuming again changes nothing and sends nothing; the task's one permit stays taken.
        again = requests.post(f"{hub.url}{INVOCATIONS}/{iid('held')}/resume", headers=member.headers, timeout=30)
        assert again.json()["status"] == "reconciliation_required"
        read = member.invoke_body(READ, CUSTOMER, "after", run, member.revision())
        refused = requests.post(hub.url + INVOCATIONS, json=read, headers=member.headers, timeout=30)
        assert refused.status_code == 409 and refused.json()["error"] == "TASK_CONCURRENCY_EXHAUSTED"
    assert len(business.executions(WRITE)) == 1
    assert business.executions(READ) == []
