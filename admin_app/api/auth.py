"""Bearer checks for the API blueprints. Each opens the request's one database transaction and
keeps it in `g.db`, so a refusal anywhere in the view rolls back everything the request did."""
from __future__ import annotations

from functools import wraps
from typing import TYPE_CHECKING

from flask import current_app, g, request

from ..errors import ApiError, unauthorized
from ..identity.admins import authenticate_admin_token
from ..identity.roles import permissions_of
from ..identity.sessions import authenticate_access
from ..identity.tokens import bearer_from_header
from ..observability import read_source
from .config_changes import note_write

if TYPE_CHECKING:
    from ..db import Database


def database() -> Database:
    db: Database = current_app.extensions["bailing"].db
    return db


def agent_session_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        bearer = bearer_from_header(request.headers.get("Authorization"))
        with database().session() as db:
            session = authenticate_access(db, bearer)
            if session is None:
                raise unauthorized()
            g.db, g.agent_session = db, session
            return view(*args, **kwargs)

    return wrapper


def agent_bearer_is_valid() -> bool:
    """Whether the request carries a live Agent access bearer (checked in a read-only
    transaction of its own: nothing is written)."""
    bearer = bearer_from_header(request.headers.get("Authorization"))
    if bearer is None:
        return False
    with database().session() as db:
        return authenticate_access(db, bearer) is not None


def admin_permission_required(permission: str | None):
    """A personal admin token whose role holds `permission` (None: any signed-in admin)."""

    def decorate(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            bearer = bearer_from_header(request.headers.get("Authorization"))
            with database().session() as db:
                admin = authenticate_admin_token(db, bearer)
                if admin is None:
                    raise unauthorized()
                if permission is not None and permission not in permissions_of(admin.role):
                    raise ApiError("forbidden", f"This requires the {permission} permission.")
                g.db, g.admin = db, admin
                # A successful write is recorded as a configuration change, committed with it.
                return note_write(db, admin.username, view(*args, **kwargs))

        return wrapper

    return decorate


def replica_reads(view):
    """Under a bearer check: a view whose `read_db()` may come from the read replica, so lag by
    up to BAILING_READ_MAX_LAG_SECONDS. When the replica fails under it, the view runs again with
    its reads on the primary; the request's own transaction (`g.db`, on the primary: the bearer
    check, the access log) is the same for both runs."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        return database().replica_retried(lambda: view(*args, **kwargs))

    return wrapper


def read_db():
    """The read session of a `replica_reads` view: on the replica, or else the request's own
    transaction (`g.db`), so that a request holds one connection of the primary at most."""
    return database().read_session(on_source=read_source.note, primary=g.db)
