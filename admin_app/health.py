"""Liveness and readiness for load balancers and orchestrators."""
from __future__ import annotations

import logging

from flask import Blueprint, current_app, jsonify

from . import migrations

bp = Blueprint("health", __name__, url_prefix="/health")
log = logging.getLogger(__name__)


@bp.get("/live")
def live():
    return jsonify({"status": "live"})


@bp.get("/ready")
def ready():
    hub = current_app.extensions["bailing"]
    try:
        state = migrations.status(hub.db.conninfo(), hub.settings.sql_dir)
    except migrations.MigrationError as err:
        return _not_ready("migrations_invalid", problems=[str(err)])
    except Exception:  # any failure to reach the database means "not ready", never a 500
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
