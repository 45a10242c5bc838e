"""Tool job traces: milestones, key names, approval state and business status; never argument
values or business response bodies."""
from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.availability import Availability
from ..conversation_audit.reads import run_audit_link
from ..errors import ApiError
from .models import Approval, Invocation, JournalEntry


def job_view(db: Session, inv: Invocation) -> dict:
    approval = db.scalar(select(Approval).where(Approval.job_id == inv.id))
    journal = db.get(JournalEntry, inv.id)
    return {
        "job_id": str(inv.id),
        "invocation_id": inv.invocation_id,
        "session_id": str(inv.session_id),
        "route_key": inv.route_key,
        "run_id": str(inv.run_id) if inv.run_id else None,
        "tool": inv.tool,
        "scope": inv.scope,
        "status": inv.status,
        "reason": inv.reason,
        "argument_keys": list(inv.argument_keys),
        "args_hash": inv.args_hash,
        "business_status": inv.business_status,
        "approval": None if approval is None else {
            "id": str(approval.id), "state": approval.status, "decided_by": approval.decided_by,
            "decided_at": iso(approval.decided_at), "consumed_at": iso(approval.consumed_at)},
        "journal": None if journal is None else {
            "state": journal.state, "method": journal.method, "http_status": journal.http_status,
            "started_at": iso(journal.started_at), "finished_at": iso(journal.finished_at)},
        "created_at": iso(inv.created_at),
        "updated_at": iso(inv.updated_at),
    }


def jobs_of_run(db: Session, run_id: uuid.UUID) -> list[dict]:
    invocations = db.scalars(select(Invocation).where(Invocation.run_id == run_id)
                             .order_by(Invocation.created_at, Invocation.id))
    return [job_view(db, inv) for inv in invocations]


def job_trace(db: Session, job_ref: str, available: Availability) -> dict:
    try:
        job_id = uuid.UUID(job_ref)
    except ValueError:
        raise ApiError(404, "job_not_found", "No such tool job.") from None
    inv = db.get(Invocation, job_id)
    if inv is None:
        raise ApiError(404, "job_not_found", "No such tool job.")
    job = job_view(db, inv)
    if inv.run_id is not None:
        job.update(run_audit_link(db, inv.run_id, available))
    return {"schema": "bailing.tool-job-trace.v1", "job": job}
