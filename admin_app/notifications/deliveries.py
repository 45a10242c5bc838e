"""The console's list of notification deliveries (approvals:read): newest first, keyset-paged on
(created_at, id), all of them or those of one status. Bounded fields only: the approval's
number, tool and route, never its snapshot; a webhook's error without its URL's path or query,
whenever it was written."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso
from .redact import scrub

STATUSES = ("pending", "sending", "delivered", "failed", "cancelled")

PageKey = tuple[datetime, uuid.UUID]  # (created_at, id) of the last row shown, newest first

_PAGE = text("""
    SELECT d.id, d.created_at, d.channel, c.kind, c.url, d.status, d.attempts, d.next_attempt_at,
           d.last_http_status, d.last_error, d.delivered_at,
           a.id AS approval_uuid, a.number, a.tool, a.route_key
    FROM bz_approval_deliveries AS d
    JOIN bz_approval_channels AS c ON c.name = d.channel
    JOIN bz_tool_approvals AS a ON a.id = d.approval_id
    WHERE (CAST(:status AS text) IS NULL OR d.status = :status)
      AND (CAST(:after_at AS timestamptz) IS NULL
           OR (d.created_at, d.id) < (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid)))
    ORDER BY d.created_at DESC, d.id DESC
    LIMIT :limit
""")


def page(db: Session, status: str | None, after: PageKey | None,
         limit: int) -> tuple[list[dict[str, Any]], PageKey | None]:
    """Deliveries newest first after `after` (of one status, when given); and the key to
    continue from, if more remain."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown delivery status {status!r}")
    after_at, after_id = after if after is not None else (None, None)
    rows = db.execute(_PAGE, {"status": status, "after_at": after_at, "after_id": after_id,
                              "limit": limit + 1}).all()
    items = [{
        "id": str(row.id),
        "created_at": iso(row.created_at),
        "channel": row.channel,
        "kind": row.kind,
        "status": row.status,
        "attempts": row.attempts,
        "next_attempt_at": iso(row.next_attempt_at),
        "last_http_status": row.last_http_status,
        "last_error": scrub(row.last_error, row.url) if row.last_error else row.last_error,
        "delivered_at": iso(row.delivered_at),
        "approval": {"id": str(row.approval_uuid), "approval_id": row.number, "tool": row.tool,
                     "route": row.route_key},
    } for row in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = rows[limit - 1]
    return items, (last.created_at, last.id)
