"""Every read of a transcript is in the access log with the sequences it showed: a page opened at
the start, at a position or at the end, the htmx pages loaded before and after, the Markdown view,
the hits of a search inside the transcript (the span from the first hit shown to the last), the
JSON export (its whole range) and the admin API's pages. A read that showed no event records no
range; a refused read records nothing.

Pages are small here (the window, its share before the target and the hits per page are set low)
so that a 40-event archive has several of each; every read goes over HTTP to a live server on a
real PostgreSQL, and SQL only checks what was (not) written."""
from __future__ import annotations

import json
import re
import uuid

import pytest

from admin_app.console import conversations
from tests.helpers import admin_token, assert_error
from tests.test_access_log_console import DASH, groups_of
from tests.test_console_transcript import Reader

TURNS = 10            # 4 events each: turn_start, user_message, assistant_message, turn_end
NEEDLE_TURNS = (2, 5, 9)  # their user messages (sequences 6, 18 and 34) hold the needle
NEEDLE = "Wombat-3"


def user_sequence(turn: int) -> int:
    return 4 * (turn - 1) + 2


@pytest.fixture
def small_pages(monkeypatch):
    monkeypatch.setattr(conversations, "WINDOW", 10)
    monkeypatch.setattr(conversations, "WINDOW_BEFORE", 3)
    monkeypatch.setattr(conversations, "HITS_PAGE", 2)


@pytest.fixture
def archive(hub, small_pages) -> str:
    """An archive of 40 events; three user messages, not next to each other, hold the needle."""
    archive_id = hub.archive("conv-ranges")
    events: list[dict] = []
    for n in range(1, TURNS + 1):
        question = f"Where is {NEEDLE} number {n}?" if n in NEEDLE_TURNS else f"Question {n}"
        events += hub.exchange(archive_id, len(events) + 1, f"turn-{n}", question, f"Answer {n}")
    hub.append(archive_id, events)
    assert [user_sequence(n) for n in NEEDLE_TURNS] == [6, 18, 34]
    return archive_id


@pytest.fixture
def reader(hub) -> Reader:
    return Reader(hub.server.url, hub.admin("support"))


