"""Sign-in and sign-out. Repeated failures are slowed, then refused for a while; an unknown
username costs the same time as a wrong password, so the form does not reveal who exists."""
from __future__ import annotations

import re
import time
from datetime import timedelta
from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user
from sqlalchemy import select, text

from ..canonical import utc_now
from ..identity.admins import _hasher, verify_password
from ..identity.models import Admin
from .security import ConsoleUser, database

bp = Blueprint("console_auth", __name__, url_prefix="/console")

SLOW_AFTER = 3        # failures before each further attempt is slowed
LOCK_AFTER = 5        # failures before the account is refused for a while
LOCK_FOR = timedelta(minutes=15)
_DUMMY_HASH = _hasher.hash("not a real password, only spends the same time")


SAFE_NEXT = re.compile(r"^/console(/[A-Za-z0-9._~%/?=&+-]*)?$")


def _safe_next(target: str | None) -> str:
    """Only console paths of plain URL characters: no open redirect, no header tricks via ?next=."""
    if target and SAFE_NEXT.match(target) and not urlsplit(target).netloc:
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
        throttle = _throttle(db, username)
        admin = db.scalar(select(Admin).where(Admin.username == username))
        now = utc_now()
        if throttle.locked_until is not None and throttle.locked_until > now:
            verify_dummy(password)
            error = "Too many failed sign-ins. Try again later."
        elif admin is None or admin.disabled or not verify_password(admin, password):
            if admin is None:
                verify_dummy(password)  # the same time as checking a real password
            failures = throttle.failed_logins + 1
            locked = now + LOCK_FOR if failures >= LOCK_AFTER else None
            _record(db, username, 0 if locked else failures, locked)
            if locked:
                error = "Too many failed sign-ins. Try again later."
            elif failures > SLOW_AFTER:
                time.sleep(min(failures - SLOW_AFTER, 3))
        else:
            _record(db, username, 0, None)
            session.clear()  # a fresh session (and CSRF token) for the signed-in user
            login_user(ConsoleUser(admin))
            return redirect(_safe_next(request.form.get("next")), code=303)
    return render_template("console/login.html", error=error, next=request.form.get("next", "")), 401


def _throttle(db, username: str):
    """This username's failure count and lock, locked for the rest of the sign-in attempt."""
    db.execute(text("INSERT INTO bz_login_throttle (username) VALUES (:u) ON CONFLICT DO NOTHING"),
               {"u": username})
    return db.execute(text("SELECT failed_logins, locked_until FROM bz_login_throttle "
                           "WHERE username = :u FOR UPDATE"), {"u": username}).one()


def _record(db, username: str, failures: int, locked_until) -> None:
    db.execute(text("UPDATE bz_login_throttle SET failed_logins = :f, locked_until = :l, updated_at = now() "
                    "WHERE username = :u"), {"f": failures, "l": locked_until, "u": username})


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
