"""Admin lifecycle in the console, for holders of admins:manage: list, create, disable and
enable, change role, reset password, list and revoke API tokens, end sessions, and the record of
these changes. /console/account is every signed-in admin's own: password change and "sign out
everywhere". Every change goes through identity.admins, which records it."""
from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, session, url_for
from flask_login import current_user, logout_user

from ..errors import ApiError
from ..identity import admins, console_sessions
from ..identity.admins import Actor, HashingBusy
from ..identity.roles import ROLES
from .security import database, login_required, permission_required, timeouts

bp = Blueprint("console_admins", __name__, url_prefix="/console")

BUSY = "The hub is busy hashing other passwords. Try again in a moment."


def _actor() -> Actor:
    return Actor(current_user.admin_id, current_user.username)


def _run(change, done: str, back: str):
    """Run one change in its own transaction; refusals roll back and are shown, not raised."""
    try:
        with database().session() as db:
            change(db)
        flash(done, "ok")
    except ApiError as err:
        flash(err.message, "error")
    except HashingBusy:
        flash(BUSY, "error")
    return redirect(back, code=303)


@bp.get("/admins/")
@permission_required("admins:manage")
def index():
    with database().session() as db:
        rows = admins.list_admins(db)
        events = admins.recent_events(db)
    return render_template("console/admins.html", admins=rows, events=events, roles=ROLES)


@bp.post("/admins/")
@permission_required("admins:manage")
def create():
    username = request.form.get("username", "")
    return _run(lambda db: admins.create_admin(db, username, request.form.get("role", ""),
                                               request.form.get("password", ""), actor=_actor()),
                "Admin created.", url_for(".index"))


@bp.get("/admins/<username>")
@permission_required("admins:manage")
def detail(username: str):
    with database().session() as db:
        found = [a for a in admins.list_admins(db) if a["username"] == username]
        if not found:
            return render_template("console/forbidden.html", permission="an existing admin"), 404
        token_rows = admins.list_tokens(db, username)
    return render_template("console/admin.html", admin=found[0], tokens=token_rows, roles=ROLES,
                           own=username == current_user.username)


def _back(username: str) -> str:
    return url_for(".detail", username=username)


@bp.post("/admins/<username>/disable")
@permission_required("admins:manage")
def disable(username: str):
    return _run(lambda db: admins.set_disabled(db, _actor(), username, True), "Disabled; their sessions ended.",
                _back(username))


@bp.post("/admins/<username>/enable")
@permission_required("admins:manage")
def enable(username: str):
    return _run(lambda db: admins.set_disabled(db, _actor(), username, False), "Enabled.", _back(username))


@bp.post("/admins/<username>/role")
@permission_required("admins:manage")
def role(username: str):
    return _run(lambda db: admins.set_role(db, _actor(), username, request.form.get("role", "")),
                "Role changed.", _back(username))


@bp.post("/admins/<username>/password")
@permission_required("admins:manage")
def reset_password(username: str):
    return _run(lambda db: admins.reset_password(db, _actor(), username, request.form.get("password", "")),
                "Password reset; their sessions ended.", _back(username))


@bp.post("/admins/<username>/tokens/revoke")
@permission_required("admins:manage")
def revoke_tokens(username: str):
    raw = request.form.get("token_id", "")
    if raw and not raw.isdigit():
        flash("No such token.", "error")
        return redirect(_back(username), code=303)
    token_id = int(raw) if raw else None
    return _run(lambda db: admins.revoke_tokens(db, _actor(), username, token_id), "Revoked.", _back(username))


@bp.post("/admins/<username>/sessions/end")
@permission_required("admins:manage")
def end_sessions(username: str):
    # Ending one's own sessions here keeps the one in use; "sign out everywhere" ends it too.
    keep = current_user.session_hash if username == current_user.username else None
    return _run(lambda db: admins.end_sessions(db, _actor(), username, keep_hash=keep), "Sessions ended.",
                _back(username))


# ---------------------------------------------------------------- one's own account

@bp.get("/account")
@login_required
def account():
    with database().session() as db:
        sessions = console_sessions.open_sessions(db, current_user.admin_id, timeouts())
    return render_template("console/account.html", sessions=sessions)


@bp.post("/account/password")
@login_required
def change_password():
    new = request.form.get("new_password", "")
    if new != request.form.get("confirm_password", ""):
        flash("The two new passwords differ.", "error")
        return redirect(url_for(".account"), code=303)
    return _run(lambda db: admins.change_own_password(db, current_user.admin_id,
                                                      request.form.get("current_password", ""), new,
                                                      keep_hash=current_user.session_hash),
                "Password changed; your other sessions ended.", url_for(".account"))


@bp.post("/account/sign-out-everywhere")
@login_required
def sign_out_everywhere():
    with database().session() as db:
        admins.end_sessions(db, _actor(), current_user.username, reason="signed_out_everywhere")
    logout_user()
    session.clear()
    return redirect(url_for("console_auth.login"), code=303)
