"""Conversations (runs:read): the archive list and the content search (reads/search.py) with
filters kept in the URL, the detail page with members and the transcript loaded page by page as
the reader scrolls, and a streamed export."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from flask import (Blueprint, Response, abort, current_app, render_template, request, stream_with_context,
                   url_for)

from .. import limits
from ..conversation_audit.archives import header_view
from ..conversation_audit.availability import probe
from ..conversation_audit.evidence_rows import export_page
from ..integrity import transcript_proofs
from ..reads import archives
from ..reads import search as finder
from . import text
from .paging import Keyset, more_url, rows_only
from .security import database, is_htmx, permission_required, read_db, record_read, replica_reads

bp = Blueprint("console_conversations", __name__, url_prefix="/console/conversations")

PAGE = 50
MESSAGES_PAGE = 50
# The transcript. A page shows a window of events around its target and loads more in either
# direction as the reader scrolls.
WINDOW = 200            # events on a page when it opens, and in each page loaded after
WINDOW_BEFORE = 50      # of which before the target, unless the target is near the end
MAX_SEQUENCE = 2**31 - 1
LONG_CHARS, LONG_LINES = 2000, 30  # a message longer than this opens collapsed
HITS_PAGE = 50          # hits of a search inside a transcript, per page
QUERY_MAX = 200         # characters of a search inside a transcript
COUNT_CAP = 1000        # hits counted exactly; beyond, "more than 1,000"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
STATES = ("enrolling", "ready")
TURN_STATUSES = ("none", "running", "completed", "failed", "cancelled")
DATE_FIELDS = ("updated", "created")
DIRECTIONS = ("desc", "asc")
Q_MAX = 200
# One cursor per sort and direction, so a cursor of one order is refused by another. The default
# order (updated, newest first) keeps the list's first cursor name.
ARCHIVES = Keyset("conversations", (datetime, uuid.UUID))
ORDERS = {("updated", "desc"): ARCHIVES,
          ("updated", "asc"): Keyset("conversations-updated-asc", (datetime, uuid.UUID)),
          ("created", "desc"): Keyset("conversations-created-desc", (datetime, uuid.UUID)),
          ("created", "asc"): Keyset("conversations-created-asc", (datetime, uuid.UUID)),
          ("events", "desc"): Keyset("conversations-events-desc", (int, uuid.UUID)),
          ("events", "asc"): Keyset("conversations-events-asc", (int, uuid.UUID))}
MESSAGES = Keyset("conversation-messages", (uuid.UUID, int))  # (archive id, sequence)
SORT_NAMES = {"updated": "Updated", "created": "Created", "events": "Events"}


def _one_of(errors: list[str], label: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        errors.append(f"{label}: “{value}” is not one of {', '.join(allowed)}.")


def _filters() -> tuple[dict[str, str], list[str]]:
    """Filters from the URL (given values only, as they are kept in every link) and an error for
    each value that does not fit: shown on the page with a 400, never silently dropped."""
    keys = (*finder.FILTERS, "sort", "dir")
    given = {k: request.args.get(k, "").strip() for k in keys if request.args.get(k, "").strip()}
    errors: list[str] = []
    # (Control characters never get here: the console refuses them in any query string.)
    for key, label, most in (("q", "Search", Q_MAX), ("principal", "Principal", limits.PRINCIPAL_FIELD_MAX["id"]),
                             ("tenant", "Tenant", limits.PRINCIPAL_FIELD_MAX["tenant"])):
        if len(given.get(key, "")) > most:
            errors.append(f"{label}: at most {most} characters.")
    for key, label, allowed in (("state", "State", STATES), ("status", "Last turn", TURN_STATUSES),
                                ("date", "Date", DATE_FIELDS), ("sort", "Sort", tuple(finder.SORTS)),
                                ("dir", "Direction", DIRECTIONS)):
        if key in given:
            _one_of(errors, label, given[key], allowed)
    for key, label in (("app", "App"), ("route", "Route")):
        if key in given and not NAME.match(given[key]):
            errors.append(f"{label}: “{given[key]}” is not an id.")
    for key, label in (("from", "From"), ("to", "To")):
        if key in given:
            try:
                if not DATE.match(given[key]):
                    raise ValueError
                datetime.strptime(given[key], "%Y-%m-%d")
            except ValueError:
                errors.append(f"{label}: “{given[key]}” is not a date (YYYY-MM-DD).")
    if not errors and given.get("from", "") > given.get("to", "9999"):
        errors.append("From is after To.")
    return given, errors


def _order(filters: dict[str, str]) -> tuple[str, str]:
    return filters.get("sort", "updated"), filters.get("dir", "desc")


def _sort_links(filters: dict[str, str]) -> dict[str, dict[str, str | None]]:
    """Each sortable column's header link (a new column sorts descending first, the sorted one
    flips) and its aria-sort."""
    current, direction = _order(filters)
    base: dict[str, Any] = {k: v for k, v in filters.items() if k not in ("sort", "dir")}
    links: dict[str, dict[str, str | None]] = {}
    for key, label in SORT_NAMES.items():
        flip = "asc" if key == current and direction == "desc" else "desc"
        links[key] = {"label": label, "url": url_for(".index", **base, sort=key, dir=flip),
                      "aria": ("descending" if direction == "desc" else "ascending") if key == current else None}
    return links


def _unavailable():
    return render_template("console/unavailable.html"), 503


def _page(status: int = 200, **values):
    for key, empty in (("items", []), ("hits", []), ("total", None), ("hits_total", None), ("more", None),
                       ("hits_more", None)):
        values.setdefault(key, empty)
    return render_template("console/conversations.html", states=STATES, turn_statuses=TURN_STATUSES,
                           date_fields=DATE_FIELDS, content_min=finder.CONTENT_MIN_CHARS,
                           sorts=_sort_links(values["filters"]) if not values.get("errors") else {},
                           **values), status


def _search_target(filters: dict[str, str]) -> str:
    """A search that showed message text, as the access log names it: its filters as a query
    string (the list's URL without the page's cursor), so the log links back to the same search."""
    return urlencode({k: v for k, v in filters.items() if k not in ("sort", "dir")})


def _hits(db, filters: dict[str, str], after):
    rows, next_key = finder.search_messages(db, filters, after, MESSAGES_PAGE)
    hits = [finder.hit_view(r) for r in rows]
    for hit in hits:
        hit["snippet"] = text.marked(hit["excerpt"], filters["q"])
    return hits, more_url(".messages", MESSAGES, next_key, filters)


@bp.get("/")
@permission_required("runs:read")
@replica_reads
def index():
    """The archive list, and with a search of CONTENT_MIN_CHARS or more, the messages holding it:
    one search box finds IDs, conversations, labels and message text."""
    filters, errors = _filters()
    keyset = ORDERS.get(_order(filters), ARCHIVES)
    after = keyset.from_request()
    with read_db() as db:
        if not probe(db).archives:
            return _unavailable()
        apps, routes = finder.filter_choices(db)
        if errors:
            return _page(400, filters=filters, errors=errors, apps=apps, routes=routes)
        sort, direction = _order(filters)
        rows, next_key = finder.search_archives(db, filters, after, PAGE, sort=sort, descending=direction == "desc")
        more = more_url(".index", keyset, next_key, filters)
        items = [header_view(r) for r in rows]
        if rows_only():
            return render_template("console/partials/conversation_rows.html", items=items, more=more)
        total = finder.count_archives(db, filters)
        hits, hits_more, hits_total = [], None, None
        if finder.searches_content(filters):
            hits, hits_more = _hits(db, filters, None)
            hits_total = finder.count_messages(db, filters)
            record_read(db, "message_search", _search_target(filters))
    return _page(filters=filters, items=items, more=more, total=total, hits=hits, hits_more=hits_more,
                 hits_total=hits_total, apps=apps, routes=routes)


@bp.get("/messages")
@permission_required("runs:read")
@replica_reads
def messages():
    """More messages of a content search (the list's "load more"); opened as a link, the page of
    messages alone from that cursor on."""
    filters, errors = _filters()
    after = MESSAGES.from_request()
    if not errors and not finder.searches_content(filters):
        errors.append(f"Search: message text is searched from {finder.CONTENT_MIN_CHARS} characters on.")
    with read_db() as db:
        if not probe(db).archives:
            return _unavailable()
        apps, routes = finder.filter_choices(db)
        if errors:
            return _page(400, filters=filters, errors=errors, apps=apps, routes=routes)
        hits, hits_more = _hits(db, filters, after)
        record_read(db, "message_search", _search_target(filters))
    if rows_only():
        return render_template("console/partials/message_hits.html", hits=hits, hits_more=hits_more)
    return _page(filters=filters, hits=hits, hits_more=hits_more, hits_only=True, apps=apps, routes=routes)


def _archive(db, archive_id: str):
    try:
        ident = uuid.UUID(archive_id)
    except ValueError:
        abort(404)
    row = archives.archive_header(db, ident)
    if row is None:
        abort(404)
    return row


def _number(name: str, minimum: int) -> int | None:
    """A sequence parameter: None when absent, a 400 page when it is not a whole number in range."""
    raw = request.args.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10 and minimum <= int(raw) <= MAX_SEQUENCE):
        abort(400, description=f"“{name}” must be a sequence number, a whole number from {minimum} "
                               f"to {MAX_SEQUENCE}.")
    return int(raw)


def _at(last: int) -> int:
    """The target of `?at=`: a sequence of this transcript or `end`; 0 for none (from the start)."""
    raw = request.args.get("at")
    if raw is None or raw == "":
        return 0
    if raw == "end":
        return last
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10 and 1 <= int(raw) <= max(last, 1)):
        abort(400, description=f"“at” must be a sequence of this transcript, from 1 to {max(last, 1)}, "
                               "or “end”.")
    return int(raw)


def _view() -> str | None:
    return "markdown" if request.args.get("view") == "markdown" else None


def _event_views(rows, start: int = 0) -> tuple[list[dict], int, int]:
    """The events a page shows, each message rendered against the page's budget (text.Page):
    taken outward from `rows[start]` (the first for a page read forwards, the last for one read
    backwards, the target of a window) while the budget lasts. Returns the views and the first
    and last index of `rows` they cover; the page's sentinels load the rest."""
    page, as_markdown = text.Page(), _view() == "markdown"
    taken: dict[int, dict] = {}
    for index in sorted(range(len(rows)), key=lambda i: (abs(i - start), i < start)):
        if page.spent:
            break
        view = archives.event_view(rows[index])
        if "content" in view:
            content = view["content"] or ""
            view["html"], view["plain_because"] = page.message(content, as_markdown)
            view["long"] = len(content) > LONG_CHARS or content.count("\n") >= LONG_LINES
        taken[index] = view
    shown = sorted(taken)
    if not shown:
        return [], 0, -1
    return [taken[i] for i in shown], shown[0], shown[-1]


def _sequences(rows) -> tuple[int, int] | None:
    """What a read records it showed: the first and last sequence of `rows` (in sequence order),
    so the hits of a search are recorded as the span from the first to the last; None for none."""
    return (rows[0].sequence, rows[-1].sequence) if rows else None


def _whole(header) -> tuple[int, int] | None:
    """The range an export shows: every event up to the header's last sequence, numbered from 1
    without gaps (appends are refused otherwise); None for an archive with no events yet."""
    return (1, header.last_sequence) if header.last_sequence else None


@bp.get("/<archive_id>")
@permission_required("runs:read")
@replica_reads
def detail(archive_id: str):
    with read_db() as db:
        available = probe(db)
        if not available.archives:
            return _unavailable()
        header = _archive(db, archive_id)
        last = header.last_sequence
        at = _at(last)
        members = archives.member_views(db, header.id, available, confirmed_at=True)
        if at:
            before = max(WINDOW_BEFORE, WINDOW - (last - at + 1))
            rows, earlier, more = archives.event_window(db, header.id, at, before, WINDOW - before, last)
        else:
            (rows, more), earlier = archives.event_page(db, header.id, 0, WINDOW, last), False
        target = next((i for i, row in enumerate(rows) if row.sequence >= at), 0)
        events, first, final = _event_views(rows, target)
        earlier, more = earlier or first > 0, more or final < len(rows) - 1
        rows = rows[first:final + 1]
        record_read(db, "transcript_view", str(header.id), sequences=_sequences(rows))
    return render_template("console/conversation.html", conversation=header_view(header), members=members,
                           events=events, at=at, earlier=earlier, more=more, view=_view(),
                           first_seq=rows[0].sequence if rows else 0,
                           next_after=rows[-1].sequence if rows else 0)


@bp.get("/<archive_id>/events")
@permission_required("runs:read")
@replica_reads
def events_page(archive_id: str):
    """More of the transcript as an htmx fragment: `after=N` the events after N, `before=N` those
    just before N (keyset on the sequence either way)."""
    before, after = _number("before", 1), _number("after", 0)
    if before is not None and after is not None:
        abort(400, description="Ask for the events “before” a sequence or “after” it, not both.")
    with read_db() as db:
        if not probe(db).archives:
            return _unavailable()
        header = _archive(db, archive_id)
        if before is not None:
            rows, earlier = archives.events_before(db, header.id, before, WINDOW, header.last_sequence)
            events, first, _ = _event_views(rows, len(rows) - 1)
            earlier, more, rows = earlier or first > 0, None, rows[first:]
        else:
            rows, more = archives.event_page(db, header.id, after or 0, WINDOW, header.last_sequence)
            events, _, final = _event_views(rows)
            earlier, more, rows = False, more or final < len(rows) - 1, rows[:final + 1]
        record_read(db, "transcript_view", str(header.id), sequences=_sequences(rows))
    return render_template("console/partials/events.html", conversation=header_view(header),
                           events=events, at=0, earlier=earlier, more=more, view=_view(),
                           backwards=before is not None, first_seq=rows[0].sequence if rows else before,
                           next_after=rows[-1].sequence if rows else (after or 0))


@bp.get("/<archive_id>/search")
@permission_required("runs:read")
@replica_reads
def search(archive_id: str):
    """The messages of one transcript that contain `q`, with a count, keyset-paged on the sequence:
    an htmx fragment for the search box, the same list as a page when opened as a link."""
    query = request.args.get("q", "").strip()
    if not query:
        abort(400, description="Type the words to look for in this transcript.")
    if len(query) > QUERY_MAX:
        abort(400, description=f"A search inside a transcript is at most {QUERY_MAX} characters.")
    after = _number("after", 0) or 0
    with read_db() as db:
        if not probe(db).archives:
            return _unavailable()
        header = _archive(db, archive_id)
        rows, more, total = archives.search_in_archive(db, header.id, query, after, HITS_PAGE,
                                                       header.last_sequence, COUNT_CAP)
        record_read(db, "transcript_view", str(header.id), sequences=_sequences(rows))
    hits = [{"sequence": r.sequence, "kind": r.kind, "snippet": text.snippet(r.content, query)} for r in rows]
    template = "console/partials/transcript_hits.html" if is_htmx() else "console/transcript_search.html"
    return render_template(template, conversation=header_view(header), hits=hits, total=total, q=query,
                           count_cap=COUNT_CAP,
                           after=after, more=more, view=_view(),
                           next_after=rows[-1].sequence if rows else after)


@bp.get("/<archive_id>/export.json")
@permission_required("runs:read")
def export(archive_id: str):
    """The whole transcript as JSON, streamed page by page so an archive of any size fits, with the
    evidence that lets `bailing-admin audit verify` check it offline (integrity.transcript_proofs):
    the export's own read is recorded first, so it is among the reads it states."""
    hub_db = database()
    with hub_db.session() as db:
        available = probe(db)
        if not available.archives:
            return _unavailable()
        header = _archive(db, archive_id)
        members = archives.member_views(db, header.id, available, confirmed_at=True)
        record_read(db, "transcript_export", str(header.id), sequences=_whole(header))
    with hub_db.session() as db:
        def last() -> int:
            nonlocal header
            header = _archive(db, archive_id)
            return header.last_sequence

        proofs = transcript_proofs.build(db, current_app.extensions["bailing"].settings.data_dir, header.id, last)
    conversation = header_view(header)

    def generate():
        yield '{"schema":"bailing.agent-conversation-audit-export.v1","conversation":'
        yield json.dumps(conversation, ensure_ascii=False)
        yield ',"members":' + json.dumps(members, ensure_ascii=False) + ',"events":['
        after, first = 0, True
        while True:
            with hub_db.session() as db:
                rows, more = export_page(db, header.id, after, 1000, proofs.last_sequence)
            for row in rows:
                view = archives.event_view(row)
                view["evidence"], redaction = transcript_proofs.event_evidence(proofs, row)
                if redaction is not None:
                    view["redaction"] = redaction
                yield ("" if first else ",") + json.dumps(view, ensure_ascii=False)
                first = False
            if not more:
                break
            after = rows[-1].sequence
        yield '],"evidence":'
        yield from transcript_proofs.evidence_json(proofs)
        yield "}"

    response = Response(stream_with_context(generate()), mimetype="application/json")
    response.headers["Content-Disposition"] = f'attachment; filename="conversation-{header.id}.json"'
    return response
