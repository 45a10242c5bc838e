"""Approval lists (approvals:read): the admin API's list, paged by offset as it is published, and the
console's queue and history, paged by keyset so that approvals decided between two pages never
push a pending one out of sight.

The queue is worked by several approvers at once: its filters (`QueueFilter`) apply alike to a
page, the pending count, the live check of the rows a page shows (`live`) and "decide and open
the next" (`next_pending`), so that all four agree on what the queue holds. An expired approval
(invocations.approvals.expired) leaves the queue and shows in the history.

Every row is a bounded summary (invocations.approvals.item_view): the argument snapshot, up to a
mebibyte each, is never loaded by a list.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, tuple_
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..identity.models import AgentSession
from ..invocations.approvals import (JOBS, REQUESTER_APP, decidable_clause, expired_clause, instant, item_view,
                                     summary_select)
from ..invocations.models import Approval, Invocation
from ..runtime.models import Message, Run

LIST_SCHEMA = "bailing.tool-approval-list.v1"
# `decided` and `expired` are the hub's own; `approved` and `denied` filter by that one status.
STATUS_FILTERS = ("pending", "decided", "approved", "denied", "expired", "all")
RISKS = ("low", "medium", "high")
# "Waiting longer than": the queue's age filter, by its name in the URL.
AGES = {"15m": timedelta(minutes=15), "1h": timedelta(hours=1), "4h": timedelta(hours=4),
        "1d": timedelta(days=1), "3d": timedelta(days=3), "7d": timedelta(days=7)}
LIVE_MAX = 2000    # rows of one page the live check answers for (a page sends its first LIVE_MAX)
FACETS_MAX = 200   # distinct tools, routes and apps offered as filter choices

# Where the next console page starts: the last approval shown, by the key of its list's order.
QueueKey = tuple[datetime, uuid.UUID]    # (created_at, id), oldest first (or newest, if asked)
HistoryKey = tuple[datetime, uuid.UUID]  # (decided_at or expires_at, id), latest first


@dataclass(frozen=True)
class QueueFilter:
    """What an approver narrowed the queue to; every field None means the whole queue."""

    risk: str | None = None
    tool: str | None = None
    route: str | None = None
    app: str | None = None
    requester: str | None = None   # part of on_behalf_of or of the principal's id, any case
    older_than: timedelta | None = None
    newest_first: bool = False

    def clauses(self, now: datetime) -> list[ColumnElement[bool]]:
        found: list[ColumnElement[bool]] = [decidable_clause(now)]
        if self.risk:
            found.append(Approval.risk == self.risk)
        if self.tool:
            found.append(Approval.tool == self.tool)
        if self.route:
            found.append(Approval.route_key == self.route)
        if self.app:
            found.append(REQUESTER_APP == self.app)
        if self.requester:
            pattern = "%" + _like_escaped(self.requester) + "%"
            found.append(or_(Approval.on_behalf_of.ilike(pattern, escape="\\"),
                             Approval.principal["id"].astext.ilike(pattern, escape="\\")))
        if self.older_than:
            found.append(Approval.created_at <= instant(now - self.older_than))
        return found

    def order(self) -> tuple[ColumnElement[Any], ...]:
        if self.newest_first:
            return Approval.created_at.desc(), Approval.id.desc()
        return Approval.created_at.asc(), Approval.id.asc()

    def after(self, key: QueueKey) -> ColumnElement[bool]:
        """Rows that come after `key` in this order."""
        row = tuple_(Approval.created_at, Approval.id)
        return row < key if self.newest_first else row > key

    def before(self, key: QueueKey) -> ColumnElement[bool]:
        """Rows that come before `key` in this order."""
        row = tuple_(Approval.created_at, Approval.id)
        return row > key if self.newest_first else row < key

    def between(self, first: QueueKey, last: QueueKey) -> ColumnElement[bool]:
        """Rows from `first` to `last` inclusive, in this order."""
        row = tuple_(Approval.created_at, Approval.id)
        if self.newest_first:
            first, last = last, first
        return and_(row >= first, row <= last)


def _like_escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _filtered(f: QueueFilter, now: datetime) -> Select[tuple[uuid.UUID]]:
    """Approvals with their invocation and its session or job (for the app filter), as the filter
    allows."""
    return (select(Approval.id).join(Invocation, Invocation.id == Approval.job_id)
            .outerjoin(AgentSession, AgentSession.id == Invocation.session_id)
            .outerjoin(JOBS, JOBS.c.id == Invocation.owner_job_id).where(*f.clauses(now)))


def list_approvals(db: Session, status: str, limit: int, offset: int) -> dict[str, Any]:
    """`pending`: the queue (decidable now), oldest first; `decided`: the history, latest decision
    first; `expired`: past their time-to-live unused, latest expiry first; `all`: pending first,
    then everything else by creation."""
    now = utc_now()
    query = summary_select().limit(limit + 1).offset(offset)
    if status == "pending":
        query = query.where(decidable_clause(now)).order_by(Approval.created_at, Approval.id)
    elif status in ("approved", "denied"):
        query = query.where(Approval.status == status).order_by(Approval.decided_at.desc(), Approval.id)
    elif status == "decided":
        query = query.where(Approval.status != "pending").order_by(Approval.decided_at.desc(), Approval.id)
    elif status == "expired":
        query = query.where(expired_clause(now)).order_by(Approval.expires_at.desc(), Approval.id)
    else:
        query = query.order_by((Approval.status == "pending").desc(), Approval.created_at, Approval.id)
    rows = db.execute(query).all()
    has_more = len(rows) > limit
    return {"schema": LIST_SCHEMA, "items": [item_view(*row) for row in rows[:limit]],
            "has_more": has_more, "next_offset": offset + limit if has_more else None}


def queue_page(db: Session, f: QueueFilter, after: QueueKey | None,
               limit: int) -> tuple[list[tuple[dict[str, Any], QueueKey]], QueueKey | None]:
    """Decidable approvals in the filter's order after `after`, each with its key; and the key to
    continue from, if more remain. Paging by key, an approval decided by someone else between two pages never makes
    the next page skip one still pending."""
    now = utc_now()
    query = summary_select().where(*f.clauses(now)).order_by(*f.order()).limit(limit + 1)
    if after is not None:
        query = query.where(f.after(after))
    rows = db.execute(query).all()
    page = [(item_view(*row), queue_key(row[0])) for row in rows[:limit]]
    return page, (page[-1][1] if len(rows) > limit else None)


@dataclass(frozen=True)
class QueueScreen:
    """One page of the console's queue: its rows with their keys, the key to continue from, and
    for a whole page (not the rows a "load more" adds) the view's count and the filter choices."""

    rows: list[tuple[dict[str, Any], QueueKey]]
    next_key: QueueKey | None
    count: int | None = None
    facets: dict[str, list[str]] | None = None


