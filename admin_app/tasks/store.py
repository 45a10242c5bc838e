"""Tasks as stored: reading them, their views on the wire, the event ledger, and group
verification under locks (TASK_CONTROL.md §2, §5, §7.3, §8.2, §9.6).

Lock order, in every transaction that touches a task: the invocation (the caller's), then the
members' client apps, routes and sessions (each sorted, FOR SHARE; FOR UPDATE on sessions only
when enrolling them), then the task row (FOR UPDATE), then its invocation records.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import canonical_json
from ..errors import ApiError
from ..identity.workspace import audience_allows
from . import rules

TASK_SCHEMA = "bailing.agent-task.v1"
METERING = "write_invocation"

TASK_COLUMNS = ("task_id, state, revision, ledger_sequence, policy, scope_hash, write_reserved, "
                 "write_consumed, active_permits, created_at, updated_at")
MEMBER_COLUMNS = ("task_id, member_key, session_id, client_app_id, route_key, client_conversation_id, "
                   "allowed_tools, identity_hash")


@dataclass(frozen=True)
class Caller:
    """Who acts on an agent path: the bearer's session and app, and the member coordinates."""

    session_id: str
    client_app_id: str
    workspace: str
    conversation: str


def load(db: Session, task_id: str, *, lock: bool = False) -> Any:
    sql = f"SELECT {TASK_COLUMNS} FROM bz_agent_tasks WHERE task_id = :id" + (" FOR UPDATE" if lock else "")  # noqa: S608 - constant identifiers, bound values
    return db.execute(text(sql), {"id": task_id}).one_or_none()


def members(db: Session, task_id: str) -> list[Any]:
    return list(db.execute(text(f"SELECT {MEMBER_COLUMNS} FROM bz_agent_task_members "  # noqa: S608 - constant identifiers, bound values
                                "WHERE task_id = :id"), {"id": task_id}))


def member_of(db: Session, task_id: str, caller: Caller) -> Any:
    """The member these coordinates name (unlocked): None for a stranger or an unknown task."""
    return db.execute(text(f"SELECT {MEMBER_COLUMNS} FROM bz_agent_task_members "  # noqa: S608 - constant identifiers, bound values
                           "WHERE task_id = :id AND session_id = :session AND route_key = :route "
                           "AND client_conversation_id = :conversation AND client_app_id = :app"),
                      {"id": task_id, "session": caller.session_id, "route": caller.workspace,
                       "conversation": caller.conversation, "app": caller.client_app_id}).one_or_none()


def sorted_members(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda m: rules.member_key_text(_member_dict(m)).encode("utf-16-be"))


# ----------------------------------------------------------------------------- views

def _member_dict(m: Any) -> dict[str, Any]:
    return {"session_id": str(m.session_id), "client_app_id": m.client_app_id, "workspace": m.route_key,
            "client_conversation_id": m.client_conversation_id, "allowed_tools": list(m.allowed_tools)}


def _common(task: Any, member_count: int) -> dict[str, Any]:
    policy = task.policy
    return {"schema_version": TASK_SCHEMA, "task_id": str(task.task_id), "state": task.state,
            "revision": task.revision, "ledger_sequence": task.ledger_sequence,
            "scope_hash": task.scope_hash, "member_count": member_count,
            "policy": {"max_write_calls": policy["max_write_calls"], "max_concurrent": policy["max_concurrent"],
                       "expires_at": policy["expires_at"]},
            "counters": {"write_reserved": task.write_reserved, "write_consumed": task.write_consumed,
                         "active_permits": task.active_permits},
            "metering": METERING, "snapshot_is_dispatch_permission": False}


def agent_view(task: Any, member_count: int, member: Any) -> dict[str, Any]:
    """What one member reads (§8.2): the task and its own member entry, never the others."""
    return {**_common(task, member_count), "member": _member_dict(member)}


