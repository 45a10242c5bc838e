"""Executor tokens (CLIENT_API_AND_EXECUTOR.md §B.2): the credentials executors claim work with,
each scoped to target names (`*` = every target).

The token is Core's format, 32 lowercase hex from `secrets`; it is shown once, on issue and on
rotation. Only its SHA-256 is stored (with its last four characters, so that a list can tell
tokens apart), so unlike Core the hub can never show a token again. Revoking deletes the row: the
token is unknown (401) at once, and the jobs it holds are requeued when their lease passes."""
from __future__ import annotations

import re
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, utc_now
from ..config_audit.changes import snapshot
from ..config_audit.log import record_change, stage
from ..errors import ApiError, invalid_field
from ..identity import tokens
from ..identity.admins import operator
from .models import Executor, ExecutorToken

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")  # the resource-name pattern of sql/081
ALL_TARGETS = "*"
ONLINE_WITHIN = timedelta(minutes=2)  # Core's console badge (§B.8)


def new_token() -> tuple[str, str]:
    """A fresh executor token and its SHA-256; only the hash is kept."""
    token = secrets.token_hex(16)
    return token, tokens.hash_token(token)


def check_name(name: Any, path: str = "name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise invalid_field(path, "must be 2-64 characters: lowercase letters, digits, '-' or '_', "
                                  "starting with a letter or digit")
    return name


def check_targets(targets: Any, path: str = "allowed_targets") -> list[str]:
    """At least one target name, or `["*"]`; no blanks, no duplicates."""
    if not isinstance(targets, list) or not targets:
        raise invalid_field(path, "must be a non-empty list of target names, or [\"*\"]")
    if targets == [ALL_TARGETS]:
        return [ALL_TARGETS]
    for i, target in enumerate(targets):
        check_name(target, f"{path}[{i}]")
    if len(set(targets)) != len(targets):
        raise invalid_field(path, "names a target twice")
    return list(targets)


def check_description(description: Any, path: str = "description") -> str:
    most = limits.EXECUTOR_TOKEN_DESCRIPTION_MAX
    if not isinstance(description, str) or len(description) > most:
        raise invalid_field(path, f"must be a string of at most {most} characters")
    return description


def masked(row: ExecutorToken) -> str:
    return "…" + row.token_last4


def listed(row: ExecutorToken) -> dict[str, Any]:
    """The list shape of Core's GET /admin/api/executor-tokens; the token masked."""
    return {"name": row.name, "token": masked(row), "allowed_targets": list(row.allowed_targets),
            "enabled": row.enabled, "last_seen_at": iso(row.last_seen_at),
            "description": row.description, "created_at": iso(row.created_at),
            "updated_at": iso(row.updated_at)}


def _issued(row: ExecutorToken, token: str, rotated: bool) -> dict[str, Any]:
    return {"ok": True, "name": row.name, "token": token, "allowed_targets": list(row.allowed_targets),
            "enabled": row.enabled, "description": row.description, "rotated": rotated}


def _settings(row: ExecutorToken, issued_at: Any = None) -> dict[str, Any]:
    """What the configuration-change log keeps of a token: its name, scope, switch and
    description, and on issue or rotation when (`issued_at`); never the token, its hash or its
    last characters."""
    return snapshot("executor_token", {"name": row.name, "allowed_targets": list(row.allowed_targets),
                                       "enabled": row.enabled, "description": row.description,
                                       "token_issued_at": iso(issued_at)})


def _stage_scope(db: Session, row: ExecutorToken, was: dict[str, Any]) -> None:
    """A change of scope, switch or description (the token kept)."""
    now = _settings(row)
    if now != was:
        stage(db, "executor_token", row.name, was, now)


def issue(db: Session, name: str, allowed_targets: Any, description: str = "",
          enabled: bool = True) -> dict[str, Any]:
    """A new token under a new name; an existing name is refused (rotate it instead)."""
    check_name(name)
    targets = check_targets(allowed_targets)
    check_description(description)
    if db.get(ExecutorToken, name) is not None:
        raise ApiError("invalid_request", f"An executor token named {name} exists: rotate it instead.")
    token, digest = new_token()
    row = ExecutorToken(name=name, token_hash=digest, token_last4=token[-4:], allowed_targets=targets,
                        enabled=enabled, description=description)
    db.add(row)
    db.flush()
    stage(db, "executor_token", name, None, _settings(row, utc_now()))
    return _issued(row, token, rotated=False)


