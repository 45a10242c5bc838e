"""What the task pages read besides the admin task views of tasks.admin (TASK_CONTROL.md §12):
the sessions the create form offers as members, the routes a member may name, and the runs bound
to a task, paged. Plain reads: nothing here verifies a member, locks a task or moves a counter."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..tasks import rules

# The create form's session picker lists at most this many sessions, the newest first; the form
# still takes any other session's ids typed by hand.
PICKER_MAX = 200
# Where the next page of bound runs starts: the last row shown, as (bound at, run id).
RunKey = tuple[datetime, uuid.UUID]


def _principal_id(principal: Any) -> str | None:
    value = principal.get("id") if isinstance(principal, dict) else None
    return value if isinstance(value, str) else None


def active_sessions(db: Session, now: datetime, limit: int = PICKER_MAX) -> list[dict[str, Any]]:
    """Agent Sessions that could be frozen as members now: not revoked, not expired, newest
    first. Their labels (device, principal) are the agents' own text: the page escapes them."""
    rows = db.execute(text("""
        SELECT id, client_app_id, device_label, principal, on_behalf_of, allowed_routes, created_at,
               task_enrolled
          FROM bz_agent_sessions
         WHERE revoked_at IS NULL AND refresh_expires_at > :now
         ORDER BY created_at DESC, id DESC LIMIT :n"""), {"now": now, "n": limit}).all()
    return [{"session_id": str(r.id), "client_app_id": r.client_app_id, "device_label": r.device_label,
             "principal_id": _principal_id(r.principal), "on_behalf_of": r.on_behalf_of,
             "allowed_routes": list(r.allowed_routes or []), "created_at": rules.wire_time(r.created_at),
             "task_enrolled": bool(r.task_enrolled)} for r in rows]


def session_of(db: Session, session_id: str, now: datetime) -> dict[str, Any] | None:
    """One session as the picker shows it, if it is still usable (the form names it by id)."""
    row = db.execute(text("""
        SELECT id, client_app_id, device_label, principal, on_behalf_of, allowed_routes, created_at,
               task_enrolled
          FROM bz_agent_sessions
         WHERE id = CAST(:id AS uuid) AND revoked_at IS NULL AND refresh_expires_at > :now"""),
        {"id": session_id, "now": now}).one_or_none()
    if row is None:
        return None
    return {"session_id": str(row.id), "client_app_id": row.client_app_id, "device_label": row.device_label,
            "principal_id": _principal_id(row.principal), "on_behalf_of": row.on_behalf_of,
            "allowed_routes": list(row.allowed_routes or []), "created_at": rules.wire_time(row.created_at),
            "task_enrolled": bool(row.task_enrolled)}


def workspaces(db: Session) -> list[str]:
    """Route keys a member may name: enabled routes with the Agent Client Runtime on."""
    rows = db.execute(text("""
        SELECT route_key FROM bz_routes
         WHERE enabled AND coalesce((agent_client ->> 'enabled')::boolean, false)
         ORDER BY route_key""")).all()
    return [r.route_key for r in rows]


def bound_runs(db: Session, task_id: str, after: RunKey | None, limit: int) -> tuple[list[dict[str, Any]],
                                                                                      RunKey | None]:
    """The runs bound to the task (bz_agent_task_runs), newest binding first, keyset paged."""
    after_at, after_id = after if after is not None else (None, None)
    rows = db.execute(text("""
        SELECT tr.run_id, tr.session_id, tr.created_at, r.route_key, r.client_conversation_id,
               r.client_turn_id, r.status
          FROM bz_agent_task_runs tr JOIN bz_runs r ON r.id = tr.run_id
         WHERE tr.task_id = CAST(:id AS uuid)
           AND (CAST(:at AS timestamptz) IS NULL
                OR (tr.created_at, tr.run_id) < (CAST(:at AS timestamptz), CAST(:run AS uuid)))
         ORDER BY tr.created_at DESC, tr.run_id DESC LIMIT :n"""),
        {"id": task_id, "at": after_at, "run": str(after_id) if after_id else None, "n": limit + 1}).all()
    page = rows[:limit]
    items = [{"run_id": str(r.run_id), "session_id": str(r.session_id), "bound_at": rules.wire_time(r.created_at),
              "workspace": r.route_key, "client_conversation_id": r.client_conversation_id,
              "client_turn_id": r.client_turn_id, "status": r.status} for r in page]
    next_key = (page[-1].created_at, page[-1].run_id) if len(rows) > limit else None
    return items, next_key
