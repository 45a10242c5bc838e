"""Delivering completion callbacks (CLIENT_API_AND_EXECUTOR.md §D.1): claim a due callback under a
lease, post it signed outside any transaction, record the attempt.

As the approval notifications' worker does (notifications/worker.py): the claim is a short
transaction (`FOR UPDATE SKIP LOCKED` picks a due row no other worker is claiming; its
`leased_until` and `next_at` move to the lease's end, and that `leased_until` is the lease's
token), the request runs with no transaction open, and the outcome is recorded in a second short
transaction by the lease's holder only. A worker that stops mid-send leaves a row whose lease runs
out: the next claim records the lost attempt and carries on with the schedule.

Core's rules: attempts at 0, +2 s and +10 s, each within 10 s; any 2xx is delivered; a 4xx other
than 429 is final; a 5xx, a 429 or no answer leads to the next attempt. Stricter than Core: a
redirect is not followed and is final (the signed record goes only where the client named); the
receiver's answer is never read; and a callback that fails for good is `dead`, in the dead-letter
list an operator sees, resolves and replays (dead_letters.py), where Core only writes an audit row.

The signing secret is the job's client token, as Core's (the hub keeps it sealed with its secret
key). A token issued before the hub kept it so, or revoked, cannot sign: the attempt fails with a
message that says so, and nothing is ever sent unsigned.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..background import ProcessThread, next_pause, wait_for_schema
from ..config import Settings
from ..db import Database
from ..identity import clients
from ..notifications.senders import Outcome, post
from . import callbacks, events

log = logging.getLogger(__name__)

RECORD_SECONDS = 30.0  # the lease's margin past the attempt's deadline, for recording its outcome
ERROR_PAUSE_MAX_SECONDS = 300.0
ERROR_MAX = 500
INTERRUPTED = "no outcome was recorded before the lease ran out (the sending process stopped?)"
NO_SECRET = ("the client token must be reissued (bailing-admin clients token <app_id>): "  # noqa: S105 - a message
             "the hub cannot sign with a token issued before it kept tokens sealed, nor with a revoked one; "
             "nothing was sent")
REDIRECT = "redirects are not followed: the callback URL must name the receiver itself"


@dataclass(frozen=True)
class Policy:
    """The schedule: `delays[n-1]` seconds after the n-th attempt failed comes the next one."""

    delays: tuple[float, ...]
    timeout: float

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(tuple(settings.job_callback_retry_seconds), settings.job_callback_timeout_seconds)

    @property
    def attempts(self) -> int:
        return len(self.delays) + 1

    @property
    def lease(self) -> float:
        return self.timeout + RECORD_SECONDS


@dataclass(frozen=True)
class Claim:
    callback_id: int
    job_id: uuid.UUID
    attempt: int  # in the current cycle (a replay starts a new one)
    token: datetime  # the lease: `leased_until` as this claim set it
    url: str
    body: bytes
    secret: str | None


@dataclass
class Report:
    """What a pass did."""

    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    interrupted: int = 0
    lease_lost: int = 0

    def as_json(self) -> dict[str, int]:
        return dict(self.__dict__)


_DUE = text("""
    SELECT c.id, c.attempts, c.leased_until
    FROM bz_job_callbacks AS c
    WHERE c.state = 'pending' AND c.next_at <= now()
    ORDER BY c.next_at, c.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
""")

_LEASE = text("""
    UPDATE bz_job_callbacks AS c
    SET attempts = CASE WHEN :restart THEN 1 ELSE c.attempts + 1 END,
        leased_until = clock_timestamp() + make_interval(secs => CAST(:lease AS double precision)),
        next_at = clock_timestamp() + make_interval(secs => CAST(:lease AS double precision)),
        updated_at = now()
    FROM bz_jobs AS j
    WHERE c.id = :id AND j.id = c.job_id
    RETURNING c.attempts, c.leased_until, c.url, c.body, c.job_id, j.client_app_id
""")

# Numbered over the callback's whole life (replays included), so the log reads in order.
_ATTEMPT = text("""
    INSERT INTO bz_job_callback_attempts (callback_id, attempt, http_status, error, duration_ms)
    SELECT :id, COALESCE(max(attempt), 0) + 1, :http_status, :error, :duration_ms
    FROM bz_job_callback_attempts WHERE callback_id = :id
