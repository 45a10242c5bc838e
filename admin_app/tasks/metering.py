"""Task control on governed tool calls (TASK_CONTROL.md §6-§8.7): which task an invocation runs
under, its reservation, its dispatch permit, and their settlement.

Each step runs inside the invocation's own transactions (service.py): the reservation and the
permit commit with the invocation row, the consumed approval and the `dispatching` journal row,
before the request leaves; the settlement commits with the recorded outcome. A refusal raised
here rolls the whole transaction back, so a refused new call leaves nothing behind and a refused
resume leaves its approval approved and unconsumed.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..errors import ApiError
from . import rules, storage, store


@dataclass
class Managed:
    """An invocation's task (locked, verified; as of its latest fact) and the calling member."""

    task: Any
    member: Any

    @property
    def task_id(self) -> str:
        return str(self.task.task_id)


def enrolled(db: Session, session_id: Any) -> bool:
    """The sticky marker, read under a share lock of the session row: an enrolment committing
    at the same time is either seen or waited for, never missed."""
    return bool(db.execute(text("SELECT task_enrolled FROM bz_agent_sessions WHERE id = :id FOR SHARE"),
                           {"id": session_id}).scalar_one_or_none())


def task_required() -> ApiError:
    return ApiError("TASK_REQUIRED")


def bound_task(db: Session, run_id: Any, session_id: Any) -> str | None:
    """The task a run of this session is bound to (a run of another session is never found)."""
    found = db.execute(text("SELECT task_id FROM bz_agent_task_runs WHERE run_id = :run AND session_id = :session"),
                       {"run": run_id, "session": session_id}).scalar_one_or_none()
    return None if found is None else str(found)


def unmanaged_or_required(db: Session, session_id: Any, available: storage.Storage,
                          run_binding: Any = None) -> None:
    """An unbound path: refused for an enrolled session, and (tables gone) for a run that was
    managed."""
    if available == "absent" and run_binding is not None:
        raise ApiError("TASK_UNSUPPORTED", "This run is bound to a task, and task control is not installed.")
    if enrolled(db, session_id):
        raise task_required()


def for_run(db: Session, session: Any, run: Any, now: datetime, *, new: bool) -> Managed | None:
    """The task an invocation on `run` acts under (verified), or None for an unmanaged call of a
    session that is not enrolled. `new`: a new invocation, which needs an active run."""
    available = storage.unbound_path(db)
    task_id = bound_task(db, run.id, session.id) if run is not None and available == "available" else None
    if task_id is None:
        unmanaged_or_required(db, session.id, available, run.task_binding if run is not None else None)
        return None
    if new and run.status != "prepared":
        raise ApiError("TASK_RUN_INACTIVE")
    caller = store.Caller(str(session.id), session.client_app_id, run.route_key, run.client_conversation_id)
    task, member = store.enter(db, task_id, caller, now)
    return Managed(task, member)


# The states a record may be in (§6.3): (permit, outcome, terminal, attempted) -> the budget
# state of a write (a read-only call has none).
VALID_RECORDS = {
    ("none", None, False, False): "reserved",                         # admitted, awaiting approval
    ("held", None, False, True): "reserved",                          # in flight
    ("unknown", "unknown", False, True): "reserved",                  # outcome unknown
    ("settled", "confirmed_dispatched", True, True): "consumed",      # answered, whatever the status
    ("settled", "confirmed_not_dispatched", False, True): "reserved",  # not sent, may be retried
    ("settled", "confirmed_not_dispatched", True, True): "released",  # not sent, final
    ("none", "confirmed_not_dispatched", True, False): "released",    # denied before any permit
}


def checked(record: Any) -> Any:
    """The record, once it is in a state the rules allow; else TASK_RECORD_INVALID."""
    budget = VALID_RECORDS.get((record.permit_state, record.outcome, record.is_terminal, record.attempt > 0))
    if budget is None or record.budget_state != (None if record.is_readonly else budget):
        raise ApiError("TASK_RECORD_INVALID", "This call's task record fails its integrity checks.")
    return record


