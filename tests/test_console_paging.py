"""Issue 18: one paging style in the console. Conversations, the approvals queue and history, runs
and the access log are keyset reads continued by an opaque `cursor`; the first page and every
"load more" render through the same rows partial; a cursor the list did not write is a 400.

Lists are filled through the agent APIs on a real PostgreSQL, with SQL only to put several rows at
the same instant (so page boundaries fall inside ties of the sort key) and to check the order.
Page sizes are made small where the rows would otherwise be many; the approvals queue is tested
at its real size."""
from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import UTC, datetime
from html import unescape

import pytest

from admin_app.console import access_log as access_log_view
from admin_app.console import approvals as approvals_view
from admin_app.console import conversations as conversations_view
from admin_app.console import runs as runs_view
from admin_app.console.paging import BAD_CURSOR, InvalidCursor, Keyset
from tests.helpers import make_admin
from tests.test_console_server import Agent, csrf_of, desk_config, signed_in

MORE = re.compile(r'<tr class="more" hx-get="([^"]+)" hx-trigger="revealed" hx-swap="outerHTML">'
                  r'<td colspan="\d+"><a href="([^"]+)">Load more</a></td></tr>')
HTMX = {"HX-Request": "true"}
TIE = "2026-01-01T00:00:00Z"
AN_ID = "0e45414a-4e02-4671-b58c-51f47e450c74"


@pytest.fixture
def desk(governed, server, cli, business, tmp_path) -> Agent:
    """The agent on route `desk`, where customer notes wait for an approval."""
    path = tmp_path / "desk.json"
    path.write_text(json.dumps(desk_config(business.url, tmp_path)), "utf-8")
    code, _, err = cli("config", "apply", str(path))
    assert code == 0, err
    return Agent(server, governed)


@pytest.fixture
def admin(server, cli):
    make_admin(cli, "pager", "admin")
    return signed_in(server.url, "pager")


def more_of(html: str) -> str | None:
    """The "load more" URL of a page or fragment; its htmx request and its plain link agree."""
    found = MORE.findall(html)
    assert len(found) <= 1, found
    if not found:
        assert 'class="more"' not in html
        return None
    fetched, linked = found[0]
    assert fetched == linked
    return unescape(fetched)


def rows_of(kind: str, html: str) -> list[str]:
    if kind == "access-log":
        return re.findall(r'<code class="small">([^<]*)</code></td>', html)  # one group's target
    return re.findall(rf'<tr data-href="/console/{kind}/([0-9a-f-]{{36}})[?"]', html)


def walk(browser, kind: str, path: str, **params) -> tuple[list[str], list[str]]:
    """Every row of a list, following its "load more" links as htmx does; and the links."""
    page = browser.get(path, params=params)
    assert page.status_code == 200, page.text[:2000]
    assert "<html" in page.text
    seen, links = rows_of(kind, page.text), []
    while (link := more_of(page.text)) is not None:
        links.append(link)
        page = browser.get(link, headers=HTMX)
        assert page.status_code == 200, page.text[:2000]
        assert "<html" not in page.text and page.text.lstrip().startswith("<tr")  # the rows partial only
        assert "HX-Request" in page.headers.get("Vary", "")
        seen += rows_of(kind, page.text)
    return seen, links


