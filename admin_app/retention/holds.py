"""Legal holds on an archive, a principal (its id) or a tenant, each with a reason: while a hold
is not released, no purge redacts and no erasure touches an archive it covers. A principal or
tenant hold covers every archive with a member of that principal or tenant (the principal frozen
when the member confirmed: bz_agent_conversation_members.principal).

Placing a hold takes HOLDS_LOCK exclusively; a purge batch and an erasure take it shared for
their transaction, so a hold committed while one runs is seen by the next batch, never missed
by one that redacts after it."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlalchemy.orm import Session

from ..canonical import iso
from ..conversation_audit.availability import require_archives
from ..errors import ApiError, invalid_request
from ..validation import Checker
from . import values
from .audit import Door, record

KIND = "legal_hold"
HOLDS_LOCK = 0x686F6C64  # "hold": pg_advisory_xact_lock key
_COLUMNS = "id, scope, value, reason, placed_by, placed_at, released_by, released_at, release_reason"

# Which of these archives an active hold covers, and by which holds.
_COVERED = text("""
    SELECT a.id AS archive_id, h.id AS hold_id
      FROM unnest(:ids) AS a(id)
      JOIN bz_legal_holds h ON h.released_at IS NULL AND (
           (h.scope = 'archive' AND h.value = a.id::text)
        OR (h.scope <> 'archive' AND EXISTS (
               SELECT 1 FROM bz_agent_conversation_members m
                WHERE m.archive_id = a.id
                  AND m.principal ->> (CASE h.scope WHEN 'principal' THEN 'id' ELSE 'tenant' END) = h.value)))
     ORDER BY a.id, h.id""").bindparams(bindparam("ids", type_=ARRAY(UUID(as_uuid=True))))
# The same test as SQL over an archive `a`, for the purge's selection.
HELD_SQL = """EXISTS (SELECT 1 FROM bz_legal_holds h WHERE h.released_at IS NULL AND (
                (h.scope = 'archive' AND h.value = a.id::text)
             OR (h.scope <> 'archive' AND EXISTS (
                    SELECT 1 FROM bz_agent_conversation_members m
                     WHERE m.archive_id = a.id
                       AND m.principal ->> (CASE h.scope WHEN 'principal' THEN 'id' ELSE 'tenant' END) = h.value))))"""


def view(row: Any) -> dict[str, Any]:
    return {"id": row.id, "scope": row.scope, "value": row.value, "reason": row.reason,
            "placed_by": row.placed_by, "placed_at": iso(row.placed_at), "active": row.released_at is None,
            "released_by": row.released_by, "released_at": iso(row.released_at),
            "release_reason": row.release_reason}


def _settings(row: Any) -> dict[str, Any]:
    return {"scope": row.scope, "value": row.value, "reason": row.reason, "released": row.released_at is not None,
            "released_by": row.released_by, "release_reason": row.release_reason}


def parse_place(body: dict[str, Any]) -> tuple[str, str, str]:
    """{scope, value, reason}."""
    checker = Checker()
    checker.obj(body, "", required=("scope", "value", "reason"))
    scope = body.get("scope")
    if "scope" in body and scope not in values.SCOPES:
        checker.add("scope", "must be archive, principal or tenant")
    value = None
    if "value" in body:
        value = (values.archive_id if scope == "archive" else values.name)(checker, body["value"], "value")
    why = values.reason(checker, body.get("reason"), "reason") if "reason" in body else None
    if checker.problems:
        raise invalid_request(checker)
    assert isinstance(scope, str) and value is not None and why is not None
    return scope, value, why


def parse_release(body: dict[str, Any]) -> str:
    checker = Checker()
    checker.obj(body, "", required=("reason",))
    why = values.reason(checker, body.get("reason"), "reason") if "reason" in body else None
    if checker.problems:
        raise invalid_request(checker)
    assert why is not None
    return why


def place(db: Session, door: Door, scope: str, value: str, reason: str) -> dict[str, Any]:
    if scope == "archive":
        require_archives(db)
        if db.execute(text("SELECT 1 FROM bz_agent_conversation_archives WHERE id = :id"),
                      {"id": uuid.UUID(value)}).first() is None:
            raise ApiError("conversation_audit_not_found")
    db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": HOLDS_LOCK})
    row = db.execute(text(f"INSERT INTO bz_legal_holds (scope, value, reason, placed_by) "  # noqa: S608 - constant columns
                          f"VALUES (:scope, :value, :reason, :by) RETURNING {_COLUMNS}"),
                     {"scope": scope, "value": value, "reason": reason, "by": door.by}).one()
    record(db, door, KIND, str(row.id), None, _settings(row))
    return view(row)


def release(db: Session, door: Door, hold_id: int, reason: str) -> dict[str, Any]:
    before = db.execute(text(f"SELECT {_COLUMNS} FROM bz_legal_holds WHERE id = :id FOR UPDATE"),  # noqa: S608
                        {"id": hold_id}).first()
    if before is None:
        raise ApiError("legal_hold_not_found")
    if before.released_at is not None:
        raise ApiError("legal_hold_released")
    row = db.execute(text(f"UPDATE bz_legal_holds SET released_by = :by, released_at = now(), "  # noqa: S608
                          f"release_reason = :reason WHERE id = :id RETURNING {_COLUMNS}"),
                     {"by": door.by, "reason": reason, "id": hold_id}).one()
    record(db, door, KIND, str(row.id), _settings(before), _settings(row))
    return view(row)


def list_holds(db: Session, limit: int) -> list[dict[str, Any]]:
    """Active holds first, then released ones; newest first within each."""
    rows = db.execute(text(f"SELECT {_COLUMNS} FROM bz_legal_holds "  # noqa: S608 - constant columns
                           "ORDER BY released_at IS NOT NULL, placed_at DESC, id DESC LIMIT :n"), {"n": limit})
    return [view(r) for r in rows]


def lock_shared(db: Session) -> None:
    """For a purge batch or an erasure: no hold is placed until this transaction ends."""
    db.execute(text("SELECT pg_advisory_xact_lock_shared(:key)"), {"key": HOLDS_LOCK})


def covering(db: Session, archive_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[int]]:
    """The active holds covering each of these archives (only those covered)."""
    found: dict[uuid.UUID, list[int]] = {}
    if archive_ids:
        for row in db.execute(_COVERED, {"ids": sorted(set(archive_ids))}):
            found.setdefault(row.archive_id, []).append(row.hold_id)
    return found


def on_principal(db: Session, principal_id: str) -> list[int]:
    """Active holds naming this principal itself (they apply even where it is no member)."""
    return list(db.scalars(text("SELECT id FROM bz_legal_holds WHERE released_at IS NULL "
                                "AND scope = 'principal' AND value = :v ORDER BY id"), {"v": principal_id}))


def parse_hold_id(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError("legal_hold_not_found")
    return int(raw)
