"""Issue 19 item 3, server side: the access log grouped into reading sessions, filtered, named and
linked, opened group by group, and exported as CSV; reads record the sequences they showed.

Over real HTTP to a live server on a real PostgreSQL. Volumes of log rows are bulk SQL inserts
(the log is what is read here); the reads that write the log go through the real APIs."""
from __future__ import annotations

import csv
import io
import re
import uuid
from html import unescape
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.helpers import admin_token, make_admin
from tests.test_console_server import signed_in

LOG = "/console/access-log"
T0 = "2026-11-30 21:00:00+00"
GROUP_ROW = re.compile(r'<tr class="access-group">(.*?)</tr>', re.DOTALL)

DASH = "\u2013"  # between the ends of a range, as the page writes it


def admin_id(sql, name: str) -> int:
    return sql("SELECT id FROM bz_admins WHERE username = %s", (name,))[0][0]


def reads(sql, name: str, target: str, count: int, *, start: str = T0, step: int = 3,
          action: str = "transcript_view", pages: int = 200) -> None:
    """`count` console reads by `name` of `target`, `step` seconds apart from `start`, each a page
    of `pages` sequences after the one before (bulk insert)."""
    sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel, at, first_sequence, last_sequence) "
        "SELECT %s, %s, %s, %s, 'console', %s::timestamptz + n * make_interval(secs => %s), "
        "       CASE WHEN %s = 'transcript_view' THEN n * %s + 1 END, "
        "       CASE WHEN %s = 'transcript_view' THEN (n + 1) * %s END "
        "FROM generate_series(0, %s - 1) n",
        (admin_id(sql, name), name, action, target, start, step, action, pages, action, pages, count))


def groups_of(html: str) -> list[list[str]]:
    """Each group row as the text of its cells."""
    rows = []
    for row in GROUP_ROW.findall(html):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        rows.append([" ".join(unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells])
    return rows


def log_count(sql) -> int:
    return sql("SELECT count(*) FROM bz_access_log")[0][0]


@pytest.fixture
def auditor(server, cli):
    make_admin(cli, "alice", "auditor")
    make_admin(cli, "bob", "auditor")
    return signed_in(server.url, "alice")


def test_a_long_scroll_is_one_group_and_breaks_split_groups(auditor, sql):
    book, other = str(uuid.uuid4()), str(uuid.uuid4())
    reads(sql, "alice", book, 99)                                    # 21:00:00 .. 21:04:54
    reads(sql, "bob", book, 10, start="2026-11-30 21:01:00+00")       # at the same time: no split
    reads(sql, "alice", book, 5, start="2026-11-30 21:40:00+00")      # 35 minutes later: a new group
    reads(sql, "alice", other, 2, start="2026-11-30 21:41:00+00", action="transcript_export")
    page = auditor.get(LOG)
    assert page.status_code == 200
    shown = groups_of(page.text)
    assert [(g[1], g[3], g[6]) for g in shown] == [
        ("alice", "transcript_export", "2 reads"), ("alice", "transcript_view", "5 reads"),
        ("alice", "transcript_view", "99 reads"), ("bob", "transcript_view", "10 reads")]  # by newest read
    assert shown[2][5] == f"1{DASH}19,800" and shown[3][5] == f"1{DASH}2,000"
    assert f"2026-11-30 21:00:00 UTC {DASH} 2026-11-30 21:04:54 UTC" in shown[2][0]
    assert shown[0][5] == "—"  # an export names no range


def read_at(sql, name: str, target: str, at: str, first: int, last: int) -> None:
    sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel, at, first_sequence, last_sequence) "
        "VALUES (%s, %s, 'transcript_view', %s, 'console', %s, %s, %s)",
        (admin_id(sql, name), name, target, at, first, last))