def record_of(db: Session, job_id: Any, *, lock: bool = False) -> Any:
    sql = "SELECT * FROM bz_agent_task_invocations WHERE job_id = :job" + (" FOR UPDATE" if lock else "")  # noqa: S608 - constant lock clause
    return db.execute(text(sql), {"job": job_id}).one_or_none()


def for_invocation(db: Session, session: Any, inv: Any, now: datetime) -> Managed | None:
    """Resume and receipt: the task of an existing invocation comes from its record (made when it
    was admitted), never from the request. An unbound invocation of an enrolled session is
    refused, including one made before the enrolment."""
    available = storage.unbound_path(db)
    record = record_of(db, inv.id) if available == "available" else None
    if record is None:
        binding = None
        if available == "absent" and inv.run_id is not None:
            binding = db.execute(text("SELECT task_binding FROM bz_runs WHERE id = :id"),
                                 {"id": inv.run_id}).scalar_one_or_none()
        unmanaged_or_required(db, session.id, available, binding)
        return None
    run = db.execute(text("SELECT route_key, client_conversation_id FROM bz_runs WHERE id = :id"),
                     {"id": record.run_id}).one()
    caller = store.Caller(str(session.id), session.client_app_id, run.route_key, run.client_conversation_id)
    task, member = store.enter(db, str(record.task_id), caller, now)
    checked(record)
    return Managed(task, member)


# ----------------------------------------------------------------------------- reservation

def reserve(db: Session, managed: Managed, inv: Any, *, readonly: bool, approval_required: bool,
            now: datetime) -> None:
    """Admit a new invocation under its task (§6.4): the task may dispatch, the member may use
    the tool, and a write fits the budget; then the record, and a write's reservation."""
    task = managed.task
    refusal = rules.dispatch_refusal(task.state, task.policy["expires_at"], now)
    if refusal is not None:
        raise refusal_error(refusal)
    if inv.tool not in list(managed.member.allowed_tools):
        raise ApiError("TASK_TOOL_NOT_ALLOWED", f"This task does not allow {inv.tool} for this member.")
    if not readonly and not rules.write_capacity(task.policy["max_write_calls"], task.write_reserved,
                                                 task.write_consumed):
        raise ApiError("TASK_WRITE_BUDGET_EXHAUSTED")
    db.execute(text("""
        INSERT INTO bz_agent_task_invocations (session_id, invocation_id, task_id, run_id, job_id, tool, args_hash,
                                               execution_fingerprint, is_readonly, approval_required,
                                               budget_state, created_at, updated_at)
        VALUES (:session, :invocation, :task, :run, :job, :tool, :args, :fingerprint, :readonly, :approval,
                :budget, now(), now())"""),
        {"session": inv.session_id, "invocation": inv.invocation_id, "task": managed.task_id, "run": inv.run_id,
         "job": inv.id, "tool": inv.tool, "args": inv.args_hash, "fingerprint": inv.execution_fingerprint,
         "readonly": readonly, "approval": approval_required, "budget": None if readonly else "reserved"})
    managed.task = store.record_fact(db, managed.task_id, "invocation_reserved", reserved=0 if readonly else 1,
                                     invocation_id=inv.invocation_id)


def link_approval(db: Session, job_id: Any, approval_id: Any) -> None:
    db.execute(text("UPDATE bz_agent_task_invocations SET approval_id = :a, updated_at = now() WHERE job_id = :job"),
               {"a": approval_id, "job": job_id})


def refusal_error(code: str) -> ApiError:
    """The dispatchability codes of rules.dispatch_refusal, each raised by name."""
    if code == "TASK_CANCELLED":
        return ApiError("TASK_CANCELLED")
    if code == "TASK_SCOPE_BLOCKED":
        return ApiError("TASK_SCOPE_BLOCKED", "The task is blocked: a member failed verification.")
    if code == "TASK_PAUSED":
        return ApiError("TASK_PAUSED")
    return ApiError("TASK_EXPIRED")


# ----------------------------------------------------------------------------- permits

