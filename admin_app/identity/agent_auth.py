"""Agent Auth v1: a local agent obtains a revocable Agent Session through the business system's
own consent page in a browser, with PKCE (S256), single-use codes bound to the redirect URI, and
refresh tokens that rotate on every use (reusing an old one revokes the session: fail closed).
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import math
import re
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, utc_now
from ..errors import ApiError, invalid_request
from ..validation import Checker, join
from . import subject_display, tokens
from .authorize_page import page_url_valid, sessions_usable
from .models import AgentAuthorization, AgentSession, ClientApp, RefreshHistory
from .sessions import (UNLABELLED_DEVICE, access_expiry, check_principal, issue_session,
                       revoke_row, session_state)

AUTHORIZATION_TTL = 600
CODE_TTL = 120
CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")
VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
GRANT_FIELDS = {
    "authorization_code": ("grant_type", "client_app_id", "code", "redirect_uri", "code_verifier"),
    "refresh_token": ("grant_type", "client_app_id", "refresh_token"),
}
# The stored status of an exchanged authorization, and the name the wire gives it.
EXCHANGED, EXCHANGED_ON_THE_WIRE = "completed", "consumed"


def invalid_grant(message: str | None = None, *, keep_changes: bool = False) -> ApiError:
    err = ApiError("invalid_grant", message)
    err.commit_anyway = keep_changes  # a fail-closed revocation must survive the refusal
    return err


def not_found() -> ApiError:
    return ApiError("not_found", "No such authorization.")


def loopback_callback(value: str) -> bool:
    """An explicit-port http URL on 127.0.0.1 or [::1], without credentials or fragment. Port 0
    is no port a callback server can listen on."""
    try:
        parts = urlsplit(value)
        port = parts.port
        host = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return False
    return (parts.scheme == "http" and host.is_loopback and bool(port) and parts.username is None
            and parts.password is None and not parts.fragment)


def _callback(checker: Checker, value, path: str) -> None:
    if checker.string(value, path, min_len=1, max_len=limits.CALLBACK_MAX, single_line=True) is None:
        return
    if not loopback_callback(value):
        checker.add(path, "must be an explicit-port loopback http URL (127.0.0.1 or [::1]) "
                          "without credentials or fragment")


def _routes(checker: Checker, value, path: str) -> None:
    if checker.string_list(value, path, max_items=limits.AUTH_MAX_ROUTES) is None:
        return
    if not value:
        checker.add(path, "must name at least one route")
    for i, route in enumerate(value):
        if route == "*":
            checker.add(join(path, i), "'*' is not a route")
        else:
            checker.resource_key(route, join(path, i), route=True)


def _non_blank(checker: Checker, value, path: str, max_len: int) -> None:
    if checker.string(value, path, min_len=1, max_len=max_len, single_line=True) is not None \
            and not value.strip():
        checker.add(path, "must not be blank")


def _client(db: Session, app_id: str) -> ClientApp:
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == app_id))
    if client is None or not client.enabled or not client.agent_authorize_url:
        raise ApiError("invalid_client")
    return client


def check_create(body: dict) -> None:
    checker = Checker()
    checker.obj(body, "", required=("client_app_id", "redirect_uri", "state", "requested_routes",
                                    "device_label", "code_challenge", "code_challenge_method"))
    if "client_app_id" in body:
        checker.resource_key(body["client_app_id"], "client_app_id")
    if "redirect_uri" in body:
        _callback(checker, body["redirect_uri"], "redirect_uri")
    if "state" in body:
        shortest, longest = limits.STATE_LENGTH
        checker.string(body["state"], "state", min_len=shortest, max_len=longest, single_line=True)
    if "requested_routes" in body:
        _routes(checker, body["requested_routes"], "requested_routes")
    if "device_label" in body:
        _non_blank(checker, body["device_label"], "device_label", limits.DEVICE_LABEL_MAX)
    if "code_challenge" in body:
        checker.string(body["code_challenge"], "code_challenge", pattern=CHALLENGE,
                       pattern_text="a base64url SHA-256 (43 characters)")
    if "code_challenge_method" in body and body["code_challenge_method"] != "S256":
        checker.add("code_challenge_method", "must be S256")
    if checker.problems:
        raise invalid_request(checker)


def create_authorization(db: Session, body: dict) -> dict:
    """`body` has passed check_create."""
    client = _client(db, body["client_app_id"])
    outside = [r for r in body["requested_routes"] if r not in client.allowed_routes]
    if outside:
        raise ApiError("invalid_client", "Routes this client may not grant: " + ", ".join(outside))
    if not page_url_valid(client.agent_authorize_url):
        raise ApiError("agent_authorize_url_invalid")
    row = AgentAuthorization(
        id=uuid.uuid4(), client_app_id=client.app_id, redirect_uri=body["redirect_uri"],
        state=body["state"], requested_routes=list(body["requested_routes"]),
        device_label=body["device_label"], code_challenge=body["code_challenge"],
        expires_at=utc_now() + timedelta(seconds=AUTHORIZATION_TTL))
    db.add(row)
    db.flush()
    separator = "&" if "?" in client.agent_authorize_url else "?"
    return {"authorization_id": str(row.id),
            "authorization_url": client.agent_authorize_url + separator + urlencode({"authorization_id": str(row.id)}),
            "expires_in": AUTHORIZATION_TTL}


def _authorization(db: Session, client: ClientApp, authorization_id: str, lock: bool = False) -> AgentAuthorization:
    try:
        ident = uuid.UUID(authorization_id)
    except ValueError:
        raise not_found() from None
    query = select(AgentAuthorization).where(AgentAuthorization.id == ident,
                                             AgentAuthorization.client_app_id == client.app_id)
    row = db.scalar(query.with_for_update() if lock else query)
    if row is None:
        raise not_found()
    return row


def _status(row: AgentAuthorization) -> str:
    if row.status == "pending" and row.expires_at <= utc_now():
        return "expired"
    return EXCHANGED_ON_THE_WIRE if row.status == EXCHANGED else row.status


def _seconds_until(moment: datetime, now: datetime) -> int:
    return max(0, math.ceil((moment - now).total_seconds()))


def context(db: Session, client: ClientApp, authorization_id: str) -> dict:
    """What a business page may show: never the state, the challenge or the callback. The flat
    `client_app_id`, `client_name`, `device_label` and `expires_in` repeat the nested fields
    under this hub's older names."""
    row = _authorization(db, client, authorization_id)
    now = utc_now()
    device = row.device_label or UNLABELLED_DEVICE
    view: dict[str, Any] = {"authorization_id": str(row.id), "client": {"app_id": client.app_id, "name": client.name},
            "device": {"name": device}, "requested_routes": list(row.requested_routes),
            "status": _status(row), "expires_at": iso(row.expires_at),
            "client_app_id": client.app_id, "client_name": client.name, "device_label": device,
            "expires_in": _seconds_until(row.expires_at, now)}
    session = db.get(AgentSession, row.session_id) if row.session_id is not None else None
    if session is not None:
        state = session_state(session.revoked_at, session.refresh_expires_at, now)
        view["session"] = {"session_id": str(session.id), "state": state,
                           "expires_at": iso(session.refresh_expires_at),
                           **subject_display.view(session.subject_display)}
        if session.revoked_at is not None:
            view["session"]["revoked_at"] = iso(session.revoked_at)
    return view


