"""The read side (admin_app.reads) on a real database: archive headers, members, event pages and
search, and run and tool-job traces, called directly as the console and the admin API call them.

The rows are written with SQL, as the write packages would have left them, so each test states
exactly the records it reads; what the APIs write is covered by the API tests."""
from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from admin_app.conversation_audit.availability import Availability
from admin_app.errors import ApiError
from admin_app.reads import archives, search, traces

FULL = Availability(archives=True, cross_binding=True)
V1_ONLY = Availability(archives=True, cross_binding=False)
NO_AUDIT = Availability(archives=False, cross_binding=False)
APP = "reads-app"
ROUTE = "reads-route"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
UNKNOWN = "6d1f0c52-8f3e-4c1a-9b27-3a5e0d4c7f10"  # a well-formed id nothing has


# ---------------------------------------------------------------- records, as the writers leave them

def _hash(seed: object) -> str:
    return hashlib.sha256(str(seed).encode()).hexdigest()


@pytest.fixture
def db(app):
    """A session on the test database, as a request gets one."""
    with app.extensions["bailing"].db.session() as session:
        yield session


@pytest.fixture
def client_app(sql) -> str:
    sql("INSERT INTO bz_client_apps (app_id, name) VALUES (%s, 'Reads')", (APP,))
    return APP


def agent_session(sql, client_app: str) -> uuid.UUID:
    ident = uuid.uuid4()
    sql("""INSERT INTO bz_agent_sessions (id, client_app_id, allowed_routes, access_token_hash,
                                          access_expires_at, refresh_expires_at, identity_hash)
           VALUES (%s, %s, %s, %s, now() + interval '1 hour', now() + interval '1 day', %s)""",
        (ident, client_app, [ROUTE], _hash(ident), _hash(("identity", ident))))
    return ident


def archive(sql, creator: uuid.UUID, *, updated_at: datetime = T0, last_sequence: int = 0,
            conversation: str = "conv-1", state: str = "ready") -> uuid.UUID:
    ident = uuid.uuid4()
    sql("""INSERT INTO bz_agent_conversation_archives
             (id, client_archive_id, client_conversation_id, creator_session_id, client_app_id, route_key,
              input_hash, state, member_count, last_sequence, created_at, updated_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 1, %s, %s, %s)""",
        (ident, uuid.uuid4(), conversation, creator, APP, ROUTE, _hash(ident), state, last_sequence,
         updated_at, updated_at))
    return ident


def said(sql, archive_id: uuid.UUID, *sequences: int) -> None:
    """User messages at these sequences (events only: the header is written apart, as a batch
    that commits after a reader read the header would leave it)."""
    for seq in sequences:
        sql("""INSERT INTO bz_agent_conversation_events
                 (archive_id, sequence, event_id, client_turn_id, kind, content, body_sha256)
               VALUES (%s, %s, %s, 't1', 'user_message', %s, %s)""",
            (archive_id, seq, f"e{seq}", f"line {seq}", _hash(seq)))


def sequences(rows) -> list[int]:
    return [r.sequence for r in rows]


# ---------------------------------------------------------------- archive header, members, events

def test_archive_header_is_the_row_or_none_and_the_detail_of_no_archive_is_a_404(db, sql, client_app):
    made = archive(sql, agent_session(sql, client_app), conversation="conv-header")
    header = archives.archive_header(db, made)
    assert header is not None and header.id == made and header.client_conversation_id == "conv-header"
    assert archives.archive_header(db, uuid.uuid4()) is None
    with pytest.raises(ApiError) as refused:
        archives.archive_detail(db, uuid.uuid4(), 0, 10, FULL)
    assert (refused.value.status, refused.value.code) == (404, "conversation_audit_not_found")


def test_event_page_never_shows_past_the_header_the_caller_read(db, sql, client_app):
    made = archive(sql, agent_session(sql, client_app), last_sequence=3)
    said(sql, made, 1, 2, 3)
    header = archives.archive_header(db, made)
    # A batch commits after the header was read: its events are in the table, beyond `upto`.
    said(sql, made, 4, 5)
    rows, more = archives.event_page(db, made, 0, 100, header.last_sequence)
    assert (sequences(rows), more) == ([1, 2, 3], False)
    # The same read bounded by a later header sees them: the bound, not the data, held them back.
    rows, more = archives.event_page(db, made, 0, 100, 5)
    assert (sequences(rows), more) == ([1, 2, 3, 4, 5], False)


def test_event_page_is_a_keyset_page_after_a_sequence(db, sql, client_app):
    made = archive(sql, agent_session(sql, client_app), last_sequence=5)
    said(sql, made, 1, 2, 3, 4, 5)
    rows, more = archives.event_page(db, made, 0, 2, 5)
    assert (sequences(rows), more) == ([1, 2], True)
    rows, more = archives.event_page(db, made, 2, 2, 5)
    assert (sequences(rows), more) == ([3, 4], True)
    rows, more = archives.event_page(db, made, 4, 2, 5)
    assert (sequences(rows), more) == ([5], False)
    rows, more = archives.event_page(db, made, 5, 2, 5)
    assert (rows, more) == ([], False)