def test_a_group_names_the_ranges_it_read_not_their_span(auditor, sql):
    """Issue 34 §3: reads of 1-200, 1-200 and 19,801-20,000 are "1-200, 19,801-20,000" (en dashes),
    not "1-20,000"; ranges that touch or overlap merge; past five ranges the rest are counted."""
    book, scattered = str(uuid.uuid4()), str(uuid.uuid4())
    for second, (first, last) in enumerate([(1, 200), (1, 200), (19_801, 20_000), (201, 250), (240, 260)]):
        read_at(sql, "alice", book, f"2026-11-30 21:00:0{second}+00", first, last)
    for n in range(8):  # eight ranges apart from each other, and one inside another
        read_at(sql, "bob", scattered, f"2026-11-30 20:00:0{n}+00", n * 1000 + 1, n * 1000 + 10)
    read_at(sql, "bob", scattered, "2026-11-30 20:00:09+00", 3, 5)
    shown = {g[1]: g for g in groups_of(auditor.get(LOG).text)}
    assert shown["alice"][5] == f"1{DASH}260, 19,801{DASH}20,000" and shown["alice"][6] == "5 reads"
    assert shown["bob"][5] == (f"1{DASH}10, 1,001{DASH}1,010, 2,001{DASH}2,010, 3,001{DASH}3,010, "
                               f"4,001{DASH}4,010 and 3 more ranges")
    assert shown["bob"][6] == "9 reads"


def test_groups_page_by_keyset_with_the_filters_kept(auditor, sql):
    for n in range(120):  # 120 groups: each read an hour after the one before
        reads(sql, "alice", str(uuid.uuid4()), 2, start=f"2026-11-{1 + n // 24:02d} {n % 24:02d}:00:00+00")
    reads(sql, "bob", str(uuid.uuid4()), 3)
    seen: list[list[str]] = []
    url = f"{LOG}?person=alice"
    while url:
        page = auditor.get(url, headers={"HX-Request": "true"} if "cursor" in url else {})
        assert page.status_code == 200
        seen += groups_of(page.text)
        more = re.search(r'hx-get="([^"]+)"', page.text)
        url = unescape(more.group(1)) if more else None
        if url:
            assert parse_qs(urlsplit(url).query)["person"] == ["alice"]
    assert len(seen) == 120 and {g[1] for g in seen} == {"alice"}
    assert len({g[4] for g in seen}) == 120  # no group twice


def test_filters_by_action_target_and_dates(auditor, sql, server):
    book, other = str(uuid.uuid4()), str(uuid.uuid4())
    reads(sql, "alice", book, 3)
    reads(sql, "bob", other, 4, start="2026-11-28 10:00:00+00", action="snapshot_view")
    assert [g[1] for g in groups_of(auditor.get(f"{LOG}?action=snapshot_view").text)] == ["bob"]
    assert [g[6] for g in groups_of(auditor.get(f"{LOG}?target={book.upper()}").text)] == ["3 reads"]
    assert [g[1] for g in groups_of(auditor.get(f"{LOG}?from=2026-11-28&to=2026-11-28").text)] == ["bob"]
    assert [g[1] for g in groups_of(auditor.get(f"{LOG}?from=2026-11-29").text)] == ["alice"]
    assert groups_of(auditor.get(f"{LOG}?person=nobody").text) == []
    assert "No read matches these filters." in auditor.get(f"{LOG}?person=nobody").text


BAD_FILTERS = [
    ("action=drop_table", "Choose an action from the list."),
    ("from=yesterday", "“From” is a date written YYYY-MM-DD."),
    ("to=2026-02-30", "“To” is a date written YYYY-MM-DD."),
    ("from=2026-12-02&to=2026-12-01", "“From” is after “To”."),
    ("person=" + "p" * 192, "A person is a username of at most 191 characters."),
    ("target=" + "t" * 192, "A target is an ID or a client conversation ID of at most 191 characters."),
]


