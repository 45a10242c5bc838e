"""/admin/api: the JSON face of the console, for admins' personal API tokens."""
from __future__ import annotations

import uuid

from flask import Blueprint, Response, g, jsonify

from ..conversation_audit import reads
from ..conversation_audit.availability import probe, require_archives
from ..errors import ApiError
from ..identity.roles import permissions_of
from ..invocations import approvals
from ..invocations.traces import job_trace
from ..runtime.traces import run_trace
from .auth import admin_permission_required
from .body import read_json_object
from .query import int_param, query_params

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")


@bp.get("/me")
@admin_permission_required(None)
def me():
    admin = g.admin
    return jsonify({"username": admin.username, "role": admin.role,
                    "permissions": sorted(permissions_of(admin.role))})


@bp.get("/conversation-audits")
@admin_permission_required("runs:read")
def conversation_audits():
    require_archives(g.db)
    params = query_params(optional=("limit", "offset"))
    limit = int_param(params, "limit", 50, 1, reads.LIST_MAX)
    offset = int_param(params, "offset", 0, 0, 10**9)
    return jsonify(reads.list_archives(g.db, limit, offset))


@bp.get("/conversation-audits/<archive_id>")
@admin_permission_required("runs:read")
def conversation_audit(archive_id: str):
    available = require_archives(g.db)
    params = query_params(optional=("after_sequence", "limit"))
    after = int_param(params, "after_sequence", 0, 0, 2**31 - 1)
    limit = int_param(params, "limit", 100, 1, reads.EVENTS_MAX)
    return jsonify(reads.archive_detail(g.db, archive_id, after, limit, available))


@bp.get("/agent-runs/<run_id>")
@admin_permission_required("runs:read")
def agent_run(run_id: str):
    try:
        rid = uuid.UUID(run_id)
    except ValueError:
        raise ApiError(404, "run_not_found", "No such run.") from None
    return jsonify(run_trace(g.db, rid, probe(g.db)))


@bp.get("/tool-jobs/<job_id>")
@admin_permission_required("runs:read")
def tool_job(job_id: str):
    return jsonify(job_trace(g.db, job_id, probe(g.db)))


@bp.get("/tool-approvals")
@admin_permission_required("approvals:read")
def tool_approvals():
    params = query_params(optional=("status", "limit", "offset"))
    status = params.get("status", "pending")
    if status not in ("pending", "decided", "all"):
        raise ApiError(400, "invalid_request", "status must be pending, decided or all.",
                       problems=[{"path": "status", "message": "must be pending, decided or all"}])
    limit = int_param(params, "limit", 50, 1, 100)
    offset = int_param(params, "offset", 0, 0, 10**9)
    return jsonify(approvals.list_approvals(g.db, status, limit, offset))


@bp.get("/tool-approvals/<approval_id>")
@admin_permission_required("approvals:read")
def tool_approval(approval_id: str):
    return jsonify(approvals.item_view(*approvals.get(g.db, approval_id)))


@bp.get("/tool-approvals/<approval_id>/snapshot")
@admin_permission_required("approvals:read")
def tool_approval_snapshot(approval_id: str):
    """The exact bytes that were frozen and hashed, read on demand (never in lists)."""
    params = query_params(optional=("download",))
    approval = approvals.snapshot(g.db, approval_id)
    response = Response(approval.snapshot.encode("utf-8"), mimetype="application/json")
    response.headers["X-Bailing-Args-Hash"] = approval.args_hash
    if params.get("download") == "1":
        response.headers["Content-Disposition"] = f'attachment; filename="approval-{approval.id}.json"'
    return response


@bp.post("/tool-approvals/<approval_id>/<decision>")
@admin_permission_required("approvals:decide")
def decide_tool_approval(approval_id: str, decision: str):
    if decision not in ("approve", "deny"):
        raise ApiError(404, "not_found", "Not found.")
    body = read_json_object(64 * 1024)
    outcome = "approved" if decision == "approve" else "denied"
    return jsonify(approvals.decide(g.db, g.admin, approval_id, outcome, body))
