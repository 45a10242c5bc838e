"""What administrators do with tasks (TASK_CONTROL.md §9): create one, pause / resume / cancel
it, list them and read one with a page of its invocation records. Agent bearers never reach
these; admin reads never verify members, block a task or change a counter."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import canonical_json, utc_now
from ..errors import ApiError
from . import rules, storage, store

LIST_DEFAULT, _, LIST_MAX = limits.TASK_LIST_LIMIT


def create(db: Session, actor: str, body: Any) -> dict[str, Any]:
    """Create a task from a create body (§9.3), or answer the task an identical earlier request
    created. Members are locked, verified and enrolled in this one transaction."""
    storage.require(db)
    request = rules.create_request(body)
    task_id = rules.task_id(actor, request.request_id)
    create_key = rules.request_key(actor, request.request_id)
    create_hash = rules.create_hash(task_id, actor, request.members, request.policy)
    # Identical creates racing both end in 200: the second waits here and finds the first.
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 62))"), {"key": create_key})
    locked = store.lock_group(db, {m["client_app_id"] for m in request.members},
                              {m["workspace"] for m in request.members},
                              {m["session_id"] for m in request.members}, enrol=True)
    existing = db.execute(text("SELECT task_id, create_key, create_hash FROM bz_agent_tasks "
                               "WHERE task_id = :id OR create_key = :key"),
                          {"id": task_id, "key": create_key}).all()
    if existing:
        if len(existing) == 1 and str(existing[0].task_id) == task_id \
                and existing[0].create_key == create_key and existing[0].create_hash == create_hash:
            return store.admin_view_of(db, task_id)
        raise ApiError("TASK_CONFLICT")
    now = utc_now()
    for i, member in enumerate(request.members):
        problem = store.member_problem(member, locked, now)
        if problem is not None:
            raise ApiError("TASK_SCOPE_BLOCKED", f"members[{i}] cannot be frozen: {problem}.")
    if rules.expired(request.policy["expires_at"], now):
        raise ApiError("TASK_EXPIRED", "policy.expires_at must be in the future.")
    identities = {rules.member_key_text(m): store.live_identity(locked.sessions[m["session_id"]])
                  for m in request.members}
    _insert(db, task_id, actor, request, create_key, create_hash,
            rules.scope_hash(request.members, identities), identities)
    return store.admin_view_of(db, task_id)


def _insert(db: Session, task_id: str, actor: str, request: rules.CreateRequest, create_key: str,
            create_hash: str, scope_hash: str, identities: dict[str, str]) -> None:
    db.execute(text("""
        INSERT INTO bz_agent_tasks (task_id, create_key, create_hash, state, revision, ledger_sequence, policy,
                                    scope_hash, created_by, created_at, updated_at)
        VALUES (:id, :key, :hash, 'active', 1, 1, CAST(:policy AS jsonb), :scope, :actor, now(), now())"""),
        {"id": task_id, "key": create_key, "hash": create_hash, "policy": canonical_json(request.policy),
         "scope": scope_hash, "actor": actor})
    for m in request.members:
        db.execute(text("""
            INSERT INTO bz_agent_task_members (task_id, member_key, session_id, client_app_id, route_key,
                                               client_conversation_id, allowed_tools, identity_hash)
            VALUES (:id, :key, :session, :app, :route, :conversation, CAST(:tools AS jsonb), :identity)"""),
            {"id": task_id, "key": rules.member_key(m), "session": m["session_id"], "app": m["client_app_id"],
             "route": m["workspace"], "conversation": m["client_conversation_id"],
             "tools": canonical_json(m["allowed_tools"]), "identity": identities[rules.member_key_text(m)]})
    sessions = sorted({m["session_id"] for m in request.members})
    # The enrolment marker: sticky, never removed (a session may belong to many tasks in turn).
    db.execute(text("""
        INSERT INTO bz_agent_task_enforcements (session_id, first_task_id, created_by, created_at)
        SELECT s, :id, :actor, now() FROM unnest(CAST(:sessions AS uuid[])) AS s
        ON CONFLICT (session_id) DO NOTHING"""), {"id": task_id, "actor": actor, "sessions": sessions})
    db.execute(text("UPDATE bz_agent_sessions SET task_enrolled = true WHERE id = ANY(CAST(:s AS uuid[]))"),
               {"s": sessions})
    db.execute(text("""
        INSERT INTO bz_agent_task_events (task_id, sequence, event, request_key, request_hash, actor, detail,
                                          created_at)
        VALUES (:id, 1, 'created', :key, :hash, :actor, '{}', now())"""),
        {"id": task_id, "key": create_key, "hash": create_hash, "actor": actor})


def control(db: Session, actor: str, task_ref: str, body: Any) -> dict[str, Any]:
    """Pause, resume or cancel (§9.5): verified (resume), replayed, revision-checked, then moved."""
    storage.require(db)
    task_id = task_path_id(task_ref)
    request = rules.control_request(body)
    if store.load(db, task_id) is None:
        raise ApiError("TASK_NOT_FOUND")
    now = utc_now()
    task = store.verify_group(db, task_id, now) if request.action == "resume" else store.load(db, task_id, lock=True)
    key = rules.request_key(actor, request.request_id)
    digest = rules.control_hash(task_id, actor, request.action, request.expected_revision)
    earlier = db.execute(text("SELECT request_hash FROM bz_agent_task_events "
                              "WHERE task_id = :id AND request_key = :key"), {"id": task_id, "key": key}).one_or_none()
    if earlier is not None:
        if earlier.request_hash != digest:
            raise ApiError("TASK_CONTROL_CONFLICT", "This request_id was already used for another control.")
        return store.admin_view_of(db, task_id)
    if request.expected_revision != task.revision:
        raise ApiError("TASK_REVISION_CONFLICT", f"The task is at revision {task.revision}.")
    state = rules.transition(task.state, request.action)
    if request.action == "resume" and rules.expired(task.policy["expires_at"], now):
        raise ApiError("TASK_EXPIRED", "The task's deadline has passed; it cannot be resumed.")
    store.record_fact(db, task_id, request.action, state=state, revision=True, request_key=key,
                      request_hash=digest, actor=actor)
    return store.admin_view_of(db, task_id)


def task_path_id(value: str) -> str:
    return rules.uuid_text(value, "task_id")


def page_limit(value: str | None) -> int:
    if value is None:
        return LIST_DEFAULT
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= LIST_MAX:
        raise rules.invalid(f"limit must be an integer from 1 to {LIST_MAX}.")
    return int(value)


def cursor(value: str | None, name: str = "before") -> str | None:
    return None if value in (None, "") else rules.uuid_text(value, name)


def list_tasks(db: Session, limit: int, before: str | None) -> dict[str, Any]:
    storage.require(db)
    rows = db.execute(text(f"""
        SELECT {store.TASK_COLUMNS} FROM bz_agent_tasks
         WHERE CAST(:before AS uuid) IS NULL OR task_id < CAST(:before AS uuid)
         ORDER BY task_id DESC LIMIT :n"""), {"before": before, "n": limit + 1}).all()  # noqa: S608 - constant identifiers, bound values
    page = rows[:limit]
    found = db.execute(text(f"SELECT {store.MEMBER_COLUMNS} FROM bz_agent_task_members "  # noqa: S608 - constant identifiers, bound values
                            "WHERE task_id = ANY(CAST(:ids AS uuid[]))"),
                       {"ids": [str(t.task_id) for t in page]}).all()
    by_task: dict[str, list[Any]] = {}
    for m in found:
        by_task.setdefault(str(m.task_id), []).append(m)
    return {"items": [store.admin_view(t, by_task.get(str(t.task_id), [])) for t in page],
            "next_cursor": str(page[-1].task_id) if len(rows) > limit else None}


def invocation_row(r: Any) -> dict[str, Any]:
    return {"session_id": str(r.session_id), "invocation_id": r.invocation_id, "run_id": str(r.run_id),
            "job_id": str(r.job_id), "tool": r.tool, "readonly": r.is_readonly, "budget_state": r.budget_state,
            "permit_state": r.permit_state, "outcome": r.outcome, "terminal": r.is_terminal,
            "attempt": r.attempt, "approval_id": str(r.approval_id) if r.approval_id else None}


def detail(db: Session, task_ref: str, limit: int, before: str | None) -> dict[str, Any]:
    """The task and a page of its invocation records, newest job first (§9.4)."""
    storage.require(db)
    task_id = task_path_id(task_ref)
    task = store.load(db, task_id)
    if task is None:
        raise ApiError("TASK_NOT_FOUND")
    rows = db.execute(text("""
        SELECT session_id, invocation_id, run_id, job_id, tool, is_readonly, budget_state, permit_state, outcome,
               is_terminal, attempt, approval_id
          FROM bz_agent_task_invocations
         WHERE task_id = :id AND (CAST(:before AS uuid) IS NULL OR job_id < CAST(:before AS uuid))
         ORDER BY job_id DESC LIMIT :n"""), {"id": task_id, "before": before, "n": limit + 1}).all()
    page = rows[:limit]
    return {"task": store.admin_view(task, store.members(db, task_id)),
            "invocations": [invocation_row(r) for r in page],
            "next_cursor": str(page[-1].job_id) if len(rows) > limit else None}


def runs(db: Session, task_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """The runs bound to the task, newest first (for the console)."""
    rows = db.execute(text("""
        SELECT tr.run_id, tr.session_id, tr.created_at, r.route_key, r.client_conversation_id, r.status
          FROM bz_agent_task_runs tr JOIN bz_runs r ON r.id = tr.run_id
         WHERE tr.task_id = :id ORDER BY tr.created_at DESC, tr.run_id DESC LIMIT :n"""),
        {"id": task_id, "n": limit}).all()
    return [{"run_id": str(r.run_id), "session_id": str(r.session_id), "created_at": rules.wire_time(r.created_at),
             "workspace": r.route_key, "client_conversation_id": r.client_conversation_id, "status": r.status}
            for r in rows]
