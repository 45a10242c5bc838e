"""Console security in one place: server-side sessions behind the signed cookie, CSRF on every
unsafe request (htmx included), input hygiene, caching headers, page permissions, and the record
of sensitive reads.

Flask-Login keeps the signed-in user; its user id is the console session's random id (the
"alternative token" pattern), and the user loader accepts it only while the server-side row is
live. Flask's signed cookie still carries the CSRF token before sign-in, so an anonymous visitor
adds no row. Flask-Login's "strong" session protection is off: it binds to X-Forwarded-For, which
any client can set."""
from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
from datetime import timedelta
from functools import wraps

from flask import Flask, abort, current_app, redirect, render_template, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from flask_login import LoginManager, UserMixin, current_user

from ..identity import access_log, console_sessions
from ..identity.models import Admin
from ..identity.roles import permissions_of
from ..observability import read_source

UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
# Until when (epoch seconds, in the signed cookie) this browser's reads stay on the primary after
# a change it made: the read replica may not have replayed it yet.
PRIMARY_UNTIL = "primary_until"
login_manager = LoginManager()


# Query strings and headers hold no control characters at all (a tab is fine in a header);
# form fields may also hold line breaks (a denial reason is a textarea).
CONTROL_IN_QUERY = re.compile(r"[\x00-\x1f\x7f]")
CONTROL_IN_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
CONTROL_IN_FORM = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
BAD_INPUT = "The request holds control characters."


class ConsoleUser(UserMixin):
    def __init__(self, admin: Admin, session_id: str, session_hash: str):
        self.id = session_id  # what Flask-Login keeps in the cookie: the server-side session's id
        self.session_hash = session_hash
        self.admin_id = admin.id
        self.username = admin.username
        self.role = admin.role
        self.permissions = permissions_of(admin.role)

    def can(self, permission: str) -> bool:
        return permission in self.permissions


class SessionCookies(SecureCookieSessionInterface):
    """The session cookie is Secure whenever the console is served over HTTPS (or always, with
    BAILING_COOKIE_SECURE=1), and always HttpOnly and SameSite=Lax."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config.get("SESSION_COOKIE_SECURE")) or request.is_secure

    def open_session(self, app: Flask, request):
        # No cookie, nothing to verify: an empty session without building the signing
        # serializer, which is most of the cost of every agent and API request.
        if app.secret_key and self.get_cookie_name(app) not in request.cookies:
            return self.session_class()
        return super().open_session(app, request)


def database():
    return current_app.extensions["bailing"].db


def timeouts() -> console_sessions.Timeouts:
    settings = current_app.extensions["bailing"].settings
    return console_sessions.Timeouts(idle=timedelta(minutes=settings.console_idle_minutes),
                                     absolute=timedelta(hours=settings.console_max_hours))


@login_manager.user_loader
def load_user(session_id: str):
    with database().session() as db:
        live = console_sessions.resume(db, session_id, timeouts())
        if live is None:
            return None
        return ConsoleUser(db.get(Admin, live.admin_id), session_id, live.token_hash)


def _is_console(path: str) -> bool:
    return path == "/" or path == "/console" or path.startswith("/console/")


def _has_control_characters() -> bool:
    if CONTROL_IN_QUERY.search(request.path):
        return True
    for key, value in request.args.items(multi=True):
        if CONTROL_IN_QUERY.search(key) or CONTROL_IN_QUERY.search(value):
            return True
    for key, value in request.headers.items():
        if CONTROL_IN_HEADER.search(key) or CONTROL_IN_HEADER.search(value):
            return True
    if request.method in UNSAFE:
        for key, value in request.form.items(multi=True):
            if CONTROL_IN_QUERY.search(key) or CONTROL_IN_FORM.search(value):
                return True
    return False


@login_manager.unauthorized_handler
def _to_login():
    if request.headers.get("HX-Request"):
        response = current_app.response_class("", status=401)
        response.headers["HX-Redirect"] = url_for("console_auth.login")
        return response
    return redirect(url_for("console_auth.login", next=request.full_path if request.query_string else request.path))


def csrf_token() -> str:
    """The session's CSRF token as a page shows it: masked by a fresh random pad each time, so the
    secret's bytes never repeat in a compressed page (BREACH) while the session keeps one token."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    raw = session["csrf"].encode("ascii")
    pad = secrets.token_bytes(len(raw))
    masked = base64.urlsafe_b64encode(pad + bytes(a ^ b for a, b in zip(raw, pad)))
    return masked.rstrip(b"=").decode("ascii")