def at_ties(sql, table: str, column: str, ids: list, per_instant: int) -> None:
    """Put `per_instant` rows (in the order of `ids`) at each instant, one second apart."""
    for n, ident in enumerate(ids):
        sql(f"UPDATE {table} SET {column} = %s::timestamptz + make_interval(secs => %s) WHERE id = %s",
            (TIE, n // per_instant, ident))


def flat(rows) -> list[str]:
    return [str(r[0]) for r in rows]


# ================================================================ the cursor itself

KEY = Keyset("things", (datetime, uuid.UUID, int))
A_KEY = (datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=UTC), uuid.uuid4(), 2**63 - 1)


def _raw(data) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_a_cursor_is_url_safe_text_that_gives_back_its_key():
    cursor = KEY.encode(A_KEY)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    assert KEY.decode(cursor) == A_KEY
    assert KEY.decode(cursor)[0].tzinfo is not None


@pytest.mark.parametrize("cursor", [
    "", "not a cursor!", "a" * 300, "%%%%", "AAAA",
    _raw({"things": 1}), _raw(["things", 1]), _raw(["things", 2, TIE, AN_ID, 1]),
    _raw(["others", 1, TIE, AN_ID, 1]),
    _raw(["things", 1, "2026-01-01T00:00:00", AN_ID, 1]),  # a time without its offset
    _raw(["things", 1, "yesterday", AN_ID, 1]),
    _raw(["things", 1, TIE, "not-a-uuid", 1]),
    _raw(["things", 1, TIE, AN_ID, 2**63]),
    _raw(["things", 1, TIE, AN_ID, True]),
    _raw(["things", 1, TIE, AN_ID, 1.5]),
    _raw(["things", 1, TIE, AN_ID, 1, 2]),
    base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("="),
])
def test_a_cursor_this_list_did_not_write_is_refused(cursor):
    with pytest.raises(InvalidCursor):
        KEY.decode(cursor)


def test_a_key_of_another_shape_cannot_be_written():
    with pytest.raises(TypeError):
        KEY.encode(A_KEY[:2])
    with pytest.raises(TypeError):
        KEY.encode((A_KEY[0], A_KEY[1], 1.5))


# ================================================================ each list, page by page

def test_conversations_walk_every_archive_once_in_order_with_the_filters_kept(desk, admin, sql, monkeypatch):
    monkeypatch.setattr(conversations_view, "PAGE", 4)
    paged = [desk.archive(f"paged-{n}") for n in range(10)]
    others = [desk.archive(f"other-{n}") for n in range(3)]
    at_ties(sql, "bz_agent_conversation_archives", "updated_at", paged + others, 3)
    everything = flat(sql("SELECT id FROM bz_agent_conversation_archives ORDER BY updated_at DESC, id DESC"))
    assert sorted(everything) == sorted(paged + others)

    seen, links = walk(admin, "conversations", "/console/conversations/")
    assert seen == everything and len(links) == 3

    seen, links = walk(admin, "conversations", "/console/conversations/", q="paged", state="ready")
    assert seen == [a for a in everything if a in paged] and len(links) == 2
    for link in links:
        assert "q=paged" in link and "state=ready" in link


def test_the_runs_page_lists_the_latest_runs_and_pages_through_them(desk, admin, sql, monkeypatch):
    monkeypatch.setattr(runs_view, "PAGE", 5)
    alpha = [desk.turn("conv-alpha", f"turn-{n}", f"alpha {n}") for n in range(8)]
    beta = [desk.turn("conv-beta", f"turn-{n}", f"beta {n}") for n in range(4)]
    at_ties(sql, "bz_runs", "created_at", alpha + beta, 3)
    newest_first = flat(sql("SELECT id FROM bz_runs ORDER BY created_at DESC, id DESC"))

    # No lookup: the most recent runs, all of them reachable.
    seen, links = walk(admin, "runs", "/console/runs/")
    assert seen == newest_first and len(links) == 2

    seen, links = walk(admin, "runs", "/console/runs/", conversation="conv-alpha", route="desk")
    assert seen == [r for r in newest_first if r in alpha] and len(links) == 1
    assert "conversation=conv-alpha" in links[0] and "route=desk" in links[0]

    assert walk(admin, "runs", "/console/runs/", run_id=beta[0]) == ([beta[0]], [])
    page = admin.get("/console/runs/", params={"session": "not-a-uuid"})
    assert page.status_code == 200 and rows_of("runs", page.text) == [] and "No run matches." in page.text


def test_the_access_log_pages_newest_first(admin, sql, monkeypatch):
    monkeypatch.setattr(access_log_view, "PAGE", 4)
    [(admin_id,)] = sql("SELECT id FROM bz_admins WHERE username = 'pager'")
    for n in range(10):
        sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel) "
            "VALUES (%s, 'pager', 'run_trace_view', %s, 'console')", (admin_id, f"target-{n:02d}"))
    seen, links = walk(admin, "access-log", "/console/access-log")
    assert seen == [f"target-{n:02d}" for n in reversed(range(10))] and len(links) == 2


def test_the_approvals_history_pages_latest_decision_first(desk, admin, sql, monkeypatch):
    monkeypatch.setattr(approvals_view, "PAGE", 4)
    decided = [desk.note(f"note {n}")["approval"]["id"] for n in range(9)]
    pending = desk.note("still pending")["approval"]["id"]
    sql("UPDATE bz_tool_approvals SET status = 'approved', decided_by = 'pager' WHERE id = ANY(%s::uuid[])",
        (decided,))
    at_ties(sql, "bz_tool_approvals", "decided_at", decided, 3)
    latest_first = flat(sql("SELECT id FROM bz_tool_approvals WHERE status <> 'pending' "
                            "ORDER BY decided_at DESC, id"))

    seen, links = walk(admin, "approvals", "/console/approvals/history")
    assert seen == latest_first and len(links) == 2
    assert walk(admin, "approvals", "/console/approvals/") == ([pending], [])


