"""Console and admin-API users: argon2 passwords, personal API tokens that expire, role
permissions, and their lifecycle (disable, enable, role, password, tokens, sessions), every
change of which is recorded in bz_admin_events with who made it."""
from __future__ import annotations

import getpass
import json
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, utc_now
from ..config_audit.changes import snapshot
from ..config_audit.log import record_object
from ..errors import ApiError
from ..evidence import leaves
from ..evidence import log as evidence_log
from . import console_sessions, tokens
from .models import Admin
from .roles import ROLES, permissions_of

USERNAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,63}$")

# Each argon2 hash or verification takes 64 MiB; this many at once per process, the rest wait
# briefly and are then refused (the console answers 429 with Retry-After).
MAX_CONCURRENT_HASHES = 4
HASH_WAIT_SECONDS = 2.0
BUSY_RETRY_AFTER_SECONDS = 2

_hasher = PasswordHasher()
_hash_slots = threading.BoundedSemaphore(MAX_CONCURRENT_HASHES)


class HashingBusy(Exception):
    """Every password-hashing slot of this process stayed taken while the caller waited."""


@contextmanager
def hashing_slot():
    if not _hash_slots.acquire(timeout=HASH_WAIT_SECONDS):
        raise HashingBusy()
    try:
        yield
    finally:
        _hash_slots.release()


@dataclass(frozen=True)
class Actor:
    """Who makes a change: a signed-in console admin, or the operator at the command line."""

    admin_id: int | None
    name: str


def operator() -> Actor:
    """The operator at the command line, named by their login where the system knows one."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):
        login = "unknown"
    return Actor(None, f"cli:{login}"[:128])


# ---------------------------------------------------------------- passwords

def check_password(password: str) -> None:
    if not limits.PASSWORD_LENGTH[0] <= len(password) <= limits.PASSWORD_LENGTH[1]:
        raise ApiError("invalid_request",
                       f"password must be {limits.PASSWORD_LENGTH[0]} to {limits.PASSWORD_LENGTH[1]} characters")


def hash_password(password: str) -> str:
    with hashing_slot():
        return _hasher.hash(password)


def verify_password(admin: Admin | str, password: str) -> bool:
    """Against an admin (or a stored hash); callers bound concurrency with hashing_slot()."""
    stored = admin if isinstance(admin, str) else admin.password_hash
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


# ---------------------------------------------------------------- admins

def _find(db: Session, username: str) -> Admin:
    admin = db.scalar(select(Admin).where(Admin.username == username).with_for_update())
    if admin is None:
        raise ApiError("admin_not_found")
    return admin


def record(db: Session, actor: Actor, action: str, target: Admin, **detail) -> None:
    _event(db, {"aid": actor.admin_id, "actor": actor.name, "action": action, "tid": target.id,
                "target": target.username, "detail": json.dumps(detail)})


def record_hub_change(db: Session, actor: Actor, action: str, **detail) -> None:
    """A change to the hub itself (a pause, a resume) in the same trail; it names no admin."""
    _event(db, {"aid": actor.admin_id, "actor": actor.name, "action": action, "tid": None, "target": "hub",
                "detail": json.dumps(detail)})


def _event(db: Session, values: dict) -> None:
    """One bz_admin_events row and its leaf in the evidence log, in the caller's transaction."""
    row = db.execute(text("INSERT INTO bz_admin_events (actor_admin_id, actor, action, target_admin_id, target, "
                          "detail) VALUES (:aid, :actor, :action, :tid, :target, CAST(:detail AS jsonb)) "
                          "RETURNING *"), values).mappings().one()
    evidence_log.append_leaves(db, [(leaves.ADMIN_EVENT, leaves.admin_event_ref(row["id"]),
                                     leaves.admin_event_data(row))])


def event_evidence_of(db: Session, refs: list[str]) -> dict[str, bytes]:
    """The leaf data of the admin events `refs` name (admin_event:<id>), as they stand."""
    ids = [int(ref.split(":", 1)[1]) for ref in refs]
    rows = db.execute(text("SELECT * FROM bz_admin_events WHERE id = ANY(:ids)"),
                      {"ids": ids}).mappings()
    return {leaves.admin_event_ref(row["id"]): leaves.admin_event_data(row) for row in rows}


def _audit_config(db: Session, actor: Actor, verb: str, admin: Admin, was: dict) -> None:
    """An admin's role or switch in the configuration-change log too (issue 33), as its allowlisted
    settings (changes.FIELDS["admin"]: never the password hash)."""
    now = snapshot("admin", admin)
    record_object(db, actor.name, verb, f"admins/{admin.username}", "admin", admin.username,
                  {**now, **was}, now)


