"""/agent-auth/v1: browser authorization of a local agent (PKCE), token exchange and refresh,
session inspection and revocation."""
from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify, request

from .. import limits
from .. import surfaces
from ..errors import ApiError, invalid_request, unauthorized
from ..identity import agent_auth, business_sessions, tokens
from ..identity.clients import authenticate_client_token
from ..identity.rate_limit import SharedWindowLimit
from ..identity.sessions import revoke_by_access_token, revoke_by_refresh_token, session_view
from ..identity.tokens import bearer_from_header
from ..validation import Checker
from .auth import agent_session_required, database
from .body import read_empty_object, read_json_object, read_raw
from .query import query_params

bp = Blueprint("agent_auth", __name__, url_prefix=surfaces.AGENT_AUTH.prefix)

@bp.get("/session")
@agent_session_required
def current_session():
    return jsonify(session_view(g.agent_session))


@bp.post("/revoke")
def revoke():
    """With an `Authorization` header, it must be an access token and the body is ignored (only
    its size is limited); the session holding that token is revoked. Without one, the body is
    `{client_app_id, refresh_token}`: the way out for an agent whose access token has expired.
    Either way it answers 200 `{revoked: true}` whether or not anything matched, naming the
    session only when one was revoked (which the caller's token already identifies)."""
    max_bytes = current_app.extensions["bailing"].settings.json_body_max_bytes
    header = request.headers.get("Authorization")
    if header is not None:
        bearer = bearer_from_header(header)
        if bearer is None or not tokens.well_formed(bearer, tokens.ACCESS):
            raise unauthorized()
        read_raw(max_bytes)
        with database().session() as db:
            return jsonify({"revoked": True, **(revoke_by_access_token(db, bearer) or {})})
    body = read_json_object(max_bytes)
    checker = Checker()
    checker.obj(body, "", required=("client_app_id", "refresh_token"))
    if "client_app_id" in body:
        checker.resource_key(body["client_app_id"], "client_app_id")
    if "refresh_token" in body and not (isinstance(body["refresh_token"], str)
                                        and tokens.refresh_well_formed(body["refresh_token"])):
        checker.add("refresh_token", "must be a refresh token")
    if checker.problems:
        raise invalid_request(checker)
    with database().session() as db:
        revoked = revoke_by_refresh_token(db, body["client_app_id"], body["refresh_token"])
        return jsonify({"revoked": True, **(revoked or {})})


# ------------------------------------------------------------------ browser authorization

def _client_from_token(db):
    client = authenticate_client_token(db, bearer_from_header(request.headers.get("Authorization")))
    if client is None:
        raise unauthorized()
    return client


def _create_limit() -> SharedWindowLimit:
    """Authorization requests per client app and caller address. Counted in the database, so all
    workers and hosts together admit the limit; the app holds only the stand-in used while the
    database lacks the table."""
    limit = current_app.extensions.get("agent_auth_create_limit")
    if limit is None:
        limit = current_app.extensions.setdefault("agent_auth_create_limit", SharedWindowLimit(
            "agent-auth.authorizations", limits.AUTHORIZATIONS_PER_WINDOW, limits.AUTHORIZATION_WINDOW_SECONDS))
    return limit


@bp.post("/authorizations")
def create_authorization():
    body = read_json_object(limits.AUTH_BODY_MAX_BYTES)
    agent_auth.check_create(body)
    if not _create_limit().allow(database(), body["client_app_id"], request.remote_addr):
        err = ApiError("rate_limited")
        err.headers["Retry-After"] = str(limits.AUTHORIZATION_WINDOW_SECONDS)
        raise err
    with database().session() as db:
        return jsonify(agent_auth.create_authorization(db, body)), 201


@bp.get("/authorizations/<authorization_id>")
def authorization_context(authorization_id: str):
    with database().session() as db:
        return jsonify(agent_auth.context(db, _client_from_token(db), authorization_id))


@bp.post("/authorizations/<authorization_id>/approve")
def approve_authorization(authorization_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        body = read_json_object(limits.AUTH_BODY_MAX_BYTES)
        agent_auth.check_approve(body)
        return jsonify(agent_auth.approve(db, client, authorization_id, body))


@bp.post("/authorizations/<authorization_id>/deny")
def deny_authorization(authorization_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        read_empty_object("deny", limits.AUTH_BODY_MAX_BYTES)
        return jsonify(agent_auth.deny(db, client, authorization_id))


@bp.post("/authorizations/<authorization_id>/revoke")
def withdraw_authorization(authorization_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        read_empty_object("revoke", limits.WITHDRAW_BODY_MAX_BYTES)
        return jsonify(agent_auth.withdraw(db, client, authorization_id))


@bp.post("/token")
def token():
    body = read_json_object(limits.AUTH_BODY_MAX_BYTES)
    settings = current_app.extensions["bailing"].settings
    with database().session() as db:
        return jsonify(agent_auth.exchange(db, body, settings.access_token_ttl, settings.refresh_token_ttl))


@bp.after_request
def _pragma_on_token(response):
    # Every answer of /token, refusals included, as for HTTP/1.0 caches.
    if request.endpoint == "agent_auth.token":
        response.headers["Pragma"] = "no-cache"
    return response


@bp.post("/sessions/<session_id>/revoke")
def revoke_by_client(session_id: str):
    """The body is not read: whatever it holds, the path names the session."""
    with database().session() as db:
        client = _client_from_token(db)
        return jsonify(agent_auth.revoke_for_client(db, client, session_id))


@bp.get("/sessions")
def list_sessions():
    """The client's sessions, filtered, newest first, paged by a cursor bound to the filters."""
    with database().session() as db:
        client = _client_from_token(db)
        query = business_sessions.parse_list_query(query_params(optional=business_sessions.LIST_PARAMETERS))
        return jsonify(business_sessions.list_sessions(db, client, query))


def _display_body_too_large(max_bytes: int, observed: int) -> ApiError:
    # BUSINESS_SIDE.md §H.2 names no 413 here: an oversized body is an invalid request.
    return ApiError("invalid_request", f"The body exceeds {max_bytes} bytes.")


@bp.put("/sessions/<session_id>/subject-display")
def set_subject_display(session_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        body = read_json_object(limits.SUBJECT_DISPLAY_BODY_MAX_BYTES, _display_body_too_large)
        business_sessions.check_subject_display_body(body)
        return jsonify(business_sessions.set_subject_display(db, client, session_id, body))
