"""Issue 19, search across archives, server side: one search box finds archives by ID prefix,
conversation and member label, and messages by their content; principal, tenant, app, route,
state, last turn and a date filter that names its field; sortable columns, each paged by its own
cursor; totals exact up to a cap; a filter value that does not fit is a 400 page naming it.

Archives and events are made through the agent API (bulk SQL only for the index check's volume),
and every page is read over real HTTP with a signed-in console session."""
from __future__ import annotations

import re
import uuid
from html import unescape

import psycopg
import pytest

from admin_app.console import conversations as view
from admin_app.reads import archives, ids, search
from tests.helpers import make_admin
from tests.test_console_paging import HTMX, more_of, rows_of
from tests.test_console_server import Agent, assert_no_active_markup, signed_in

PATH = "/console/conversations/"
HIT = re.compile(r'<tr data-hit>.*?<a href="([^"]+)" class="hit-link">#(\d+)</a></td>\s*<td>([a-z_]+)</td>\s*'
                 r'<td class="snippet">(.*?)</td>', re.S)


@pytest.fixture
def agent(governed, server) -> Agent:
    return Agent(server, governed)


@pytest.fixture
def auditor(server, cli):
    make_admin(cli, "searcher", "auditor")
    return signed_in(server.url, "searcher")


def other_agent(cli, server, principal: str) -> Agent:
    """A second agent session on `desk` with its own principal."""
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk", "--principal", principal)
    assert code == 0, err
    return Agent(server, out)


def talk(agent: Agent, archive: str, *messages: str) -> None:
    """One turn per pair of messages (user, assistant), appended after what is there."""
    events, seq = [], 0
    for n in range(0, len(messages), 2):
        turn = f"turn-{uuid.uuid4().hex[:8]}"
        kinds = [("turn_start", None), ("user_message", messages[n]),
                 ("assistant_message", messages[n + 1] if n + 1 < len(messages) else "ok"), ("turn_end", None)]
        for kind, content in kinds:
            seq += 1
            event = {"event_id": f"{turn}-{seq}", "sequence": seq, "client_turn_id": turn, "kind": kind}
            if content is not None:
                event["content"] = content
            if kind == "turn_end":
                event["status"] = "completed"
            events.append(event)
    agent.append(archive, events)


def listed(html: str) -> list[str]:
    return rows_of("conversations", html)


def hits_of(html: str) -> list[tuple[str, int, str, str]]:
    return [(unescape(href), int(seq), role, snippet) for href, seq, role, snippet in HIT.findall(html)]


def total_of(html: str, attribute: str = "data-total") -> str:
    match = re.search(rf'<p class="total" {attribute}>([^<]*)</p>', html)
    assert match, "no total on the page"
    return unescape(match.group(1))


# ================================================================ IDs, conversations, labels

def test_one_search_box_finds_archives_by_id_prefix_conversation_and_label(agent, auditor, cli, server, sql):
    first = agent.archive("conv-first-search", "Dana at the desk")
    other = other_agent(cli, server, '{"id": "user-77", "tenant": "tenant-9"}')
    second = other.archive("conv-second-search", "Night shift")
    client_id = str(sql("SELECT client_archive_id FROM bz_agent_conversation_archives WHERE id = %s", (first,))[0][0])

    def found(q: str) -> set[str]:
        page = auditor.get(PATH, params={"q": q})
        assert page.status_code == 200, page.text[:2000]
        return set(listed(page.text))

    assert found(first[:8]) == {first}  # an 8-character prefix of the archive id
    assert found(first) == {first} and found(first.upper()) == {first}  # the full value, any case
    assert found(first[:13]) >= {first}  # a prefix with its dash
    assert found(client_id[:8]) >= {first}  # the client's archive id
    assert found(other.sid[:8]) >= {second} and first not in found(other.sid)  # a member's session id
    assert found("second-sea") == {second}  # the client conversation id, by substring
    assert found("night SHIFT") == {second}  # a member label, by substring, any case
    # Fewer than 4 hex digits is no ID prefix (and no conversation or label here contains them).
    assert first not in found(first[:3])
    assert found("conv-%") == set()  # `%` and `_` are literal characters
    assert total_of(auditor.get(PATH, params={"q": first[:8]}).text) == "1 conversation"