def test_archive_detail_pages_up_to_its_own_header(db, sql, client_app):
    made = archive(sql, agent_session(sql, client_app), last_sequence=3)
    said(sql, made, 1, 2, 3, 4)  # 4: committed by a batch whose header update is not yet seen
    detail = archives.archive_detail(db, made, 1, 10, FULL)
    assert [e["sequence"] for e in detail["events"]] == [2, 3]
    assert (detail["has_more"], detail["next_after_sequence"]) == (False, 3)
    assert detail["conversation"]["conversation_id"] == str(made)
    past_the_end = archives.archive_detail(db, made, 7, 10, FULL)
    assert (past_the_end["events"], past_the_end["next_after_sequence"]) == ([], 7)


def _member(sql, archive_id: uuid.UUID, session_id: uuid.UUID, position: int, *, label=None,
            confirmed: bool = True, binding: tuple[str, str, str] | None = None) -> None:
    app_id, name, route = binding or (None, None, None)
    sql("""INSERT INTO bz_agent_conversation_members
             (archive_id, session_id, position, label, confirmed_at, principal, on_behalf_of,
              client_app_id, client_name, route_key)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        (archive_id, session_id, position, label, T0 if confirmed else None,
         json.dumps({"id": "user-42"}) if confirmed else None, "tenant-7:user-42" if confirmed else None,
         app_id, name, route))


def test_member_views_omit_null_legacy_bindings_and_show_recorded_ones(db, sql, client_app):
    legacy, bound, pending = (agent_session(sql, client_app) for _ in range(3))
    made = archive(sql, legacy)
    _member(sql, made, legacy, 0, label="Store A")
    _member(sql, made, bound, 1, binding=(APP, "Reads", ROUTE))
    _member(sql, made, pending, 2, confirmed=False)

    first, second, third = archives.member_views(db, made, FULL)
    assert first == {"session_id": str(legacy), "display_label": "Store A", "confirmed": True,
                     "principal": {"id": "user-42"}, "on_behalf_of": "tenant-7:user-42"}
    assert second == {"session_id": str(bound), "display_label": str(bound), "confirmed": True,
                      "principal": {"id": "user-42"}, "on_behalf_of": "tenant-7:user-42",
                      "client_app_id": APP, "client_name": "Reads", "route_key": ROUTE}
    # Unconfirmed: no identity was frozen, so none is shown.
    assert third == {"session_id": str(pending), "display_label": str(pending), "confirmed": False}
    # Before 058 the binding columns are not even read.
    assert all(not {"client_app_id", "client_name", "route_key"} & set(view)
               for view in archives.member_views(db, made, V1_ONLY))
    # The console's views are the same plus when each member confirmed.
    timed = archives.member_views(db, made, FULL, confirmed_at=True)
    assert [v.pop("confirmed_at") for v in timed] == ["2026-03-01T12:00:00.000Z"] * 2 + [None]
    assert timed == [first, second, third]
    assert archives.archive_detail(db, made, 0, 10, FULL)["members"] == [first, second, third]


# ---------------------------------------------------------------- search and filter choices

def test_search_archives_keyset_pages_return_every_archive_exactly_once(db, sql, client_app):
    creator = agent_session(sql, client_app)
    # Ties on updated_at make the id decide the order inside a page and across a page break.
    made = {archive(sql, creator, updated_at=T0 + timedelta(minutes=i // 3)) for i in range(8)}
    seen, cursor, pages = [], None, 0
    while True:
        rows, cursor = search.search_archives(db, {}, cursor, 3)
        seen += [(r.updated_at, r.id) for r in rows]
        pages += 1
        if cursor is None:
            break
        assert cursor == seen[-1]
    assert pages == 3
    assert sorted(i for _, i in seen) == sorted(made) and len(seen) == len(made)
    assert seen == sorted(seen, reverse=True)  # newest first, then by id, descending


def test_search_archives_filters_and_pages_on_what_matches(db, sql, client_app):
    creator = agent_session(sql, client_app)
    wanted = [archive(sql, creator, conversation=f"order_{i}", updated_at=T0 + timedelta(minutes=i))
              for i in range(3)]
    archive(sql, creator, conversation="orderX1")  # `_` is a literal character, not a wildcard
    archive(sql, creator, conversation="order_9", state="enrolling")
    rows, cursor = search.search_archives(db, {"q": "order_", "state": "ready"}, None, 2)
    assert [r.id for r in rows] == [wanted[2], wanted[1]] and cursor is not None
    rows, cursor = search.search_archives(db, {"q": "order_", "state": "ready"}, cursor, 2)
    assert ([r.id for r in rows], cursor) == ([wanted[0]], None)


def test_filter_choices_are_every_app_and_route_sorted(db, sql, client_app):
    sql("INSERT INTO bz_client_apps (app_id, name) VALUES ('aa-app', 'A')")
    sql("INSERT INTO bz_routes (route_key, name) VALUES ('zz-route', 'Z'), ('bb-route', 'B')")
    apps, routes = search.filter_choices(db)
    assert apps == sorted(apps) and {"aa-app", APP} <= set(apps)
    assert routes == sorted(routes) and {"bb-route", "zz-route"} <= set(routes)


def test_list_archives_pages_by_offset(db, sql, client_app):
    creator = agent_session(sql, client_app)
    made = [archive(sql, creator, updated_at=T0 + timedelta(minutes=i)) for i in range(3)]
    first = archives.list_archives(db, 2, 0)
    assert [i["conversation_id"] for i in first["items"]] == [str(made[2]), str(made[1])]
    assert (first["has_more"], first["next_offset"]) == (True, 2)
    last = archives.list_archives(db, 2, 2)
    assert ([i["conversation_id"] for i in last["items"]], last["has_more"], last["next_offset"]) == \
        ([str(made[0])], False, None)


# ---------------------------------------------------------------- run and job traces

def _run(sql, session_id: uuid.UUID, context: dict) -> uuid.UUID:
    thread = sql("INSERT INTO bz_threads (session_id, route_key, client_conversation_id) "
                 "VALUES (%s, %s, 'conv-1') RETURNING id", (session_id, ROUTE))[0][0]
    run_id = uuid.uuid4()
    sql("""INSERT INTO bz_runs (id, thread_id, session_id, client_app_id, route_key, client_conversation_id,
                                client_turn_id, user_message_id, request_hash, context, profile_revision,
                                capability_revision)
           VALUES (%s, %s, %s, %s, %s, 'conv-1', 't1', 'm1', %s, %s, %s, %s)""",
        (run_id, thread, session_id, APP, ROUTE, _hash(run_id), json.dumps(context), _hash(1), _hash(2)))
    sql("INSERT INTO bz_messages (thread_id, run_id, role, message_id, content) VALUES (%s, %s, 'user', 'm1', 'hi')",
        (thread, run_id))
    return run_id


def test_run_trace_with_context_shows_the_context_and_the_archive_link(db, sql, client_app):
    session_id = agent_session(sql, client_app)
    context = {"greeting": "grüß dich", "tools": []}
    run_id = _run(sql, session_id, context)
    made = archive(sql, session_id, last_sequence=1)
    sql("""INSERT INTO bz_agent_conversation_events
             (archive_id, sequence, event_id, client_turn_id, kind, run_id, member_session_id, thread_id,
              body_sha256)
           VALUES (%s, 1, 'link', 'turn-9', 'run_link', %s, %s, 1, %s)""", (made, run_id, session_id, _hash(0)))

    trace, shown = traces.run_trace_with_context(db, run_id, FULL)
    # Indented and left readable (jsonb keeps its own key order, so the text is not compared).
    assert json.loads(shown) == context and shown.startswith('{\n  "') and "grüß dich" in shown
    assert trace == traces.run_trace(db, run_id, FULL)
    assert trace["run"]["conversation_audit_id"] == str(made) and trace["run"]["client_turn_id"] == "turn-9"
    assert [m["content"] for m in trace["messages"]] == ["hi"] and trace["jobs"] == []
    # Without the audit tables the link is not looked for.
    assert "conversation_audit_id" not in traces.run_trace(db, run_id, NO_AUDIT)["run"]


@pytest.mark.parametrize("read", [traces.run_trace, traces.run_trace_with_context])
def test_run_trace_of_an_unknown_run_is_run_not_found(db, read):
    with pytest.raises(ApiError) as refused:
        read(db, uuid.uuid4(), FULL)
    assert (refused.value.status, refused.value.code) == (404, "run_not_found")


@pytest.mark.parametrize("ref", [UNKNOWN, "not-a-uuid"])
def test_job_trace_of_an_unknown_job_is_job_not_found(db, ref):
    with pytest.raises(ApiError) as refused:
        traces.job_trace(db, ref, FULL)
    assert (refused.value.status, refused.value.code) == (404, "job_not_found")


@pytest.mark.parametrize("ref", [UNKNOWN, "not-a-uuid"])
def test_core_job_trace_of_an_unknown_job_is_not_found(db, ref):
    with pytest.raises(ApiError) as refused:
        traces.core_job_trace(db, ref, FULL)
    assert (refused.value.status, refused.value.code) == (404, "not_found")


def test_agent_client_trace_of_a_run_on_another_thread_is_not_found(db, sql, client_app):
    run_id = _run(sql, agent_session(sql, client_app), {})
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run_id,))[0][0]
    assert traces.agent_client_trace(db, str(thread), str(run_id), FULL)["run"]["run_id"] == str(run_id)
    for thread_ref, run_ref in ((str(thread + 1), str(run_id)), (str(thread), str(uuid.uuid4())),
                                ("x", str(run_id)), (str(thread), "not-a-uuid")):
        with pytest.raises(ApiError) as refused:
            traces.agent_client_trace(db, thread_ref, run_ref, FULL)
        assert refused.value.code == "not_found", (thread_ref, run_ref)
