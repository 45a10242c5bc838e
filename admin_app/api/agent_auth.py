"""/agent-auth/v1: browser authorization of a local agent (PKCE), token exchange and refresh,
session inspection and revocation."""
from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify, request

from ..errors import invalid_request, unauthorized
from ..identity import agent_auth
from ..identity.clients import authenticate_client_token
from ..identity.sessions import authenticate_access, revoke_by_refresh_token, revoke_session, session_view
from ..identity.tokens import bearer_from_header
from ..validation import Checker
from .auth import agent_session_required, database
from .body import read_empty_object, read_json_object

bp = Blueprint("agent_auth", __name__, url_prefix="/agent-auth/v1")


@bp.get("/session")
@agent_session_required
def current_session():
    return jsonify(session_view(g.agent_session))


@bp.post("/revoke")
def revoke():
    """Revoke with the session's own access bearer and `{}`, or with a
    `{client_app_id, refresh_token}` body, which works whatever bearer is sent: it is the way out
    for an agent whose access token has already expired."""
    body = read_json_object(current_app.extensions["bailing"].settings.json_body_max_bytes)
    with database().session() as db:
        if not body:
            session = authenticate_access(db, bearer_from_header(request.headers.get("Authorization")))
            if session is None:
                raise unauthorized()
            return jsonify(revoke_session(db, str(session.id)))
        checker = Checker()
        checker.obj(body, "", required=("client_app_id", "refresh_token"))
        if "client_app_id" in body:
            checker.resource_key(body["client_app_id"], "client_app_id")
        if "refresh_token" in body:
            checker.string(body["refresh_token"], "refresh_token", min_len=1, max_len=256)
        if checker.problems:
            raise invalid_request(checker)
        return jsonify(revoke_by_refresh_token(db, body["client_app_id"], body["refresh_token"]))


# ------------------------------------------------------------------ browser authorization

AUTH_BODY_MAX = 64 * 1024


def _client_from_token(db):
    client = authenticate_client_token(db, bearer_from_header(request.headers.get("Authorization")))
    if client is None:
        raise unauthorized()
    return client


@bp.post("/authorizations")
def create_authorization():
    body = read_json_object(AUTH_BODY_MAX)
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
        body = read_json_object(AUTH_BODY_MAX)
        return jsonify(agent_auth.approve(db, client, authorization_id, body))


@bp.post("/authorizations/<authorization_id>/deny")
def deny_authorization(authorization_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        read_empty_object("deny", AUTH_BODY_MAX)
        return jsonify(agent_auth.deny(db, client, authorization_id))


@bp.post("/token")
def token():
    body = read_json_object(AUTH_BODY_MAX)
    settings = current_app.extensions["bailing"].settings
    with database().session() as db:
        return jsonify(agent_auth.exchange(db, body, settings.access_token_ttl, settings.refresh_token_ttl))


@bp.post("/sessions/<session_id>/revoke")
def revoke_by_client(session_id: str):
    with database().session() as db:
        client = _client_from_token(db)
        read_empty_object("revoke", AUTH_BODY_MAX)
        return jsonify(agent_auth.revoke_for_client(db, client, session_id))
