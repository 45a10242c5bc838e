"""Executors in the admin API (CLIENT_API_AND_EXECUTOR.md §B.1, §B.2, §F), Core's paths and shapes:

    GET    /admin/api/executors                  runs:read   [{executor_id, targets, capabilities, last_seen_at,
                                                                online}]
    DELETE /admin/api/executors/<executor_id>    runs:write  {ok: true}
    GET    /admin/api/executor-tokens            runs:read   [{name, token (masked), allowed_targets, ...}]
    POST   /admin/api/executor-tokens            runs:write  {ok, name, token}: create, update, rotate
    DELETE /admin/api/executor-tokens/<name>     runs:write  {ok: true}
    GET    /admin/api/targets                    runs:read   [{name, kind, enabled, description, ...}]
    GET    /admin/api/dispatch-status            runs:read   {now, summary, by_target, leases, blocked_threads}

Refusals past the bearer check are Core's (`{"error": "<text>"}`, 404 `{"error": "not found"}`);
the bearer check answers as on every admin API route. Writes are recorded in the configuration-
change log by the bearer check's hook (method and path: a token name, never a token).

Differences from Core: a token is in a reply only when it was issued by that request (the hub
keeps only hashes, so an update without `rotate_token` answers `token: null`, and Core's
`GET /executor-tokens/<name>/token` reveal does not exist); targets come from the configuration
file (`executor_targets`), so /targets is read-only here."""
from __future__ import annotations

from flask import Blueprint, Response, g, jsonify

from .. import limits, surfaces
from ..errors import ApiError, error_response
from ..jobs import dispatch_status, executor_tokens
from ..jobs.answers import CoreError, refuse
from .auth import admin_permission_required
from .body import read_json_object

bp = Blueprint("admin_executors", __name__, url_prefix=surfaces.ADMIN_API.prefix)

BEARER_CODES = ("unauthorized", "forbidden")


@bp.errorhandler(ApiError)
def _refused(err: ApiError) -> Response:
    if isinstance(err, CoreError) or err.code in BEARER_CODES:
        return error_response(err)
    return error_response(refuse(err.status, "not found" if err.status == 404 else err.message))


@bp.get("/executors")
@admin_permission_required("runs:read")
def executors() -> Response:
    return jsonify(executor_tokens.list_executors(g.db))


@bp.delete("/executors/<executor_id>")
@admin_permission_required("runs:write")
def forget_executor(executor_id: str) -> Response:
    return jsonify(executor_tokens.forget_executor(g.db, executor_id))


@bp.get("/executor-tokens")
@admin_permission_required("runs:read")
def tokens() -> Response:
    return jsonify(executor_tokens.list_tokens(g.db))


@bp.post("/executor-tokens")
@admin_permission_required("runs:write")
def upsert_token() -> Response:
    body = read_json_object(limits.EXECUTOR_TOKEN_BODY_MAX_BYTES)
    return jsonify(executor_tokens.upsert_body(g.db, body))


@bp.delete("/executor-tokens/<name>")
@admin_permission_required("runs:write")
def revoke_token(name: str) -> Response:
    executor_tokens.revoke(g.db, name)
    return jsonify({"ok": True})


@bp.get("/targets")
@admin_permission_required("runs:read")
def targets() -> Response:
    return jsonify(dispatch_status.targets(g.db))


@bp.get("/dispatch-status")
@admin_permission_required("runs:read")
def status() -> Response:
    return jsonify(dispatch_status.dispatch_status(g.db))
