"""/admin/api/agent-tasks: administrators create, list, read and control tasks (TASK_CONTROL.md
§9). Reads need `clients:read`, writes `clients:write`; every other method or sub-path is 404."""
from __future__ import annotations

from flask import Blueprint, Response, g, jsonify, request

from .. import limits, surfaces
from ..errors import ApiError
from ..tasks import admin as tasks
from ..validation import strict_json_loads
from .auth import admin_permission_required
from .body import read_raw

bp = Blueprint("admin_tasks", __name__, url_prefix=surfaces.ADMIN_TASKS)


@bp.after_request
def _no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    return response


def _too_large(max_bytes: int, _observed: int) -> ApiError:
    err = ApiError("TASK_INVALID_INPUT", f"The body exceeds {max_bytes} bytes.")
    err.status = 413  # the one task refusal answered 413, as upstream does
    return err


def _body(max_bytes: int) -> dict:
    raw = read_raw(max_bytes, _too_large)
    try:
        value = strict_json_loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise ApiError("TASK_INVALID_INPUT", "The body must be a JSON object.")
    return value


def _page() -> tuple[int, str | None]:
    return tasks.page_limit(request.args.get("limit")), tasks.cursor(request.args.get("before"))


@bp.get("")
@admin_permission_required("clients:read")
def list_tasks():
    limit, before = _page()
    return jsonify(tasks.list_tasks(g.db, limit, before))


@bp.post("")
@admin_permission_required("clients:write")
def create():
    return jsonify(tasks.create(g.db, g.admin.username, _body(limits.TASK_CREATE_BODY_MAX_BYTES)))


@bp.get("/<task_id>")
@admin_permission_required("clients:read")
def detail(task_id: str):
    limit, before = _page()
    return jsonify(tasks.detail(g.db, task_id, limit, before))


@bp.post("/<task_id>/control")
@admin_permission_required("clients:write")
def control(task_id: str):
    return jsonify(tasks.control(g.db, g.admin.username, task_id, _body(limits.TASK_CONTROL_BODY_MAX_BYTES)))


@bp.route("", methods=["PUT", "PATCH", "DELETE"])
@bp.route("/<task_id>", methods=["POST", "PUT", "PATCH", "DELETE"])
@bp.route("/<task_id>/control", methods=["GET", "PUT", "PATCH", "DELETE"])
@bp.route("/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
@admin_permission_required(None)  # a stranger learns nothing, not even what is not here
def not_here(**_parts):
    raise ApiError("not_found")