def _pending(row: AgentAuthorization) -> None:
    """Repeated, expired and completed requests are terminal."""
    status = _status(row)
    if status == "expired":
        raise ApiError("expired")
    if status != "pending":
        raise ApiError("invalid_state", f"This authorization was already {status}.")


def _redirect(row: AgentAuthorization, **params) -> str:
    separator = "&" if urlsplit(row.redirect_uri).query else "?"
    return row.redirect_uri + separator + urlencode({**params, "state": row.state})


def check_approve(body: dict) -> None:
    checker = Checker()
    checker.obj(body, "", required=("principal", "on_behalf_of", "allowed_routes"),
                optional=("subject_display",))
    if "principal" in body:
        check_principal(checker, body["principal"], "principal")
    if "on_behalf_of" in body:
        _non_blank(checker, body["on_behalf_of"], "on_behalf_of", limits.ON_BEHALF_OF_MAX)
    if "allowed_routes" in body:
        _routes(checker, body["allowed_routes"], "allowed_routes")
    if "subject_display" in body:
        subject_display.check(checker, body["subject_display"], "subject_display")
    if checker.problems:
        raise invalid_request(checker)


def approve(db: Session, client: ClientApp, authorization_id: str, body: dict) -> dict:
    """`body` has passed check_approve."""
    row = _authorization(db, client, authorization_id, lock=True)
    _pending(row)
    beyond = [r for r in body["allowed_routes"]
              if r not in row.requested_routes or r not in client.allowed_routes]
    if beyond:
        raise ApiError("route_not_allowed", "Approved routes exceed the request or the client "
                                                 "allowlist: " + ", ".join(beyond))
    code, code_hash = tokens.new_token(tokens.CODE)
    row.status, row.decided_at = "approved", utc_now()
    row.principal, row.on_behalf_of = body["principal"], body["on_behalf_of"]
    row.approved_routes = list(body["allowed_routes"])
    row.subject_display = subject_display.stored(body.get("subject_display"))
    row.code_hash, row.code_expires_at = code_hash, utc_now() + timedelta(seconds=CODE_TTL)
    return {"redirect_uri": _redirect(row, code=code)}


