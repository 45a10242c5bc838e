"""Agent Sessions: issue, authenticate by access token, revoke.

Issuance makes the same checks whatever asks for it (the operator CLI now, the browser
authorization flow later): the client exists and is enabled, every route is a real key within the
client's allowlist, the principal has the expected shape.
"""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso, sha256_json, utc_now
from ..db import attach_loaded, pipelined
from ..errors import ApiError, invalid_request
from ..validation import Checker, Invalid, join
from . import tokens
from .models import AgentSession, ClientApp

MAX_SUBJECT_CHARS = 255
MAX_DEVICE_LABEL_CHARS = 128


def check_principal(checker: Checker, value: Any, path: str) -> None:
    principal = checker.obj(value, path, required=("id",), optional=("tenant", "roles", "audience"))
    if principal is None:
        return
    if "id" in principal:
        checker.string(principal["id"], join(path, "id"), min_len=1, max_len=191, single_line=True)
    if "tenant" in principal:
        checker.string(principal["tenant"], join(path, "tenant"), min_len=1, max_len=191, single_line=True)
    if "audience" in principal:
        checker.string(principal["audience"], join(path, "audience"), min_len=1, max_len=191, single_line=True)
    if "roles" in principal:
        checker.string_list(principal["roles"], join(path, "roles"), max_items=64)


def identity_hash(client_app_id: str, principal: dict | None, on_behalf_of: str | None) -> str:
    return sha256_json(
        {"client_app_id": client_app_id, "principal": principal, "on_behalf_of": on_behalf_of}
    )


def issue_session(
    db: Session,
    *,
    client_app_id: str,
    routes: list[str],
    principal: dict | None,
    on_behalf_of: str | None,
    access_ttl: int,
    refresh_ttl: int,
    device_label: str | None = None,
    task_enrolled: bool = False,
) -> dict:
    checker = Checker()
    checker.resource_key(client_app_id, "client")
    if checker.string_list(routes, "routes", max_items=64) is not None:
        if not routes:
            checker.add("routes", "must name at least one route")
        for i, route in enumerate(routes):
            if route == "*":
                checker.add(join("routes", i), "'*' is not a route")
            else:
                checker.resource_key(route, join("routes", i), route=True)
    if principal is not None:
        check_principal(checker, principal, "principal")
    if on_behalf_of is not None:
        checker.string(on_behalf_of, "on_behalf_of", min_len=1, max_len=MAX_SUBJECT_CHARS, single_line=True)
    if device_label is not None:
        checker.string(device_label, "device_label", min_len=1, max_len=MAX_DEVICE_LABEL_CHARS, single_line=True)
    checker.integer(access_ttl, "access_ttl", minimum=1, maximum=24 * 3600)
    checker.integer(refresh_ttl, "refresh_ttl", minimum=1, maximum=365 * 24 * 3600)
    if checker.problems:
        raise invalid_request(Invalid(checker.problems))

    client = db.scalar(select(ClientApp).where(ClientApp.app_id == client_app_id))
    if client is None or not client.enabled:
        raise ApiError(400, "invalid_client", "The client app is unknown or disabled.")
    outside = [r for r in routes if r not in client.allowed_routes]
    if outside:
        raise ApiError(403, "route_not_allowed",
                       "Routes outside the client's allowlist: " + ", ".join(outside))

    now = utc_now()
    access_token, access_hash = tokens.new_token(tokens.ACCESS)
    refresh_token, refresh_hash = tokens.new_token(tokens.REFRESH)
    refresh_expires = now + timedelta(seconds=refresh_ttl)
    # An access token never outlives the session it belongs to.
    access_expires = min(now + timedelta(seconds=access_ttl), refresh_expires)
    row = AgentSession(
        id=uuid.uuid4(),
        client_app_id=client_app_id,
        principal=principal,
        on_behalf_of=on_behalf_of,
        allowed_routes=list(routes),
        device_label=device_label,
        access_token_hash=access_hash,
        access_expires_at=access_expires,
        refresh_token_hash=refresh_hash,
        refresh_expires_at=refresh_expires,
        identity_hash=identity_hash(client_app_id, principal, on_behalf_of),
        task_enrolled=task_enrolled,
    )
    db.add(row)
    db.flush()
    return {
        "session_id": str(row.id),
        "access_token": access_token,
        "refresh_token": refresh_token,
        "access_expires_at": iso(access_expires),
        "refresh_expires_at": iso(refresh_expires),
    }


# The session and whether its client is enabled, in one prepared statement: this runs before
# every agent request.
_BY_ACCESS_HASH = f"""
    SELECT {", ".join("s." + c.name for c in AgentSession.__table__.columns)},
           c.enabled AS client_enabled
      FROM bz_agent_sessions s LEFT JOIN bz_client_apps c ON c.app_id = s.client_app_id
     WHERE s.access_token_hash = %(digest)s"""


def authenticate_access(db: Session, bearer: str | None) -> AgentSession | None:
    """The live session behind an access token, or None for any failure, which callers must
    all answer the same way (401) so that a caller learns nothing from the difference."""
    if bearer is None or not tokens.well_formed(bearer, tokens.ACCESS):
        return None
    digest = tokens.hash_token(bearer)
    found = pipelined(db, (_BY_ACCESS_HASH, {"digest": digest}))[0]
    if not found:
        return None
    row = found[0]
    if not tokens.same_hash(row.access_token_hash, digest):
        return None
    now = utc_now()
    if row.revoked_at is not None or row.access_expires_at <= now or row.refresh_expires_at <= now:
        return None
    if not row.client_enabled:  # None: the client app is gone
        return None
    values = row._asdict()
    del values["client_enabled"]
    return attach_loaded(db, AgentSession(**values))


def revoke_session(db: Session, session_id: str) -> dict:
    try:
        sid = uuid.UUID(session_id)
    except ValueError:
        raise ApiError(400, "invalid_request", "session_id must be a UUID.") from None
    row = db.get(AgentSession, sid, with_for_update=True)
    if row is None:
        raise ApiError(404, "session_not_found", "No such agent session.")
    already = row.revoked_at is not None
    if not already:
        row.revoked_at = utc_now()
    return {"session_id": str(row.id), "revoked_at": iso(row.revoked_at), "already_revoked": already}


def session_view(row: AgentSession) -> dict:
    """Non-secret session metadata, as GET /agent-auth/v1/session shows it."""
    return {
        "session_id": str(row.id),
        "client_app_id": row.client_app_id,
        "principal": row.principal,
        "on_behalf_of": row.on_behalf_of,
        "allowed_routes": list(row.allowed_routes),
        "device_label": row.device_label,
        "access_expires_at": iso(row.access_expires_at),
        "refresh_expires_at": iso(row.refresh_expires_at),
        "created_at": iso(row.created_at),
        "task_enrolled": row.task_enrolled,
    }


def revoke_by_refresh_token(db: Session, client_app_id: str, refresh_token: str) -> dict:
    """Revoke the session a refresh token belongs to, when it belongs to that client."""
    if not tokens.well_formed(refresh_token, tokens.REFRESH):
        raise ApiError(400, "invalid_grant", "The refresh token is not valid for this client.")
    row = db.scalar(
        select(AgentSession)
        .where(AgentSession.refresh_token_hash == tokens.hash_token(refresh_token))
        .with_for_update()
    )
    if row is None or row.client_app_id != client_app_id:
        raise ApiError(400, "invalid_grant", "The refresh token is not valid for this client.")
    return revoke_session(db, str(row.id))
