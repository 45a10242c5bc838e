"""Completion callbacks (CLIENT_API_AND_EXECUTOR.md §D.1): when a job with a callback URL finishes
(`done` or `error`, again after each rerun), its final record is queued in the same transaction,
as the exact bytes that will be signed and posted; callback_worker.py delivers them.

Queued, not posted from the finishing request: the executor's result is answered at once, a slow
or dead receiver never holds a transaction, and a callback that fails for good stays in the
dead-letter list (dead_letters.py) instead of only in a log.

A callback URL's path and query may hold the receiver's secret (a token in the query is common),
so the URL is shown, logged and recorded elsewhere as its origin only (`shown_url`)."""
from __future__ import annotations

import hashlib
import hmac

from sqlalchemy import event
from sqlalchemy.orm import Session

from .. import js_json
from ..notifications.bell import Bell
from ..notifications.redact import HIDDEN_PART, origin
from . import events
from .models import Job, JobCallback
from .view import job_record

# Core posts on each finish of the finish routine: `done` or `error` (§D.1), never for a job
# rejected at launch or at pause, nor for the queue timeout (those do not call this).
FINISHED = ("done", "error")

# Wakes this process's delivery worker when a finishing transaction commits, so the first attempt
# leaves at once (Core's "attempt at 0 s"); other processes find the row at their next poll.
BELL = Bell()


def enqueue(db: Session, job: Job) -> None:
    """Called in the transaction that finishes `job` (done or error): queue its signed callback
    when it has a callback URL."""
    if not job.callback_url or job.status not in FINISHED:
        return None
    db.flush()
    # The record after the finish update, as the database holds it (what an update by SQL or a
    # server default wrote included): the same record GET /jobs answers.
    db.refresh(job)
    callback = JobCallback(job_id=job.id, url=job.callback_url, body=encode(job_record(job)), state="pending")
    db.add(callback)
    db.flush()
    events.record(db, job.id, "callback_queued",
                  detail={"callback_id": callback.id, "url": shown_url(job.callback_url)})
    if not event.contains(db, "after_commit", _ring):
        # Rung only when the transaction commits: a rollback leaves nothing to send.
        event.listen(db, "after_commit", _ring)
    return None


def _ring(_session: Session) -> None:
    BELL.ring()


def encode(record: dict[str, object]) -> str:
    """The body as Core's JSON.stringify writes it: compact, non-ASCII as is, numbers as
    JavaScript writes them. Signed and sent as its UTF-8 bytes."""
    return js_json.stringify(record)


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=` and the hex HMAC-SHA256 of `<timestamp>.<body>` under the client's token
    (Core's callback signature; its SDKs' `verify_callback` checks it)."""
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers(secret: str, timestamp_ms: int, body: bytes) -> dict[str, str]:
    stamp = str(timestamp_ms)
    return {
        "Content-Type": "application/json",
        "User-Agent": "bailing-hub",
        "X-Bailing-Timestamp": stamp,
        "X-Bailing-Signature": signature(secret, stamp, body),
    }


def shown_url(url: str) -> str:
    """`scheme://host[:port]`, and `/…` when the URL has a path or query past `/`: all of the
    URL the hub ever shows or logs."""
    where = origin(url)
    rest = url.split("://", 1)[-1]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    hidden = rest[cut:]
    return where if hidden in ("", "/") else f"{where}/{HIDDEN_PART}"
