"""Configuration changes (audit:read): the configuration-change log newest first, each row with
who, when, which object and how, and what changed as a small before/after table. Values come from
configuration (route names, descriptions, URLs): shown escaped, and cut by the log itself."""
from __future__ import annotations

from datetime import datetime

from flask import Blueprint, render_template
from flask.typing import ResponseReturnValue

from ..config_audit.log import newest
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required

bp = Blueprint("console_config_changes", __name__, url_prefix="/console/config-changes")

PAGE = 50
CHANGES = Keyset("config-changes", (datetime, int))


@bp.get("/")
@permission_required("audit:read")
def index() -> ResponseReturnValue:
    after = CHANGES.from_request()
    with database().session() as db:
        items, next_key = newest(db, after, PAGE)
    more = more_url(".index", CHANGES, next_key, {})
    return render_template("console/config_changes.html", items=items, more=more, rows_only=rows_only())
