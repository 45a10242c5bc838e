"""Task control as agents meet it (TASK_CONTROL.md §8.1-§8.4): the capabilities, a member's
snapshot, turn admission with the run binding, and capability search under a task."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..errors import ApiError
from . import metering, rules, storage, store

CAPABILITIES_SCHEMA = "bailing.agent-task-control-capabilities.v1"
CONTROLS = ["pause", "resume", "cancel"]


def capabilities(db: Session, session: Any) -> dict[str, Any]:
    """Supported when all six tables exist; `required` for an enrolled session either way."""
    found = storage.probe(db)
    if found == "partial":
        raise ApiError("TASK_UNAVAILABLE", "Task control storage is incomplete.")
    supported = found == "available"
    return {"schema_version": CAPABILITIES_SCHEMA, "supported": supported,
            "mode": "required" if metering.enrolled(db, session.id) else "optional",
            "task_schema": store.TASK_SCHEMA, "metering": store.METERING, "same_hub_only": True,
            "controls": list(CONTROLS), "inspect_invocation": supported}


def snapshot(db: Session, session: Any, task_ref: str, params: dict[str, str], now: datetime) -> dict[str, Any]:
    """The task as one member sees it (§8.2). State and expiry are not checked: a paused,
    cancelled or expired task stays readable; nothing is reserved or permitted."""
    task_id = rules.uuid_text(task_ref, "task_id")
    workspace = rules.workspace(params.get("workspace"))
    conversation = rules.conversation_id(params.get("client_conversation_id"))
    storage.require(db)
    caller = store.Caller(str(session.id), session.client_app_id, workspace, conversation)
    task, member = store.enter(db, task_id, caller, now)
    return store.agent_view(task, store.member_count(db, task_id), member)


def admit_turn(db: Session, session: Any, route_key: str, conversation: str, binding: dict | None,
               now: datetime) -> str | None:
    """Before a turn creates anything (§8.3): an unbound turn of an enrolled session is refused;
    a bound one must name a task this member belongs to, verified, with the task's scope hash and
    able to dispatch. Returns the task id the run will be bound to."""
    if binding is None:
        metering.unmanaged_or_required(db, session.id, storage.unbound_path(db))
        return None
    storage.require(db)
    caller = store.Caller(str(session.id), session.client_app_id, route_key, conversation)
    task, _member = store.enter(db, binding["task_id"], caller, now)
    if binding["scope_hash"] != task.scope_hash:
        raise ApiError("TASK_BINDING_CONFLICT", "scope_hash is not the task's.")
    refusal = rules.dispatch_refusal(task.state, task.policy["expires_at"], now)
    if refusal is not None:
        raise metering.refusal_error(refusal)
    return str(task.task_id)


def bind_run(db: Session, task_id: str, run: Any) -> None:
    """A new run joins its task for good, in the transaction that creates it."""
    db.execute(text("INSERT INTO bz_agent_task_runs (run_id, task_id, session_id, created_at) "
                    "VALUES (:run, :task, :session, now())"),
               {"run": run.id, "task": task_id, "session": run.session_id})


def replayed_run(db: Session, task_id: str, run: Any) -> None:
    """An identical managed turn again: its run must still be this task's and still active."""
    if metering.bound_task(db, run.id, run.session_id) != task_id:
        raise ApiError("TASK_BINDING_CONFLICT", "The run is bound to another task.")
    if run.status != "prepared":
        raise ApiError("TASK_RUN_INACTIVE")


def search_gate(db: Session, session: Any, route_key: str, run: Any, now: datetime) -> None:
    """Capability search (§8.4): a bare query, or a run outside any task, would escape the task's
    scope for an enrolled session; a bound run must be this route's, active, and its task able
    to dispatch. Search itself reserves and permits nothing."""
    available = storage.unbound_path(db)
    task_id = metering.bound_task(db, run.id, session.id) if run is not None and available == "available" else None
    if task_id is None:
        metering.unmanaged_or_required(db, session.id, available, run.task_binding if run is not None else None)
        return
    if run.client_app_id != session.client_app_id or run.route_key != route_key:
        raise ApiError("TASK_BINDING_CONFLICT", "The run belongs to another workspace.")
    if run.status != "prepared":
        raise ApiError("TASK_RUN_INACTIVE")
    caller = store.Caller(str(session.id), session.client_app_id, run.route_key, run.client_conversation_id)
    task, _member = store.enter(db, task_id, caller, now)
    refusal = rules.dispatch_refusal(task.state, task.policy["expires_at"], now)
    if refusal is not None:
        raise metering.refusal_error(refusal)
