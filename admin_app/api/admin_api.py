"""/admin/api: the JSON face of the console, for admins' personal API tokens."""
from __future__ import annotations

import uuid

from flask import Blueprint, g, jsonify

from ..conversation_audit import reads
from ..conversation_audit.availability import probe, require_archives
from ..errors import ApiError
from ..identity.roles import permissions_of
from ..runtime.traces import run_trace
from .auth import admin_permission_required
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
