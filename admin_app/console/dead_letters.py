"""Dead letters (runs:read): completion callbacks of Client API jobs that failed for good, newest
first, with where they went (the URL's origin only) and the last error; holders of runs:write
replay one now or resolve it. The list is the admin API's `GET /admin/api/delivery-dlq`, paged
as every console list is. Error texts and previews come from receivers and jobs: untrusted,
shown escaped and bounded."""
from __future__ import annotations

from datetime import datetime

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from ..jobs import dead_letters
from .paging import Keyset, more_url, rows_only
from .security import database, is_htmx, permission_required

bp = Blueprint("console_dead_letters", __name__, url_prefix="/console/dead-letters")

PAGE = 50
BIGINT_MAX = 2**63 - 1
LETTERS = Keyset("jobs.dead_letters", (datetime, int))
MESSAGES = {
    "delivered": ("Delivered: the dead letter is resolved.", "ok"),
    "resolved": ("Resolved: nothing more is sent for it.", "ok"),
    "already_resolved": ("It was already resolved.", "ok"),
    "already_delivered": ("It was already delivered.", "ok"),
    "retrying": ("Not delivered: the next attempts follow on their schedule.", "error"),
    "dead": ("Not delivered: it is dead again.", "error"),
    "busy": ("It is being delivered: wait for its attempts to end.", "error"),
    "not_dead": ("It has not failed for good: it is not a dead letter.", "error"),
}


@bp.get("/")
@permission_required("runs:read")
def index() -> ResponseReturnValue:
    every = request.args.get("all") == "1"
    after = LETTERS.from_request()
    with database().session() as db:
        items, next_key = dead_letters.page(db, every, after, PAGE)
    more = more_url(".index", LETTERS, next_key, {"all": "1" if every else ""})
    return render_template("console/dead_letters.html", items=items, more=more, every=every,
                           rows_only=rows_only(), can_act=current_user.can("runs:write"))


def _known(callback_id: int) -> None:
    if callback_id > BIGINT_MAX:  # no such id: the column is a bigint
        abort(404)


def _after(callback_id: int, done: dead_letters.Outcome) -> ResponseReturnValue:
    if done.status == "not_found":
        abort(404)
    message, category = MESSAGES.get(done.status, (done.status, "error"))
    if done.error and category == "error":
        message = f"{message} {done.error}"
    if is_htmx():  # the row again, as it stands now, with what happened
        with database().session() as db:
            item = dead_letters.letter(db, callback_id)
        if item is None:
            abort(404)
        return render_template("console/dead_letters.html", items=[item], more=None, rows_only=True,
                               can_act=True, note=(message, category))
    flash(message, category)
    return redirect(url_for(".index"), code=303)


@bp.post("/<int:callback_id>/replay")
@permission_required("runs:write")
def replay(callback_id: int) -> ResponseReturnValue:
    _known(callback_id)
    hub = current_app.extensions["bailing"]
    done = dead_letters.replay(database(), hub.settings, current_app.secret_key, callback_id,
                               current_user.username)
    return _after(callback_id, done)


@bp.post("/<int:callback_id>/resolve")
@permission_required("runs:write")
def resolve(callback_id: int) -> ResponseReturnValue:
    _known(callback_id)
    with database().session() as db:
        done = dead_letters.resolve(db, callback_id, current_user.username)
    return _after(callback_id, done)
