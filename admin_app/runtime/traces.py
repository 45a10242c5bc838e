"""Run traces for support staff: a run, its visible messages, its tool jobs, its archive link."""
from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.availability import Availability
from ..conversation_audit.reads import run_audit_link
from ..errors import ApiError
from ..invocations.traces import jobs_of_run
from .models import Message, Run


def run_trace(db: Session, run_id: uuid.UUID, available: Availability) -> dict:
    run = db.get(Run, run_id)
    if run is None:
        raise ApiError(404, "run_not_found", "No such run.")
    messages = db.scalars(select(Message).where(Message.run_id == run.id).order_by(Message.id))
    return {
        "schema": "bailing.agent-run-trace.v1",
        "run": {
            "run_id": str(run.id),
            "session_id": str(run.session_id),
            "client_app_id": run.client_app_id,
            "route_key": run.route_key,
            "thread_id": run.thread_id,
            "client_conversation_id": run.client_conversation_id,
            "user_message_id": run.user_message_id,
            "status": run.status,
            "profile_revision": run.profile_revision,
            "capability_revision": run.capability_revision,
            "created_at": iso(run.created_at),
            "completed_at": iso(run.completed_at),
            # conversation_audit_id and client_turn_id appear once an archive links the run.
            **run_audit_link(db, run.id, available),
        },
        "messages": [{"role": m.role, "message_id": m.message_id, "content": m.content,
                      "created_at": iso(m.created_at)} for m in messages],
        "jobs": jobs_of_run(db, run.id),
    }