def create_admin(db: Session, username: str, role: str, password: str, actor: Actor | None = None) -> dict:
    if not USERNAME.match(username):
        raise ApiError("invalid_request", "username must match ^[a-z0-9][a-z0-9._-]{1,63}$")
    _check_role(role)
    check_password(password)
    if db.scalar(select(Admin.id).where(Admin.username == username)) is not None:
        raise ApiError("admin_exists", f"An admin named {username} already exists.")
    admin = Admin(username=username, role=role, password_hash=hash_password(password), disabled=False)
    db.add(admin)
    db.flush()
    who = actor or operator()
    record(db, who, "admin_created", admin, role=role)
    # A new account is a configuration change as a role change is (issue 33): created, from nothing.
    record_object(db, who.name, "CREATE", f"admins/{username}", "admin", username, None, snapshot("admin", admin))
    return {"username": username, "role": role, "permissions": sorted(permissions_of(role))}


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ApiError("invalid_request", "role must be one of: " + ", ".join(ROLES))


def _not_yourself(actor: Actor, admin: Admin, what: str) -> None:
    """A console admin cannot lock themselves out; the command line is the way back in."""
    if actor.admin_id == admin.id:
        raise ApiError("own_account", f"You cannot {what} your own account.")


def _touch(db: Session, admin: Admin) -> None:
    db.execute(text("UPDATE bz_admins SET updated_at = now() WHERE id = :id"), {"id": admin.id})


def list_admins(db: Session) -> list[dict]:
    rows = db.execute(text(
        "SELECT a.id, a.username, a.role, a.disabled, a.created_at, a.updated_at, "
        "(SELECT count(*) FROM bz_console_sessions s WHERE s.admin_id = a.id AND s.ended_at IS NULL "
        " AND s.expires_at > now()) AS sessions, "
        "(SELECT count(*) FROM bz_admin_tokens t WHERE t.admin_id = a.id AND t.revoked_at IS NULL "
        " AND t.expires_at > now()) AS tokens "
        "FROM bz_admins a ORDER BY a.username"))
    return [{"username": r.username, "role": r.role, "disabled": r.disabled,
             "created_at": iso(r.created_at), "updated_at": iso(r.updated_at),
             "open_sessions": r.sessions, "live_tokens": r.tokens} for r in rows]


def set_disabled(db: Session, actor: Actor, username: str, disabled: bool) -> dict:
    """Disabling ends the admin's sessions; their tokens are refused while they stay disabled."""
    admin = _find(db, username)
    _not_yourself(actor, admin, "disable" if disabled else "enable")
    if admin.disabled != disabled:
        admin.disabled = disabled
        _touch(db, admin)
        ended = console_sessions.end_all_of(db, admin.id, "admin_disabled") if disabled else 0
        record(db, actor, "admin_disabled" if disabled else "admin_enabled", admin, sessions_ended=ended)
        _audit_config(db, actor, "DISABLE" if disabled else "ENABLE", admin, {"disabled": not disabled})
    return {"username": admin.username, "role": admin.role, "disabled": admin.disabled}


def set_role(db: Session, actor: Actor, username: str, role: str) -> dict:
    _check_role(role)
    admin = _find(db, username)
    _not_yourself(actor, admin, "change the role of")
    if admin.role != role:
        before, admin.role = admin.role, role
        _touch(db, admin)
        record(db, actor, "role_changed", admin, before=before, after=role)
        _audit_config(db, actor, "ROLE", admin, {"role": before})
    return {"username": admin.username, "role": role, "permissions": sorted(permissions_of(role))}


def reset_password(db: Session, actor: Actor, username: str, password: str) -> dict:
    """A new password set by someone else: every session of the admin ends."""
    check_password(password)
    admin = _find(db, username)
    admin.password_hash = hash_password(password)
    _touch(db, admin)
    ended = console_sessions.end_all_of(db, admin.id, "password_reset")
    record(db, actor, "password_reset", admin, sessions_ended=ended)
    return {"username": admin.username, "sessions_ended": ended}


def change_own_password(db: Session, admin_id: int, current: str, new: str, keep_hash: str) -> int:
    """The signed-in admin's own change: the current password must be right; every other session
    of theirs ends. Returns how many ended."""
    check_password(new)
    admin = db.get_one(Admin, admin_id, with_for_update=True)
    with hashing_slot():
        right = verify_password(admin, current)
    if not right:
        raise ApiError("wrong_password")
    admin.password_hash = hash_password(new)
    _touch(db, admin)
    ended = console_sessions.end_all_of(db, admin.id, "password_changed", keep_hash=keep_hash)
    record(db, Actor(admin.id, admin.username), "password_changed", admin, sessions_ended=ended)
    return ended


