"""A job's timeline (bz_job_events): one row per thing that happened to it, written in the
transaction that made it happen, so the timeline never says more or less than the job did."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import JobEvent

# The names the timeline uses (Core's, CLIENT_API_AND_EXECUTOR.md §F), and the hub's own
# additions (`lease_expired`, `result_refused`, `callback_queued`, `callback_dead`, `callback_replayed`,
# `callback_resolved`).
EVENTS = ("received", "rejected", "awaiting_executor", "dispatched", "lease_expired", "retry_scheduled",
          "finished", "expired", "rerun", "result_ignored", "result_refused", "tool_call", "tool_result",
          "tool_lookup", "tool_call_deduped", "tool_approval_pending", "tool_approved", "tool_denied",
          "callback", "callback_dead", "callback_replayed", "callback_queued", "callback_resolved")


def record(db: Session, job_id: uuid.UUID, event: str, actor: str | None = None,
           detail: dict[str, Any] | None = None) -> None:
    """Add one event to the job's timeline, in the caller's transaction. `detail` holds names,
    ids and counts, never the text an agent or a user sent."""
    if event not in EVENTS:
        raise ValueError(f"unknown job event {event!r}")
    db.add(JobEvent(job_id=job_id, event=event, actor=actor, detail=detail or {}))


def timeline(db: Session, job_id: uuid.UUID, limit: int = 500) -> list[JobEvent]:
    """The job's events, oldest first."""
    return list(db.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                           .order_by(JobEvent.id).limit(limit)))
