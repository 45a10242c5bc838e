"""Hub pause controls: Core's `POST /admin/pause` and `POST /admin/resume` (BUSINESS_SIDE.md
§ E.1), and the pause in `GET /admin/api/status`.

The two controls answer as Core does, outside the hub's API envelope: 200 `{"paused": ...}`,
401 `{"error": "unauthorized"}`, 403 `{"error": "当前角色无此权限"}` without `system:write` (the
admin role's), 403 `{"error": "跨站请求被拒绝"}` for a console cookie sent from another site, and
404 `{"error": "not found"}` for any other method. The caller is a personal admin token
(`Authorization: Bearer`), or a signed-in console session from the console's own origin. Core
reads no body; the hub also takes an optional `{"reason": "..."}`, which it records.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, Response, g, jsonify, request
from flask_login import current_user

from .. import limits, surfaces
from ..identity.admins import Actor, authenticate_admin_token
from ..identity.roles import permissions_of
from ..identity.tokens import bearer_from_header
from ..runtime import pause
from .auth import admin_permission_required, database
from .body import read_json_object

bp = Blueprint("hub_pause", __name__)

PERMISSION = "system:write"
NOT_PERMITTED = "当前角色无此权限"
CROSS_SITE = "跨站请求被拒绝"
# Every method but POST is "not found", as on Core (HEAD goes with GET, OPTIONS is answered too).
OTHER_METHODS = ["GET", "PUT", "PATCH", "DELETE", "OPTIONS"]


class _Refused(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


def _core_answer(status: int, body: dict) -> Response:
    response = jsonify(body)
    response.status_code = status
    return response


@bp.after_request
def _json_never_cached(response: Response) -> Response:
    # Outside the API prefixes, so said here; refusals in the envelope (a bad body) too.
    if response.mimetype == "application/json":
        response.headers["Content-Type"] = "application/json; charset=utf-8"
    response.headers["Cache-Control"] = "no-store"
    return response


def _same_origin() -> bool:
    """A cookie-borne change must come from the console's own pages: the browser's Origin (or
    else Referer) names this host, and Sec-Fetch-Site, when sent, says so too."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site != "same-origin":
        return False
    sent = request.headers.get("Origin") or request.headers.get("Referer")
    if not sent:
        return False
    parts = urlsplit(sent)
    return f"{parts.scheme}://{parts.netloc}" == request.host_url.rstrip("/")


def _caller(db) -> tuple[Actor, str, str]:
    """(who, role, channel) of the request, or _Refused."""
    header = request.headers.get("Authorization")
    if header is not None:
        admin = authenticate_admin_token(db, bearer_from_header(header))
        if admin is None:
            raise _Refused(401, "unauthorized")
        return Actor(admin.id, admin.username), admin.role, "api"
    if current_user.is_authenticated:
        if not _same_origin():
            raise _Refused(403, CROSS_SITE)
        return Actor(current_user.admin_id, current_user.username), current_user.role, "console"
    raise _Refused(401, "unauthorized")


@bp.post("/admin/<any(pause, resume):action>")
def control(action: str):
    try:
        with database().session() as db:
            actor, role, channel = _caller(db)
            if PERMISSION not in permissions_of(role):
                raise _Refused(403, NOT_PERMITTED)
            # Read only once the caller may act; `{}`, nothing, or `{"reason": "..."}`.
            reason = pause.body_reason(read_json_object(limits.PAUSE_BODY_MAX_BYTES))
            state = pause.set_paused(db, actor, action == "pause", reason, channel)
    except _Refused as refused:  # rolled back: a refusal records nothing
        return _core_answer(refused.status, {"error": refused.error})
    return _core_answer(200, {"paused": state["paused"]})


@bp.route("/admin/<any(pause, resume):action>", methods=OTHER_METHODS)
def control_elsewhere(action: str):
    return _core_answer(404, {"error": "not found"})


@bp.get(surfaces.ADMIN_API.prefix + "/status")
@admin_permission_required(None)
def status():
    """The hub's state for any signed-in admin: whether it is paused, and who paused it, when
    and why (Core's status also counts its run queue and executors, which this hub has none of)."""
    state = pause.current(g.db)
    return jsonify({"paused": state.paused, "pause": state.as_json()})