def test_a_short_hex_search_is_not_taken_for_an_id_prefix():
    assert ids.id_range("c656") is not None and ids.id_range("c65") is None
    low, high = ids.id_range("c656db38")
    assert str(low) == "c656db38-0000-0000-0000-000000000000" and str(high) == "c656db39-0000-0000-0000-000000000000"
    assert ids.id_range("ffff-") is None  # a dash where a UUID's text has none
    assert ids.id_range("ffffffff")[1] is None  # the last prefix has no upper bound
    assert ids.id_range("c656db38-") is not None and ids.id_range("c656db38-1a") is not None
    assert ids.id_range("ACME") is None and ids.id_range("c656db38-1a")[0].hex.startswith("c656db381a")


# ================================================================ message content

def test_content_hits_mark_the_match_escaped_and_link_to_the_exact_event(agent, auditor, sql):
    archive = agent.archive("conv-hostile-search", "Desk")
    talk(agent, archive, "Where are the pallets?", "Aisle 4 holds <script>alert(1)</script> PALLETS and pallets.",
         "Nothing here", "still nothing")
    quiet = agent.archive("conv-quiet-search")
    talk(agent, quiet, "hello", "no match here")

    page = auditor.get(PATH, params={"q": "pallets"})
    assert page.status_code == 200
    assert_no_active_markup(page.text)
    hits = hits_of(page.text)
    assert [(h[1], h[2]) for h in hits] == [(2, "user"), (3, "assistant")]
    for href, seq, _role, _snippet in hits:
        assert href == f"/console/conversations/{archive}?at={seq}#seq-{seq}"
    snippet = hits[1][3]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in snippet and "<script>" not in snippet
    assert snippet.count("<mark>") == 2 and "<mark>PALLETS</mark>" in snippet and "<mark>pallets</mark>" in snippet
    assert total_of(page.text, "data-hits-total") == "2 messages"
    assert listed(page.text) == []  # no conversation is *named* after pallets
    assert "0 conversations" in total_of(page.text)

    # The other filters narrow the messages to the conversations they select.
    assert hits_of(auditor.get(PATH, params={"q": "pallets", "state": "enrolling"}).text) == []
    assert len(hits_of(auditor.get(PATH, params={"q": "pallets", "tenant": "tenant-7"}).text)) == 2

    # A hit opens the transcript at its event.
    opened = auditor.get(hits[1][0].split("#")[0])
    assert opened.status_code == 200 and 'id="seq-3"' in opened.text

    # Two characters are no content search: the page says so instead of reading every message.
    short = auditor.get(PATH, params={"q": "pa"})
    assert short.status_code == 200 and hits_of(short.text) == []
    assert "Message text is searched from 3 characters on." in unescape(short.text)

    # Each search that showed message text is in the access log, named by its filters; the
    # one that showed none is not.
    assert sql("SELECT action, target, first_sequence FROM bz_access_log WHERE action = 'message_search' "
               "ORDER BY id") == [("message_search", "q=pallets", None),
                                  ("message_search", "q=pallets&state=enrolling", None),
                                  ("message_search", "q=pallets&tenant=tenant-7", None)]
    log = auditor.get("/console/access-log")
    assert log.status_code == 200
    assert '<a href="/console/conversations/?q=pallets&amp;tenant=tenant-7">a search of message text</a>' in log.text


def test_content_hits_page_by_their_own_cursor(agent, auditor, sql, monkeypatch):
    monkeypatch.setattr(view, "MESSAGES_PAGE", 3)
    archive = agent.archive("conv-many-hits")
    agent.fill(archive, 16)  # "user says N" / "assistant says N": 8 messages
    page = auditor.get(PATH, params={"q": "says"})
    seen = [h[1] for h in hits_of(page.text)]
    assert total_of(page.text, "data-hits-total") == "8 messages"
    while (link := more_of(page.text)) is not None and "/messages" in link:
        page = auditor.get(link, headers=HTMX)
        assert page.status_code == 200 and "<html" not in page.text
        seen += [h[1] for h in hits_of(page.text)]
    assert seen == [2, 3, 6, 7, 10, 11, 14, 15]
    # Opened as a plain link, the messages page stands alone.
    link = more_of(auditor.get(PATH, params={"q": "says"}).text.split('id="hits-heading"')[1])
    whole = auditor.get(link)
    assert whole.status_code == 200 and "<html" in whole.text and [h[1] for h in hits_of(whole.text)] == [7, 10, 11]
    # The archive list's cursor is not the messages' cursor, and the messages need a term.
    wrong = auditor.get(f"{PATH}messages", params={"q": "says", "cursor": view.ARCHIVES.encode(
        (sql("SELECT updated_at FROM bz_agent_conversation_archives")[0][0], uuid.UUID(archive)))})
    assert wrong.status_code == 400
    short = auditor.get(f"{PATH}messages", params={"q": "sa"})
    assert short.status_code == 400 and "message text is searched from 3 characters on" in unescape(short.text)