def queue_screen(db: Session, f: QueueFilter, after: QueueKey | None, limit: int, whole: bool) -> QueueScreen:
    rows, next_key = queue_page(db, f, after, limit)
    if not whole:
        return QueueScreen(rows, next_key)
    return QueueScreen(rows, next_key, pending_count(db, f), facets(db))


def queue_key(approval: Approval) -> QueueKey:
    return approval.created_at, approval.id


def live(db: Session, f: QueueFilter, window: tuple[QueueKey, QueueKey] | None) -> dict[str, Any]:
    """For a queue page showing the rows from `first` to `last` (`window`; None for a page that
    shows none): which of them are still to be decided (the others were decided elsewhere or
    expired), how many match the filter in all, and how many come after `last` and before
    `first` in the page's order: arrivals (at the end oldest first, at the top newest first) and
    rows the page has not loaded yet."""
    count = pending_count(db, f)
    if window is None:
        return {"ids": [], "count": count, "after_last": count, "before_first": 0}
    now = utc_now()
    first, last = window
    shown = _filtered(f, now).where(f.between(first, last)).order_by(*f.order()).limit(LIVE_MAX)

    def counted(where: ColumnElement[bool]) -> int:
        return db.scalar(select(func.count()).select_from(_filtered(f, now).where(where).subquery())) or 0

    return {"ids": [str(i) for i in db.scalars(shown)], "count": count,
            "after_last": counted(f.after(last)), "before_first": counted(f.before(first))}


def next_pending(db: Session, f: QueueFilter, current: Approval) -> uuid.UUID | None:
    """The approval to open after deciding `current`: the next one in the filter's order, or,
    past the end, the first one (someone may have left an older one undecided)."""
    now = utc_now()
    candidates = _filtered(f, now).where(Approval.id != current.id).order_by(*f.order()).limit(1)
    following: uuid.UUID | None = db.scalar(candidates.where(f.after(queue_key(current))))
    return following or db.scalar(candidates)


def facets(db: Session) -> dict[str, list[str]]:
    """The tools, routes and apps the queue holds now: the filter's choices."""
    queue = _filtered(QueueFilter(), utc_now())
    return {name: list(db.scalars(queue.with_only_columns(column).distinct().order_by(column).limit(FACETS_MAX)))
            for name, column in (("tools", Approval.tool), ("routes", Approval.route_key),
                                 ("apps", REQUESTER_APP))}


def history_page(db: Session, after: HistoryKey | None,
                 limit: int) -> tuple[list[dict[str, Any]], HistoryKey | None]:
    """Decided and expired approvals, latest first (by decision, or for an undecided one by its
    expiry; ties by id, as the admin API orders them), after `after`; and the key to continue
    from, if more remain."""
    now = utc_now()
    settled = func.coalesce(Approval.decided_at, Approval.expires_at)
    query = (summary_select().where(or_(Approval.status != "pending", expired_clause(now)))
             .order_by(settled.desc(), Approval.id).limit(limit + 1))
    if after is not None:
        at, ident = after
        query = query.where(or_(settled < at, and_(settled == at, Approval.id > ident)))
    rows = db.execute(query).all()
    items = [item_view(*row) for row in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = rows[limit - 1][0]
    at = last.decided_at or last.expires_at
    assert at is not None  # a decision sets decided_at; an undecided row is here only once expired
    return items, (at, last.id)


def pending_count(db: Session, f: QueueFilter | None = None) -> int:
    """The number in the console's navigation (the whole queue), or of one filtered view."""
    query = _filtered(f or QueueFilter(), utc_now())
    if f is None or f == QueueFilter():
        # No filter needs the join: count the partial index alone.
        query = select(Approval.id).where(decidable_clause(utc_now()))
    return db.scalar(select(func.count()).select_from(query.subquery())) or 0


def decision_context(db: Session, run_id: str | None, with_message: bool) -> dict[str, Any] | None:
    """The run that asked for the call and, for a reader who may see runs (runs:read), the user's
    message of that turn: what the person asked the agent to do."""
    if not run_id:
        return None
    run = db.get(Run, uuid.UUID(run_id))
    if run is None:
        return None
    context: dict[str, Any] = {"run_id": run_id, "client_conversation_id": None, "client_turn_id": None,
                               "user_message": None}
    if with_message:
        context.update(client_conversation_id=run.client_conversation_id, client_turn_id=run.client_turn_id)
        context["user_message"] = db.scalar(select(Message.content).where(
            Message.run_id == run.id, Message.role == "user").order_by(Message.id).limit(1))
    return context
