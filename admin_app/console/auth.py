"""Sign-in and sign-out. Failures slow further attempts (see sign_in_throttle) but never lock a
real user out; an unknown username costs the same time as a wrong password, so the form does not
reveal who exists. Each sign-in starts a new server-side session; signing out ends it there."""
from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user
from sqlalchemy import select

from ..identity import console_sessions, tokens
from ..identity.admins import (BUSY_RETRY_AFTER_SECONDS, HashingBusy, _hasher, hashing_slot,
                               verify_password)
from ..identity.models import Admin
from . import sign_in_throttle as throttle
from .security import ConsoleUser, database, timeouts

bp = Blueprint("console_auth", __name__, url_prefix="/console")

GENERIC = "Wrong username or password."
WAIT = "Too many failed sign-ins from your address. Try again in {seconds} seconds."
BUSY = "The hub is busy signing other people in. Try again in a moment."
_DUMMY_HASH = _hasher.hash("not a real password, only spends the same time")

SAFE_NEXT = re.compile(r"/console(/[A-Za-z0-9._~%/?=&+-]*)?")


def _safe_next(target: str | None) -> str:
    """Only console paths of plain URL characters: no open redirect, no header tricks via ?next=."""
    if target and SAFE_NEXT.fullmatch(target) and not urlsplit(target).netloc:
        return target
    return url_for("console_auth.home")


def _page(error: str | None, status: int, retry_after: int | None = None):
    response = render_template("console/login.html", error=error, next=request.form.get("next", ""))
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return response, status, headers


@bp.route("/login", methods=["GET", "POST"])
def login():
    if request.method == "GET":
        if current_user.is_authenticated:
            return redirect(_safe_next(request.args.get("next")))
        return render_template("console/login.html", error=None, next=request.args.get("next", ""))
    username = request.form.get("username", "")[:64]
    password = request.form.get("password", "")[:1024]
    address = throttle.address_key(request.remote_addr)

    # Read what the attempt needs, then let the connection go: the delay and the hash take time.
    with database().session() as db:
        admin = db.execute(select(Admin.id, Admin.password_hash)
                           .where(Admin.username == username)).first()
        account = throttle.account_key(admin.id if admin else None, username)
        counts = throttle.counts(db, account, address)
    wait = throttle.address_wait(counts)
    if wait:
        return _page(WAIT.format(seconds=wait), 429, retry_after=wait)
    time.sleep(throttle.account_delay(counts.account))
    try:
        with hashing_slot():
            right = verify_password(admin.password_hash if admin else _DUMMY_HASH, password)
    except HashingBusy:
        return _page(BUSY, 429, retry_after=BUSY_RETRY_AFTER_SECONDS)

    with database().session() as db:
        current = db.get(Admin, admin.id) if admin else None
        if not (right and current is not None and not current.disabled):
            throttle.failed(db, account, address)
            return _page(GENERIC, 401)
        throttle.succeeded(db, account, address)
        session.clear()  # a fresh cookie session (and CSRF token) for the signed-in user
        session_id = console_sessions.start(db, current.id, timeouts())
        user = ConsoleUser(current, session_id, tokens.hash_token(session_id))
    login_user(user)
    return redirect(_safe_next(request.form.get("next")), code=303)


@bp.post("/logout")
def logout():
    if current_user.is_authenticated:
        with database().session() as db:
            console_sessions.end(db, current_user.get_id(), "signed_out")
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
    if current_user.can("admins:manage"):
        return redirect(url_for("console_admins.index"))
    return render_template("console/forbidden.html", permission="any console page"), 403
