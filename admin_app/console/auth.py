"""Sign-in and sign-out. Repeated failures are slowed, then refused for a while; an unknown
username costs the same time as a wrong password, so the form does not reveal who exists."""
from __future__ import annotations

import time
from datetime import timedelta
from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user
from sqlalchemy import select

from ..canonical import utc_now
from ..identity.admins import _hasher, verify_password
from ..identity.models import Admin
from .security import ConsoleUser, database

bp = Blueprint("console_auth", __name__, url_prefix="/console")

SLOW_AFTER = 3        # failures before each further attempt is slowed
LOCK_AFTER = 5        # failures before the account is refused for a while
LOCK_FOR = timedelta(minutes=15)
_DUMMY_HASH = _hasher.hash("not a real password, only spends the same time")


def _safe_next(target: str | None) -> str:
    """Only same-site paths: no open redirect through ?next=."""
    if target and target.startswith("/console") and not urlsplit(target).netloc and "\\" not in target:
        return target
    return url_for("console_auth.home")


@bp.route("/login", methods=["GET", "POST"])
def login():
    if request.method == "GET":
        if current_user.is_authenticated:
            return redirect(_safe_next(request.args.get("next")))
        return render_template("console/login.html", error=None, next=request.args.get("next", ""))
    username = request.form.get("username", "")[:64]
    password = request.form.get("password", "")[:1024]
    error = "Wrong username or password."
    with database().session() as db:
        admin = db.scalar(select(Admin).where(Admin.username == username).with_for_update())
        now = utc_now()
        if admin is None:
            verify_dummy(password)
        elif admin.locked_until is not None and admin.locked_until > now:
            error = "Too many failed sign-ins. Try again later."
        elif admin.disabled or not verify_password(admin, password):
            admin.failed_logins += 1
            if admin.failed_logins >= LOCK_AFTER:
                admin.locked_until, admin.failed_logins = now + LOCK_FOR, 0
                error = "Too many failed sign-ins. Try again later."
            elif admin.failed_logins > SLOW_AFTER:
                time.sleep(min(admin.failed_logins - SLOW_AFTER, 3))
        else:
            admin.failed_logins, admin.locked_until = 0, None
            session.clear()  # a fresh session (and CSRF token) for the signed-in user
            login_user(ConsoleUser(admin))
            return redirect(_safe_next(request.form.get("next")), code=303)
    return render_template("console/login.html", error=error, next=request.form.get("next", "")), 401


def verify_dummy(password: str) -> None:
    try:
        _hasher.verify(_DUMMY_HASH, password)
    except Exception:  # the outcome is irrelevant: only the time spent matters
        pass


@bp.post("/logout")
def logout():
    logout_user()
    session.clear()
    return redirect(url_for("console_auth.login"), code=303)


@bp.get("/")
def home():
    if not current_user.is_authenticated:
        return redirect(url_for("console_auth.login"))
    if current_user.can("runs:read"):
        return redirect(url_for("console_conversations.index"))
    if current_user.can("approvals:read"):
        return redirect(url_for("console_approvals.queue"))
    return render_template("console/forbidden.html", permission="any console page"), 403
