"""The job reaper (CLIENT_API_AND_EXECUTOR.md §B.8): each serving process makes a pass every
`job_reaper_seconds` (Core: 60 s; the first one that long after the process's first request).

- A `dispatched` job whose lease has passed (its executor stopped heartbeating), or that was
  dispatched more than `job_dispatch_max_seconds` ago (Core's 2-hour hard cap, heartbeats or
  not), goes back to `queued`: claim fields cleared, `attempts` unchanged, a `lease_expired`
  event (Core writes none), and waiting claims are told at once.
- A `queued` job created more than `job_queue_ttl_seconds` ago (Core: 30 minutes, counted from
  `created_at`) ends `error` with a fixed text and an `expired` event; as in Core, no callback.

Core's third rule, "no lease and the executor silent for 3 minutes", has nothing to act on here:
every claim sets a lease. Several processes may reap at once: rows are taken with SKIP LOCKED, so
each is handled once."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..background import ProcessThread, next_pause
from ..config import Settings
from ..db import Database
from . import events
from .claims import announce

log = logging.getLogger(__name__)

QUEUE_TIMEOUT_TEXT = "The job waited in the queue longer than the hub allows and was not run."
ERROR_PAUSE_MAX_SECONDS = 600.0
BATCH = 500  # rows per statement; a pass repeats until none is left

_REQUEUE = text("""
    WITH stale AS (
        SELECT id, executor_id, executor_token,
               CASE WHEN lease_until < now() THEN 'lease' ELSE 'hard_cap' END AS reason
        FROM bz_jobs
        WHERE status = 'dispatched'
          AND (lease_until < now() OR dispatched_at < now() - make_interval(secs => :hard_cap))
        ORDER BY id LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE bz_jobs j SET status = 'queued', executor_id = NULL, executor_token = NULL, claim_token = NULL,
        claimed_at = NULL, dispatched_at = NULL, lease_until = NULL, updated_at = now()
    FROM stale WHERE j.id = stale.id
    RETURNING j.id, j.target, stale.executor_id, stale.executor_token, stale.reason
""")

_EXPIRE = text("""
    WITH old AS (
        SELECT id FROM bz_jobs
        WHERE status = 'queued' AND created_at < now() - make_interval(secs => :ttl)
        ORDER BY id LIMIT :batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE bz_jobs j SET status = 'error', error = :error, finished_at = now(), updated_at = now()
    FROM old WHERE j.id = old.id
    RETURNING j.id
""")


def requeue_stale(db: Session, settings: Settings) -> int:
    rows = db.execute(_REQUEUE, {"hard_cap": settings.job_dispatch_max_seconds, "batch": BATCH}).all()
    for row in rows:
        events.record(db, row.id, "lease_expired", "reaper",
                      {"reason": row.reason, "executor_id": row.executor_id, "token": row.executor_token})
    for target in sorted({row.target for row in rows}):
        announce(db, target)
    return len(rows)


def expire_queued(db: Session, settings: Settings) -> int:
    rows = db.execute(_EXPIRE, {"ttl": settings.job_queue_ttl_seconds, "batch": BATCH,
                                "error": QUEUE_TIMEOUT_TEXT}).all()
    for row in rows:
        events.record(db, row.id, "expired", "reaper", {"ttl_seconds": settings.job_queue_ttl_seconds})
    return len(rows)


def reap(database: Database, settings: Settings) -> dict[str, int]:
    """One pass: expire first (a job just put back is not expired in the same pass), then requeue;
    each batch in a transaction of its own."""
    report = {"expired": 0, "requeued": 0}
    for key, step in (("expired", expire_queued), ("requeued", requeue_stale)):
        while True:
            with database.session() as db:
                done = step(db, settings)
            report[key] += done
            if done < BATCH:
                break
    return report


@dataclass
class Reaper:
    """The reaper thread of one hub process, started by its first request."""

    database: Database
    settings: Settings
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-job-reaper", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop(timeout)

    def _pass(self) -> Any:
        report = reap(self.database, self.settings)
        if report["expired"] or report["requeued"]:
            log.info("job reaper: %d requeued, %d expired", report["requeued"], report["expired"])
        return report

    def _run(self) -> None:
        every = float(self.settings.job_reaper_seconds)
        wait = every
        while not self.runner.stop_event.wait(wait):
            wait = next_pause(self._pass, "job reaper", wait, every, max(every, ERROR_PAUSE_MAX_SECONDS))
