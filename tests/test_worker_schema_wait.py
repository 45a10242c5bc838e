"""A hub's background workers wait quietly for a schema that is still being applied (a fresh
demo serves before it migrates), and still report a table missing once the schema is there."""
from __future__ import annotations

import logging
import threading
import time

import psycopg

from admin_app import create_app, migrations
from admin_app.notifications import worker
from admin_app.notifications.bell import BELL
from admin_app.notifications.worker import DeliveryWorker, Report
from tests.conftest import SQL_DIR


def _until(condition, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _loud(caplog) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_delivery_worker_waits_quietly_for_the_schema_then_delivers(empty_db, tmp_path, caplog,
                                                                         monkeypatch):
    caplog.set_level(logging.INFO, logger="admin_app")
    passes: list[Report] = []
    passed = threading.Event()
    real_pass = worker.deliver_due

    def spy(*args, **kwargs) -> Report:
        try:
            report = real_pass(*args, **kwargs)
        finally:
            passed.set()
        passes.append(report)
        return report

    monkeypatch.setattr(worker, "deliver_due", spy)
    app = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    hub = app.extensions["bailing"]
    deliveries = DeliveryWorker(hub.db, hub.settings, poll_seconds=0.1)
    deliveries.ensure_started()
    try:
        # Not migrated: several schema checks, no pass, and nothing said above INFO.
        assert _until(lambda: any("wait for the schema" in r.getMessage() for r in caplog.records))
        time.sleep(0.4)
        assert not passed.is_set() and passes == []
        assert _loud(caplog) == []
        waiting = [r for r in caplog.records if "wait for the schema" in r.getMessage()]
        assert len(waiting) == 1 and waiting[0].levelno == logging.INFO  # said once

        migrations.upgrade(empty_db, SQL_DIR)
        assert _until(passed.is_set), "no delivery pass after the schema was applied"
        assert _until(lambda: passes != [])
        assert passes[0].as_json() == Report().as_json()  # a real pass over the (empty) outbox
        assert _loud(caplog) == []

        # Once the schema is there, a table missing is a real failure, and it is said.
        with psycopg.connect(empty_db, autocommit=True) as conn:
            conn.execute("DROP TABLE bz_approval_delivery_attempts, bz_approval_deliveries CASCADE")
        BELL.ring()
        assert _until(lambda: any("notification deliveries paused" in m for m in _loud(caplog)))
        assert any("bz_approval_deliveries" in m for m in _loud(caplog))
    finally:
        deliveries.stop(5)
        hub.db.dispose()
    assert not deliveries.runner.thread.is_alive()


def test_a_worker_stopped_while_it_waits_for_the_schema_ends_without_a_pass(empty_db, tmp_path, caplog,
                                                                              monkeypatch):
    caplog.set_level(logging.INFO, logger="admin_app")
    monkeypatch.setattr(worker, "deliver_due", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a pass")))
    app = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    hub = app.extensions["bailing"]
    deliveries = DeliveryWorker(hub.db, hub.settings, poll_seconds=5.0)
    deliveries.ensure_started()
    try:
        assert _until(lambda: any("wait for the schema" in r.getMessage() for r in caplog.records))
        started = time.monotonic()
        deliveries.stop(5)
        assert time.monotonic() - started <= 1.0  # the wait ends with the stop, not its poll
        assert not deliveries.runner.thread.is_alive()
        assert _loud(caplog) == []
    finally:
        hub.db.dispose()
