"""What a decision on a job's approval does to the job (CLIENT_API_AND_EXECUTOR.md §C.7): noted in
its timeline (`tool_approved`, `tool_denied`), and an approval of a finished job (done, error,
rejected) queues it again under the same id (rerun.py), so that an executor claims it with the
approved call in its `approved_note`. A job still dispatched is left alone: its brain may call
again and consume the approval. A denial reruns nothing.

Registered with invocations.approvals (`on_decided`) when this module is imported, which the app
factory does (admin_app/__init__.py): every door a decision comes through (console, admin API,
the business system's decision) runs it in the deciding transaction."""
from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..invocations.approvals import on_decided
from ..invocations.models import Approval, Invocation
from . import events, rerun
from .models import TERMINAL, Job


@on_decided
def job_decided(db: Session, approval_id: uuid.UUID, decision: str) -> bool:
    """True when the job was queued again."""
    row = db.execute(select(Invocation.owner_job_id, Approval.number, Approval.tool, Approval.decided_by)
                     .join(Approval, Approval.job_id == Invocation.id)
                     .where(Approval.id == approval_id)).first()
    if row is None or row.owner_job_id is None:
        return False  # an agent's call: its agent resumes it
    job_id = row.owner_job_id
    events.record(db, job_id, "tool_approved" if decision == "approved" else "tool_denied", row.decided_by,
                  {"approval_id": row.number, "tool": row.tool})
    # Read before it is locked: a job still dispatched is not locked at all, so a tool call of
    # it that holds the job and waits for this approval's invocation never waits on us in turn.
    if decision != "approved" or db.scalar(select(Job.status).where(Job.id == job_id)) not in TERMINAL:
        return False
    job = rerun.locked(db, job_id)
    requeued = job is not None and rerun.requeue(db, job, row.decided_by or "approval", approval_id=row.number)
    db.flush()  # the deciding code expires what it read afterwards: unflushed changes would be lost
    return requeued
