"""/admin/api/runs: Core's admin reads of Client API jobs and their rerun (CLIENT_API_AND_EXECUTOR.md
§F), behind `runs:read` and `runs:write`. Reads of one job (its record, audit, trace) are recorded
in the access log like every trace read. The trace of one job is served by admin_api.job_run_trace,
beside the trace of an agent's tool job it always served."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask import Blueprint, g, jsonify

from .. import limits, surfaces
from ..conversation_audit.availability import probe
from ..errors import ApiError, invalid_field
from ..jobs import rerun as reruns
from ..jobs.models import Job
from ..reads import jobs as job_reads
from ..validation import SAFE_INTEGER_MAX
from .admin_api import recorded
from .auth import admin_permission_required, read_db, replica_reads
from .query import clamped_int_param, query_params

bp = Blueprint("admin_jobs", __name__, url_prefix=surfaces.ADMIN_API.prefix)

CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # no ID holds one (and PostgreSQL text holds no NUL)


@bp.get("/runs")
@admin_permission_required("runs:read")
@replica_reads
def runs():
    params = query_params(optional=("limit", "offset"))
    limit = clamped_int_param(params, "limit", *limits.JOB_LIST_LIMIT)
    offset = clamped_int_param(params, "offset", 0, 0, SAFE_INTEGER_MAX)
    with read_db() as db:
        return jsonify(job_reads.run_list(db, limit, offset))


def _lookup(params: dict[str, str]) -> tuple[str, str]:
    """The one lookup a trace search names: (key, value)."""
    given = [key for key in ("job_id", *job_reads.SEARCH_KEYS[1:]) if key in params]
    if len(given) != 1:
        raise invalid_field("query", "name exactly one of " + ", ".join(job_reads.SEARCH_KEYS))
    key = given[0]
    value = params[key]
    if not value.strip() or len(value) > limits.JOB_SEARCH_VALUE_MAX or CONTROL.search(value):
        raise invalid_field(key, f"must be 1 to {limits.JOB_SEARCH_VALUE_MAX} characters, not all blank, "
                                 "without control characters")
    return key, value


@bp.get("/runs/trace")
@admin_permission_required("runs:read")
@replica_reads
def trace_search():
    """A job's trace by its ID, or the jobs of a request, client, principal or thread: the trace of
    the only match (with `matches`), or with several or `list=1` the matches alone."""
    params = query_params(optional=(*job_reads.SEARCH_KEYS, "limit", "list"))
    key, value = _lookup(params)
    listing = params.get("list", "0")
    if listing not in ("0", "1"):
        raise invalid_field("list", "must be 1 (or 0)")
    limit = clamped_int_param(params, "limit", *limits.JOB_SEARCH_LIMIT)
    body: dict[str, Any]
    with read_db() as db:
        if key == "job_id":
            body = job_reads.any_job_trace(db, value, probe(db))
            target = body["job"]["job_id"]
        else:
            matches = job_reads.search(db, key, value, limit)
            if listing == "1" or len(matches) > 1:
                return jsonify({"matches": matches, "count": len(matches)})
            if not matches:
                raise ApiError("not_found", "No job matches.")
            target = matches[0]["job_id"]
            job = job_reads.find(db, target)
            assert job is not None  # just read
            body = {**job_reads.job_trace(db, job), "matches": matches}
    recorded("job_trace_view", target)
    return jsonify(body)


def _job_read(job_id: str, read: Callable[[Any, Job], Any]):
    """`read` of one job (404 when there is none), recorded as a view of its trace."""
    with read_db() as db:
        job = job_reads.find(db, job_id)
        if job is None:
            raise ApiError("not_found")
        body = read(db, job)
    recorded("job_trace_view", job.id)
    return jsonify(body)


@bp.get("/runs/<job_id>")
@admin_permission_required("runs:read")
@replica_reads
def run(job_id: str):
    return _job_read(job_id, job_reads.admin_record)


@bp.get("/runs/<job_id>/audit")
@admin_permission_required("runs:read")
@replica_reads
def run_audit(job_id: str):
    return _job_read(job_id, job_reads.audit)


@bp.post("/runs/<job_id>/rerun")
@admin_permission_required("runs:write")
def rerun(job_id: str):
    """A finished job back in the queue under the same ID; 400 while it is still in flight."""
    query_params()
    job = reruns.rerun(g.db, job_id, g.admin.username, via="admin_api")
    return jsonify({"ok": True, "job_id": str(job.id), "status": job.status})
