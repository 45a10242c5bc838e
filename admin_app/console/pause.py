"""Hub pause in the console: the control for holders of `system:write` (the admin role), and the
banner every console page shows while the hub is paused, with who paused it, when and why.
The change itself is runtime.pause's, recorded in the admin trail like the API's and the CLI's."""
from __future__ import annotations

import logging

from flask import Blueprint, Flask, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from .. import limits
from ..errors import ApiError
from ..identity.admins import Actor
from ..runtime import pause
from .security import database, permission_required

bp = Blueprint("console_pause", __name__, url_prefix="/console")
log = logging.getLogger(__name__)

PERMISSION = "system:write"


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)

    @app.context_processor
    def _pause_banner() -> dict[str, object]:
        # A function, so only pages that show the banner (signed-in ones) ask the database.
        return {"hub_pause": banner_state}


def banner_state() -> pause.PauseState | None:
    """The pause in force for the banner; None when it cannot be read (the page still renders:
    an error page may be showing exactly that the database is down)."""
    try:
        with database().session() as db:
            return pause.current(db)
    except Exception:  # the banner never breaks a page
        log.info("console: the pause state could not be read", exc_info=True)
        return None


@bp.get("/pause")
@permission_required(PERMISSION)
def index() -> ResponseReturnValue:
    with database().session() as db:
        state = pause.current(db)
    return render_template("console/pause.html", state=state, reason_max=limits.PAUSE_REASON_MAX)


def _change(paused: bool) -> ResponseReturnValue:
    raw = request.form.get("reason", "")
    try:
        if paused and not raw.strip():
            raise ApiError("invalid_request", "A pause needs a reason.")
        reason = pause.check_reason(raw or None)
        with database().session() as db:
            done = pause.set_paused(db, Actor(current_user.admin_id, current_user.username), paused, reason,
                                    "console")
    except ApiError as err:
        flash(err.message, "error")
        return redirect(url_for(".index"), code=303)
    if paused:
        flash("The hub is paused." if done["changed"] else "The hub was already paused.", "ok")
    else:
        flash("The hub is running again." if done["changed"] else "The hub was not paused.", "ok")
    return redirect(url_for(".index"), code=303)


@bp.post("/pause")
@permission_required(PERMISSION)
def pause_hub() -> ResponseReturnValue:
    return _change(True)


@bp.post("/resume")
@permission_required(PERMISSION)
def resume_hub() -> ResponseReturnValue:
    return _change(False)
