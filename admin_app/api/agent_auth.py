"""/agent-auth/v1: how a local agent holds, inspects and gives up its Agent Session."""
from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify, request

from ..errors import invalid_request, unauthorized
from ..identity.sessions import authenticate_access, revoke_by_refresh_token, revoke_session, session_view
from ..identity.tokens import bearer_from_header
from ..validation import Checker
from .auth import agent_session_required, database
from .body import read_json_object

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