def admin_view(task: Any, rows: list[Any]) -> dict[str, Any]:
    return {**_common(task, len(rows)), "members": [_member_dict(m) for m in sorted_members(rows)],
            "created_at": rules.wire_time(task.created_at), "updated_at": rules.wire_time(task.updated_at)}


def admin_view_of(db: Session, task_id: str) -> dict[str, Any]:
    task = load(db, task_id)
    assert task is not None  # callers name a task they found
    return admin_view(task, members(db, task_id))


def member_count(db: Session, task_id: str) -> int:
    return int(db.execute(text("SELECT count(*) FROM bz_agent_task_members WHERE task_id = :id"),
                          {"id": task_id}).scalar_one())


# ----------------------------------------------------------------------------- ledger

def record_fact(db: Session, task_id: str, event: str, *, state: str | None = None, revision: bool = False,
                reserved: int = 0, consumed: int = 0, permits: int = 0, request_key: str | None = None,
                request_hash: str | None = None, actor: str | None = None, invocation_id: str | None = None,
                permit_id: str | None = None, detail: dict[str, Any] | None = None) -> Any:
    """One fact of the task: its counters and state move, `ledger_sequence` (and, for a control
    or a block, `revision`) goes up by one, and the event is appended under that sequence. The
    table's checks refuse a negative counter, so a bookkeeping bug cannot commit."""
    task = db.execute(text(f"""
        UPDATE bz_agent_tasks
           SET ledger_sequence = ledger_sequence + 1, revision = revision + :bump,
               state = coalesce(:state, state), write_reserved = write_reserved + :reserved,
               write_consumed = write_consumed + :consumed, active_permits = active_permits + :permits,
               updated_at = now()
         WHERE task_id = :id RETURNING {TASK_COLUMNS}"""),  # noqa: S608 - constant identifiers, bound values
        {"bump": int(revision), "state": state, "reserved": reserved, "consumed": consumed,
         "permits": permits, "id": task_id}).one()
    db.execute(text("""
        INSERT INTO bz_agent_task_events (task_id, sequence, event, request_key, request_hash, actor,
                                          invocation_id, permit_id, detail, created_at)
        VALUES (:id, :seq, :event, :key, :hash, :actor, :invocation, :permit, CAST(:detail AS jsonb), now())"""),
        {"id": task_id, "seq": task.ledger_sequence, "event": event, "key": request_key, "hash": request_hash,
         "actor": actor, "invocation": invocation_id, "permit": permit_id,
         "detail": canonical_json(detail or ({"revision": task.revision} if revision else {}))})
    return task


# ----------------------------------------------------------------------------- verification

@dataclass(frozen=True)
class Locked:
    """The rows a group verification read under its locks."""

    clients: dict[str, Any]
    routes: dict[str, Any]
    sessions: dict[str, Any]


def lock_group(db: Session, apps: set[str], routes: set[str], sessions: set[str], *,
               enrol: bool = False) -> Locked:
    """Share-lock (sessions: lock for update when they are being enrolled) the rows a
    verification reads, in the one order every task transaction uses."""
    clients = db.execute(text("""
        SELECT app_id, enabled, agent_authorize_url, allowed_routes FROM bz_client_apps
         WHERE app_id = ANY(:keys) ORDER BY app_id FOR SHARE"""), {"keys": sorted(apps)})
    found_routes = db.execute(text("""
        SELECT route_key, enabled, audience, agent_client, tools FROM bz_routes
         WHERE route_key = ANY(:keys) ORDER BY route_key FOR SHARE"""), {"keys": sorted(routes)})
    found_sessions = db.execute(text(f"""
        SELECT id, client_app_id, principal, on_behalf_of, allowed_routes, revoked_at, refresh_expires_at,
               created_at, task_enrolled
          FROM bz_agent_sessions WHERE id = ANY(CAST(:keys AS uuid[])) ORDER BY id
           FOR {"UPDATE" if enrol else "SHARE"}"""), {"keys": sorted(sessions)})  # noqa: S608 - constant lock mode
    return Locked({r.app_id: r for r in clients}, {r.route_key: r for r in found_routes},
                  {str(r.id): r for r in found_sessions})


