"""Conversations (runs:read): the archive list with filters kept in the URL, the detail page with
members and the transcript loaded page by page as the reader scrolls, and a streamed export."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime

from flask import Blueprint, Response, abort, render_template, request, stream_with_context

from ..conversation_audit.archives import header_view
from ..conversation_audit.availability import probe
from ..reads import archives
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required, record_read

bp = Blueprint("console_conversations", __name__, url_prefix="/console/conversations")

PAGE = 50
EVENTS_PAGE = 200
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
STATES = ("enrolling", "ready")
TURN_STATUSES = ("none", "running", "completed", "failed", "cancelled")
ARCHIVES = Keyset("conversations", (datetime, uuid.UUID))  # the list's cursor: (updated_at, id)


def _filters() -> dict[str, str]:
    """Filters from the URL; values that do not fit are dropped rather than trusted."""
    raw = {k: request.args.get(k, "").strip() for k in archives.FILTERS}
    clean = {}
    if raw["state"] in STATES:
        clean["state"] = raw["state"]
    if raw["status"] in TURN_STATUSES:
        clean["status"] = raw["status"]
    for key in ("app", "route"):
        if re.match(r"^[a-z0-9][a-z0-9_-]{1,63}$", raw[key]):
            clean[key] = raw[key]
    for key in ("from", "to"):
        if DATE.match(raw[key]):
            try:
                datetime.strptime(raw[key], "%Y-%m-%d")
                clean[key] = raw[key]
            except ValueError:
                pass
    if raw["q"]:
        clean["q"] = raw["q"][:200]
    return clean


def _cursor() -> archives.SearchCursor | None:
    """Where this page starts (None: the first page); a cursor of another list is a 400 page."""
    return ARCHIVES.from_request()


def _unavailable():
    return render_template("console/unavailable.html"), 503


@bp.get("/")
@permission_required("runs:read")
def index():
    filters, after = _filters(), _cursor()
    with database().session() as db:
        if not probe(db).archives:
            return _unavailable()
        rows, next_key = archives.search_archives(db, filters, after, PAGE)
        apps, routes = archives.filter_choices(db)
    more = more_url(".index", ARCHIVES, next_key, filters)
    items = [header_view(r) for r in rows]
    template = "console/partials/conversation_rows.html" if rows_only() else "console/conversations.html"
    return render_template(template, items=items, more=more, filters=filters, apps=apps, routes=routes,
                           states=STATES, turn_statuses=TURN_STATUSES)


def _archive(db, archive_id: str):
    try:
        ident = uuid.UUID(archive_id)
    except ValueError:
        abort(404)
    row = archives.archive_header(db, ident)
    if row is None:
        abort(404)
    return row


@bp.get("/<archive_id>")
@permission_required("runs:read")
def detail(archive_id: str):
    at = request.args.get("at", "")
    start = int(at) - 1 if at.isascii() and at.isdigit() and 0 < int(at) <= 2**31 - 1 else 0
    with database().session() as db:
        available = probe(db)
        if not available.archives:
            return _unavailable()
        header = _archive(db, archive_id)
        members = archives.member_views(db, header.id, available, confirmed_at=True)
        events, more = archives.event_page(db, header.id, start, EVENTS_PAGE, header.last_sequence)
        record_read(db, "transcript_view", str(header.id))
    return render_template("console/conversation.html", conversation=header_view(header), members=members,
                           events=[archives.event_view(e) for e in events], more=more, start=start,
                           next_after=events[-1].sequence if events else start)


@bp.get("/<archive_id>/events")
@permission_required("runs:read")
def events_page(archive_id: str):
    """The next page of the transcript, as an htmx fragment (keyset on the sequence)."""
    after = request.args.get("after", "0")
    if not (after.isascii() and after.isdigit()) or int(after) > 2**31 - 1:
        abort(400)
    with database().session() as db:
        if not probe(db).archives:
            return _unavailable()
        header = _archive(db, archive_id)
        events, more = archives.event_page(db, header.id, int(after), EVENTS_PAGE, header.last_sequence)
        record_read(db, "transcript_view", str(header.id))  # each page read is a read of the transcript
    return render_template("console/partials/events.html", conversation=header_view(header),
                           events=[archives.event_view(e) for e in events], more=more,
                           next_after=events[-1].sequence if events else int(after))


@bp.get("/<archive_id>/export.json")
@permission_required("runs:read")
def export(archive_id: str):
    """The whole transcript as JSON, streamed page by page so an archive of any size fits."""
    with database().session() as db:
        available = probe(db)
        if not available.archives:
            return _unavailable()
        header = _archive(db, archive_id)
        members = archives.member_views(db, header.id, available, confirmed_at=True)
        record_read(db, "transcript_export", str(header.id))
    conversation = header_view(header)
    hub_db = database()

    def generate():
        yield '{"schema":"bailing.agent-conversation-audit-export.v1","conversation":'
        yield json.dumps(conversation, ensure_ascii=False)
        yield ',"members":' + json.dumps(members, ensure_ascii=False) + ',"events":['
        after, first = 0, True
        while True:
            with hub_db.session() as db:
                rows, more = archives.event_page(db, header.id, after, 1000, header.last_sequence)
            for row in rows:
                yield ("" if first else ",") + json.dumps(archives.event_view(row), ensure_ascii=False)
                first = False
            if not more:
                break
            after = rows[-1].sequence
        yield "]}"

    response = Response(stream_with_context(generate()), mimetype="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="conversation-{header.id}.json"'
    return response