def test_a_bad_filter_is_a_clear_400_that_reads_and_writes_nothing(auditor, sql):
    reads(sql, "alice", str(uuid.uuid4()), 3)
    before = sql("SELECT count(*), max(id) FROM bz_access_log")
    for query, message in BAD_FILTERS:
        for path in (LOG, f"{LOG}/export.csv"):
            page = auditor.get(f"{path}?{query}")
            assert page.status_code == 400, (path, query)
            assert message in unescape(page.text), (path, query)
            assert groups_of(page.text) == []
    assert sql("SELECT count(*), max(id) FROM bz_access_log") == before


def test_a_bad_cursor_is_refused(auditor):
    page = auditor.get(f"{LOG}?cursor=not-a-cursor")
    assert page.status_code == 400 and "damaged" in unescape(page.text)


def test_a_group_opens_to_its_individual_reads(auditor, sql):
    book = str(uuid.uuid4())
    reads(sql, "alice", book, 150)
    reads(sql, "alice", book, 2, start="2026-11-30 23:00:00+00")  # a later group of the same target
    page = auditor.get(LOG)
    link = unescape(re.findall(r'href="(/console/access-log/group/[^"]+)"', page.text)[1])
    first = auditor.get(link)
    assert first.status_code == 200
    rows = re.findall(r'<tr><td data-label="When"><time', first.text)
    assert len(rows) == 100
    more = unescape(re.search(r'hx-get="([^"]+)"', first.text).group(1))
    rest = auditor.get(more, headers={"HX-Request": "true"})
    assert len(re.findall(r'<tr><td data-label="When"><time', rest.text)) == 50
    assert "hx-get" not in rest.text
    assert auditor.get("/console/access-log/group/999999999").status_code == 404


def test_targets_are_named_and_linked_in_one_page(hub, server, sql):
    archive, run = hub.traced_conversation()
    [(approval,)] = sql("SELECT id FROM bz_tool_approvals")
    [(job,)] = sql("SELECT id FROM bz_tool_invocations WHERE status = 'executed'")
    reader = hub.admin("auditor", "carol")
    reads(sql, reader, str(archive), 2, pages=4)
    reads(sql, reader, str(run), 1, action="run_trace_view", start="2026-11-30 22:00:00+00")
    reads(sql, reader, str(approval), 1, action="snapshot_view", start="2026-11-30 22:01:00+00")
    reads(sql, reader, str(job), 1, action="job_trace_view", start="2026-11-30 22:02:00+00")
    page = signed_in(server.url, reader).get(LOG)
    assert page.status_code == 200
    html = unescape(page.text)
    assert f'href="/console/conversations/{archive}?at=1">conv-acme-credit</a>' in html
    assert f'href="/console/runs/{run}">conv-acme-credit · desk</a>' in html
    assert re.search(rf'href="/console/approvals/{approval}">approval #\d+ · customer_update_credit_limit</a>', html)
    assert f'href="/console/runs/{run}">customer_get (job of a run)</a>' in html
    # Filtering by the client conversation id finds the archive's reads.
    by_name = signed_in(server.url, reader).get(f"{LOG}?target=conv-acme-credit")
    assert [g[3] for g in groups_of(by_name.text)] == ["transcript_view"]


def test_untrusted_targets_are_escaped(auditor, sql):
    reads(sql, "alice", '<img src=x onerror=alert(1)>"', 1, action="run_trace_view")
    page = auditor.get(LOG)
    assert "<img src=x" not in page.text and "&lt;img src=x onerror=alert(1)&gt;" in page.text