def _csrf_matches(sent: str, expected: str) -> bool:
    """`sent` is the session's token, masked (as pages show it) or as it is."""
    raw = expected.encode("ascii")
    candidate = sent.encode("utf-8", "replace")
    try:
        masked = (base64.urlsafe_b64decode(candidate + b"=" * (-len(candidate) % 4))
                  if len(candidate) > len(raw) else b"")
    except (binascii.Error, ValueError):
        masked = b""
    if len(masked) == 2 * len(raw):
        pad, body = masked[:len(raw)], masked[len(raw):]
        candidate = bytes(a ^ b for a, b in zip(body, pad))
    return secrets.compare_digest(candidate, raw)


def init_app(app: Flask) -> None:
    app.session_interface = SessionCookies()
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_NAME="bailing_session")
    login_manager.init_app(app)
    login_manager.session_protection = None  # "strong" binds to X-Forwarded-For, which clients forge

    @app.before_request
    def _hygiene():
        if _is_console(request.path) and _has_control_characters():
            abort(400, description=BAD_INPUT)

    @app.before_request
    def _csrf():
        if request.method in UNSAFE and request.path.startswith("/console"):
            sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
            expected = session.get("csrf")
            if not expected or not _csrf_matches(sent, expected):
                abort(400, description="The form has expired or did not come from this console. "
                                       "Reload the page and try again.")

    @app.after_request
    def _console_caching(response):
        # Pages and downloads hold transcripts and snapshots: never kept by a browser or proxy;
        # a fragment and its full page differ, so caches must tell them apart.
        if _is_console(request.path):
            response.headers["Cache-Control"] = "no-store"
            response.vary.add("HX-Request")
        return response

    @app.after_request
    def _read_own_writes(response):
        # Whatever page a change leads to (a redirect after a decision, the next list) shows it.
        if request.method in UNSAFE and _is_console(request.path) and database().settings.read_database_url:
            session[PRIMARY_UNTIL] = time.time() + database().own_writes_seconds()
        return response

    @app.context_processor
    def _console_globals():
        return {"csrf_token": csrf_token, "display_zone": app.config.get("DISPLAY_TIMEZONE", "UTC"),
                "read_notice": read_notice}


def permission_required(permission: str):
    """Pages for holders of `permission`. Others get a 403 page that holds no data; the server
    refuses what the page would not offer."""

    def decorate(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            if not current_user.is_authenticated:
                return login_manager.unauthorized()
            if not current_user.can(permission):
                return render_template("console/forbidden.html", permission=permission), 403
            return view(*args, **kwargs)

        return wrapper

    return decorate


def login_required(view):
    """Pages of any signed-in admin (their own account)."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        if not current_user.is_authenticated:
            return login_manager.unauthorized()
        return view(*args, **kwargs)

    return wrapper


def record_read(db, action: str, target: str, sequences: tuple[int, int] | None = None) -> None:
    """Sensitive reads are audited like writes: who opened what, when, and for a transcript page
    the first and last sequence it showed. Written on the primary: in the read's transaction, or
    for a read session (maybe on the replica, which cannot write) once its reads went through,
    before the page is rendered; a read that fails records nothing either way."""
    admin_id, username = current_user.admin_id, current_user.username
    database().after_read(db, lambda primary: access_log.record_console_read(
        primary, admin_id, username, action, target, sequences=sequences))


def replica_reads(view):
    """A page whose `reads()` may come from the read replica, so lag behind the last changes by
    up to BAILING_READ_MAX_LAG_SECONDS (never just after this browser made one). When the replica
    fails under it, the view runs again with its reads on the primary: such a view writes nothing
    before its reads are done (record_read waits for them)."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        if _wrote_lately():
            return view(*args, **kwargs)
        return database().replica_retried(lambda: view(*args, **kwargs))

    return wrapper


def read_db():
    """The read session of a `replica_reads` page (elsewhere, a read-only one on the primary)."""
    return database().read_session(on_source=read_source.note)


def _wrote_lately() -> bool:
    until = session.get(PRIMARY_UNTIL)
    return isinstance(until, int | float) and time.time() < until


def read_notice() -> str | None:
    """The layout's notice when a configured replica was passed over for this page's reads."""
    source = read_source.current()
    if source is None or source.server != "primary" or source.problem is None:
        return None
    if source.problem == "lagging":
        behind = f"lags {source.lag_seconds:.0f} s" if source.lag_seconds is not None else "lags behind"
        return f"Showing data from the primary: the read replica {behind}."
    return "Showing data from the primary: the read replica is unavailable."


def is_htmx() -> bool:
    """A fragment request; a history restore needs the whole page."""
    return bool(request.headers.get("HX-Request")) and not request.headers.get("HX-History-Restore-Request")