def volume_archive(agent, sql) -> str:
    """An archive of 20,000 routine messages and one zebra (sequence 12,345), its indexes and
    statistics as autovacuum leaves them after a bulk load."""
    archive = agent.archive("conv-volume")
    sql("""INSERT INTO bz_agent_conversation_events
               (archive_id, sequence, event_id, client_turn_id, kind, content, body_sha256)
           SELECT %s, n, 'e' || n, 't' || n, 'user_message', 'routine line number ' || n, repeat('0', 64)
           FROM generate_series(1, 20000) n""", (archive,))
    sql("UPDATE bz_agent_conversation_events SET content = 'a zebra crossing by the depot' "
        "WHERE archive_id = %s AND sequence = 12345", (archive,))
    sql("UPDATE bz_agent_conversation_archives SET last_sequence = 20000 WHERE id = %s", (archive,))
    # Merge the index's pending entries, refresh statistics. (Each partition's index, when the
    # events are partitioned: --events-partitions.)
    sql("SELECT gin_clean_pending_list(oid::regclass) FROM pg_class WHERE relkind = 'i' "
        "AND relname LIKE 'bz\\_agent\\_conversation\\_events\\_content\\_trgm%%'")
    sql("ANALYZE bz_agent_conversation_events")
    return archive


def test_a_content_search_reads_the_trigram_index_not_every_event(agent, sql, db_url):
    archive = volume_archive(agent, sql)
    params: dict = {}
    where = search._message_conditions({"q": "zebra crossing"}, params)
    query = ("SELECT e.sequence FROM bz_agent_conversation_events e JOIN bz_agent_conversation_archives a "
             f"ON a.id = e.archive_id WHERE {' AND '.join(where)} ORDER BY e.archive_id, e.sequence LIMIT 51")
    with psycopg.connect(db_url) as conn:
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + re.sub(r":(\w+)", r"%(\1)s", query), params))
    assert "bz_agent_conversation_events_content_trgm" in plan, plan
    # The table that holds the events (their partition, when partitioned: the empty ones may
    # well be scanned) is read through the index.
    holder = sql("SELECT DISTINCT tableoid::regclass::text FROM bz_agent_conversation_events WHERE archive_id = %s",
                 (archive,))[0][0]
    assert f"Seq Scan on {holder} " not in plan, plan


def test_a_search_inside_one_transcript_reads_that_archive_not_the_whole_trigram_index(agent, sql, db_url):
    """The trigram index covers every archive: a transcript's search through it costs what the word
    costs in all of them (a million rows for a common one on a big hub). Read in sequence order, it
    costs at most this archive's events, whatever the word; the planner would take the index for
    a rare word, so that is the case checked."""
    archive = volume_archive(agent, sql)
    params = {"id": archive, "upto": 20000, "q": "%ZEBRA%", "after": 0, "limit": 51, "cap": 1001}
    with psycopg.connect(db_url) as conn:
        def run(query: str) -> list:
            return conn.execute(re.sub(r":(\w+)", r"%(\1)s", query), params).fetchall()

        assert run(archives.IN_ARCHIVE_COUNT) == [(1,)]
        assert [r[0] for r in run(archives.IN_ARCHIVE_PAGE)] == [12345]
        for query in (archives.IN_ARCHIVE_COUNT, archives.IN_ARCHIVE_PAGE):
            plan = "\n".join(r[0] for r in run("EXPLAIN " + query))
            assert "content_trgm" not in plan, plan