def test_the_queue_misses_no_pending_approval_when_some_are_decided_between_pages(desk, server, cli, sql):
    """The bug keyset paging fixes: an offset would skip as many as were decided meanwhile."""
    make_admin(cli, "approver-one", "approver")
    make_admin(cli, "approver-two", "approver")
    notes = [desk.note(f"note {n:02d}")["approval"] for n in range(56)]
    at_ties(sql, "bz_tool_approvals", "created_at", [a["id"] for a in notes], 7)
    oldest_first = flat(sql("SELECT id FROM bz_tool_approvals ORDER BY created_at, id"))

    one = signed_in(server.url, "approver-one")
    first = one.get("/console/approvals/")
    assert first.status_code == 200
    shown = rows_of("approvals", first.text)
    assert shown == oldest_first[:50]
    assert one.get("/console/approvals/count").text.count(">56<") == 1

    two = signed_in(server.url, "approver-two")
    hashes = {a["id"]: a["args_hash"] for a in notes}
    for approval_id in shown[:5]:
        token = csrf_of(two.get(f"/console/approvals/{approval_id}").text)
        decided = two.post(f"/console/approvals/{approval_id}/decide",
                           data={"decision": "approve", "args_hash": hashes[approval_id], "csrf_token": token})
        assert decided.status_code == 303

    rest = one.get(more_of(first.text), headers=HTMX)
    assert rest.status_code == 200
    assert rows_of("approvals", rest.text) == oldest_first[50:]
    assert more_of(rest.text) is None
    assert rows_of("approvals", one.get("/console/approvals/").text) == oldest_first[5:55]


# ================================================================ the same URL without JavaScript

def test_a_load_more_link_opened_as_a_page_shows_the_whole_page_from_there(desk, admin, monkeypatch):
    monkeypatch.setattr(runs_view, "PAGE", 2)
    runs = [desk.turn("conv-plain", f"turn-{n}", f"plain {n}") for n in range(5)]
    first = admin.get("/console/runs/", params={"conversation": "conv-plain"})
    link = more_of(first.text)
    page = admin.get(link)  # no HX-Request: a plain link, a new tab, a history restore
    assert page.status_code == 200 and "<html" in page.text
    assert 'value="conv-plain"' in page.text  # the lookup form keeps the filter
    newest_first = runs[::-1]
    assert rows_of("runs", first.text) == newest_first[:2] and rows_of("runs", page.text) == newest_first[2:4]
    restore = admin.get(link, headers={**HTMX, "HX-History-Restore-Request": "true"})
    assert "<html" in restore.text


# ================================================================ refused cursors

LISTS = {
    "conversations": "/console/conversations/",
    "queue": "/console/approvals/",
    "history": "/console/approvals/history",
    "runs": "/console/runs/",
    "access log": "/console/access-log",
}
# For each list, a well-formed cursor of another: same key shape where one exists.
A_TIME_KEY = (datetime.now(UTC), uuid.uuid4())
FOREIGN = {
    "conversations": approvals_view.QUEUE.encode(A_TIME_KEY),
    "queue": approvals_view.HISTORY.encode(A_TIME_KEY),
    "history": approvals_view.QUEUE.encode(A_TIME_KEY),
    "runs": conversations_view.ARCHIVES.encode(A_TIME_KEY),
    "access log": runs_view.RUNS.encode(A_TIME_KEY),
}
BAD = {
    "junk": lambda name: "not-a-cursor",
    "not base64": lambda name: "abc$def",
    "the old conversation cursor": lambda name: f"{TIE}|{uuid.uuid4()}",
    "another list's": FOREIGN.get,
    "an older format": lambda name: _raw(["conversations", 0, TIE, str(uuid.uuid4())]),
}


@pytest.mark.parametrize("name", LISTS)
def test_a_bad_or_foreign_cursor_is_a_400_page_that_reads_and_writes_nothing(name, desk, admin, sql):
    desk.archive("listed-conversation")
    desk.note("listed note")
    before = sql("SELECT count(*) FROM bz_access_log")
    for bad, cursor in BAD.items():
        for headers in ({}, HTMX):
            response = admin.get(LISTS[name], params={"cursor": cursor(name)}, headers=headers)
            assert response.status_code == 400, (bad, headers)
            assert BAD_CURSOR in unescape(response.text)
            assert re.findall(r'<tr data-href="', response.text) == []
    assert sql("SELECT count(*) FROM bz_access_log") == before
