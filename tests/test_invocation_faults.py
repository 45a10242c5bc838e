"""A governed call whose hub loses its database while the business system holds the request.

Once the journal says `dispatching` the request may have left, so whatever fails afterwards (the
connection that records the answer, or the whole database) is answered as what it is: the outcome
is unknown (`reconciliation_required`, `auto_retry_allowed: false`), never "nothing was sent".
The business system sees one request; the receipt, a later resume, the trace and a task's
counters all say the same; a resume sends nothing. Before that moment a storage failure is 503
`invocation_storage_unavailable` and writes nothing, authentication included.

The cuts are real: the dispatcher's backend is terminated with pg_terminate_backend, and for the
whole database, new connections are refused (ALLOW_CONNECTIONS false) and every backend of the
test's database is terminated.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
import pytest
import requests

from tests.helpers import assert_error, assert_ok, bearer
from tests.task_world import (BIG, INVOCATIONS, SMALL, WRITE, World, approve, binding, counters, iid,
                              stored)

HOLD_MS = 1500  # how long the business system holds the call after executing it
NOTHING_SENT = "nothing was sent"


class Database:
    """The test's database, cut from outside: from the server's maintenance database, since a
    database cannot refuse connections while the one giving the order is its own."""

    def __init__(self, db_url: str):
        self.name = conninfo_to_dict(db_url)["dbname"]
        self.control = psycopg.connect(make_conninfo(db_url, dbname="postgres"), autocommit=True)

    def close(self) -> None:
        self.control.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS true')
        self.control.close()

    def dispatcher(self) -> int:
        """The backend holding a dispatch's lock (the only session-level advisory lock here)."""
        rows = self.control.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = %s)", (self.name,)).fetchall()
        assert len(rows) == 1, rows
        return rows[0][0]

    def terminate(self, pid: int) -> None:
        assert self.control.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone()[0] is True

    @contextmanager
    def down(self):
        """No connection to the database: the ones open are ended, new ones refused."""
        self.control.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS false')
        self.control.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s",
                             (self.name,))
        try:
            yield
        finally:
            self.control.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS true')


@pytest.fixture
def database(db_url):
    cut = Database(db_url)
    yield cut
    cut.close()