def grant(db: Session, managed: Managed, job_id: Any, now: datetime) -> str:
    """A fresh permit for one dispatch attempt (§6.5), before the approval is consumed and the
    journal row written in this same transaction: a pause, an expiry or a full task therefore
    never uses up an approval."""
    record = record_of(db, job_id, lock=True)
    if record is None:
        raise ApiError("TASK_RECORD_INVALID", "This call has no task record.")
    if checked(record).permit_state in ("held", "unknown"):
        # Another attempt holds the permit: it may be under way or done, so none may start.
        raise ApiError("TASK_DISPATCH_UNCERTAIN")
    if record.is_terminal or (record.attempt > 0 and record.outcome != "confirmed_not_dispatched"):
        raise ApiError("TASK_RECORD_INVALID", "This call's task record is finished.")
    task = managed.task
    refusal = rules.dispatch_refusal(task.state, task.policy["expires_at"], now)
    if refusal is not None:
        raise refusal_error(refusal)
    if task.active_permits >= task.policy["max_concurrent"]:
        raise ApiError("TASK_CONCURRENCY_EXHAUSTED")
    permit = str(uuid.uuid4())
    db.execute(text("""
        UPDATE bz_agent_task_invocations
           SET permit_id = :permit, permit_state = 'held', outcome = NULL, attempt = attempt + 1, updated_at = now()
         WHERE job_id = :job"""), {"permit": permit, "job": job_id})
    store.record_fact(db, managed.task_id, "dispatch_permitted", permits=1, invocation_id=record.invocation_id,
                      permit_id=permit, detail={"approval_id": str(record.approval_id) if record.approval_id else None})
    return permit


def settle(db: Session, job_id: Any, *, dispatched: bool | None) -> None:
    """What became of a permitted attempt (§6.6), in the transaction that records it, whatever
    the task's state: `True` a trusted response (a write is consumed), `None` unknown (permit and
    reservation kept). Unmanaged invocations have no record and nothing to settle."""
    record = record_of(db, job_id) if storage.probe(db) == "available" else None
    if record is None:
        return
    store.load(db, str(record.task_id), lock=True)  # the task row before its record (lock order)
    record = checked(record_of(db, job_id, lock=True))
    if dispatched is None:
        if record.permit_state != "held":
            return  # already unknown (or settled by the answer that arrived): nothing changes
        db.execute(text("UPDATE bz_agent_task_invocations SET permit_state = 'unknown', outcome = 'unknown', "
                        "updated_at = now() WHERE job_id = :job"), {"job": job_id})
        store.record_fact(db, str(record.task_id), "settled_unknown", invocation_id=record.invocation_id,
                          permit_id=str(record.permit_id), detail={"terminal": False})
        return
    if record.permit_state == "settled":
        return
    write = not record.is_readonly
    db.execute(text("""
        UPDATE bz_agent_task_invocations
           SET permit_state = 'settled', outcome = 'confirmed_dispatched', is_terminal = true,
               budget_state = CASE WHEN is_readonly THEN NULL ELSE 'consumed' END, updated_at = now()
         WHERE job_id = :job"""), {"job": job_id})
    store.record_fact(db, str(record.task_id), "settled_confirmed_dispatched", permits=-1,
                      reserved=-1 if write else 0, consumed=1 if write else 0, invocation_id=record.invocation_id,
                      permit_id=str(record.permit_id), detail={"terminal": True})


def release(db: Session, job_id: Any, reason: str) -> None:
    """Close a record that never got a permit (§6.7): its approval was denied or expired, or it
    was refused before dispatch. A write's reservation is given back; repeating changes nothing."""
    record = record_of(db, job_id) if storage.probe(db) == "available" else None
    if record is None or record.is_terminal:
        return
    store.load(db, str(record.task_id), lock=True)
    record = checked(record_of(db, job_id, lock=True))
    if record.is_terminal or record.permit_state != "none":
        return  # after a permit, only a settlement may close it
    write = not record.is_readonly
    db.execute(text("""
        UPDATE bz_agent_task_invocations
           SET budget_state = CASE WHEN is_readonly THEN NULL ELSE 'released' END,
               outcome = 'confirmed_not_dispatched', is_terminal = true, updated_at = now()
         WHERE job_id = :job"""), {"job": job_id})
    store.record_fact(db, str(record.task_id), "reservation_released", reserved=-1 if write else 0,
                      invocation_id=record.invocation_id,
                      detail={"reason": reason, "approval_id": str(record.approval_id) if record.approval_id else None})
