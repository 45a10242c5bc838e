"""The access log (audit:read): who read which transcript, snapshot, export or trace, grouped into
reading sessions, filtered by person, action, target and dates (kept in the URL), each group opened
to its individual reads, and the whole filtered log as CSV.

Viewing the log is not itself recorded (it holds no business data, only who read what); exporting
it is, as `access_log_export` with the filters as its target, because a CSV of the log leaves the
hub."""
from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from flask import Blueprint, Response, abort, current_app, render_template, request, stream_with_context, url_for

from ..conversation_audit.availability import probe
from ..identity.access_log import ACTIONS
from ..reads import access_log as log_reads
from .paging import Keyset, more_url, rows_only
from .security import database, permission_required, read_db, record_read, replica_reads

bp = Blueprint("console_access_log", __name__, url_prefix="/console/access-log")

PAGE = 50           # groups on a page
GROUP_PAGE = 100    # individual reads on a page of one group
EXPORT_BATCH = 1000
TEXT_MAX = 191      # a person or target typed into a filter
TARGETS_MAX = 50    # archives one client conversation id may name
FILTERS = ("person", "action", "target", "from", "to")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
GROUPS = Keyset("access-log", (datetime, int))
GROUP_ROWS = Keyset("access-log-group", (datetime, int))
# A cell a spreadsheet would run as a formula starts with one of these; such a cell gets a quote.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _query() -> dict[str, str]:
    return {k: request.args.get(k, "").strip() for k in FILTERS}


def _day(value: str) -> datetime | None:
    """Midnight of a YYYY-MM-DD date in the console's display zone, or None if it is no date."""
    if not DATE.match(value):
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d")
    except ValueError:
        return None
    return day.replace(tzinfo=ZoneInfo(current_app.config.get("DISPLAY_TIMEZONE", "UTC")))


def _filters(db, query: dict[str, str], archives: bool) -> tuple[log_reads.Filters, list[str]]:
    """The filters the URL names, and a message for each value that cannot be one."""
    problems: list[str] = []
    person = query["person"] or None
    if person is not None and len(person) > TEXT_MAX:
        problems.append(f"A person is a username of at most {TEXT_MAX} characters.")
    action = query["action"] or None
    if action is not None and action not in ACTIONS:
        problems.append("Choose an action from the list.")
    targets = None
    if query["target"]:
        if len(query["target"]) > TEXT_MAX:
            problems.append(f"A target is an ID or a client conversation ID of at most {TEXT_MAX} characters.")
        else:
            targets = log_reads.targets_named(db, query["target"], archives, TARGETS_MAX)
    since = until = None
    if query["from"]:
        since = _day(query["from"])
        if since is None:
            problems.append("“From” is a date written YYYY-MM-DD.")
    if query["to"]:
        day = _day(query["to"])
        if day is None:
            problems.append("“To” is a date written YYYY-MM-DD.")
        else:
            until = day + timedelta(days=1)  # "to" includes its whole day
    if since is not None and until is not None and since >= until:
        problems.append("“From” is after “To”.")
    return log_reads.Filters(person, action, targets, since, until), problems


def _page(template: str, status: int = 200, **context):
    query_args = _given(context.get("query", {}))
    return render_template(template, actions=sorted(ACTIONS), query_args=query_args, **context), status


@bp.get("")
@permission_required("audit:read")
@replica_reads
def index():
    """Groups of reads, newest first; later pages come as htmx rows."""
    query, after = _query(), GROUPS.from_request()
    with read_db() as db:
        archives = probe(db).archives
        filters, problems = _filters(db, query, archives)
        if problems:
            return _page("console/access_log.html", 400, query=query, problems=problems, groups=[], more=None)
        groups, next_key = log_reads.groups(db, filters, after, PAGE, archives)
    more = more_url(".index", GROUPS, next_key, query)
    template = "console/partials/access_log_rows.html" if rows_only() else "console/access_log.html"
    return _page(template, query=query, problems=[], groups=groups, more=more,
                 filtered=any(query.values()), export=_export_url(query))


@bp.get("/group/<int:head_id>")
@permission_required("audit:read")
@replica_reads
def group(head_id: int):
    """The individual reads of one group (named by its newest read), under the same filters."""
    query, after = _query(), GROUP_ROWS.from_request()
    if head_id > 2**63 - 1:
        abort(404)
    with read_db() as db:
        archives = probe(db).archives
        filters, problems = _filters(db, query, archives)
        if problems:
            return _page("console/access_log.html", 400, query=query, problems=problems, groups=[], more=None)
        head = log_reads.group_head(db, head_id)
        if head is None:
            abort(404)
        reads, next_key = log_reads.group_rows(db, filters, head, after, GROUP_PAGE, archives)
    if not reads:
        abort(404)  # the head is not a read these filters show
    more = more_url(".group", GROUP_ROWS, next_key, {**query, "head_id": str(head_id)})
    template = "console/partials/access_log_reads.html" if rows_only() else "console/access_log_group.html"
    return _page(template, query=query, head=head, reads=reads, more=more,
                 back=url_for(".index", **_given(query)))


def _given(query: dict[str, str]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if v}


def _export_url(query: dict[str, str]) -> str:
    return url_for(".export", **_given(query))


def safe_cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: one that would start a formula gets a quote first."""
    cell = "" if value is None else str(value)
    return "'" + cell if cell.startswith(FORMULA_START) else cell


EXPORT_COLUMNS = ("id", "at", "username", "channel", "admin_token_id", "action", "target", "target_name",
                  "first_sequence", "last_sequence")


def target_name(row) -> str | None:
    """What a read's target is called, as the console shows it (see the rows partial)."""
    if row.action in ("transcript_view", "transcript_export"):
        return row.conversation
    if row.action == "run_trace_view" and row.run_conversation is not None:
        return f"{row.run_conversation} · {row.run_route}"
    if row.action in ("snapshot_view", "snapshot_download") and row.approval_number is not None:
        return f"approval #{row.approval_number} · {row.approval_tool}"
    if row.action == "job_trace_view":
        return row.job_tool
    return None


@bp.get("/export.csv")
@permission_required("audit:read")
def export():
    """Every individual read under the filters, as CSV, streamed page by page (keyset)."""
    query = _query()
    with database().session() as db:
        archives = probe(db).archives
        filters, problems = _filters(db, query, archives)
        if problems:
            return _page("console/access_log.html", 400, query=query, problems=problems, groups=[], more=None)
        record_read(db, "access_log_export", urlencode(_given(query)) or "all")
    hub_db = database()

    def generate():
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(EXPORT_COLUMNS)
        after = None
        while True:
            with hub_db.session() as db:
                rows, after = log_reads.rows(db, filters, after, EXPORT_BATCH, archives)
            for r in rows:
                writer.writerow([safe_cell(v) for v in (
                    r.id, r.at.isoformat(), r.username, r.channel, r.admin_token_id, r.action, r.target,
                    target_name(r), r.first_sequence, r.last_sequence)])
            yield out.getvalue()
            out.seek(0)
            out.truncate()
            if after is None:
                return

    response = Response(stream_with_context(generate()), mimetype="text/csv")
    response.headers["Content-Disposition"] = 'attachment; filename="access-log.csv"'
    return response
