"""The dead-letter list of completion callbacks (CLIENT_API_AND_EXECUTOR.md §D.3), in Core's shape
for its delivery dead letters (`GET /admin/api/delivery-dlq`), and an operator's two actions on a
dead letter: replay it now (a new cycle of attempts; it is resolved when one delivers it) or
resolve it (seen, nothing more to send). Also every callback of one job, with its attempts.

Core keeps no dead letter for callbacks (only for route deliveries); the hub keeps one, since a
callback that failed for good is otherwise lost. A dead letter is a callback that died once
(`died_at`); it stays in the list until resolved.

Nothing here shows a callback URL's path or query: the recipient is `scheme://host[:port]/…`, and
the body's preview has the URL (and any other URL in it) cut the same way."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso
from ..config import Settings
from ..db import Database
from ..notifications.redact import scrub
from . import callback_worker, events
from .callback_worker import Policy
from .callbacks import shown_url

CHANNEL = "callback"
# A callback URL is at most 2 048 characters (§A.3), twice that JSON-escaped: a URL that starts
# in the preview ends within this much of the body.
_HEAD = limits.DEAD_LETTER_PREVIEW_CHARS + 2 * 2048 + 64


def limit_of(raw: str | None) -> int:
    """Core's `limit`: the default unless a positive number is given; at most the maximum."""
    default, least, most = limits.DEAD_LETTER_LIMIT
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        value = default
    return default if value < least else min(value, most)


def preview(head: str, url: str) -> str:
    """The body's first DEAD_LETTER_PREVIEW_CHARS (limits) characters, with the callback URL (as
    the body spells it, JSON-escaped) and any other URL cut to its origin."""
    escaped = json.dumps(url, ensure_ascii=False)[1:-1]
    head = head.replace(escaped, shown_url(url))
    return scrub(head, url)[:limits.DEAD_LETTER_PREVIEW_CHARS]


def _letter(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "parent_job_id": str(row.job_id),
        "channel": CHANNEL,
        "recipient": shown_url(row.url),
        "content_preview": preview(row.head, row.url),
        "error": row.last_error,
        "resolved": row.resolved_at is not None,
        "created_at": iso(row.died_at),
        "resolved_at": iso(row.resolved_at),
        # The hub's additions: where the callback stands (`pending` while a replay retries).
        "state": row.state,
        "attempts": row.attempts,
        "last_status": row.last_status,
        "resolved_by": row.resolved_by,
    }


_LETTER_COLUMNS = """
    SELECT id, job_id, url, left(body, :head) AS head, state, attempts, last_status, last_error,
           died_at, resolved_at, resolved_by
    FROM bz_job_callbacks
"""
_LETTERS = text(_LETTER_COLUMNS + """
    WHERE died_at IS NOT NULL AND (CAST(:every AS boolean) OR resolved_at IS NULL)
      AND (CAST(:after_at AS timestamptz) IS NULL OR (died_at, id) < (CAST(:after_at AS timestamptz), :after_id))
    ORDER BY died_at DESC, id DESC
    LIMIT :limit
""")

PageKey = tuple[datetime, int]


