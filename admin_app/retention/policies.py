"""Retention policies: per client app and route (or `*`, every route of the app without a policy
of its own), keep messages N days, or keep them (keep_days NULL). A route's own policy wins over
its app's `*`, a `keep` one too. Setting and removing record the change (audit.record)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..canonical import iso
from ..errors import ApiError, invalid_request
from ..validation import Checker
from . import values
from .audit import Door, record

KIND = "retention_policy"
_COLUMNS = "id, client_app_id, route_key, keep_days, created_by, created_at, updated_at"


def view(row: Any) -> dict[str, Any]:
    return {"id": row.id, "client_app_id": row.client_app_id, "route_key": row.route_key,
            "keep_days": row.keep_days, "created_by": row.created_by, "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at)}


def parse(body: dict[str, Any]) -> tuple[str, str, int | None]:
    """{client_app_id, route_key?, keep_days}: keep_days a number of days or null (keep)."""
    checker = Checker()
    checker.obj(body, "", required=("client_app_id", "keep_days"), optional=("route_key",))
    app, route = values.app_and_route(checker, body.get("client_app_id"), body.get("route_key", values.ALL_ROUTES))
    days = values.keep_days(checker, body.get("keep_days"))
    if checker.problems:
        raise invalid_request(checker)
    assert app is not None and route is not None
    return app, route, days


def list_policies(db: Session) -> list[dict[str, Any]]:
    rows = db.execute(text(f"SELECT {_COLUMNS} FROM bz_retention_policies "  # noqa: S608 - constant columns
                           "ORDER BY client_app_id, route_key = '*' DESC, route_key"))
    return [view(r) for r in rows]


def _locked(db: Session, app: str, route: str) -> Any:
    return db.execute(text(f"SELECT {_COLUMNS} FROM bz_retention_policies "  # noqa: S608 - constant columns
                           "WHERE client_app_id = :app AND route_key = :route FOR UPDATE"),
                      {"app": app, "route": route}).first()


def set_policy(db: Session, door: Door, app: str, route: str, keep_days: int | None) -> dict[str, Any]:
    """Create or change the policy of (app, route); setting it as it is records no object change."""
    # Two first settings of one key at once: the second waits on the first's row (ON CONFLICT).
    before = _locked(db, app, route)
    row = db.execute(text(f"""
        INSERT INTO bz_retention_policies (client_app_id, route_key, keep_days, created_by)
        VALUES (:app, :route, :days, :by)
        ON CONFLICT (client_app_id, route_key) DO UPDATE
           SET keep_days = EXCLUDED.keep_days,
               updated_at = CASE WHEN bz_retention_policies.keep_days IS DISTINCT FROM EXCLUDED.keep_days
                                 THEN now() ELSE bz_retention_policies.updated_at END
        RETURNING {_COLUMNS}"""), {"app": app, "route": route, "days": keep_days, "by": door.by}).one()  # noqa: S608
    record(db, door, KIND, f"{app}/{route}", None if before is None else before._mapping, row._mapping)
    return view(row)


def remove_policy(db: Session, door: Door, app: str, route: str) -> dict[str, Any]:
    row = db.execute(text("DELETE FROM bz_retention_policies WHERE client_app_id = :app AND route_key = :route "  # noqa: S608 - constant columns
                          f"RETURNING {_COLUMNS}"), {"app": app, "route": route}).first()
    if row is None:
        raise ApiError("retention_policy_not_found", f"No retention policy for {app}/{route}.")
    record(db, door, KIND, f"{app}/{route}", row._mapping, None)
    return view(row)


def remove_policy_by_id(db: Session, door: Door, policy_id: int) -> dict[str, Any]:
    row = db.execute(text("SELECT client_app_id, route_key FROM bz_retention_policies WHERE id = :id"),
                     {"id": policy_id}).first()
    if row is None:
        raise ApiError("retention_policy_not_found")
    return remove_policy(db, door, row.client_app_id, row.route_key)


def parse_policy_id(raw: str) -> int:
    """A policy id from a path: anything but a plain whole number names no policy (404)."""
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError("retention_policy_not_found")
    return int(raw)
