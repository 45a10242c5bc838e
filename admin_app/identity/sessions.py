"""Agent Sessions: issue, authenticate by access token, revoke.

Issuance makes the same checks whatever asks for it (the operator CLI now, the browser
authorization flow later): the client exists and is enabled, every route is a real key within the
client's allowlist, the principal has the expected shape.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, sha256_json, utc_now
from ..db import attach_loaded, pipelined
from ..errors import ApiError, invalid_request
from ..validation import Checker, Invalid, join
from . import subject_display as display
from . import tokens
from .authorize_page import sessions_usable
from .models import AgentSession, ClientApp

# Shown for sessions issued without a device label (operator-issued, or authorized before the
# label was required): clients require a non-blank label in the session view.
UNLABELLED_DEVICE = "Unlabelled device"
# The principal's fields and their lengths, as Agent Auth accepts them.


def check_principal(checker: Checker, value: Any, path: str) -> None:
    principal = checker.obj(value, path, required=("id",), optional=("tenant", "roles", "audience", "channel"))
    if principal is None:
        return
    for key, limit in limits.PRINCIPAL_FIELD_MAX.items():
        if key in principal:
            checker.string(principal[key], join(path, key), min_len=1, max_len=limit, single_line=True)
    if "roles" in principal:
        checker.string_list(principal["roles"], join(path, "roles"), max_items=limits.PRINCIPAL_MAX_ROLES,
                            item_max_len=limits.PRINCIPAL_ROLE_MAX)


def access_expiry(now: datetime, access_ttl: int, refresh_expires: datetime) -> datetime:
    """An access token never outlives its session, and expires strictly before it (clients
    require the session's refresh expiry to be later than the access expiry)."""
    return min(now + timedelta(seconds=access_ttl), refresh_expires - timedelta(seconds=1))


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
    subject_display: dict | None = None,
) -> dict:
    """`subject_display` is a stored value (identity/subject_display.py), as an approved
    authorization holds it."""
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
        checker.string(on_behalf_of, "on_behalf_of", min_len=1, max_len=limits.SESSION_SUBJECT_MAX, single_line=True)
    if device_label is not None:
        checker.string(device_label, "device_label", min_len=1, max_len=limits.DEVICE_LABEL_MAX, single_line=True)
    checker.integer(access_ttl, "access_ttl", minimum=1, maximum=24 * 3600)
    checker.integer(refresh_ttl, "refresh_ttl", minimum=1, maximum=365 * 24 * 3600)
    if checker.problems:
        raise invalid_request(Invalid(checker.problems))

    client = db.scalar(select(ClientApp).where(ClientApp.app_id == client_app_id))
    if client is None or not client.enabled:
        raise ApiError("invalid_client", "The client app is unknown or disabled.")
    outside = [r for r in routes if r not in client.allowed_routes]
    if outside:
        raise ApiError("route_not_allowed",
                       "Routes outside the client's allowlist: " + ", ".join(outside))

    now = utc_now()
    access_token, access_hash = tokens.new_token(tokens.ACCESS)
    refresh_token, refresh_hash = tokens.new_token(tokens.REFRESH)
    refresh_expires = now + timedelta(seconds=refresh_ttl)
    access_expires = access_expiry(now, access_ttl, refresh_expires)
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
        subject_display=subject_display,
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


# The session and the state of its client, in one prepared statement: this runs before every
# agent request.
_BY_ACCESS_HASH = f"""
    SELECT {", ".join("s." + c.name for c in AgentSession.__table__.columns)},
           c.enabled AS client_enabled, c.agent_authorize_url AS client_authorize_url
      FROM bz_agent_sessions s LEFT JOIN bz_client_apps c ON c.app_id = s.client_app_id
     WHERE s.access_token_hash = %(digest)s"""  # noqa: S608 - constant identifiers, bound values


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
    if not sessions_usable(row.client_enabled, row.client_authorize_url):  # enabled None: the app is gone
        return None
    values = row._asdict()
    del values["client_enabled"], values["client_authorize_url"]
    return attach_loaded(db, AgentSession(**values))


def revoke_session(db: Session, session_id: str) -> dict:
    try:
        sid = uuid.UUID(session_id)
    except ValueError:
        raise ApiError("invalid_request", "session_id must be a UUID.") from None
    row = db.get(AgentSession, sid, with_for_update=True)
    if row is None:
        raise ApiError("session_not_found")
    return revoke_row(row)


def session_view(row: AgentSession) -> dict:
    """Non-secret session metadata, as GET /agent-auth/v1/session shows it. `expires_at` is the
    access token's expiry (`access_expires_at` says the same under this hub's older name)."""
    return {
        "session_id": str(row.id),
        "client_app_id": row.client_app_id,
        "device_label": row.device_label or UNLABELLED_DEVICE,
        **display.view(row.subject_display),
        "principal": row.principal,
        "on_behalf_of": row.on_behalf_of,
        "allowed_routes": list(row.allowed_routes),
        "created_at": iso(row.created_at),
        "expires_at": iso(row.access_expires_at),
        "refresh_expires_at": iso(row.refresh_expires_at),
        "access_expires_at": iso(row.access_expires_at),
        "task_enrolled": row.task_enrolled,
    }


def session_state(revoked_at: datetime | None, refresh_expires_at: datetime, now: datetime) -> str:
    """A session as the business backend sees it: `revoked`, or `expired` once its refresh
    expiry has passed, else `active`."""
    if revoked_at is not None:
        return "revoked"
    return "expired" if refresh_expires_at <= now else "active"


def revoke_row(row: AgentSession) -> dict:
    already = row.revoked_at is not None
    if not already:
        row.revoked_at = utc_now()
    return {"session_id": str(row.id), "revoked_at": iso(row.revoked_at), "already_revoked": already}


def revoke_by_access_token(db: Session, access_token: str) -> dict | None:
    """Revoke the session an access token belongs to, whether or not that token is still live
    (revoking is always safe). None when no session holds it."""
    row = db.scalar(
        select(AgentSession)
        .where(AgentSession.access_token_hash == tokens.hash_token(access_token))
        .with_for_update()
    )
    return None if row is None else revoke_row(row)


def revoke_by_refresh_token(db: Session, client_app_id: str, refresh_token: str) -> dict | None:
    """Revoke the session a refresh token belongs to, when it belongs to that client. None when
    it does not: the caller answers the same either way."""
    row = db.scalar(
        select(AgentSession)
        .where(AgentSession.refresh_token_hash == tokens.hash_token(refresh_token))
        .with_for_update()
    )
    if row is None or row.client_app_id != client_app_id:
        return None
    return revoke_row(row)
