"""/admin/api: the JSON face of the console, for admins' personal API tokens."""
from __future__ import annotations

import uuid
from functools import wraps

from flask import Blueprint, Response, g, jsonify, request

from .. import limits, surfaces
from ..conversation_audit import archives
from ..conversation_audit.availability import probe, require_archives
from ..errors import ApiError, invalid_field
from ..identity import access_log
from ..identity.roles import permissions_of
from ..identity.tokens import bearer_from_header
from ..invocations import approvals
from ..reads import approvals as approval_reads
from ..reads import archives as archive_reads
from ..reads.jobs import any_job_trace
from ..reads.traces import agent_client_trace, job_trace, run_trace
from ..validation import SAFE_INTEGER_MAX
from .auth import admin_permission_required, agent_bearer_is_valid, read_db, replica_reads
from .body import read_json_object
from .query import clamped_int_param, int_param, query_params

bp = Blueprint("admin_api", __name__, url_prefix=surfaces.ADMIN_API.prefix)


def recorded(action: str, target, sequences: tuple[int, int] | None = None) -> None:
    """A sensitive read, in the access log with the admin and the token that made it; written in
    the request's transaction (`g.db`, on the primary, also when the read itself came from the
    replica), so it commits with the answer and a refusal records nothing."""
    bearer = bearer_from_header(request.headers.get("Authorization"))
    assert bearer is not None  # admin_permission_required authenticated this very header
    access_log.record_api_read(g.db, g.admin.id, g.admin.username, bearer, action, str(target),
                               sequences=sequences)


@bp.get("/me")
@admin_permission_required(None)
def me():
    admin = g.admin
    return jsonify({"username": admin.username, "role": admin.role,
                    "permissions": sorted(permissions_of(admin.role))})


def audit_reader(view):
    """`runs:read`, and, as Core answers, 403 `forbidden` (not 401) for a live agent bearer: it is
    a known caller that may not read transcripts."""
    guarded = admin_permission_required("runs:read")(view)

    @wraps(view)
    def wrapper(*args, **kwargs):
        try:
            return guarded(*args, **kwargs)
        except ApiError as err:
            if err.status == 401 and agent_bearer_is_valid():
                raise ApiError("forbidden", "This requires the runs:read permission.") from None
            raise

    return wrapper


@bp.get("/conversation-audits")
@audit_reader
@replica_reads
def conversation_audits():
    with read_db() as db:
        require_archives(db)
        params = query_params(optional=("limit", "offset"))
        limit = clamped_int_param(params, "limit", *archive_reads.LIST_LIMIT)
        offset = clamped_int_param(params, "offset", 0, 0, SAFE_INTEGER_MAX)
        return jsonify(archive_reads.list_archives(db, limit, offset))


@bp.get("/conversation-audits/<archive_id>")
@audit_reader
@replica_reads
def conversation_audit(archive_id: str):
    archive = archives.parse_archive_id(archive_id)
    with read_db() as db:
        available = require_archives(db)
        params = query_params(optional=("after_sequence", "limit"))
        after = clamped_int_param(params, "after_sequence", 0, 0, SAFE_INTEGER_MAX)
        limit = clamped_int_param(params, "limit", *archive_reads.EVENTS_LIMIT)
        detail = archive_reads.archive_detail(db, archive, after, limit, available)
    events = detail["events"]  # each page read is a read of the transcript, and names its range
    recorded("transcript_view", archive,
             (events[0]["sequence"], events[-1]["sequence"]) if events else None)
    return jsonify(detail)


@bp.route("/conversation-audits", methods=["POST", "PUT", "PATCH", "DELETE"])
@bp.route("/conversation-audits/<path:_rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
@audit_reader
def conversation_audits_elsewhere(_rest: str = ""):
    """Archives are only read, and only there."""
    raise archives.unknown_endpoint()


@bp.get("/agent-runs/<run_id>")
@admin_permission_required("runs:read")
@replica_reads
def agent_run(run_id: str):
    try:
        rid = uuid.UUID(run_id)
    except ValueError:
        raise ApiError("run_not_found") from None
    with read_db() as db:
        trace = run_trace(db, rid, probe(db))
    recorded("run_trace_view", rid)
    return jsonify(trace)


@bp.get("/tool-jobs/<job_id>")
@admin_permission_required("runs:read")
@replica_reads
def tool_job(job_id: str):
    with read_db() as db:
        trace = job_trace(db, job_id, probe(db))
    recorded("job_trace_view", uuid.UUID(job_id))
    return jsonify(trace)


@bp.get("/threads/<thread_id>/agent-runs/<run_id>/trace")
@admin_permission_required("runs:read")
@replica_reads
def agent_run_trace(thread_id: str, run_id: str):
    with read_db() as db:
        trace = agent_client_trace(db, thread_id, run_id, probe(db))
    recorded("run_trace_view", uuid.UUID(run_id))
    return jsonify(trace)


@bp.get("/runs/<job_id>/trace")
@admin_permission_required("runs:read")
@replica_reads
def job_run_trace(job_id: str):
    """An agent's tool job (an invocation) as before; else a Client API job (reads/jobs.py)."""
    with read_db() as db:
        trace = any_job_trace(db, job_id, probe(db))
    recorded("job_trace_view", uuid.UUID(job_id))
    return jsonify(trace)


@bp.get("/tool-approvals")
@admin_permission_required("approvals:read")
def tool_approvals():
    params = query_params(optional=("status", "limit", "offset"))
    status = params.get("status", "pending")
    if status not in approval_reads.STATUS_FILTERS:
        allowed = ", ".join(approval_reads.STATUS_FILTERS)
        raise invalid_field("status", f"must be one of {allowed}")
    limit = int_param(params, "limit", *limits.APPROVALS_LIMIT)
    offset = int_param(params, "offset", 0, 0, limits.APPROVALS_OFFSET_MAX)
    return jsonify(approval_reads.list_approvals(g.db, status, limit, offset))


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
    recorded("snapshot_download" if params.get("download") == "1" else "snapshot_view", approval.id)
    response = Response(approval.snapshot.encode("utf-8"), mimetype="application/json")
    response.headers["X-Bailing-Args-Hash"] = approval.args_hash
    if params.get("download") == "1":
        response.headers["Content-Disposition"] = f'attachment; filename="approval-{approval.id}.json"'
    return response


@bp.post("/tool-approvals/<approval_id>/<decision>")
@admin_permission_required("approvals:decide")
def decide_tool_approval(approval_id: str, decision: str):
    if decision not in ("approve", "deny"):
        raise ApiError("not_found")
    body = read_json_object(limits.ADMIN_BODY_MAX_BYTES)
    outcome = "approved" if decision == "approve" else "denied"
    return jsonify(approvals.decide(g.db, g.admin, approval_id, outcome, body))
