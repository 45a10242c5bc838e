"""BAILING_AUDIT_RETENTION_DAYS: how long the configuration-change log keeps its rows, and the
background pass of each serving process that purges it (first 60 s after the process starts,
then every 6 h, only while the setting is above 0). Several processes may purge at once: the
DELETE is idempotent, and only a pass that deleted something records the purge."""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

from ..background import ProcessThread, next_pause
from ..db import Database
from .log import prune

log = logging.getLogger(__name__)

ENV = "BAILING_AUDIT_RETENTION_DAYS"
FIRST_PASS_SECONDS = 60.0
PASS_SECONDS = 6 * 3600.0


def days_from(raw: str | None) -> int | float:
    """`max(0, number)`; unset, empty, not a number or not finite is 0, keep forever. Fractions
    are taken as they are (a whole number reads back as one)."""
    try:
        value = float((raw or "").strip() or "0")
    except ValueError:
        return 0
    if not math.isfinite(value) or value <= 0:
        return 0
    return int(value) if value.is_integer() else value


def days_from_env() -> int | float:
    return days_from(os.environ.get(ENV))


def prune_once(database: Database, days: int | float) -> dict:
    with database.session() as db:
        return prune(db, days)


@dataclass
class RetentionWorker:
    """The purge thread of one hub process, started once by its first request: the schedule
    counts from the process's start."""

    database: Database
    days: int | float
    first_pass_seconds: float = FIRST_PASS_SECONDS
    pass_seconds: float = PASS_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-audit-retention", self._run, again=False)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop(timeout)

    def _prune(self) -> None:
        report = prune_once(self.database, self.days)
        if report["deleted"]:
            log.info("config audit retention: %d rows before %s deleted", report["deleted"], report["cutoff"])

    def _run(self) -> None:
        wait = self.first_pass_seconds
        while not self.runner.stop_event.wait(wait):
            # A failed pass is tried again at the next one, 6 h on, not sooner.
            next_pause(self._prune, "config audit retention", self.pass_seconds, self.pass_seconds,
                       self.pass_seconds)
            wait = self.pass_seconds


def init_app(app) -> None:
    """Start the purge with the process's first request, when the setting asks for one."""
    days = days_from_env()
    if days > 0:
        worker = RetentionWorker(app.extensions["bailing"].db, days)
        app.extensions["bailing.audit_retention"] = worker
        app.before_request(worker.ensure_started)
