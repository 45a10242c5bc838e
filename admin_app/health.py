"""Liveness and readiness for load balancers and orchestrators, and the public health check
connectors call first (`GET /health`, as upstream Core answers it)."""
from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from flask import Blueprint, current_app, jsonify

from . import embedded_pg, migrations
from .runtime import pause

bp = Blueprint("health", __name__, url_prefix="/health")
log = logging.getLogger(__name__)

PACKAGE = "bailing-hub"
try:
    _VERSION: str | None = version(PACKAGE)
except PackageNotFoundError:  # run from a checkout that was never installed
    _VERSION = None
_APP = {"name": PACKAGE, "version": _VERSION}


@bp.get("")
def health():
    """Whether the hub answers, without authentication: Core's `{"status": "ok", "paused": ...}`
    (HEAD: the same headers, no body). It answers 200 whatever the database does, so a
    connector's first call tells "the hub is there" apart from what readiness reports."""
    response = jsonify({"status": "ok", "paused": _paused(), "app": _APP})
    response.headers["Content-Type"] = "application/json; charset=utf-8"
    response.headers["Cache-Control"] = "no-store"
    return response


def _paused() -> bool:
    """The pause in force (runtime.pause), read from the database when there is one to ask: a
    server this process does not start (the embedded one is never started for /health), and that
    answers. Unknown (no database, or none answering) reads as not paused: nothing then takes
    new work anyway, and /health/ready says why."""
    hub = current_app.extensions["bailing"]
    if (hub.db.existing_engine() is None and hub.settings.database_url is None
            and not embedded_pg.is_running(hub.settings.data_dir)):
        return False
    try:
        with hub.db.session() as db:
            return pause.is_paused(db)
    except Exception:  # health answers, whatever the database does
        log.info("health: the pause state could not be read", exc_info=True)
        return False


@bp.get("/live")
def live():
    return jsonify({"status": "live"})


@bp.get("/ready")
def ready():
    hub = current_app.extensions["bailing"]
    try:
        # Asked often, readiness is also what first notices that the embedded server stopped.
        state = hub.db.reviving(lambda conninfo: migrations.status(conninfo, hub.settings.sql_dir))
    except migrations.MigrationError as err:
        return _not_ready("migrations_invalid", problems=[str(err)])
    except Exception:  # any failure to reach the database means "not ready", never a 500
        down = hub.db.down_reason()
        if down is not None:  # the embedded server, which an operator starts with one command
            return _not_ready(down, command=embedded_pg.START_COMMAND)
        log.warning("readiness: database unreachable", exc_info=True)
        return _not_ready("database_unreachable")
    if state.problems:
        return _not_ready("migrations_invalid", problems=state.problems)
    if state.pending:
        return _not_ready("migrations_pending", pending=[m.filename for m in state.pending])
    return jsonify({"status": "ready", "applied": len(state.applied)})


def _not_ready(reason: str, **details):
    response = jsonify({"status": "not_ready", "reason": reason, **details})
    response.status_code = 503
    response.headers["Cache-Control"] = "no-store"
    return response
