"""Whether task control is available, read from the database itself (TASK_CONTROL.md §11.2): all
six tables (available), none (absent: an unmigrated hub), or some (partial: refuse, never bypass).
A database error propagates: it is a failure, never "absent"."""
from __future__ import annotations

from typing import Literal

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..errors import ApiError

TABLES = ("bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements",
          "bz_agent_task_invocations", "bz_agent_task_runs", "bz_agent_task_events")
_PROBE = text("SELECT count(*) FROM unnest(CAST(:names AS text[])) AS t (name) "
              "WHERE to_regclass(name) IS NOT NULL")

Storage = Literal["available", "absent", "partial"]


def probe(db: Session) -> Storage:
    # Asked on every request (one catalog lookup): a dropped table is noticed at once.
    found = db.execute(_PROBE, {"names": list(TABLES)}).scalar_one()
    return "available" if found == len(TABLES) else "absent" if found == 0 else "partial"


def require(db: Session) -> None:
    """Task records are involved: absent is 501, partial 503."""
    found = probe(db)
    if found == "absent":
        raise ApiError("TASK_UNSUPPORTED", "This hub's database has no task control tables.")
    if found == "partial":
        raise ApiError("TASK_UNAVAILABLE", "Task control storage is incomplete.")


def unbound_path(db: Session) -> Storage:
    """An unbound path may go on without tasks only when the storage is whole or absent."""
    found = probe(db)
    if found == "partial":
        raise ApiError("TASK_UNAVAILABLE", "Task control storage is incomplete.")
    return found
