"""Delivering the outbox: claim a due row under a lease, send it, record the attempt.

Why a lease and not a lock: a row lock held across the network call would keep a transaction
(and a pooled connection) open for as long as a slow receiver takes. Instead the claim is a short
transaction: `FOR UPDATE SKIP LOCKED` picks a due row that no other worker is claiming, and it is
marked `sending` with a fresh lease token and `next_attempt_at` set to when the lease runs out;
that commits before anything is sent. Each attempt ends by its deadline (limits.py), and the lease
is longer than the longest attempt and its recording, so while an attempt may still be running
no other worker takes the row. The outcome is recorded in a second short transaction, by the
lease's holder only: the attempt's row and the delivery's next state are written together, or
not at all, so an answer that comes after the lease was lost (a process paused, the database
slow) never overwrites what a newer attempt recorded. A worker that dies mid-send leaves a
`sending` row whose lease runs out: another worker takes it again, records the lost attempt as
`interrupted`, and sends it once more (at least once; receivers deduplicate by
`X-Bailing-Delivery`, which stays the same).

Retries back off exponentially: `backoff * 4^(attempt-1)` (30 s, 2 min, 8 min, 32 min...), each
at most MAX_DELAY; after `max_attempts` attempts the row is `failed`. Times are the database's
clock, so every process agrees on what is due.
"""
from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..background import ProcessThread, next_pause, wait_for_schema
from ..config import Settings
from ..db import Database
from . import request, senders
from .bell import BELL
from .channels import BUSINESS_KINDS
from .message import Notice
from .senders import Outcome

log = logging.getLogger(__name__)

LEASE_SECONDS = limits.NOTIFICATION_LEASE_SECONDS
MAX_DELAY_SECONDS = 6 * 3600
POLL_SECONDS = 10.0  # other processes' new rows, and retries coming due
ERROR_PAUSE_MAX_SECONDS = 300.0  # the longest wait after the database failed the worker
INTERRUPTED = "no outcome was recorded before the lease ran out (the sending process stopped?)"


def retry_delay(attempt: int, backoff_seconds: int) -> int:
    """Seconds before the attempt after `attempt` (1-based)."""
    delay: int = backoff_seconds * 4 ** (attempt - 1)
    return min(delay, MAX_DELAY_SECONDS)


@dataclass(frozen=True)
class Claim:
    delivery_id: uuid.UUID
    attempt: int
    token: uuid.UUID
    started_at: datetime
    kind: str
    url: str | None
    secret_env: str | None
    recipients: list[str]
    notice: Notice
    body: bytes | None = None  # a business channel's request (request.py), built at the claim


@dataclass
class Report:
    """What one pass did, as `bailing-admin notifications deliver` prints it."""

    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    cancelled: int = 0
    interrupted: int = 0
    lease_lost: int = 0

    def as_json(self) -> dict[str, int]:
        return dict(self.__dict__)


_DUE = text("""
    SELECT d.id, d.status, d.attempts, d.attempt_started_at, c.enabled,
           a.status = 'pending' AND (a.expires_at IS NULL OR a.expires_at > now()) AS waiting
    FROM bz_approval_deliveries AS d JOIN bz_approval_channels AS c ON c.name = d.channel
    JOIN bz_tool_approvals AS a ON a.id = d.approval_id
    WHERE d.status IN ('pending', 'sending') AND d.next_attempt_at <= now()
    ORDER BY d.next_attempt_at, d.id
    LIMIT 1
    FOR UPDATE OF d SKIP LOCKED
""")

# The approval's bounded fields only: the snapshot column is never read here.
_TARGET = text("""
    SELECT c.kind, c.url, c.secret_env, c.recipients,
           a.id, a.number, a.tool, a.route_key, a.risk, a.summary, a.on_behalf_of,
           a.snapshot_bytes, a.args_hash, a.created_at, a.expires_at
    FROM bz_approval_deliveries AS d
    JOIN bz_approval_channels AS c ON c.name = d.channel
    JOIN bz_tool_approvals AS a ON a.id = d.approval_id
    WHERE d.id = :id
""")

