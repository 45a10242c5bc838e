"""Support triage (runs:read): the runs list and the unresolved tool calls, newest first.

Runs are filtered by status, client app, route and creation time, and looked up by a prefix of any
ID they are known by: the run's, its session's, its client conversation or turn, or one of its tool
calls (the agent's invocation ID or the hub's job ID). Each lookup branch is an index range read
(sql/067) that stops after one page; the page is the newest of their union, and each row says what
matched. Keyset paged on (created_at, id), so the end of a busy hub pages as cheaply as its start.

Rows are summaries (the columns a list shows); a run's context and completion are read by its
trace."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, and_, false, func, literal, select, tuple_, union_all
from sqlalchemy.orm import Session

from ..identity.models import AgentSession
from ..invocations.models import Approval, Invocation
from ..runtime.models import Run
from .ids import id_range

RUN_STATUSES = ("prepared", "completed", "failed", "cancelled")
# The tool-call statuses that still need someone, grouped as the console shows them.
UNRESOLVED = {
    "reconciliation_required": "outcome unknown",
    "business_rejected": "failed",
    "rejected_before_dispatch": "failed",
    "in_progress": "in progress",
    "awaiting_approval": "in progress",
}
# What a lookup matched, in the order the console names it.
MATCHES = ("run ID", "session ID", "conversation ID", "turn ID", "invocation ID", "job ID")
# Exact lookups on one field each, as links from elsewhere in the console name a run's peers.
EXACT = {"run_id": Run.id, "session": Run.session_id, "conversation": Run.client_conversation_id,
         "turn": Run.client_turn_id}
# Where the next page starts: the last row shown, as (created_at, id).
Key = tuple[datetime, uuid.UUID]


@dataclass(frozen=True)
class RunFilters:
    q: str = ""
    status: str = ""
    app: str = ""
    route: str = ""
    created_from: datetime | None = None
    created_to: datetime | None = None  # exclusive
    exact: tuple[tuple[str, str], ...] = ()  # (a key of EXACT, value)


@dataclass(frozen=True)
class CallFilters:
    state: str = ""
    app: str = ""
    route: str = ""
    tool: str = ""


def _prefix(value: str) -> str:
    """A LIKE pattern matching values that start with `value` (its wildcards taken literally)."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _narrowed(query: Select[Any], f: RunFilters, after: Key | None) -> Select[Any]:
    for key, value in f.exact:
        if key in ("run_id", "session"):  # a value that is not a UUID matches no run
            ident = _uuid(value)
            query = query.where(EXACT[key] == ident if ident is not None else false())
        else:
            query = query.where(EXACT[key] == value)
    if f.status:
        query = query.where(Run.status == f.status)
    if f.app:
        query = query.where(Run.client_app_id == f.app)
    if f.route:
        query = query.where(Run.route_key == f.route)
    if f.created_from is not None:
        query = query.where(Run.created_at >= f.created_from)
    if f.created_to is not None:
        query = query.where(Run.created_at < f.created_to)
    if after is not None:
        query = query.where(tuple_(Run.created_at, Run.id) < after)
    return query


def _starts_with(column: Any, q: str) -> Any:
    """A UUID column's values whose text starts with `q`: a range of its btree (reads/ids.py);
    no UUID's text starts with what is no hex prefix."""
    bounds = id_range(q)
    if bounds is None:
        return false()
    low, high = bounds
    return column >= low if high is None else and_(column >= low, column < high)


def _branches(q: str) -> list[tuple[str, Any, bool]]:
    """(what matched, condition, through a tool call) for each ID a run is known by."""
    text = _prefix(q)
    return [("run ID", _starts_with(Run.id, q), False),
            ("session ID", _starts_with(Run.session_id, q), False),
            ("conversation ID", Run.client_conversation_id.like(text), False),
            ("turn ID", Run.client_turn_id.like(text), False),
            ("invocation ID", Invocation.invocation_id.like(text), True),
            ("job ID", _starts_with(Invocation.id, q), True)]


def recent_runs(db: Session, f: RunFilters, after: Key | None,
                limit: int) -> tuple[list[dict[str, Any]], Key | None]:
    """Runs matching the filters (and the lookup, if any), newest first, after `after`; and the
    key to continue from, if more remain. Each row's `matched` names what the lookup matched."""
    columns = (Run.id, Run.client_app_id, Run.route_key, Run.client_conversation_id, Run.client_turn_id,
               Run.status, Run.created_at)
    order = (Run.created_at.desc(), Run.id.desc())
    if not f.q:  # no lookup: the filters alone
        query = _narrowed(select(*columns), f, after).order_by(*order).limit(limit + 1)
        rows = [dict(r._mapping, matched=[]) for r in db.execute(query)]
    else:
        parts = []
        for what, condition, through_call in _branches(f.q):
            part = select(Run.id.label("id"), Run.created_at.label("created_at"), literal(what).label("what"))
            if through_call:
                part = part.join(Invocation, Invocation.run_id == Run.id).distinct()
            parts.append(_narrowed(part.where(condition), f, after).order_by(*order).limit(limit + 1))
        hits = union_all(*(p.subquery().select() for p in parts)).subquery("hits")
        query = (select(*columns, func.array_agg(hits.c.what.distinct()).label("matched"))
                 .join(hits, hits.c.id == Run.id).group_by(Run.id).order_by(*order).limit(limit + 1))
        rows = [dict(r._mapping) for r in db.execute(query)]
        for row in rows:
            row["matched"] = [m for m in MATCHES if m in row["matched"]]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], (last["created_at"], last["id"])


def unresolved_calls(db: Session, f: CallFilters, after: Key | None,
                     limit: int) -> tuple[list[Row[Any]], Key | None]:
    """Tool calls in an unresolved status (one of them if `f.state`), newest first, after
    `after`, with their run and approval if any; and the key to continue from."""
    states = [f.state] if f.state else list(UNRESOLVED)
    query = (select(Invocation.id, Invocation.invocation_id, Invocation.run_id, Invocation.route_key,
                    Invocation.tool, Invocation.status, Invocation.reason, Invocation.business_status,
                    Invocation.created_at, Invocation.updated_at, AgentSession.client_app_id,
                    Approval.id.label("approval_id"), Approval.number.label("approval_number"))
             .join(AgentSession, AgentSession.id == Invocation.session_id)
             .outerjoin(Approval, Approval.job_id == Invocation.id)
             .where(Invocation.status.in_(states))
             .order_by(Invocation.created_at.desc(), Invocation.id.desc()).limit(limit + 1))
    if f.app:
        query = query.where(AgentSession.client_app_id == f.app)
    if f.route:
        query = query.where(Invocation.route_key == f.route)
    if f.tool:
        query = query.where(Invocation.tool == f.tool)
    if after is not None:
        query = query.where(tuple_(Invocation.created_at, Invocation.id) < after)
    rows = list(db.execute(query).all())
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], (last.created_at, last.id)
