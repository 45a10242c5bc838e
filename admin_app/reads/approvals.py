"""Approval lists (approvals:read): the admin API's list, paged by offset as it is published, and the
console's queue and history, paged by keyset so that approvals decided between two pages never
push a pending one out of sight.

Every row is a bounded summary (invocations.approvals.item_view): the argument snapshot, up to a
mebibyte each, is never loaded by a list.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, tuple_
from sqlalchemy.orm import Session

from ..invocations.approvals import item_view, summary_select
from ..invocations.models import Approval

LIST_SCHEMA = "bailing.tool-approval-list.v1"
# `decided` is the hub's own; `approved` and `denied` filter by that one status.
STATUS_FILTERS = ("pending", "decided", "approved", "denied", "all")

# Where the next console page starts: the last approval shown, by the key of its list's order.
QueueKey = tuple[datetime, uuid.UUID]    # (created_at, id), oldest first
HistoryKey = tuple[datetime, uuid.UUID]  # (decided_at, id), latest decision first


def list_approvals(db: Session, status: str, limit: int, offset: int) -> dict[str, Any]:
    """`pending`: the queue, oldest first; `decided`: the history, latest decision first; `all`:
    pending first, then everything else by creation."""
    query = summary_select().limit(limit + 1).offset(offset)
    if status == "pending":
        query = query.where(Approval.status == "pending").order_by(Approval.created_at, Approval.id)
    elif status in ("approved", "denied"):
        query = query.where(Approval.status == status).order_by(Approval.decided_at.desc(), Approval.id)
    elif status == "decided":
        query = query.where(Approval.status != "pending").order_by(Approval.decided_at.desc(), Approval.id)
    else:
        query = query.order_by((Approval.status == "pending").desc(), Approval.created_at, Approval.id)
    rows = db.execute(query).all()
    has_more = len(rows) > limit
    return {"schema": LIST_SCHEMA, "items": [item_view(*row) for row in rows[:limit]],
            "has_more": has_more, "next_offset": offset + limit if has_more else None}


def queue_page(db: Session, after: QueueKey | None, limit: int) -> tuple[list[dict[str, Any]], QueueKey | None]:
    """Pending approvals oldest first, after `after`; and the key to continue from, if more remain."""
    query = (summary_select().where(Approval.status == "pending")
             .order_by(Approval.created_at, Approval.id).limit(limit + 1))
    if after is not None:
        query = query.where(tuple_(Approval.created_at, Approval.id) > after)
    rows = db.execute(query).all()
    items = [item_view(*row) for row in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = rows[limit - 1][0]
    return items, (last.created_at, last.id)


def history_page(db: Session, after: HistoryKey | None,
                 limit: int) -> tuple[list[dict[str, Any]], HistoryKey | None]:
    """Decided approvals, latest decision first (ties by id, as the admin API orders them), after
    `after`; and the key to continue from, if more remain. A decision always sets decided_at."""
    query = (summary_select().where(Approval.status != "pending")
             .order_by(Approval.decided_at.desc(), Approval.id).limit(limit + 1))
    if after is not None:
        decided_at, ident = after
        query = query.where(or_(Approval.decided_at < decided_at,
                                and_(Approval.decided_at == decided_at, Approval.id > ident)))
    rows = db.execute(query).all()
    items = [item_view(*row) for row in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = rows[limit - 1][0]
    assert last.decided_at is not None  # set by every decision, with the status
    return items, (last.decided_at, last.id)


def pending_count(db: Session) -> int:
    """The number in the console's navigation."""
    return db.scalar(select(func.count()).select_from(Approval).where(Approval.status == "pending")) or 0