# ================================================================ principal, tenant, dates

def test_principal_and_tenant_filters_match_a_confirmed_members_principal(agent, auditor, cli, server):
    mine = agent.archive("conv-tenant-seven")
    other = other_agent(cli, server, '{"id": "user-77", "tenant": "tenant-9"}')
    theirs = other.archive("conv-tenant-nine")

    def found(**params) -> set[str]:
        page = auditor.get(PATH, params=params)
        assert page.status_code == 200
        return set(listed(page.text))

    assert found(principal="user-42") == {mine} and found(principal="user-77") == {theirs}
    assert found(tenant="tenant-9") == {theirs} and found(tenant="tenant-7") == {mine}
    assert found(principal="user-42", tenant="tenant-9") == set()
    assert found(principal="user-4") == set()  # a principal is matched whole, not by substring
    page = auditor.get(PATH, params={"principal": "user-77"})
    assert 'name="principal" value="user-77"' in page.text  # the form keeps it


def test_a_principal_or_tenant_alone_is_counted_from_its_members_and_bounded(agent, auditor, cli, server,
                                                                               monkeypatch):
    mine = {agent.archive("conv-counted-a"), agent.archive("conv-counted-b")}
    other_agent(cli, server, '{"id": "user-77", "tenant": "tenant-9"}').archive("conv-counted-c")

    def total(**params) -> str:
        page = auditor.get(PATH, params=params)
        assert page.status_code == 200
        return total_of(page.text)

    assert total(principal="user-42") == "2 conversations" and total(tenant="tenant-9") == "1 conversation"
    assert total(principal="user-42", tenant="tenant-7") == "2 conversations"  # both: the joined count
    assert total(principal="nobody") == "0 conversations"
    assert set(listed(auditor.get(PATH, params={"principal": "user-42"}).text)) == mine
    monkeypatch.setattr(search, "ARCHIVE_COUNT_CAP", 1)
    assert total(principal="user-42") == "More than 1 conversations (an estimate: counting stops there)"


def test_the_date_filter_names_the_field_it_uses(agent, auditor, sql):
    old_new = agent.archive("conv-made-long-ago")
    sql("UPDATE bz_agent_conversation_archives SET created_at = '2026-01-05T10:00:00Z', "
        "updated_at = '2026-03-05T10:00:00Z' WHERE id = %s", (old_new,))

    def found(**params) -> set[str]:
        return set(listed(auditor.get(PATH, params=params).text))

    assert found(date="created", **{"from": "2026-01-05", "to": "2026-01-05"}) == {old_new}
    assert found(date="updated", **{"from": "2026-01-05", "to": "2026-01-05"}) == set()
    assert found(**{"from": "2026-03-05", "to": "2026-03-05"}) == {old_new}  # updated unless told
    page = auditor.get(PATH, params={"date": "created"})
    assert '<option value="created" selected>created</option>' in page.text


# ================================================================ sorting and totals

def test_each_sort_pages_by_its_own_cursor_and_marks_its_header(agent, auditor, sql, monkeypatch):
    monkeypatch.setattr(view, "PAGE", 2)
    made = []
    for n, size in enumerate((8, 4, 12, 4, 16)):
        archive = agent.archive(f"conv-sorted-{n}")
        agent.fill(archive, size)
        made.append(archive)
    by_events = [str(r[0]) for r in sql("SELECT id FROM bz_agent_conversation_archives "
                                        "ORDER BY last_sequence DESC, id DESC")]
    seen, page = [], auditor.get(PATH, params={"sort": "events", "dir": "desc"})
    assert re.search(r'<th scope="col" aria-sort="descending"><a href="[^"]*sort=events[^"]*dir=asc', page.text)
    assert page.text.count("aria-sort=") == 1
    seen += listed(page.text)
    cursors = []
    while (link := more_of(page.text)) is not None:
        assert "sort=events" in link and "dir=desc" in link
        cursors.append(re.search(r"cursor=([^&]+)", link).group(1))
        page = auditor.get(link, headers=HTMX)
        seen += listed(page.text)
    assert seen == by_events and len(cursors) == 2

    ascending = auditor.get(PATH, params={"sort": "events", "dir": "asc"})
    assert 'aria-sort="ascending"' in ascending.text
    assert listed(ascending.text) == by_events[::-1][:2]
    created = auditor.get(PATH, params={"sort": "created", "dir": "asc"})
    assert listed(created.text) == made[:2]

    # A cursor of one order is refused by another, and nothing is read or recorded.
    before = sql("SELECT count(*) FROM bz_access_log")
    for params in ({"sort": "events", "dir": "asc"}, {"sort": "created", "dir": "desc"}, {}):
        refused = auditor.get(PATH, params={**params, "cursor": cursors[0]})
        assert refused.status_code == 400 and listed(refused.text) == []
    assert sql("SELECT count(*) FROM bz_access_log") == before


