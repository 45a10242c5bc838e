"""Records (audit:read): retention policies, legal holds, erasure requests and the latest purge
runs. Admins (config:write) set and remove policies, place and release holds, request erasures
and run the purge from here; each change goes through the same service as the admin API and the
command line, recorded in the configuration-change log under the API path it matches. Reasons
and values are an operator's text: shown escaped."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Flask, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from .. import limits
from ..errors import ApiError
from ..retention import erasure, holds, policies, purge
from ..retention.audit import Door
from .security import database, permission_required

bp = Blueprint("console_retention", __name__, url_prefix="/console/records")

READ, WRITE = "audit:read", "config:write"


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    app.jinja_env.filters["redaction_basis"] = basis_label


def basis_label(redaction: dict[str, Any]) -> str:
    """What a redaction was made under, as a reader says it: "retention policy #3 (run #12)" or
    "erasure request #5"."""
    ref = str(redaction.get("basis_ref") or "")
    if redaction.get("basis") == "erasure":
        return f"erasure request #{ref}"
    parts = dict(part.split(":", 1) for part in ref.split("/") if ":" in part)
    if "policy" in parts and "run" in parts:
        return f"retention policy #{parts['policy']} (run #{parts['run']})"
    return f"retention ({ref})"


@bp.get("/")
@permission_required(READ)
def index() -> ResponseReturnValue:
    most = limits.RETENTION_LIST_LIMIT[0]
    with database().session() as db:
        found = {"policies": policies.list_policies(db), "holds": holds.list_holds(db, most),
                 "erasures": erasure.list_requests(db, most), "runs": purge.list_runs(db, 20)}
    return render_template("console/records.html", **found, reason_max=limits.RETENTION_REASON_MAX,
                           value_max=limits.LEGAL_HOLD_VALUE_MAX, keep_days=limits.RETENTION_KEEP_DAYS,
                           can_write=current_user.can(WRITE))


def _door(path: str) -> Door:
    return Door(current_user.username, "POST", path)


def _act(change: Callable[[], str]) -> ResponseReturnValue:
    """Run one change; its refusal (a bad field, a hold that applies...) is shown, not raised."""
    try:
        flash(change(), "ok")
    except ApiError as err:
        flash(err.message, "error")
    return redirect(url_for(".index"), code=303)


@bp.post("/policies")
@permission_required(WRITE)
def set_policy() -> ResponseReturnValue:
    form = request.form

    def change() -> str:
        raw = form.get("keep_days", "").strip()
        days: Any = None if form.get("keep") == "keep" else (int(raw) if raw.isdigit() and len(raw) <= 9 else raw)
        app, route, keep_days = policies.parse({"client_app_id": form.get("client_app_id", "").strip(),
                                                "route_key": form.get("route_key", "").strip() or "*",
                                                "keep_days": days})
        with database().session() as db:
            policies.set_policy(db, _door("retention/policies"), app, route, keep_days)
        return f"Retention policy of {app}/{route} saved."

    return _act(change)


@bp.post("/policies/<policy_id>/remove")
@permission_required(WRITE)
def remove_policy(policy_id: str) -> ResponseReturnValue:
    def change() -> str:
        number = policies.parse_policy_id(policy_id)
        with database().session() as db:
            gone = policies.remove_policy_by_id(db, _door(f"retention/policies/{number}"), number)
        return f"Retention policy of {gone['client_app_id']}/{gone['route_key']} removed."

    return _act(change)


@bp.post("/runs")
@permission_required(WRITE)
def run_purge() -> ResponseReturnValue:
    def change() -> str:
        done = purge.run(database(), current_user.username)
        assert done is not None
        return (f"Retention run #{done['id']}: {done['redacted']} messages redacted in {done['archives']} "
                f"archives; {done['held']} held archives skipped.")

    return _act(change)


@bp.post("/holds")
@permission_required(WRITE)
def place_hold() -> ResponseReturnValue:
    def change() -> str:
        scope, value, reason = holds.parse_place({"scope": request.form.get("scope", ""),
                                                  "value": request.form.get("value", "").strip(),
                                                  "reason": request.form.get("reason", "")})
        with database().session() as db:
            placed = holds.place(db, _door("legal-holds"), scope, value, reason)
        return f"Legal hold #{placed['id']} placed."

    return _act(change)


@bp.post("/holds/<hold_id>/release")
@permission_required(WRITE)
def release_hold(hold_id: str) -> ResponseReturnValue:
    def change() -> str:
        number = holds.parse_hold_id(hold_id)
        reason = holds.parse_release({"reason": request.form.get("reason", "")})
        with database().session() as db:
            holds.release(db, _door(f"legal-holds/{number}/release"), number, reason)
        return f"Legal hold #{number} released."

    return _act(change)


@bp.post("/erasures")
@permission_required(WRITE)
def request_erasure() -> ResponseReturnValue:
    def change() -> str:
        principal, reason = erasure.parse({"principal_id": request.form.get("principal_id", "").strip(),
                                           "reason": request.form.get("reason", "")})
        with database().session() as db:
            done = erasure.request_erasure(db, _door("erasure-requests"), principal, reason)
        return f"Erasure request #{done['id']}: {done['redacted']} messages erased in {done['archives']} archives."

    return _act(change)
