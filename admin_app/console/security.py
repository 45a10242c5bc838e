"""Console security in one place: sessions and their cookie, CSRF on every unsafe request
(htmx included), page permissions, and the record of sensitive reads."""
from __future__ import annotations

import secrets
from functools import wraps

from flask import Flask, abort, current_app, redirect, render_template, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from flask_login import LoginManager, UserMixin, current_user
from sqlalchemy import text

from ..identity.models import Admin
from ..identity.roles import permissions_of

UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
login_manager = LoginManager()


class ConsoleUser(UserMixin):
    def __init__(self, admin: Admin):
        self.id = str(admin.id)
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


@login_manager.user_loader
def load_user(user_id: str):
    if not user_id.isdigit():
        return None
    with database().session() as db:
        admin = db.get(Admin, int(user_id))
        if admin is None or admin.disabled:
            return None
        return ConsoleUser(admin)


@login_manager.unauthorized_handler
def _to_login():
    if request.headers.get("HX-Request"):
        response = current_app.response_class("", status=401)
        response.headers["HX-Redirect"] = url_for("console_auth.login")
        return response
    return redirect(url_for("console_auth.login", next=request.full_path if request.query_string else request.path))


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def init_app(app: Flask) -> None:
    app.session_interface = SessionCookies()
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_NAME="bailing_session")
    login_manager.init_app(app)
    login_manager.session_protection = "strong"

    @app.before_request
    def _csrf():
        if request.method in UNSAFE and request.path.startswith("/console"):
            sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf_token", "")
            expected = session.get("csrf")
            if not expected or not secrets.compare_digest(sent.encode("utf-8", "replace"),
                                                          expected.encode("utf-8")):
                abort(400, description="The form has expired or did not come from this console. "
                                       "Reload the page and try again.")

    @app.context_processor
    def _console_globals():
        return {"csrf_token": csrf_token, "display_zone": app.config.get("DISPLAY_TIMEZONE", "UTC")}


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


def record_read(db, action: str, target: str) -> None:
    """Sensitive reads are audited like writes: who opened what, when."""
    db.execute(text("INSERT INTO bz_access_log (admin_id, username, action, target) "
                    "VALUES (:admin, :user, :action, :target)"),
               {"admin": current_user.admin_id, "user": current_user.username, "action": action,
                "target": target})


def is_htmx() -> bool:
    """A fragment request; a history restore needs the whole page."""
    return bool(request.headers.get("HX-Request")) and not request.headers.get("HX-History-Restore-Request")

