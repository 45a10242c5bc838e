"""Conversations (runs:read): the archive list with filters kept in the URL, the detail page with
members and the transcript loaded page by page as the reader scrolls, and a streamed export."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime

from flask import Blueprint, Response, abort, render_template, request, stream_with_context, url_for
from sqlalchemy import text

from ..canonical import iso
from ..conversation_audit import reads
from ..conversation_audit.archives import HEADER_COLUMNS, header_view
from ..conversation_audit.availability import probe
from .security import database, is_htmx, permission_required, record_read

bp = Blueprint("console_conversations", __name__, url_prefix="/console/conversations")

PAGE = 50
EVENTS_PAGE = 200
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
STATES = ("enrolling", "ready")
TURN_STATUSES = ("none", "running", "completed", "failed", "cancelled")


def _filters() -> dict[str, str]:
    """Filters from the URL; values that do not fit are dropped rather than trusted."""
    raw = {k: request.args.get(k, "").strip() for k in reads.FILTERS}
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


def _cursor() -> tuple | None:
    raw = request.args.get("cursor", "")
    at, _, ident = raw.partition("|")
    try:
        return datetime.fromisoformat(at), uuid.UUID(ident)
    except ValueError:
        return None


def _unavailable():
    return render_template("console/unavailable.html"), 503


@bp.get("/")
@permission_required("runs:read")
def index():
    filters = _filters()
    with database().session() as db:
        if not probe(db).archives:
            return _unavailable()
        rows, next_cursor = reads.search_archives(db, filters, _cursor(), PAGE)
        apps = [r[0] for r in db.execute(text("SELECT app_id FROM bz_client_apps ORDER BY app_id"))]
        routes = [r[0] for r in db.execute(text("SELECT route_key FROM bz_routes ORDER BY route_key"))]
    more = None
    if next_cursor is not None:
        more = url_for(".index", **filters, cursor=f"{next_cursor[0].isoformat()}|{next_cursor[1]}")
    items = [header_view(r) for r in rows]
    template = "console/partials/conversation_rows.html" if is_htmx() and request.args.get("cursor") \
        else "console/conversations.html"
    return render_template(template, items=items, more=more, filters=filters, apps=apps, routes=routes,
                           states=STATES, turn_statuses=TURN_STATUSES)


def _archive(db, archive_id: str):
    try:
        ident = uuid.UUID(archive_id)
    except ValueError:
        abort(404)
    row = db.execute(text(f"SELECT {HEADER_COLUMNS} FROM bz_agent_conversation_archives WHERE id = :id"),  # noqa: S608 - constant identifiers, bound values
                     {"id": ident}).first()
    if row is None:
        abort(404)
    return row


def _members(db, archive_id, available) -> list[dict]:
    bindings = ", m.client_app_id, m.client_name, m.route_key" if available.cross_binding else ""
    rows = db.execute(text(f"""
        SELECT m.session_id, m.label, m.confirmed_at, m.principal, m.on_behalf_of{bindings}
        FROM bz_agent_conversation_members m WHERE m.archive_id = :id ORDER BY m.position"""),  # noqa: S608 - constant identifiers, bound values
        {"id": archive_id})
    members = []
    for row in rows:
        view = reads.member_view(row, available)
        view["confirmed_at"] = iso(row.confirmed_at)
        members.append(view)
    return members


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
        members = _members(db, header.id, available)
        events, more = reads.event_page(db, header.id, start, EVENTS_PAGE, header.last_sequence)
        record_read(db, "transcript_view", str(header.id))
    return render_template("console/conversation.html", conversation=header_view(header), members=members,
                           events=[reads.event_view(e) for e in events], more=more, start=start,
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
        events, more = reads.event_page(db, header.id, int(after), EVENTS_PAGE, header.last_sequence)
        record_read(db, "transcript_view", str(header.id))  # each page read is a read of the transcript
    return render_template("console/partials/events.html", conversation=header_view(header),
                           events=[reads.event_view(e) for e in events], more=more,
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
        members = _members(db, header.id, available)
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
                rows, more = reads.event_page(db, header.id, after, 1000, header.last_sequence)
            for row in rows:
                yield ("" if first else ",") + json.dumps(reads.event_view(row), ensure_ascii=False)
                first = False
            if not more:
                break
            after = rows[-1].sequence
        yield "]}"

    response = Response(stream_with_context(generate()), mimetype="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="conversation-{header.id}.json"'
    return response