def _listed(allowed: list[str] | None, key: str) -> bool:
    return allowed is not None and (key in allowed or "*" in allowed)


def live_identity(session: Any) -> str:
    return rules.identity_digest(str(session.id), session.client_app_id, session.principal,
                                 session.on_behalf_of, session.created_at)


def member_problem(member: dict[str, Any], locked: Locked, now: datetime,
                   identity_hash: str | None = None) -> str | None:
    """Why this member does not verify (§5), or None. Without `identity_hash` (at creation) the
    identity is what is being frozen, so it is not compared."""
    session = locked.sessions.get(member["session_id"])
    if session is None or session.client_app_id != member["client_app_id"]:
        return "the session does not exist or belongs to another client app"
    if session.revoked_at is not None or session.refresh_expires_at <= now:
        return "the session is revoked or expired"
    client = locked.clients.get(member["client_app_id"])
    if client is None or not client.enabled or not client.agent_authorize_url:
        return "the client app is missing, disabled or has no authorization page"
    route = locked.routes.get(member["workspace"])
    if route is None or not route.enabled:
        return "the workspace is missing or disabled"
    if not _listed(session.allowed_routes, member["workspace"]) or not _listed(client.allowed_routes,
                                                                               member["workspace"]):
        return "the workspace is not allowed to the session or its client app"
    if not (route.agent_client or {}).get("enabled") \
            or not ((route.tools or {}).get("agent_direct") or {}).get("enabled"):
        return "the workspace has no Agent Client Runtime or business tools enabled"
    principal = session.principal
    roles = principal.get("roles", []) if isinstance(principal, dict) else None
    if not isinstance(principal, dict) or not isinstance(principal.get("id"), str) \
            or not isinstance(roles, list) or not all(isinstance(r, str) for r in roles) \
            or not isinstance(session.on_behalf_of, str):
        return "the session has no usable principal or on-behalf-of subject"
    if not audience_allows(route.audience or {}, {**principal, "roles": roles}):
        return "the workspace's audience does not admit the session"
    if identity_hash is not None and live_identity(session) != identity_hash:
        return "the session's identity changed"
    return None


def verify_group(db: Session, task_id: str, now: datetime) -> Any:
    """Lock and verify the whole group, then lock the task row and return it. Any member that
    fails blocks the task (when active or paused) and answers TASK_SCOPE_BLOCKED; the block is
    committed although the request fails, so callers verify before they write anything."""
    rows = members(db, task_id)
    locked = lock_group(db, {m.client_app_id for m in rows}, {m.route_key for m in rows},
                        {str(m.session_id) for m in rows})
    task = load(db, task_id, lock=True)
    if task is None:
        raise ApiError("TASK_MEMBER_MISMATCH")
    failing = next((p for m in rows if (p := member_problem(_member_dict(m), locked, now, m.identity_hash))), None)
    if failing is None and rows:
        return task
    if task.state in ("active", "paused"):
        record_fact(db, task_id, "scope_blocked", state="blocked", revision=True)
    err = ApiError("TASK_SCOPE_BLOCKED", f"A member of the task failed verification: {failing or 'no members'}.")
    err.commit_anyway = True  # the block stands; nothing else of this request was written
    raise err


def enter(db: Session, task_id: str, caller: Caller, now: datetime) -> tuple[Any, Any]:
    """An agent path into a task: the caller must be a member (checked without locks, so a
    stranger can never block the task), then the whole group verifies. (locked task, member)"""
    member = member_of(db, task_id, caller)
    if member is None:
        raise ApiError("TASK_MEMBER_MISMATCH")
    return verify_group(db, task_id, now), member


def new_uuid() -> str:
    return str(uuid.uuid4())