def test_totals_are_exact_up_to_a_cap_then_labelled_an_estimate(agent, auditor, monkeypatch):
    for n in range(3):
        archive = agent.archive(f"conv-counted-{n}")
        talk(agent, archive, f"counted question {n}", f"counted answer {n}")
    page = auditor.get(PATH, params={"q": "counted"})
    assert total_of(page.text) == "3 conversations"
    assert total_of(page.text, "data-hits-total") == "6 messages"
    monkeypatch.setattr(search, "ARCHIVE_COUNT_CAP", 2)
    monkeypatch.setattr(search, "MESSAGE_COUNT_CAP", 5)
    page = auditor.get(PATH, params={"q": "counted"})
    assert total_of(page.text) == "More than 2 conversations (an estimate: counting stops there)"
    assert total_of(page.text, "data-hits-total") == "More than 5 messages (an estimate: counting stops there)"
    assert total_of(auditor.get(PATH, params={"q": "conv-counted-1"}).text) == "1 conversation"


# ================================================================ refusals

BAD = {
    "state": ("bogus", "State: “bogus” is not one of enrolling, ready."),
    "status": ("done", "Last turn: “done” is not one of none, running, completed, failed, cancelled."),
    "date": ("deleted", "Date: “deleted” is not one of updated, created."),
    "sort": ("label", "Sort: “label” is not one of updated, created, events."),
    "dir": ("up", "Direction: “up” is not one of desc, asc."),
    "app": ("Not An App!", "App: “Not An App!” is not an id."),
    "route": ("<b>x</b>", "Route: “<b>x</b>” is not an id."),
    "from": ("2026-02-30", "From: “2026-02-30” is not a date (YYYY-MM-DD)."),
    "to": ("yesterday", "To: “yesterday” is not a date (YYYY-MM-DD)."),
    "q": ("x" * 201, "Search: at most 200 characters."),
    "principal": ("u" * 129, "Principal: at most 128 characters."),
    "tenant": ("t" * 129, "Tenant: at most 128 characters."),
}


def test_a_filter_value_that_does_not_fit_is_a_400_page_that_names_it(agent, auditor, sql):
    archive = agent.archive("conv-listed-anyway")
    talk(agent, archive, "listed question", "listed answer")
    before = sql("SELECT count(*) FROM bz_access_log")
    for key, (value, message) in BAD.items():
        for path in (PATH, f"{PATH}messages"):
            page = auditor.get(path, params={key: value, **({} if key == "q" else {"q": "listed"})})
            assert page.status_code == 400, (key, path, page.text[:500])
            assert message in unescape(page.text), key
            assert '<div class="form-errors" role="alert">' in page.text
            assert listed(page.text) == [] and hits_of(page.text) == []
            assert_no_active_markup(page.text)
    page = auditor.get(PATH, params={"from": "2026-02-02", "to": "2026-02-01"})
    assert page.status_code == 400 and "From is after To." in unescape(page.text)
    # Two faults at once are both named.
    page = auditor.get(PATH, params={"state": "bogus", "sort": "label"})
    assert page.status_code == 400 and unescape(page.text).count("is not one of") == 2
    assert sql("SELECT count(*) FROM bz_access_log") == before


def test_a_role_without_runs_read_is_refused_the_search(agent, server, cli):
    agent.archive("conv-secret-search")
    make_admin(cli, "only-approves", "approver")
    approver = signed_in(server.url, "only-approves")
    for path in (PATH, f"{PATH}messages"):
        refused = approver.get(path, params={"q": "conv-secret"})
        assert refused.status_code == 403 and "conv-secret-search" not in refused.text
