"""Agent Auth v1: a local agent obtains a revocable Agent Session through the business system's
own consent page in a browser, with PKCE (S256), single-use codes bound to the redirect URI, and
refresh tokens that rotate on every use (reusing an old one revokes the session: fail closed).
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import uuid
from datetime import timedelta
from urllib.parse import urlencode, urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..errors import ApiError, invalid_request
from ..validation import Checker, join
from . import tokens
from .models import AgentAuthorization, AgentSession, ClientApp, RefreshHistory
from .sessions import check_principal, issue_session, revoke_session

AUTHORIZATION_TTL = 600
CODE_TTL = 120
CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")
VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
MAX_ROUTES = 16


def invalid_grant(message: str = "The code or refresh token is invalid, expired, replayed or mismatched.",
                  *, keep_changes: bool = False) -> ApiError:
    err = ApiError(400, "invalid_grant", message)
    err.commit_anyway = keep_changes  # a fail-closed revocation must survive the refusal
    return err


def _loopback_callback(checker: Checker, value, path: str) -> None:
    if checker.string(value, path, min_len=1, max_len=2048, single_line=True) is None:
        return
    try:
        parts = urlsplit(value)
        port = parts.port
        host = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        checker.add(path, "must be an explicit-port loopback http URL (127.0.0.1 or [::1])")
        return
    if parts.scheme != "http" or not host.is_loopback or port is None or parts.username is not None \
            or parts.password is not None or parts.fragment:
        checker.add(path, "must be an explicit-port loopback http URL without credentials or fragment")


def _routes(checker: Checker, value, path: str) -> None:
    if checker.string_list(value, path, max_items=MAX_ROUTES) is None:
        return
    if not value:
        checker.add(path, "must name at least one route")
    for i, route in enumerate(value):
        if route == "*":
            checker.add(join(path, i), "'*' is not a route")
        else:
            checker.resource_key(route, join(path, i), route=True)


def _client(db: Session, app_id: str) -> ClientApp:
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == app_id))
    if client is None or not client.enabled or not client.agent_authorize_url:
        raise ApiError(400, "invalid_client", "The client is unknown, disabled or has no authorization page.")
    return client


def create_authorization(db: Session, body: dict) -> dict:
    checker = Checker()
    checker.obj(body, "", required=("client_app_id", "redirect_uri", "state", "requested_routes",
                                    "code_challenge", "code_challenge_method"), optional=("device_label",))
    if "client_app_id" in body:
        checker.resource_key(body["client_app_id"], "client_app_id")
    if "redirect_uri" in body:
        _loopback_callback(checker, body["redirect_uri"], "redirect_uri")
    if "state" in body:
        checker.string(body["state"], "state", min_len=8, max_len=512, single_line=True)
    if "requested_routes" in body:
        _routes(checker, body["requested_routes"], "requested_routes")
    if "device_label" in body:
        checker.string(body["device_label"], "device_label", min_len=1, max_len=128, single_line=True)
    if "code_challenge" in body:
        checker.string(body["code_challenge"], "code_challenge", pattern=CHALLENGE,
                       pattern_text="a base64url SHA-256 (43 characters)")
    if "code_challenge_method" in body and body["code_challenge_method"] != "S256":
        checker.add("code_challenge_method", "must be S256")
    if checker.problems:
        raise invalid_request(checker)
    client = _client(db, body["client_app_id"])
    outside = [r for r in body["requested_routes"] if r not in client.allowed_routes]
    if outside:
        raise ApiError(400, "invalid_client", "Routes this client may not grant: " + ", ".join(outside))
    row = AgentAuthorization(
        id=uuid.uuid4(), client_app_id=client.app_id, redirect_uri=body["redirect_uri"],
        state=body["state"], requested_routes=list(body["requested_routes"]),
        device_label=body.get("device_label"), code_challenge=body["code_challenge"],
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
        raise ApiError(404, "authorization_not_found", "No such authorization.") from None
    query = select(AgentAuthorization).where(AgentAuthorization.id == ident,
                                             AgentAuthorization.client_app_id == client.app_id)
    row = db.scalar(query.with_for_update() if lock else query)
    if row is None:
        raise ApiError(404, "authorization_not_found", "No such authorization.")
    return row


def _status(row: AgentAuthorization) -> str:
    if row.status == "pending" and row.expires_at <= utc_now():
        return "expired"
    return row.status


def context(db: Session, client: ClientApp, authorization_id: str) -> dict:
    row = _authorization(db, client, authorization_id)
    return {"authorization_id": str(row.id), "client_app_id": client.app_id, "client_name": client.name,
            "device_label": row.device_label, "requested_routes": list(row.requested_routes),
            "status": _status(row), "expires_at": iso(row.expires_at),
            "expires_in": max(0, int((row.expires_at - utc_now()).total_seconds()))}


def _pending(row: AgentAuthorization) -> None:
    """Repeated, expired and completed requests are terminal."""
    status = _status(row)
    if status == "expired":
        raise ApiError(410, "authorization_expired", "This authorization request has expired.")
    if status != "pending":
        raise ApiError(409, "authorization_processed", f"This authorization was already {status}.")


def _redirect(row: AgentAuthorization, **params) -> str:
    separator = "&" if urlsplit(row.redirect_uri).query else "?"
    return row.redirect_uri + separator + urlencode({**params, "state": row.state})


def approve(db: Session, client: ClientApp, authorization_id: str, body: dict) -> dict:
    checker = Checker()
    checker.obj(body, "", required=("principal", "allowed_routes"), optional=("on_behalf_of",))
    if "principal" in body:
        check_principal(checker, body["principal"], "principal")
    if body.get("on_behalf_of") is not None:
        checker.string(body["on_behalf_of"], "on_behalf_of", min_len=1, max_len=255, single_line=True)
    if "allowed_routes" in body:
        _routes(checker, body["allowed_routes"], "allowed_routes")
    if checker.problems:
        raise invalid_request(checker)
    row = _authorization(db, client, authorization_id, lock=True)
    _pending(row)
    beyond = [r for r in body["allowed_routes"]
              if r not in row.requested_routes or r not in client.allowed_routes]
    if beyond:
        raise ApiError(403, "route_not_allowed", "Approved routes exceed the request or the client "
                                                 "allowlist: " + ", ".join(beyond))
    code, code_hash = tokens.new_token(tokens.CODE)
    row.status, row.decided_at = "approved", utc_now()
    row.principal, row.on_behalf_of = body["principal"], body.get("on_behalf_of")
    row.approved_routes = list(body["allowed_routes"])
    row.code_hash, row.code_expires_at = code_hash, utc_now() + timedelta(seconds=CODE_TTL)
    return {"redirect_uri": _redirect(row, code=code)}


def deny(db: Session, client: ClientApp, authorization_id: str) -> dict:
    row = _authorization(db, client, authorization_id, lock=True)
    _pending(row)
    row.status, row.decided_at = "denied", utc_now()
    return {"redirect_uri": _redirect(row, error="access_denied")}


def _pkce_matches(verifier: str, challenge: str) -> bool:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    computed = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
    return tokens.same_hash(computed, challenge)


def exchange(db: Session, body: dict, access_ttl: int, refresh_ttl: int) -> dict:
    grant = body.get("grant_type")
    checker = Checker()
    if grant == "authorization_code":
        checker.obj(body, "", required=("grant_type", "client_app_id", "code", "redirect_uri", "code_verifier"))
        for key in ("code", "redirect_uri"):
            if key in body:
                checker.string(body[key], key, min_len=1, max_len=2048)
        if "code_verifier" in body:
            checker.string(body["code_verifier"], "code_verifier", pattern=VERIFIER,
                           pattern_text="a PKCE verifier (43-128 unreserved characters)")
    elif grant == "refresh_token":
        checker.obj(body, "", required=("grant_type", "client_app_id", "refresh_token"))
        if "refresh_token" in body:
            checker.string(body["refresh_token"], "refresh_token", min_len=1, max_len=256)
    else:
        checker.add("grant_type", "must be authorization_code or refresh_token")
    if "client_app_id" in body:
        checker.resource_key(body["client_app_id"], "client_app_id")
    if checker.problems:
        raise invalid_request(checker)
    if grant == "authorization_code":
        return _exchange_code(db, body, access_ttl, refresh_ttl)
    return _refresh(db, body, access_ttl)


def _exchange_code(db: Session, body: dict, access_ttl: int, refresh_ttl: int) -> dict:
    if not tokens.well_formed(body["code"], tokens.CODE):
        raise invalid_grant()
    row = db.scalar(select(AgentAuthorization)
                    .where(AgentAuthorization.code_hash == tokens.hash_token(body["code"])).with_for_update())
    if row is None or row.client_app_id != body["client_app_id"]:
        raise invalid_grant()
    if row.status == "completed":
        # A replayed code: whatever it produced is revoked too (fail closed).
        if row.session_id is not None:
            revoke_session(db, str(row.session_id))
        raise invalid_grant(keep_changes=True)
    if row.status != "approved" or row.code_expires_at is None or row.code_expires_at <= utc_now() \
            or row.redirect_uri != body["redirect_uri"] \
            or not _pkce_matches(body["code_verifier"], row.code_challenge):
        raise invalid_grant()
    issued = issue_session(db, client_app_id=row.client_app_id, routes=list(row.approved_routes),
                           principal=row.principal, on_behalf_of=row.on_behalf_of,
                           access_ttl=access_ttl, refresh_ttl=refresh_ttl, device_label=row.device_label)
    row.status, row.session_id = "completed", uuid.UUID(issued["session_id"])
    return _token_response(issued, access_ttl, list(row.approved_routes))


def _token_response(issued: dict, access_ttl: int, routes: list[str]) -> dict:
    return {"token_type": "Bearer", "expires_in": access_ttl, "allowed_routes": routes, **issued}


def _refresh(db: Session, body: dict, access_ttl: int) -> dict:
    token = body["refresh_token"]
    if not tokens.well_formed(token, tokens.REFRESH):
        raise invalid_grant()
    digest = tokens.hash_token(token)
    session = db.scalar(select(AgentSession).where(AgentSession.refresh_token_hash == digest).with_for_update())
    if session is None:
        rotated = db.get(RefreshHistory, digest)
        if rotated is not None:
            # An already-rotated token came back: someone else may hold the session. Revoke it.
            revoke_session(db, str(rotated.session_id))
            raise invalid_grant(keep_changes=True)
        raise invalid_grant()
    client = db.scalar(select(ClientApp).where(ClientApp.app_id == session.client_app_id))
    now = utc_now()
    if session.client_app_id != body["client_app_id"] or session.revoked_at is not None \
            or session.refresh_expires_at <= now or client is None or not client.enabled:
        raise invalid_grant()
    access, access_hash = tokens.new_token(tokens.ACCESS)
    refresh, refresh_hash = tokens.new_token(tokens.REFRESH)
    db.add(RefreshHistory(token_hash=digest, session_id=session.id))
    session.access_token_hash, session.refresh_token_hash = access_hash, refresh_hash
    session.access_expires_at = min(now + timedelta(seconds=access_ttl), session.refresh_expires_at)
    session.refreshed_at = now
    return _token_response({"session_id": str(session.id), "access_token": access, "refresh_token": refresh,
                            "access_expires_at": iso(session.access_expires_at),
                            "refresh_expires_at": iso(session.refresh_expires_at)},
                           access_ttl, list(session.allowed_routes))


def revoke_for_client(db: Session, client: ClientApp, session_id: str) -> dict:
    try:
        ident = uuid.UUID(session_id)
    except ValueError:
        raise ApiError(404, "session_not_found", "No such agent session.") from None
    session = db.get(AgentSession, ident)
    if session is None or session.client_app_id != client.app_id:
        raise ApiError(404, "session_not_found", "No such agent session.")
    return revoke_session(db, session_id)
