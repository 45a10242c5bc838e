"""Support triage (runs:read): the runs list and the unresolved tool calls, newest first.

Runs are filtered by status, client app, route and creation time, and looked up by a prefix of any
ID they are known by: the run's, its session's, its client conversation or turn, or one of its tool
calls (the agent's invocation ID or the hub's job ID). Each lookup branch is an index range read
(sql/067) that stops after one page; the page is the newest of their union, and each row says what
matched. Keyset paged on (created_at, id), so the end of a busy hub pages as cheaply as its start.

Rows are summaries (the columns a list shows); a run's context and completion are read by its
trace."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, select, tuple_
from sqlalchemy.orm import Session

from ..identity.models import AgentSession
from ..invocations.models import Approval, Invocation
from ..runtime.models import Run
from . import lookup
from .lookup import like_prefix, starts_with

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
RUNS = lookup.Listing(Run, EXACT, frozenset({"run_id", "session"}), Invocation.run_id == Run.id, MATCHES)
Key = lookup.Key


RunFilters = lookup.Filters


@dataclass(frozen=True)
class CallFilters:
    state: str = ""
    app: str = ""
    route: str = ""
    tool: str = ""


def _branches(q: str) -> list[tuple[str, Any, bool]]:
    """(what matched, condition, through a tool call) for each ID a run is known by."""
    text = like_prefix(q)
    return [("run ID", starts_with(Run.id, q), False),
            ("session ID", starts_with(Run.session_id, q), False),
            ("conversation ID", Run.client_conversation_id.like(text), False),
            ("turn ID", Run.client_turn_id.like(text), False),
            ("invocation ID", Invocation.invocation_id.like(text), True),
            ("job ID", starts_with(Invocation.id, q), True)]


def recent_runs(db: Session, f: RunFilters, after: Key | None,
                limit: int) -> tuple[list[dict[str, Any]], Key | None]:
    """Runs matching the filters (and the lookup, if any), newest first, after `after`; and the
    key to continue from, if more remain. Each row's `matched` names what the lookup matched."""
    columns = (Run.id, Run.client_app_id, Run.route_key, Run.client_conversation_id, Run.client_turn_id,
               Run.status, Run.created_at)
    return lookup.recent(db, RUNS, columns, _branches(f.q) if f.q else [], f, after, limit)


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