def test_the_export_is_every_row_streamed_safe_and_recorded(auditor, sql):
    book = str(uuid.uuid4())
    reads(sql, "alice", book, 2500, step=1)
    reads(sql, "bob", "=HYPERLINK(\"http://x\")", 1, action="run_trace_view")
    reads(sql, "bob", "@SUM(A1)", 1, action="run_trace_view")
    with auditor.http.get(f"{auditor.base}{LOG}/export.csv", stream=True, timeout=120) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/csv")
        assert response.headers["Content-Disposition"] == 'attachment; filename="access-log.csv"'
        assert "Content-Length" not in response.headers
        chunks = list(response.iter_content(chunk_size=None))
    assert len(chunks) > 1
    table = list(csv.reader(io.StringIO(b"".join(chunks).decode("utf-8"))))
    assert table[0][:7] == ["id", "at", "username", "channel", "admin_token_id", "action", "target"]
    body = table[1:]
    assert body[0][5:7] == ["access_log_export", "all"]  # the export itself is on record, newest
    assert len(body) == 2503 and len({r[0] for r in body}) == 2503
    assert {r[6] for r in body if r[2] == "bob"} == {"'=HYPERLINK(\"http://x\")", "'@SUM(A1)"}
    assert sql("SELECT username, action, target FROM bz_access_log WHERE action = 'access_log_export'") == [
        ("alice", "access_log_export", "all")]

    filtered = auditor.get(f"{LOG}/export.csv?person=bob&action=run_trace_view")
    assert len(list(csv.reader(io.StringIO(filtered.text)))) == 3  # the header and bob's two reads
    assert sql("SELECT target FROM bz_access_log WHERE action = 'access_log_export' ORDER BY id")[1] == (
        "person=bob&action=run_trace_view",)
    # The export's own record is named and links back to the same filters.
    page = unescape(auditor.get(f"{LOG}?action=access_log_export").text)
    assert 'href="/console/access-log?person=bob&action=run_trace_view">the log, filtered</a>' in page


@pytest.mark.parametrize("role", ["support", "approver"])
def test_without_audit_read_the_page_group_and_export_are_403_and_write_nothing(server, cli, sql, role):
    make_admin(cli, "alice", "auditor")
    reads(sql, "alice", str(uuid.uuid4()), 3)
    [(head,)] = sql("SELECT max(id) FROM bz_access_log")
    make_admin(cli, "reader", role)
    reader = signed_in(server.url, "reader")
    before = sql("SELECT count(*), max(id) FROM bz_access_log")
    for path in (LOG, f"{LOG}/group/{head}", f"{LOG}/export.csv", f"{LOG}/export.csv?person=alice"):
        response = reader.get(path)
        assert response.status_code == 403, path
        assert "alice" not in response.text and "transcript_view" not in response.text
    assert sql("SELECT count(*), max(id) FROM bz_access_log") == before


def test_an_api_transcript_read_records_the_page_it_answered(hub, server, cli, sql):
    archive = hub.archive("conv-ranged")
    hub.append(archive, hub.exchange(archive, 1, "t1", "q", "a") + hub.exchange(archive, 5, "t2", "q", "a"))
    token = admin_token(cli, "api-auditor", "auditor")
    headers = {"Authorization": f"Bearer {token}"}
    for query in ("after_sequence=2&limit=3", "after_sequence=8&limit=3"):
        response = server.get(f"/admin/api/conversation-audits/{archive}?{query}", headers=headers)
        assert response.status_code == 200, response.text
    assert sql("SELECT action, channel, first_sequence, last_sequence FROM bz_access_log ORDER BY id") == [
        ("transcript_view", "api", 3, 5), ("transcript_view", "api", None, None)]  # past the end: no range


def test_the_table_refuses_a_half_or_reversed_range(cli, sql):
    make_admin(cli, "alice", "auditor")
    for first, last in ((1, None), (None, 1), (5, 4)):
        with pytest.raises(psycopg.errors.CheckViolation):
            sql("INSERT INTO bz_access_log (admin_id, username, action, target, channel, first_sequence, "
                "last_sequence) VALUES (%s, 'alice', 'transcript_view', 'x', 'console', %s, %s)",
                (admin_id(sql, "alice"), first, last))
    assert log_count(sql) == 0