def deny(db: Session, client: ClientApp, authorization_id: str) -> dict:
    row = _authorization(db, client, authorization_id, lock=True)
    _pending(row)
    row.status, row.decided_at = "denied", utc_now()
    return {"redirect_uri": _redirect(row, error="access_denied")}


def withdraw(db: Session, client: ClientApp, authorization_id: str) -> dict:
    """The business backend withdraws an authorization: a request not yet exchanged can no longer
    be (it reads as denied, its code is void), and the session an exchanged one produced is
    revoked. Idempotent."""
    row = _authorization(db, client, authorization_id, lock=True)
    if row.status in ("pending", "approved"):
        row.status, row.decided_at = "denied", utc_now()
        row.code_hash = row.code_expires_at = None
    if row.session_id is not None:
        revoke_session_by_id(db, row.session_id)
    reply = {"authorization_id": str(row.id), "revoked": True}
    if row.session_id is not None:
        reply["session_id"] = str(row.session_id)
    return reply


# ------------------------------------------------------------------ POST /token

def _pkce_matches(verifier: str, challenge: str) -> bool:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    computed = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
    return tokens.same_hash(computed, challenge)


def check_exchange(body: dict) -> str:
    """The grant, once the body has exactly its fields, each a string. The values themselves
    (token shapes, callback, verifier) are checked by the grant and refused as invalid_grant."""
    grant = body.get("grant_type")
    if not isinstance(grant, str):
        raise invalid_request(Checker.single("grant_type", "must be a string"))
    if grant not in GRANT_FIELDS:
        raise ApiError("unsupported_grant_type")
    checker = Checker()
    checker.obj(body, "", required=GRANT_FIELDS[grant])
    for key in GRANT_FIELDS[grant][2:]:
        if key in body:
            checker.string(body[key], key, min_len=1, max_len=limits.GRANT_FIELD_MAX)
    if "client_app_id" in body:
        checker.resource_key(body["client_app_id"], "client_app_id")
    if checker.problems:
        raise invalid_request(checker)
    return grant


def exchange(db: Session, body: dict, access_ttl: int, refresh_ttl: int) -> dict:
    grant = check_exchange(body)
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == body["client_app_id"]))
    if client is None or not sessions_usable(client.enabled, client.agent_authorize_url):
        raise invalid_grant("The client is unknown, disabled or its authorization page is not valid.")
    if grant == "authorization_code":
        return _exchange_code(db, client, body, access_ttl, refresh_ttl)
    return _refresh(db, body, access_ttl)