""")


def _bounded(message: str | None) -> str | None:
    if message is None:
        return None
    message = " ".join(message.split())
    return message if len(message) <= ERROR_MAX else message[:ERROR_MAX - 1] + "…"


def lease(db: Session, callback_id: int, policy: Policy, secret_key: str | bytes | None,
          restart: bool = False) -> Claim:
    """In the caller's transaction, with the row locked: the next attempt of `callback_id`, leased
    to the caller. `restart`: the first attempt of a new cycle (a replay)."""
    row = db.execute(_LEASE, {"id": callback_id, "lease": policy.lease, "restart": restart}).one()
    return Claim(callback_id=callback_id, job_id=row.job_id, attempt=row.attempts, token=row.leased_until,
                 url=row.url, body=row.body.encode("utf-8"),
                 secret=clients.callback_secret(db, row.client_app_id, secret_key) if secret_key else None)


def claim(db: Session, policy: Policy, secret_key: str | bytes | None, report: Report) -> Claim | None:
    """In the caller's (short) transaction: the next due callback, leased; None when none is due.
    An attempt whose lease ran out is recorded as lost first (and may end the callback)."""
    while True:
        row = db.execute(_DUE).first()
        if row is None:
            return None
        if row.leased_until is not None:  # its lease ran out: the attempt in flight was lost
            report.interrupted += 1
            _write_attempt(db, row.id, Outcome(False, error=INTERRUPTED), int(policy.lease * 1000))
            if row.attempts >= policy.attempts:
                job_id = db.scalar(text("""
                    UPDATE bz_job_callbacks
                    SET state = 'dead', leased_until = NULL, last_error = :error, updated_at = now(),
                        died_at = COALESCE(died_at, now())
                    WHERE id = :id RETURNING job_id
                """), {"id": row.id, "error": INTERRUPTED})
                events.record(db, job_id, "callback_dead", detail={"callback_id": row.id, "attempts": row.attempts})
                report.dead += 1
                continue
        return lease(db, row.id, policy, secret_key)


def send(item: Claim, policy: Policy) -> tuple[Outcome, int]:
    """One attempt, outside any transaction: the outcome and how long it took (ms)."""
    if item.secret is None:
        return Outcome(False, error=NO_SECRET), 0
    started = time.monotonic()
    outcome = post(item.url, item.body, callbacks.headers(item.secret, time.time_ns() // 1_000_000, item.body),
                   policy.timeout)
    took = int((time.monotonic() - started) * 1000)
    if outcome.http_status is not None and 300 <= outcome.http_status < 400:
        outcome = Outcome(False, http_status=outcome.http_status, error=_bounded(f"{outcome.error}: {REDIRECT}"))
    return outcome, took


def verdict(outcome: Outcome) -> str:
    """`delivered`, `final` (no use trying again) or `retry`."""
    if outcome.delivered:
        return "delivered"
    status = outcome.http_status
    if status is None or status == 429 or status >= 500:
        return "retry"
    return "final"


def _write_attempt(db: Session, callback_id: int, outcome: Outcome, duration_ms: int) -> None:
    db.execute(_ATTEMPT, {"id": callback_id, "http_status": outcome.http_status,
                          "error": _bounded(outcome.error), "duration_ms": duration_ms})


def record(db: Session, item: Claim, outcome: Outcome, duration_ms: int, policy: Policy,
           report: Report | None = None) -> str | None:
    """The callback's next state and the attempt's row, if this claim still holds the lease;
    otherwise nothing (another worker took the row, and records this attempt as lost). Returns
    `delivered`, `retrying` or `dead`, or None when the lease was lost."""
    said = verdict(outcome)
    error = _bounded(outcome.error)
    if said == "delivered":
        state, delay = "delivered", None
    elif said == "final" or item.attempt >= policy.attempts:
        state, delay = "dead", None
    else:
        state, delay = "retrying", policy.delays[item.attempt - 1]
    held = db.execute(text("""
        UPDATE bz_job_callbacks
        SET state = CASE WHEN :state = 'retrying' THEN 'pending' ELSE :state END,
            leased_until = NULL, last_status = :http_status, last_error = :error, updated_at = now(),
            next_at = CASE WHEN :state = 'retrying'
                           THEN now() + make_interval(secs => CAST(:delay AS double precision)) ELSE next_at END,
            delivered_at = CASE WHEN :state = 'delivered' THEN now() END,
            died_at = CASE WHEN :state = 'dead' THEN COALESCE(died_at, now()) ELSE died_at END,
            -- A dead letter a replay delivered is resolved by it, in the replaying admin's name.
            resolved_at = CASE WHEN :state = 'delivered' AND died_at IS NOT NULL THEN now() ELSE resolved_at END,
            resolved_by = CASE WHEN :state = 'delivered' AND died_at IS NOT NULL
                               THEN COALESCE(replayed_by, 'delivery') ELSE resolved_by END
        WHERE id = :id AND leased_until = :token
        RETURNING id
    """), {"id": item.callback_id, "token": item.token, "state": state, "delay": delay,
           "http_status": outcome.http_status, "error": error if state != "delivered" else None}).first()
    if held is None:
        log.warning("job callback %s: the lease of attempt %d ran out before its outcome was recorded; "
                    "the outcome is dropped", item.callback_id, item.attempt)
        if report is not None:
            report.lease_lost += 1
        return None
    _write_attempt(db, item.callback_id, outcome, duration_ms)
    detail: dict[str, object] = {"callback_id": item.callback_id, "url": callbacks.shown_url(item.url),
                                 "ok": outcome.delivered, "attempt": item.attempt}
    if outcome.http_status is not None:
        detail["status"] = outcome.http_status
    if state == "dead":
        detail["final"] = True
    events.record(db, item.job_id, "callback", detail=detail)
    if state == "dead":
        events.record(db, item.job_id, "callback_dead", detail={"callback_id": item.callback_id,
                                                                 "attempts": item.attempt})
        log.warning("job callback %s to %s is dead after attempt %d: %s", item.callback_id,
                    callbacks.shown_url(item.url), item.attempt, error)
    if report is not None:
        setattr(report, state, getattr(report, state) + 1)
    return state


def deliver_one(database: Database, settings: Settings, secret_key: str | bytes | None,
                report: Report | None = None) -> str | None:
    """One due callback, one attempt: `delivered`, `retrying` or `dead` (None: nothing was due, or
    the lease was lost)."""
    policy, report = Policy.of(settings), report or Report()
    with database.session() as db:
        item = claim(db, policy, secret_key, report)
    if item is None:
        return None
    outcome, took = send(item, policy)
    with database.session() as db:
        return record(db, item, outcome, took, policy, report)


def deliver_due(database: Database, settings: Settings, secret_key: str | bytes | None,
                stop: threading.Event | None = None) -> Report:
    """Every callback due now, one attempt at a time, until none is left (or `stop` is set)."""
    policy, report = Policy.of(settings), Report()
    while stop is None or not stop.is_set():
        with database.session() as db:
            item = claim(db, policy, secret_key, report)
        if item is None:
            break
        outcome, took = send(item, policy)
        with database.session() as db:
            record(db, item, outcome, took, policy, report)
    return report


@dataclass
class CallbackWorker:
    """The callback thread of one hub process: a pass when a job with a callback finishes here
    (the bell) or every `job_callback_poll_seconds` (retries coming due, other processes' rows).
    `secret_key` gives the hub's secret key when a pass needs it (it may be read from the data
    folder on first use)."""

    database: Database
    settings: Settings
    secret_key: Callable[[], str | bytes | None]
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-job-callbacks", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 15.0) -> None:
        self.runner.stop_event.set()
        callbacks.BELL.ring()
        self.runner.stop(timeout)

    def _run(self) -> None:
        stop, poll = self.runner.stop_event, self.settings.job_callback_poll_seconds
        pause = poll
        if not wait_for_schema(self.database, self.settings.sql_dir, stop, "job callbacks", poll):
            return
        while not stop.is_set():
            seen = callbacks.BELL.count  # before the pass: a ring during it is not missed
            pause = next_pause(lambda: deliver_due(self.database, self.settings, self.secret_key(), stop),
                               "job callbacks", pause, poll, ERROR_PAUSE_MAX_SECONDS)
            if stop.is_set():
                break
            # After a failed pass, its longer pause; otherwise until the soonest retry is due.
            callbacks.BELL.wait(seen, pause if pause != poll else self._next_due_in(poll))

    def _next_due_in(self, longest: float) -> float:
        """Seconds until the soonest retry is due (a retry 2 s away is not left for the poll)."""
        try:
            with self.database.session() as db:
                seconds = db.scalar(text("""
                    SELECT EXTRACT(EPOCH FROM min(next_at) - now()) FROM bz_job_callbacks WHERE state = 'pending'
                """))
        except Exception:  # noqa: BLE001 - the pass reports database trouble; here the poll stands
            return longest
        return longest if seconds is None else max(0.05, min(longest, float(seconds)))