# One row per attempt, written once: by the lease's holder, or as `interrupted` by the worker
# that finds the lease run out (the holder then records nothing).
_ATTEMPT = text("""
    INSERT INTO bz_approval_delivery_attempts
        (delivery_id, attempt, started_at, finished_at, outcome, http_status, error, next_attempt_at)
    VALUES (:id, :attempt, :started, now(), :outcome, :http_status, :error,
            now() + make_interval(secs => CAST(:delay AS double precision)))
""")


def _close(db: Session, delivery_id: uuid.UUID, status: str, error: str | None,
           token: uuid.UUID | None = None, http_status: int | None = None) -> bool:
    """A final status; with `token`, only while that lease is still held."""
    result = db.execute(text("""
        UPDATE bz_approval_deliveries
        SET status = :status, next_attempt_at = NULL, lease_token = NULL, last_error = :error,
            last_http_status = COALESCE(:http_status, last_http_status),
            delivered_at = CASE WHEN :status = 'delivered' THEN now() END, updated_at = now()
        WHERE id = :id AND (CAST(:token AS uuid) IS NULL OR lease_token = :token)
    """), {"id": delivery_id, "status": status, "error": error, "token": token, "http_status": http_status})
    return bool(getattr(result, "rowcount", 0))


def claim(db: Session, settings: Settings, report: Report) -> Claim | None:
    """In the caller's (short) transaction: the next due delivery, leased to this worker; None
    when nothing is due. Rows that need no sending (channel disabled, out of attempts after an
    interrupted one, an approval decided or expired meanwhile) are closed on the way."""
    while True:
        row = db.execute(_DUE).first()
        if row is None:
            return None
        if row.status == "sending":  # its lease ran out: the attempt in flight was lost
            report.interrupted += 1
            db.execute(_ATTEMPT, {"id": row.id, "attempt": row.attempts, "started": row.attempt_started_at,
                                  "outcome": "interrupted", "http_status": None, "error": INTERRUPTED,
                                  "delay": None})
            if row.attempts >= settings.notification_max_attempts:
                _close(db, row.id, "failed", INTERRUPTED)
                report.failed += 1
                continue
        if not row.enabled or not row.waiting:
            # Nobody needs telling: the channel was switched off, or the approval no longer waits.
            _close(db, row.id, "cancelled", "the channel was disabled before this was sent" if not row.enabled
                   else "the approval was decided or expired before this was sent")
            report.cancelled += 1
            continue
        token = uuid.uuid4()
        started = db.scalar(text("""
            UPDATE bz_approval_deliveries
            SET status = 'sending', attempts = attempts + 1, lease_token = :token,
                attempt_started_at = now(), updated_at = now(),
                next_attempt_at = now() + make_interval(secs => CAST(:lease AS double precision))
            WHERE id = :id
            RETURNING attempt_started_at
        """), {"id": row.id, "token": token, "lease": LEASE_SECONDS})
        target = db.execute(_TARGET, {"id": row.id}).one()
        notice = Notice(id=target.id, number=target.number, tool=target.tool, route=target.route_key,
                        risk=target.risk, summary=target.summary, on_behalf_of=target.on_behalf_of,
                        snapshot_bytes=target.snapshot_bytes, args_hash=target.args_hash,
                        created_at=target.created_at, expires_at=target.expires_at)
        business = request.body(request.payload(db, target.id)) if target.kind in BUSINESS_KINDS else None
        return Claim(delivery_id=row.id, attempt=row.attempts + 1, token=token, started_at=started,
                     kind=target.kind,
                     url=target.url, secret_env=target.secret_env, recipients=list(target.recipients),
                     notice=notice, body=business)


def send(item: Claim, settings: Settings) -> Outcome:
    """One attempt, outside any transaction."""
    if item.body is not None:
        assert item.url is not None and item.secret_env is not None  # the table's CHECK
        return senders.send_business(item.delivery_id, item.body, url=item.url, secret_env=item.secret_env,
                                     seconds=limits.NOTIFICATION_WEBHOOK_SECONDS)
    if item.kind == "webhook":
        assert item.url is not None and item.secret_env is not None  # the table's CHECK
        return senders.send_webhook(item.delivery_id, item.notice, url=item.url, secret_env=item.secret_env,
                                    public_url=settings.public_url, seconds=limits.NOTIFICATION_WEBHOOK_SECONDS)
    return senders.send_email(item.delivery_id, item.notice, recipients=item.recipients, settings=settings,
                              seconds=limits.NOTIFICATION_EMAIL_SECONDS)


