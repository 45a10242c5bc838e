"""Console sign-in sessions, kept on the server: the cookie carries a random id, the table a
SHA-256 of it. A session is alive while it is neither ended, idle too long, nor past its absolute
end; nothing about the client (address, forwarded headers, user agent) is part of the check."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import CursorResult, text
from sqlalchemy.orm import Session

from ..canonical import utc_now
from . import tokens

# last_seen_at is rewritten at most this often, so that reading pages is not a write per request;
# the idle timeout is therefore exact to within this much.
TOUCH_EVERY = timedelta(seconds=30)
ENDED_ROWS_KEPT_FOR = timedelta(days=7)


@dataclass(frozen=True)
class Timeouts:
    idle: timedelta
    absolute: timedelta


@dataclass(frozen=True)
class LiveSession:
    id: int
    admin_id: int
    token_hash: str


def start(db: Session, admin_id: int, timeouts: Timeouts) -> str:
    """A fresh session id for a sign-in (never a value the browser chose); returns the id."""
    session_id = secrets.token_urlsafe(32)
    now = utc_now()
    db.execute(text("DELETE FROM bz_console_sessions WHERE (ended_at IS NOT NULL AND ended_at < :old) "
                    "OR expires_at < :old"), {"old": now - ENDED_ROWS_KEPT_FOR})
    db.execute(text("INSERT INTO bz_console_sessions (token_hash, admin_id, created_at, last_seen_at, expires_at) "
                    "VALUES (:h, :a, :now, :now, :exp)"),
               {"h": tokens.hash_token(session_id), "a": admin_id, "now": now, "exp": now + timeouts.absolute})
    return session_id


def resume(db: Session, session_id: str, timeouts: Timeouts) -> LiveSession | None:
    """The live session of this id, its last use moved to now; None when ended, idle or expired,
    or when its admin is disabled."""
    if not isinstance(session_id, str) or not 20 <= len(session_id) <= 64:
        return None
    now = utc_now()
    digest = tokens.hash_token(session_id)
    row = db.execute(text(
        "SELECT s.id, s.admin_id, s.last_seen_at FROM bz_console_sessions s "
        "JOIN bz_admins a ON a.id = s.admin_id "
        "WHERE s.token_hash = :h AND s.ended_at IS NULL AND s.expires_at > :now "
        "AND s.last_seen_at > :idle AND NOT a.disabled"),
        {"h": digest, "now": now, "idle": now - timeouts.idle}).first()
    if row is None:
        return None
    if row.last_seen_at < now - TOUCH_EVERY:
        db.execute(text("UPDATE bz_console_sessions SET last_seen_at = :now WHERE id = :id"),
                   {"now": now, "id": row.id})
    return LiveSession(row.id, row.admin_id, digest)


def end(db: Session, session_id: str, reason: str = "signed_out") -> None:
    db.execute(text("UPDATE bz_console_sessions SET ended_at = now(), end_reason = :r "
                    "WHERE token_hash = :h AND ended_at IS NULL"),
               {"h": tokens.hash_token(session_id), "r": reason})


def end_all_of(db: Session, admin_id: int, reason: str, keep_hash: str | None = None) -> int:
    """End every open session of an admin (but `keep_hash`, the caller's own); returns how many."""
    result = db.execute(text("UPDATE bz_console_sessions SET ended_at = now(), end_reason = :r "
                             "WHERE admin_id = :a AND ended_at IS NULL "
                             "AND token_hash IS DISTINCT FROM :keep"),
                        {"a": admin_id, "r": reason, "keep": keep_hash})
    assert isinstance(result, CursorResult)  # an UPDATE's result, which counts its rows
    return result.rowcount


def open_sessions(db: Session, admin_id: int, timeouts: Timeouts) -> list[dict]:
    now = utc_now()
    rows = db.execute(text(
        "SELECT id, token_hash, created_at, last_seen_at, expires_at FROM bz_console_sessions "
        "WHERE admin_id = :a AND ended_at IS NULL AND expires_at > :now AND last_seen_at > :idle "
        "ORDER BY created_at DESC"), {"a": admin_id, "now": now, "idle": now - timeouts.idle})
    return [dict(r._mapping) for r in rows]
