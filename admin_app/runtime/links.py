"""What another package may learn of a run: the runtime's one declared interface for the
conversation audit, which checks a `run_link` event against the run it names.

The audit sees an immutable copy of the run's owner and place, never the ORM model, so the
runtime's tables stay the runtime's own.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from .models import Run


@dataclass(frozen=True)
class LinkableRun:
    """Who ran a run and in which conversation turn (the fields a link is checked against)."""

    id: uuid.UUID
    thread_id: int
    session_id: uuid.UUID
    client_app_id: str
    route_key: str
    client_conversation_id: str
    client_turn_id: str


def run_for_link(db: Session, run_id: uuid.UUID) -> LinkableRun | None:
    """The run `run_id`, or None when there is none."""
    run = db.get(Run, run_id)
    if run is None:
        return None
    return LinkableRun(id=run.id, thread_id=run.thread_id, session_id=run.session_id,
                       client_app_id=run.client_app_id, route_key=run.route_key,
                       client_conversation_id=run.client_conversation_id,
                       client_turn_id=run.client_turn_id)