def shown(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-sequence="(\d+)"', html)]


def hits(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-hit="(\d+)"', html)]


def log(sql) -> list[tuple]:
    return sql("SELECT username, action, target, channel, first_sequence, last_sequence FROM bz_access_log "
               "ORDER BY id")


def console_read(archive_id: str, action: str, first: int | None, last: int | None) -> tuple:
    return ("support-user", action, archive_id, "console", first, last)


HTMX = {"HX-Request": "true"}

# Each page of the transcript: its path under the archive, whether it is an htmx fragment, the
# sequences it shows (so, those its read records).
PAGES = {
    "the start": ("", False, range(1, 11)),
    "a position": ("?at=20", False, range(17, 27)),     # 3 before the target, the target, 6 after
    "the end": ("?at=end", False, range(31, 41)),       # near the end: the window fills from before
    "the last sequence": ("?at=40", False, range(31, 41)),
    "the first sequence": ("?at=1", False, range(1, 8)),
    "the Markdown view": ("?view=markdown&at=20", False, range(17, 27)),
    "a page after": ("/events?after=10", True, range(11, 21)),
    "a page before": ("/events?before=17", True, range(7, 17)),
    "the first page before": ("/events?before=5", True, range(1, 5)),
    "the last page after": ("/events?after=35", True, range(36, 41)),
    "a page after, in Markdown": ("/events?after=10&view=markdown", True, range(11, 21)),
    "a page before, opened as a link": ("/events?before=17", False, range(7, 17)),
}


@pytest.mark.parametrize("page", PAGES)
def test_each_page_of_a_transcript_records_exactly_the_sequences_it_showed(archive, reader, sql, page):
    path, htmx, sequences = PAGES[page]
    response = reader.get(f"/console/conversations/{archive}{path}", headers=HTMX if htmx else {})
    assert response.status_code == 200, response.text[-1000:]
    assert shown(response.text) == list(sequences)
    assert log(sql) == [console_read(archive, "transcript_view", sequences[0], sequences[-1])]


def test_a_page_that_showed_no_event_records_no_range(archive, reader, sql):
    for path in ("/events?after=40", "/events?after=1000"):
        response = reader.get(f"/console/conversations/{archive}{path}", headers=HTMX)
        assert response.status_code == 200 and shown(response.text) == []
    assert log(sql) == [console_read(archive, "transcript_view", None, None)] * 2


def test_scrolling_in_both_directions_records_each_page_shown(archive, reader, sql):
    base = f"/console/conversations/{archive}"
    assert shown(reader.get(f"{base}?at=20").text) == list(range(17, 27))
    assert shown(reader.get(f"{base}/events?before=17", headers=HTMX).text) == list(range(7, 17))
    assert shown(reader.get(f"{base}/events?before=7", headers=HTMX).text) == list(range(1, 7))
    assert shown(reader.get(f"{base}/events?after=26", headers=HTMX).text) == list(range(27, 37))
    assert shown(reader.get(f"{base}/events?after=36", headers=HTMX).text) == list(range(37, 41))
    assert [row[4:] for row in log(sql)] == [(17, 26), (7, 16), (1, 6), (27, 36), (37, 40)]


@pytest.mark.parametrize("htmx", [True, False], ids=["fragment", "page"])
def test_a_search_inside_a_transcript_records_the_span_of_the_hits_it_showed(archive, reader, sql, htmx):
    base = f"/console/conversations/{archive}/search"
    headers = HTMX if htmx else {}
    first = reader.get(base, params={"q": NEEDLE.lower()}, headers=headers)
    assert first.status_code == 200
    assert hits(first.text) == [6, 18]  # two a page; the hits are apart, the range spans them
    following = reader.get(base, params={"q": NEEDLE, "after": 18}, headers=headers)
    assert hits(following.text) == [34]
    one = reader.get(base, params={"q": "number 5?"}, headers=headers)
    assert hits(one.text) == [18]
    none = reader.get(base, params={"q": "no such words"}, headers=headers)
    assert none.status_code == 200 and hits(none.text) == []
    past = reader.get(base, params={"q": NEEDLE, "after": 34}, headers=headers)
    assert past.status_code == 200 and hits(past.text) == []
    assert log(sql) == [console_read(archive, "transcript_view", 6, 18),
                        console_read(archive, "transcript_view", 34, 34),
                        console_read(archive, "transcript_view", 18, 18),
                        console_read(archive, "transcript_view", None, None),
                        console_read(archive, "transcript_view", None, None)]


def test_a_search_hit_in_an_answer_is_recorded_at_its_own_sequence(archive, reader, sql):
    response = reader.get(f"/console/conversations/{archive}/search", params={"q": "Answer 10"}, headers=HTMX)
    assert hits(response.text) == [39]  # turn 10's assistant message (and not "Answer 1")
    assert log(sql) == [console_read(archive, "transcript_view", 39, 39)]


def test_the_export_records_the_whole_range_it_exported(archive, reader, sql):
    response = reader.get(f"/console/conversations/{archive}/export.json")
    assert response.status_code == 200
    exported = [e["sequence"] for e in json.loads(response.content)["events"]]
    assert exported == list(range(1, 41))
    assert log(sql) == [console_read(archive, "transcript_export", exported[0], exported[-1])]


def test_the_export_of_an_archive_without_events_records_no_range(hub, reader, sql):
    empty = hub.archive("conv-empty")
    response = reader.get(f"/console/conversations/{empty}/export.json")
    assert response.status_code == 200 and json.loads(response.content)["events"] == []
    assert log(sql) == [console_read(empty, "transcript_export", None, None)]


def test_the_access_log_shows_each_read_with_its_range(archive, reader, hub, sql):
    base = f"/console/conversations/{archive}"
    assert reader.get(f"{base}/search", params={"q": NEEDLE}, headers=HTMX).status_code == 200
    assert reader.get(f"{base}/export.json").status_code == 200
    auditor = Reader(hub.server.url, hub.admin("auditor"))
    page = auditor.get("/console/access-log")
    assert page.status_code == 200
    # Each group row's cells: when, who, through, action, target, sequences, reads.
    assert [(g[3], g[5], g[6]) for g in groups_of(page.text)] == [
        ("transcript_export", f"1{DASH}40", "1 read"), ("transcript_view", f"6{DASH}18", "1 read")]


@pytest.mark.parametrize("query, first, last", [("after_sequence=0&limit=10", 1, 10),
                                                ("after_sequence=17&limit=5", 18, 22),
                                                ("after_sequence=38&limit=10", 39, 40),
                                                ("after_sequence=40&limit=10", None, None)])
def test_an_admin_api_page_of_events_records_the_sequences_it_answered(archive, server, cli, sql, query,
                                                                       first, last):
    token = admin_token(cli, "api-reader", "support")
    response = server.get(f"/admin/api/conversation-audits/{archive}?{query}",
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    answered = [e["sequence"] for e in response.json()["events"]]
    assert ((answered[0], answered[-1]) if answered else (None, None)) == (first, last)
    assert log(sql) == [("api-reader", "transcript_view", archive, "api", first, last)]


READS = ("", "?at=20", "?view=markdown", "/events?after=0", "/events?before=20", "/search?q=Wombat",
         "/export.json")


@pytest.mark.parametrize("path", READS)
def test_a_reader_without_runs_read_is_refused_and_nothing_is_recorded(archive, hub, sql, path):
    approver = Reader(hub.server.url, hub.admin("approver"))
    for headers in ({}, HTMX):
        response = approver.get(f"/console/conversations/{archive}{path}", headers=headers)
        assert response.status_code == 403, response.text[-1000:]
        assert "Question" not in response.text and "Answer" not in response.text and NEEDLE not in response.text
    assert log(sql) == []


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize("archive_id", ["unknown", "not-an-id"])
def test_a_read_of_an_unknown_archive_is_404_and_nothing_is_recorded(archive, reader, sql, path, archive_id):
    target = str(uuid.uuid4()) if archive_id == "unknown" else archive_id
    response = reader.get(f"/console/conversations/{target}{path}")
    assert response.status_code == 404, response.text[-1000:]
    assert log(sql) == []


def test_refused_admin_api_reads_record_nothing(archive, server, cli, sql):
    support = {"Authorization": f"Bearer {admin_token(cli, 'api-reader', 'support')}"}
    approver = {"Authorization": f"Bearer {admin_token(cli, 'api-approver', 'approver')}"}
    refusals = [(approver, f"/conversation-audits/{archive}", 403, "forbidden"),
                (support, f"/conversation-audits/{uuid.uuid4()}", 404, "conversation_audit_not_found"),
                (support, f"/conversation-audits/{archive}?after_sequence=-1", 400, "invalid_request"),
                (support, f"/conversation-audits/{archive}?limit=ten", 400, "invalid_request")]
    for headers, path, status, code in refusals:
        assert_error(server.get(f"/admin/api{path}", headers=headers), status, code)
    assert log(sql) == []
