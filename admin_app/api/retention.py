"""Retention, legal holds and erasure requests (issue 33): reads need `audit:read` (auditors and
admins), changes `config:write` (admins). Bodies are strict (unknown fields refused); every
change is in the configuration-change log with what changed (retention.audit)."""
from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify, request

from .. import limits, surfaces
from ..retention import erasure, holds, policies, purge
from ..retention.audit import Door
from .auth import admin_permission_required
from .body import read_empty_object, read_json_object
from .config_changes import recorded_path

bp = Blueprint("retention", __name__, url_prefix=surfaces.ADMIN_API.prefix)


def _door() -> Door:
    return Door(g.admin.username, request.method, recorded_path(request.path) or request.path)


def _body() -> dict:
    return read_json_object(limits.ADMIN_BODY_MAX_BYTES)


def _limit() -> int:
    """`limit`: a whole number brought into bounds; anything else is the default (never refused)."""
    default, low, high = limits.RETENTION_LIST_LIMIT
    values = request.args.getlist("limit")
    raw = values[0].strip() if len(values) == 1 else ""
    number = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else default
    return min(max(number, low), high)


@bp.get("/retention/policies")
@admin_permission_required("audit:read")
def list_policies():
    return jsonify(policies.list_policies(g.db))


@bp.put("/retention/policies")
@admin_permission_required("config:write")
def set_policy():
    app, route, days = policies.parse(_body())
    return jsonify(policies.set_policy(g.db, _door(), app, route, days))


@bp.delete("/retention/policies/<policy_id>")
@admin_permission_required("config:write")
def remove_policy(policy_id: str):
    return jsonify(policies.remove_policy_by_id(g.db, _door(), policies.parse_policy_id(policy_id)))


@bp.get("/retention/runs")
@admin_permission_required("audit:read")
def list_runs():
    return jsonify(purge.list_runs(g.db, _limit()))


@bp.post("/retention/runs")
@admin_permission_required("config:write")
def run_purge():
    read_empty_object("a retention run", limits.ADMIN_BODY_MAX_BYTES)
    return jsonify(purge.run(current_app.extensions["bailing"].db, g.admin.username))


@bp.get("/legal-holds")
@admin_permission_required("audit:read")
def list_holds():
    return jsonify(holds.list_holds(g.db, _limit()))


@bp.post("/legal-holds")
@admin_permission_required("config:write")
def place_hold():
    scope, value, reason = holds.parse_place(_body())
    return jsonify(holds.place(g.db, _door(), scope, value, reason))


@bp.post("/legal-holds/<hold_id>/release")
@admin_permission_required("config:write")
def release_hold(hold_id: str):
    number = holds.parse_hold_id(hold_id)
    return jsonify(holds.release(g.db, _door(), number, holds.parse_release(_body())))


@bp.get("/erasure-requests")
@admin_permission_required("audit:read")
def list_erasures():
    return jsonify(erasure.list_requests(g.db, _limit()))


@bp.post("/erasure-requests")
@admin_permission_required("config:write")
def request_erasure():
    principal, reason = erasure.parse(_body())
    return jsonify(erasure.request_erasure(g.db, _door(), principal, reason))
