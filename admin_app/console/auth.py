"""Sign-in and sign-out. Failures slow further attempts (see identity.sign_in_throttle) but never lock a
real user out; an unknown username costs the same time as a wrong password, so the form does not
reveal who exists. Each sign-in starts a new server-side session; signing out ends it there."""
from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, session, url_for
from flask_login import current_user, login_user, logout_user

from ..conversation_audit.availability import probe
from ..identity import console_sessions, tokens
from ..identity import sign_in_throttle as throttle
from ..identity.admins import BUSY_RETRY_AFTER_SECONDS, HashingBusy, hashing_slot, verify_password
from .security import ConsoleUser, database, timeouts

bp = Blueprint("console_auth", __name__, url_prefix="/console")

GENERIC = "Wrong username or password."
WAIT = "Too many failed sign-ins from your address. Try again in {seconds} seconds."
BUSY = "The hub is busy signing other people in. Try again in a moment."

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

    # Read what the attempt needs, then let the connection go: the delay and the hash take time.
    with database().session() as db:
        attempt = throttle.attempt(db, username, request.remote_addr)
    wait = throttle.address_wait(attempt.counts)
    if wait:
        return _page(WAIT.format(seconds=wait), 429, retry_after=wait)
    time.sleep(throttle.account_delay(attempt.counts.account))
    try:
        with hashing_slot():
            right = verify_password(attempt.password_hash, password)
    except HashingBusy:
        return _page(BUSY, 429, retry_after=BUSY_RETRY_AFTER_SECONDS)

    with database().session() as db:
        current = throttle.admin_to_sign_in(db, attempt)
        if not (right and current is not None):
            throttle.failed(db, attempt.account, attempt.address)
            return _page(GENERIC, 401)
        throttle.succeeded(db, attempt.account, attempt.address)
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
    # Each role lands where its work is: support on the runs (agents' calls), approvers on the
    # queue, auditors and admins on the conversations (the access log or the runs on a hub that
    # went without the conversation audit).
    if current_user.can("runs:read") and not current_user.can("audit:read"):
        return redirect(url_for("console_runs.index"))
    if current_user.can("runs:read"):
        with database().session() as db:
            archives = probe(db).archives
        if archives:
            return redirect(url_for("console_conversations.index"))
        return redirect(url_for("console_runs.index" if current_user.can("approvals:read")
                                else "console_access_log.index"))
    if current_user.can("approvals:read"):
        return redirect(url_for("console_approvals.queue"))
    if current_user.can("admins:manage"):
        return redirect(url_for("console_admins.index"))
    return render_template("console/forbidden.html", permission="any console page"), 403