def page(db: Session, every: bool, after: PageKey | None, limit: int) -> tuple[list[dict[str, Any]], PageKey | None]:
    """Dead letters newest first after `after`: the unresolved ones, or with `every` all ever
    dead; and the key to continue from, if more remain."""
    after_at, after_id = after if after is not None else (None, None)
    rows = db.execute(_LETTERS, {"head": _HEAD, "every": every, "after_at": after_at, "after_id": after_id,
                                 "limit": limit + 1}).all()
    items = [_letter(row) for row in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = rows[limit - 1]
    return items, (last.died_at, last.id)


def letters(db: Session, every: bool = False, limit: int = limits.DEAD_LETTER_LIMIT[0]) -> list[dict[str, Any]]:
    """Core's list: the newest `limit` dead letters (unresolved ones unless `every`)."""
    return page(db, every, None, limit)[0]


def letter(db: Session, callback_id: int) -> dict[str, Any] | None:
    """One dead letter as the list shows it; None when the callback is not one."""
    row = db.execute(text(_LETTER_COLUMNS + " WHERE id = :id AND died_at IS NOT NULL"),
                     {"id": callback_id, "head": _HEAD}).first()
    return None if row is None else _letter(row)


def callback_view(row: Any, attempts: list[Any]) -> dict[str, Any]:
    return {
        "id": row.id,
        "job_id": str(row.job_id),
        "url": shown_url(row.url),
        "state": row.state,
        "attempts": row.attempts,
        "next_at": iso(row.next_at) if row.state == "pending" else None,
        "last_status": row.last_status,
        "last_error": row.last_error,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "delivered_at": iso(row.delivered_at),
        "died_at": iso(row.died_at),
        "replayed_by": row.replayed_by,
        "resolved_at": iso(row.resolved_at),
        "resolved_by": row.resolved_by,
        "bytes": row.bytes,
        "attempt_log": [{"attempt": a.attempt, "at": iso(a.at), "http_status": a.http_status, "error": a.error,
                         "duration_ms": a.duration_ms} for a in attempts],
    }


_CALLBACKS = """
    SELECT id, job_id, url, state, attempts, next_at, last_status, last_error, created_at, updated_at,
           delivered_at, died_at, replayed_by, resolved_at, resolved_by, octet_length(body) AS bytes
    FROM bz_job_callbacks
"""


def _attempts(db: Session, ids: list[int]) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {i: [] for i in ids}
    if ids:
        for a in db.execute(text("""
            SELECT callback_id, attempt, at, http_status, error, duration_ms FROM bz_job_callback_attempts
            WHERE callback_id = ANY(:ids) ORDER BY callback_id, attempt, id
        """), {"ids": ids}):
            found[a.callback_id].append(a)
    return found


def of_job(db: Session, job_id: str) -> list[dict[str, Any]] | None:
    """Every callback of the job, oldest first, with its attempts; None when there is no such job."""
    try:
        key = uuid.UUID(job_id)
    except ValueError:
        return None
    if db.scalar(text("SELECT 1 FROM bz_jobs WHERE id = :id"), {"id": key}) is None:
        return None
    rows = list(db.execute(text(_CALLBACKS + " WHERE job_id = :id ORDER BY id"), {"id": key}))
    attempts = _attempts(db, [row.id for row in rows])
    return [callback_view(row, attempts[row.id]) for row in rows]


def recent(db: Session, dead_only: bool = False, limit: int = limits.DEAD_LETTER_LIMIT[0]) -> list[dict[str, Any]]:
    """The newest callbacks (or only those dead now), with their attempts (the command's list)."""
    where = " WHERE state = 'dead'" if dead_only else ""
    rows = list(db.execute(text(_CALLBACKS + where + " ORDER BY id DESC LIMIT :limit"),
                           {"limit": limit}))
    attempts = _attempts(db, [row.id for row in rows])
    return [callback_view(row, attempts[row.id]) for row in rows]


# ---------------------------------------------------------------- actions

@dataclass(frozen=True)
class Outcome:
    """What an action did. `status`: `delivered`, `retrying` or `dead` after a replay; `resolved`;
    `already_resolved`, `already_delivered` (nothing done); `busy` (a delivery is in flight);
    `not_dead` (not a dead letter); `not_found`."""

    status: str
    error: str | None = None

    @property
    def note(self) -> str | None:
        return {"already_resolved": "already resolved", "already_delivered": "already delivered"}.get(self.status)


def _refusal(row: Any) -> Outcome | None:
    if row is None:
        return Outcome("not_found")
    if row.resolved_at is not None:
        return Outcome("already_resolved")
    if row.state == "delivered":
        return Outcome("already_delivered")
    if row.state == "pending":
        return Outcome("busy", "the callback is being delivered: wait for its attempts to end")
    return None


_LOCK = text("SELECT id, job_id, state, died_at, resolved_at FROM bz_job_callbacks WHERE id = :id FOR UPDATE")


def replay(database: Database, settings: Settings, secret_key: str | bytes | None, callback_id: int,
           actor: str) -> Outcome:
    """Send a dead callback again now: a new cycle of attempts on Core's schedule, the first in
    this call. Delivered, it is resolved in `actor`'s name; failing with a retry left, the worker
    carries on with the cycle."""
    policy = Policy.of(settings)
    with database.session() as db:
        row = db.execute(_LOCK, {"id": callback_id}).first()
        refused = _refusal(row)
        if refused is not None:
            return refused
        assert row is not None  # _refusal answered for a missing row
        db.execute(text("UPDATE bz_job_callbacks SET state = 'pending', replayed_by = :actor WHERE id = :id"),
                   {"id": callback_id, "actor": actor})
        events.record(db, row.job_id, "callback_replayed", actor, {"callback_id": callback_id})
        item = callback_worker.lease(db, callback_id, policy, secret_key, restart=True)
    sent, took = callback_worker.send(item, policy)
    with database.session() as db:
        state = callback_worker.record(db, item, sent, took, policy)
    return Outcome(state or "busy", sent.error)


def resolve(db: Session, callback_id: int, actor: str) -> Outcome:
    """Mark a dead letter resolved: nothing more is sent for it."""
    row = db.execute(_LOCK, {"id": callback_id}).first()
    if row is not None and row.died_at is None and row.state != "delivered":
        return Outcome("not_dead", "the callback has not failed for good: it is not a dead letter")
    refused = _refusal(row)
    if refused is not None:
        return refused
    assert row is not None  # _refusal answered for a missing row
    db.execute(text("UPDATE bz_job_callbacks SET resolved_at = now(), resolved_by = :actor, updated_at = now() "
                    "WHERE id = :id"), {"id": callback_id, "actor": actor})
    events.record(db, row.job_id, "callback_resolved", actor, {"callback_id": callback_id})
    return Outcome("resolved")
