"""The access log read (audit:read): who opened which transcript, snapshot, export or trace, newest
first. Keyset paged on the log's id, which grows with every record. The log is written by
identity.access_log, in the transaction of each read it records."""
from __future__ import annotations

from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

# Where the next page starts: the id of the last record shown.
LogKey = tuple[int]


def page(db: Session, after: LogKey | None, limit: int) -> tuple[list[Row[Any]], LogKey | None]:
    """`limit` records older than `after` (newest first); and the key to continue from, if any."""
    rows = list(db.execute(text("""
        SELECT id, username, action, target, channel, admin_token_id, at FROM bz_access_log
        WHERE (CAST(:before AS bigint) IS NULL OR id < :before)
        ORDER BY id DESC LIMIT :limit"""), {"before": after[0] if after else None, "limit": limit + 1}))
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], (rows[limit - 1].id,)
