"""Notification deliveries (approvals:read): which channel was told of which approval, how many
attempts it took, what the last one answered and when the next is due; newest first, all of them
or those of one status, paged as every console list is. Error texts come from receivers and mail
servers: untrusted, shown escaped."""
from __future__ import annotations

import uuid
from datetime import datetime

from flask import Blueprint, abort, current_app, render_template, request

from ..notifications import deliveries
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required

bp = Blueprint("console_notifications", __name__, url_prefix="/console/notifications")

PAGE = 50
DELIVERIES = Keyset("notifications.deliveries", (datetime, uuid.UUID))


@bp.get("/")
@permission_required("approvals:read")
def index():
    status = request.args.get("status", "")
    if status and status not in deliveries.STATUSES:
        abort(400, description="Status is one of: " + ", ".join(deliveries.STATUSES) + ".")
    after = DELIVERIES.from_request()
    with database().session() as db:
        items, next_key = deliveries.page(db, status or None, after, PAGE)
    more = more_url(".index", DELIVERIES, next_key, {"status": status})
    public_url = current_app.extensions["bailing"].settings.public_url
    return render_template("console/notifications.html", items=items, more=more, status=status,
                           statuses=deliveries.STATUSES, public_url=public_url, rows_only=rows_only())