def record(db: Session, item: Claim, outcome: Outcome, settings: Settings, report: Report) -> None:
    """The delivery's next state and the attempt's row, if this worker still holds the lease of
    this attempt; otherwise nothing (the row is another worker's now, and the attempt is
    recorded as `interrupted`)."""
    last = item.attempt >= settings.notification_max_attempts
    delay = None if outcome.delivered or last else retry_delay(item.attempt, settings.notification_backoff_seconds)
    if delay is None:
        status = "delivered" if outcome.delivered else "failed"
        held = _close(db, item.delivery_id, status, outcome.error, item.token, outcome.http_status)
    else:
        held = bool(getattr(db.execute(text("""
            UPDATE bz_approval_deliveries
            SET status = 'pending', lease_token = NULL, last_error = :error, last_http_status = :http_status,
                next_attempt_at = now() + make_interval(secs => CAST(:delay AS double precision)),
                updated_at = now()
            WHERE id = :id AND lease_token = :token
        """), {"id": item.delivery_id, "token": item.token, "delay": delay, "error": outcome.error,
               "http_status": outcome.http_status}), "rowcount", 0))
        status = "retrying"
    if not held:
        # Another worker took the row when the lease ran out: its state is that worker's now.
        log.warning("notification delivery %s: the lease of attempt %d ran out before its outcome was "
                    "recorded; the outcome is dropped", item.delivery_id, item.attempt)
        report.lease_lost += 1
        return
    db.execute(_ATTEMPT, {"id": item.delivery_id, "attempt": item.attempt, "started": item.started_at,
                          "outcome": "delivered" if outcome.delivered else "failed",
                          "http_status": outcome.http_status, "error": outcome.error, "delay": delay})
    setattr(report, status, getattr(report, status) + 1)


def deliver_due(database: Database, settings: Settings, stop: threading.Event | None = None) -> Report:
    """Send every delivery due now, one at a time, until none is left (or `stop` is set)."""
    report = Report()
    while stop is None or not stop.is_set():
        with database.session() as db:
            item = claim(db, settings, report)
        if item is None:
            break
        outcome = send(item, settings)
        with database.session() as db:
            record(db, item, outcome, settings, report)
    return report


@dataclass
class DeliveryWorker:
    """The delivery thread of one hub process: a pass whenever the bell rings (an approval with
    notifications committed in this process) or POLL_SECONDS pass."""

    database: Database
    settings: Settings
    poll_seconds: float = POLL_SECONDS
    runner: ProcessThread = field(init=False)

    def __post_init__(self) -> None:
        self.runner = ProcessThread("bailing-notifications", self._run)

    def ensure_started(self) -> None:
        self.runner.ensure_started()

    def stop(self, timeout: float = 10.0) -> None:
        self.runner.stop_event.set()
        BELL.ring()
        self.runner.stop(timeout)

    def _run(self) -> None:
        stop, pause = self.runner.stop_event, self.poll_seconds
        # A fresh hub serves while its schema is applied: the outbox is read once it is there.
        if not wait_for_schema(self.database, self.settings.sql_dir, stop, "notification deliveries",
                               self.poll_seconds):
            return
        while not stop.is_set():
            seen = BELL.count  # before the pass: a ring during it is not missed
            pause = next_pause(lambda: deliver_due(self.database, self.settings, stop), "notification deliveries",
                               pause, self.poll_seconds, ERROR_PAUSE_MAX_SECONDS)
            if stop.is_set():
                break
            BELL.wait(seen, pause)


def counts(database: Database) -> dict[str, Any]:
    """How many deliveries are in each state (for the command's report)."""
    with database.session() as db:
        rows = db.execute(text("SELECT status, count(*) AS n FROM bz_approval_deliveries GROUP BY status"))
        return {row.status: row.n for row in rows}