def _exchange_code(db: Session, client: ClientApp, body: dict, access_ttl: int, refresh_ttl: int) -> dict:
    if not tokens.well_formed(body["code"], tokens.CODE) or not loopback_callback(body["redirect_uri"]) \
            or not VERIFIER.fullmatch(body["code_verifier"]):
        raise invalid_grant()
    row = db.scalar(select(AgentAuthorization)
                    .where(AgentAuthorization.code_hash == tokens.hash_token(body["code"])).with_for_update())
    if row is None or row.client_app_id != client.app_id:
        raise invalid_grant()
    if row.status == EXCHANGED:
        # A replayed code: whatever it produced is revoked too (fail closed).
        if row.session_id is not None:
            revoke_session_by_id(db, row.session_id)
        raise invalid_grant(keep_changes=True)
    if row.status != "approved" or row.approved_routes is None \
            or row.code_expires_at is None or row.code_expires_at <= utc_now() \
            or row.redirect_uri != body["redirect_uri"] \
            or not _pkce_matches(body["code_verifier"], row.code_challenge) \
            or any(r not in client.allowed_routes for r in row.approved_routes):
        raise invalid_grant()
    now = utc_now()  # not later than the moment issue_session counts the lifetimes from
    issued = issue_session(db, client_app_id=row.client_app_id, routes=list(row.approved_routes),
                           principal=row.principal, on_behalf_of=row.on_behalf_of,
                           access_ttl=access_ttl, refresh_ttl=refresh_ttl, device_label=row.device_label,
                           subject_display=row.subject_display)
    row.status, row.session_id = EXCHANGED, uuid.UUID(issued["session_id"])
    session = db.get_one(AgentSession, row.session_id)
    return token_response(session, issued["access_token"], issued["refresh_token"], now)


def revoke_session_by_id(db: Session, session_id: uuid.UUID) -> None:
    session = db.get(AgentSession, session_id, with_for_update=True)
    if session is not None:
        revoke_row(session)


def _whole_seconds_left(moment: datetime, now: datetime) -> int:
    # At least 1: clients refuse 0, and a session being answered for is live.
    return max(1, int((moment - now).total_seconds()))


def token_response(session: AgentSession, access_token: str, refresh_token: str, now: datetime) -> dict:
    """Exactly the keys of the wire contract, the lifetimes counted from `now`, the moment the
    tokens were issued."""
    return {"token_type": "Bearer", "access_token": access_token,
            "expires_in": _whole_seconds_left(session.access_expires_at, now),
            "refresh_token": refresh_token,
            "refresh_expires_in": _whole_seconds_left(session.refresh_expires_at, now),
            "session_id": str(session.id), "client_app_id": session.client_app_id,
            **subject_display.view(session.subject_display)}


def _refresh(db: Session, body: dict, access_ttl: int) -> dict:
    token = body["refresh_token"]
    if not tokens.refresh_well_formed(token):
        raise invalid_grant()
    digest = tokens.hash_token(token)
    session = db.scalar(select(AgentSession).where(AgentSession.refresh_token_hash == digest).with_for_update())
    if session is None:
        rotated = db.get(RefreshHistory, digest)
        if rotated is not None:
            # An already-rotated token came back: someone else may hold the session. Revoke it.
            revoke_session_by_id(db, rotated.session_id)
            raise invalid_grant(keep_changes=True)
        raise invalid_grant()
    now = utc_now()
    if session.client_app_id != body["client_app_id"] or session.revoked_at is not None \
            or session.refresh_expires_at <= now:
        raise invalid_grant()
    access, access_hash = tokens.new_token(tokens.ACCESS)
    refresh, refresh_hash = tokens.new_token(tokens.REFRESH)
    db.add(RefreshHistory(token_hash=digest, session_id=session.id))
    session.access_token_hash, session.refresh_token_hash = access_hash, refresh_hash
    session.access_expires_at = access_expiry(now, access_ttl, session.refresh_expires_at)
    session.refreshed_at = now
    return token_response(session, access, refresh, now)


# ------------------------------------------------------------------ revocation by the business backend

def revoke_for_client(db: Session, client: ClientApp, session_id: str) -> dict:
    try:
        ident = uuid.UUID(session_id)
    except ValueError:
        raise ApiError("not_found", "No such agent session.") from None
    session = db.get(AgentSession, ident, with_for_update=True)
    if session is None or session.client_app_id != client.app_id:
        raise ApiError("not_found", "No such agent session.")
    return {"revoked": True, **revoke_row(session)}