class Held:
    """A call sent on a thread while the business system holds it after executing it."""

    def __init__(self, world: World, send):
        world.business.fault(WRITE, "delay", 1, delay_ms=HOLD_MS)
        self.response: requests.Response | None = None
        self.thread = threading.Thread(target=self._run, args=(send,), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not world.business.executions(WRITE):  # recorded before the business system waits
            assert time.monotonic() < deadline, "the call never reached the business system"
            time.sleep(0.02)

    @classmethod
    def invoke(cls, world: World, member, name: str, run: str | None = None) -> Held:
        """A write invoked under `name` (in `run`, when given), held by the business system."""
        body = member.invoke_body(WRITE, SMALL, name, run, member.revision())
        return cls(world, lambda: requests.post(world.server.url + INVOCATIONS, headers=member.headers,
                                                json=body, timeout=30))

    def _run(self, send) -> None:
        self.response = send()

    def answer(self) -> dict:
        self.thread.join(timeout=30)
        assert self.response is not None, "no answer"
        return assert_ok(self.response)


def unknown(result: dict, world: World) -> None:
    """The answer of a call whose outcome the hub cannot know."""
    assert (result["state"], result["status"], result["ok"], result["auto_retry_allowed"]) == (
        "reconciliation_required", "reconciliation_required", False, False), result
    assert NOTHING_SENT not in result["text"].lower()
    [(key,)] = world.sql("SELECT idempotency_key FROM bz_tool_journal")
    assert key in result["text"]  # what support reconciles it by
    assert world.business.executions(WRITE)[0]["idempotency_key"] == key


def settled_as_unknown(world: World, name: str, member, job_id: str) -> None:
    """Receipt, resume, journal and trace agree: outcome unknown, and nothing is sent again."""
    receipt = assert_ok(member.receipt_raw(name))
    assert receipt["result"]["state"] == "reconciliation_required"
    assert receipt["result"]["auto_retry_allowed"] is False
    assert receipt["dispatch_state"] == "unknown"
    for _ in range(2):
        resumed = assert_ok(member.resume_raw(name))
        assert (resumed["state"], resumed["auto_retry_allowed"]) == ("reconciliation_required", False)
        assert NOTHING_SENT not in resumed["text"].lower()
    assert world.sql("SELECT state, http_status FROM bz_tool_journal") == [("uncertain", None)]
    assert world.sql("SELECT status, reason, business_status FROM bz_tool_invocations WHERE invocation_id = %s",
                     (iid(name),)) == [("reconciliation_required", "no_outcome_recorded", None)]
    receipt = assert_ok(member.receipt_raw(name))
    assert (receipt["journal_state"], receipt["dispatch_state"]) == ("uncertain", "unknown")
    job = assert_ok(world.server.get(f"/admin/api/tool-jobs/{job_id}", headers=world.admin_headers))["job"]
    assert (job["status"], job["reason"], job["journal"]["state"]) == (
        "reconciliation_required", "no_outcome_recorded", "uncertain")
    [execution] = world.business.executions()  # one request, never sent again
    assert (execution["operation"], execution["job_id"], execution["status"]) == (WRITE, job_id, 200)


def job_of(world: World, name: str) -> str:
    [(job_id,)] = world.sql("SELECT id::text FROM bz_tool_invocations WHERE invocation_id = %s", (iid(name),))
    return job_id


# ================================================================ the connection that records the answer

def test_invoke_whose_recording_connection_is_cut_answers_unknown_and_sends_once(world, database):
    member = world.member()
    held = Held.invoke(world, member, "cut")
    assert world.sql("SELECT state FROM bz_tool_journal") == [("dispatching",)]
    database.terminate(database.dispatcher())
    result = held.answer()
    unknown(result, world)
    # Recorded at once on another connection: no dispatching row is left behind.
    assert world.sql("SELECT state, failure FROM bz_tool_journal") == [("uncertain", "no_outcome_recorded")]
    settled_as_unknown(world, "cut", member, job_of(world, "cut"))


def test_an_approved_resume_whose_recording_connection_is_cut_answers_unknown(world, database):
    member = world.member()
    waiting = member.invoke(WRITE, BIG, "approved-cut", None)
    assert waiting["state"] == "awaiting_approval"
    approve(world, waiting)
    held = Held(world, lambda: requests.post(f"{world.server.url}{INVOCATIONS}/{iid('approved-cut')}/resume",
                                             headers=member.headers, timeout=30))
    database.terminate(database.dispatcher())
    unknown(held.answer(), world)
    settled_as_unknown(world, "approved-cut", member, job_of(world, "approved-cut"))
    assert world.sql("SELECT status, consumed_at IS NOT NULL FROM bz_tool_approvals") == [("approved", True)]


def test_a_failing_record_of_the_outcome_answers_unknown(world, database):
    """The database stays up but refuses to record the answer (a trigger here; a full disk or a
    failing commit alike): the call is still answered as unknown and recorded so."""
    world.sql("""CREATE FUNCTION refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN IF NEW.state = 'completed' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$""")
    world.sql("CREATE TRIGGER refuse_outcome BEFORE UPDATE ON bz_tool_journal FOR EACH ROW "
              "EXECUTE FUNCTION refuse_outcome()")
    member = world.member()
    result = member.invoke(WRITE, SMALL, "refused-record", None)
    unknown(result, world)
    settled_as_unknown(world, "refused-record", member, job_of(world, "refused-record"))


# ================================================================ the whole database

def test_invoke_with_the_database_gone_during_the_call_answers_unknown(world, database):
    member = world.member()
    other = member.invoke_body(WRITE, SMALL, "while-down", None, member.revision())
    held = Held.invoke(world, member, "gone")
    with database.down():
        result = held.answer()
        unknown_without_database(result)
        # Meanwhile the agent's other calls cannot be judged: 503 before anything is sent,
        # authentication included, and never the internal error.
        assert_error(requests.post(world.server.url + INVOCATIONS, headers=member.headers, json=other,
                                   timeout=30), 503, "invocation_storage_unavailable")
        for response in (member.resume_raw("gone"), member.receipt_raw("gone")):
            assert_error(response, 503, "invocation_storage_unavailable")
    # The journal row was left `dispatching`, its dispatcher gone: every reader says unknown.
    assert world.sql("SELECT state FROM bz_tool_journal") == [("dispatching",)]
    receipt = assert_ok(member.receipt_raw("gone"))
    assert (receipt["result"]["state"], receipt["dispatch_state"], receipt["result_source"]) == (
        "reconciliation_required", "unknown", "journal")
    job = assert_ok(world.server.get(f"/admin/api/tool-jobs/{job_of(world, 'gone')}",
                                     headers=world.admin_headers))["job"]
    assert (job["status"], job["reason"], job["journal"]["state"]) == (
        "reconciliation_required", "no_outcome_recorded", "dispatching")
    settled_as_unknown(world, "gone", member, job_of(world, "gone"))
    assert world.sql("SELECT count(*) FROM bz_tool_invocations WHERE invocation_id = %s",
                     (iid("while-down"),)) == [(0,)]


def unknown_without_database(result: dict) -> None:
    """Answered from what was known before the call, with nothing to read it from."""
    assert (result["state"], result["ok"], result["auto_retry_allowed"], result["reason"]) == (
        "reconciliation_required", False, False, "no_outcome_recorded"), result
    assert result["tool"] == WRITE and result["invocation_id"] == iid("gone")
    assert "idempotency key" in result["text"] and NOTHING_SENT not in result["text"].lower()


def test_a_task_managed_call_cut_mid_dispatch_keeps_its_permit_and_reservation(world, database):
    member = world.member()
    task = world.create([member], max_write_calls=3, max_concurrent=2)
    run = member.turn(binding(task))["run_id"]
    held = Held.invoke(world, member, "task-cut", run)
    assert counters(world, task["task_id"]) == (1, 0, 1)
    with database.down():
        unknown_task = held.answer()
    assert (unknown_task["state"], unknown_task["auto_retry_allowed"]) == ("reconciliation_required", False)
    settled_as_unknown(world, "task-cut", member, job_of(world, "task-cut"))
    # Unknown keeps the reservation and the permit: the task cannot spend them again.
    assert counters(world, task["task_id"]) == (1, 0, 1)
    [record] = world.detail(task["task_id"])["invocations"]
    assert (record["permit_state"], record["outcome"], record["terminal"]) == ("unknown", "unknown", False)


# ================================================================ before anything is sent

def test_with_the_database_down_a_call_is_503_storage_unavailable_and_writes_nothing(world, database):
    member = world.member()
    revision = member.revision()
    before = stored(world)
    body = member.invoke_body(WRITE, SMALL, "never", None, revision)
    token = member.session["access_token"]
    stranger = token[:-1] + ("b" if token.endswith("a") else "a")  # well formed, nobody's
    with database.down():
        answers = [
            requests.post(world.server.url + INVOCATIONS, headers=member.headers, json=body, timeout=30),
            member.resume_raw("never"),
            member.receipt_raw("never"),
            world.server.get(f"{INVOCATIONS}/inspection-capabilities", headers=member.headers),
            # A stranger too: the bearer cannot be checked, so it is not called unauthorized.
            requests.post(world.server.url + INVOCATIONS, headers=bearer(stranger), json=body, timeout=30),
        ]
    for response in answers:
        error = assert_error(response, 503, "invocation_storage_unavailable")
        assert "nothing was sent" in error["message"]
    assert stored(world) == before
    assert world.business.executions() == []
    # Once the database is back, the same call runs, once.
    assert member.invoke(WRITE, SMALL, "never", None)["state"] == "executed"
    assert len(world.business.executions(WRITE)) == 1

