"""Governed calls share the connection pool instead of exhausting it.

A burst of simultaneous invocations against a slow business system (the demo one, on loopback,
answering each call after half a second) on a threaded server: every call answers 200 and is
executed once, and no request thread ever asks the pool for a connection while it already holds
one (that wait is what deadlocked ten calls on a pool of ten: each held its request's connection
and waited for a second one for the dispatch lock)."""
from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter

import requests
from sqlalchemy import event

from tests.conftest import LiveServer
from tests.helpers import session_bearer

INVOCATIONS = "/agent-api/v1/tool-invocations"
TOOL = "customer_get"  # a read: dispatched at once, no approval
BURST = 50
DELAY_MS = 500


def invocation_id(n: int) -> str:
    return hashlib.sha256(f"burst-{n}".encode()).hexdigest()


class PoolWatch:
    """Per request thread, how many pooled connections it holds; a checkout by a thread that
    already holds one is recorded (it may wait on a pool its own connection keeps full)."""

    def __init__(self, engine):
        self.lock = threading.Lock()
        self.held: Counter = Counter()
        self.nested: list[int] = []
        self.most = 0
        self.engine = engine
        event.listen(engine, "checkout", self.checkout)
        event.listen(engine, "checkin", self.checkin)

    def checkout(self, *_):
        me = threading.get_ident()
        with self.lock:
            if self.held[me]:
                self.nested.append(me)
            self.held[me] += 1
            self.most = max(self.most, sum(self.held.values()))

    def checkin(self, *_):
        with self.lock:
            me = threading.get_ident()
            if self.held[me]:
                self.held[me] -= 1

    def close(self):
        event.remove(self.engine, "checkout", self.checkout)
        event.remove(self.engine, "checkin", self.checkin)


def test_a_burst_of_governed_calls_on_a_slow_business_system_never_exhausts_the_pool(
        app, governed, business, sql):
    hub = app.extensions["bailing"]
    pool_limit = hub.settings.db_pool_size + hub.settings.db_max_overflow
    assert BURST > 4 * pool_limit  # the burst far outnumbers the connections
    business.fault(TOOL, "delay", BURST, delay_ms=DELAY_MS)
    server = LiveServer(app)
    watch = PoolWatch(hub.db.engine)
    try:
        tools = server.get("/agent-api/v1/tools?route=desk", headers=session_bearer(governed))
        assert tools.status_code == 200, tools.text
        revision = tools.json()["capability_revision"]
        barrier = threading.Barrier(BURST)
        answers: dict[int, tuple[int, dict | str]] = {}

        def call(n: int) -> None:
            barrier.wait(timeout=30)
            response = requests.post(
                server.url + INVOCATIONS, headers=session_bearer(governed), timeout=60, json={
                    "invocation_id": invocation_id(n), "route": "desk", "tool": TOOL,
                    "capability_revision": revision, "arguments": {"customer_id": "C-100234"}})
            try:
                answers[n] = (response.status_code, response.json())
            except ValueError:
                answers[n] = (response.status_code, response.text)

        threads = [threading.Thread(target=call, args=(n,), daemon=True) for n in range(BURST)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        print(f"\n{BURST} governed calls at once on a pool of {pool_limit}: "
              f"{time.monotonic() - started:.1f} s, at most {watch.most} connections checked out")
        assert not any(thread.is_alive() for thread in threads)
    finally:
        watch.close()
        server.stop()

    statuses = Counter(status for status, _ in answers.values())
    assert statuses == {200: BURST}, {n: a for n, a in answers.items() if a[0] != 200}
    assert all(body["status"] == "executed" and body["business_status"] == 200
               for _, body in answers.values())
    assert watch.nested == [], f"{len(watch.nested)} checkouts by threads already holding one"
    assert 1 <= watch.most <= pool_limit
    # Every call dispatched once and recorded; no dispatch lock outlived its request.
    assert len(business.executions(TOOL)) == BURST
    assert sql("SELECT status, count(*) FROM bz_tool_invocations GROUP BY status") == [("executed", BURST)]
    assert sql("SELECT state, count(*) FROM bz_tool_journal GROUP BY state") == [("completed", BURST)]
    assert sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
               "(SELECT oid FROM pg_database WHERE datname = current_database())") == [(0,)]


def test_the_pool_watch_sees_a_nested_checkout(app):
    """The check above can fail: a thread holding a connection that takes another is caught."""
    engine = app.extensions["bailing"].db.engine
    watch = PoolWatch(engine)
    try:
        with engine.connect():
            with engine.connect():
                pass
    finally:
        watch.close()
    assert watch.nested == [threading.get_ident()]