def rotate(db: Session, name: str) -> dict[str, Any]:
    """A new token for `name`; the previous one stops working at once."""
    row = db.scalar(select(ExecutorToken).where(ExecutorToken.name == name).with_for_update())
    if row is None:
        raise ApiError("not_found", f"No executor token named {name}.")
    token, digest = new_token()
    was = _settings(row)
    row.token_hash, row.token_last4, row.updated_at = digest, token[-4:], utc_now()
    stage(db, "executor_token", name, was, _settings(row, row.updated_at))
    return _issued(row, token, rotated=True)


def upsert(db: Session, name: str, allowed_targets: Any, enabled: bool, description: str | None,
           rotate_token: bool) -> dict[str, Any]:
    """Core's POST /admin/api/executor-tokens: create, or update the scope, switch and description
    of an existing name (its token kept unless `rotate_token`). The token is in the reply only when
    it was issued now: the hub keeps no token it could show again (`token: null` otherwise)."""
    check_name(name)
    targets = check_targets(allowed_targets)
    row = db.scalar(select(ExecutorToken).where(ExecutorToken.name == name).with_for_update())
    if row is None:
        return issue(db, name, targets, check_description(description or ""), enabled)
    was = _settings(row)
    row.allowed_targets, row.enabled, row.updated_at = targets, enabled, utc_now()
    if description is not None:
        row.description = check_description(description)
    if rotate_token:
        _stage_scope(db, row, was)
        return rotate(db, name)
    _stage_scope(db, row, was)
    return {"ok": True, "name": row.name, "token": None, "allowed_targets": list(row.allowed_targets),
            "enabled": row.enabled, "description": row.description, "rotated": False}


UPSERT_FIELDS = ("name", "allowed_targets", "enabled", "description", "rotate_token")


def upsert_body(db: Session, body: dict[str, Any]) -> dict[str, Any]:
    """POST /admin/api/executor-tokens: `{name, allowed_targets, enabled?, description?,
    rotate_token?}`; any other field is refused."""
    for key in body:
        if key not in UPSERT_FIELDS:
            raise invalid_field(key, "is not a known field")
    enabled, rotate_token = body.get("enabled", True), body.get("rotate_token", False)
    for key, value in (("enabled", enabled), ("rotate_token", rotate_token)):
        if not isinstance(value, bool):
            raise invalid_field(key, "must be true or false")
    description = body.get("description")
    if description is not None:
        check_description(description)
    return upsert(db, check_name(body.get("name")), body.get("allowed_targets"), enabled, description, rotate_token)


def note_command(db: Session, verb: str, name: str) -> None:
    """A change made at the command line, in the configuration-change log (the admin API's are
    recorded by its own hook): who, what, which token by name; never the token."""
    record_change(db, operator().name, verb, f"executor-tokens/{name}")


def revoke(db: Session, name: str) -> dict[str, Any]:
    """Delete the token: it is unknown from the next request on."""
    deleted = db.execute(delete(ExecutorToken).where(ExecutorToken.name == name)
                         .returning(ExecutorToken)).scalar()
    if deleted is None:
        raise ApiError("not_found", f"No executor token named {name}.")
    stage(db, "executor_token", name, _settings(deleted), None)
    return {"ok": True, "name": name, "revoked": True}


def list_tokens(db: Session) -> list[dict[str, Any]]:
    return [listed(row) for row in db.scalars(select(ExecutorToken).order_by(ExecutorToken.name))]


def executor_record(row: Executor, now: Any = None) -> dict[str, Any]:
    now = now or utc_now()
    return {"executor_id": row.executor_id, "token_name": row.token_name, "targets": list(row.targets),
            "capabilities": row.capabilities, "last_seen_at": iso(row.last_seen_at),
            "online": row.last_seen_at >= now - ONLINE_WITHIN}


def list_executors(db: Session) -> list[dict[str, Any]]:
    """Executors as they last reported, most recently seen first; `online` within 2 minutes."""
    now = utc_now()
    rows = db.scalars(select(Executor).order_by(Executor.last_seen_at.desc(), Executor.executor_id))
    return [executor_record(row, now) for row in rows]


def forget_executor(db: Session, executor_id: str) -> dict[str, Any]:
    """Core's DELETE /admin/api/executors/<id>: drop the console row (it comes back on the next
    claim or heartbeat)."""
    deleted = db.execute(delete(Executor).where(Executor.executor_id == executor_id)
                         .returning(Executor.executor_id)).first()
    if deleted is None:
        raise ApiError("not_found", f"No executor {executor_id}.")
    return {"ok": True}