def end_sessions(db: Session, actor: Actor, username: str, keep_hash: str | None = None,
                 reason: str = "ended_by_admin") -> dict:
    admin = _find(db, username)
    ended = console_sessions.end_all_of(db, admin.id, reason, keep_hash=keep_hash)
    record(db, actor, "sessions_ended", admin, sessions_ended=ended)
    return {"username": admin.username, "sessions_ended": ended}


def recent_events(db: Session, limit: int = 100) -> list[dict]:
    rows = db.execute(text("SELECT actor, action, target, detail, at FROM bz_admin_events "
                           "ORDER BY at DESC, id DESC LIMIT :n"), {"n": limit})
    return [dict(r._mapping) for r in rows]


# ---------------------------------------------------------------- API tokens

def issue_admin_token(db: Session, username: str, days: int = limits.TOKEN_DAYS_DEFAULT,
                      actor: Actor | None = None) -> dict:
    if not 1 <= days <= limits.TOKEN_DAYS_MAX:
        raise ApiError("invalid_request", f"days must be 1 to {limits.TOKEN_DAYS_MAX}")
    admin = db.scalar(select(Admin).where(Admin.username == username))
    if admin is None:
        raise ApiError("admin_not_found", f"No admin named {username}.")
    if admin.disabled:
        raise ApiError("admin_disabled", f"{username} is disabled.")
    token, digest = tokens.new_token(tokens.ADMIN)
    now = utc_now()
    expires = now + timedelta(days=days)
    token_id = db.execute(text("INSERT INTO bz_admin_tokens (admin_id, token_hash, created_at, expires_at) "
                               "VALUES (:a, :h, :now, :exp) RETURNING id"),
                          {"a": admin.id, "h": digest, "now": now, "exp": expires}).scalar_one()
    record(db, actor or operator(), "token_issued", admin, token_id=token_id, days=days)
    return {"username": username, "role": admin.role, "token": token, "token_id": token_id,
            "created_at": iso(now), "expires_at": iso(expires)}


def list_tokens(db: Session, username: str) -> list[dict]:
    admin = db.scalar(select(Admin).where(Admin.username == username))
    if admin is None:
        raise ApiError("admin_not_found", f"No admin named {username}.")
    rows = db.execute(text("SELECT id, created_at, expires_at, last_used_at, revoked_at, "
                           "(revoked_at IS NULL AND expires_at > now()) AS live "
                           "FROM bz_admin_tokens WHERE admin_id = :a ORDER BY created_at DESC, id DESC"),
                      {"a": admin.id})
    return [{"token_id": r.id, "created_at": iso(r.created_at), "expires_at": iso(r.expires_at),
             "last_used_at": iso(r.last_used_at), "revoked_at": iso(r.revoked_at),
             "status": "revoked" if r.revoked_at else ("live" if r.live else "expired")} for r in rows]


def revoke_tokens(db: Session, actor: Actor, username: str, token_id: int | None) -> dict:
    """Revoke one token of the admin (by id) or, with None, all their live ones."""
    admin = _find(db, username)
    query = "UPDATE bz_admin_tokens SET revoked_at = now() WHERE admin_id = :a AND revoked_at IS NULL"
    params = {"a": admin.id}
    if token_id is not None:
        if db.scalar(text("SELECT 1 FROM bz_admin_tokens WHERE admin_id = :a AND id = :t"),
                     {"a": admin.id, "t": token_id}) is None:
            raise ApiError("token_not_found")
        query += " AND id = :t"
        params["t"] = token_id
    revoked = [r.id for r in db.execute(text(query + " RETURNING id"), params)]
    for revoked_id in revoked:
        record(db, actor, "token_revoked", admin, token_id=revoked_id)
    return {"username": admin.username, "revoked": sorted(revoked)}


def authenticate_admin_token(db: Session, bearer: str | None) -> Admin | None:
    """The admin of a live token: not revoked, not expired, its admin not disabled."""
    if bearer is None or not tokens.well_formed(bearer, tokens.ADMIN):
        return None
    digest = tokens.hash_token(bearer)
    row = db.execute(text("SELECT t.id, t.token_hash, t.admin_id FROM bz_admin_tokens t "
                          "JOIN bz_admins a ON a.id = t.admin_id "
                          "WHERE t.token_hash = :h AND t.revoked_at IS NULL AND t.expires_at > now() "
                          "AND NOT a.disabled"), {"h": digest}).first()
    if row is None or not tokens.same_hash(row.token_hash, digest):
        return None
    db.execute(text("UPDATE bz_admin_tokens SET last_used_at = now() WHERE id = :id"), {"id": row.id})
    return db.get(Admin, row.admin_id)
