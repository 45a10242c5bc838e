"""Issue 5, items 1, 5, 6 and 7: the three migration modes read from the database itself, the
archive limits (20,000 events, 16 MiB of text, the 2 MiB envelope), concurrent writers, the
administrator read API and run traces.

Every request goes over real HTTP to a live server backed by a real PostgreSQL; SQL is used only
to fill an archive quickly and to check what was (not) written.
"""
from __future__ import annotations

import copy
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import requests

from admin_app import create_app, limits, migrations
from admin_app.canonical import sha256_json
from tests.conftest import EXAMPLES, SQL_DIR, cli_of, run_cli_process, serve
from tests.helpers import PASSWORD_LINE, admin_token, assert_error, assert_ok, bearer, session_bearer

JSON = {"Content-Type": "application/json"}
AUDITS = "/agent-api/v1/conversation-audits"
ADMIN = "/admin/api/conversation-audits"
CAPABILITIES = AUDITS + "/capabilities"
ROUTE = "customers"
CONVERSATION = "conv-1"
ADMIN_NAMES = {"auditor": "alice", "support": "carol", "approver": "bob", "admin": "root"}
HEADER_KEYS = {"conversation_id", "client_archive_id", "client_conversation_id", "client_app_id",
               "route_key", "state", "member_count", "confirmed_count", "last_sequence",
               "message_count", "turn_count", "last_turn_status", "created_at", "updated_at"}
BINDING_KEYS = {"client_app_id", "route_key", "client_name"}
MAX_EVENTS = limits.AUDIT_ARCHIVE_MAX_EVENTS
MAX_TEXT_BYTES = limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES
ENVELOPE_MAX = limits.AUDIT_ENVELOPE_MAX_BYTES
PRINCIPAL = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
ON_BEHALF_OF = "tenant-7:user-42"


# ----------------------------------------------------------------------------- helpers

def agent_post(live, session: dict, path: str, body) -> requests.Response:
    return live.post(path, json=body, headers={**session_bearer(session), **JSON})


def v1_body(creator: dict, *others: dict, archive: str | None = None,
            conversation: str = CONVERSATION, route: str = ROUTE) -> dict:
    return {"client_archive_id": archive or str(uuid.uuid4()), "client_conversation_id": conversation,
            "route": route,
            "member_session_ids": [creator["session_id"], *(o["session_id"] for o in others)]}


def create_v1(live, creator: dict, *others: dict, **kwargs) -> str:
    """A v1 archive, confirmed by every member; returns its conversation_id."""
    header = assert_ok(agent_post(live, creator, AUDITS, v1_body(creator, *others, **kwargs)), 200)["conversation"]
    for other in others:
        assert_ok(agent_post(live, other, f"{AUDITS}/{header['conversation_id']}/confirm", {}))
    return header["conversation_id"]


def ev(seq: int, kind: str, turn: str = "t1", eid: str | None = None, **extra) -> dict:
    return {"event_id": eid or f"e{seq}", "sequence": seq, "client_turn_id": turn, "kind": kind, **extra}


def said(seq: int, turn: str = "t1", eid: str | None = None, text: str | None = None) -> dict:
    kind = "user_message" if seq % 2 == 0 else "assistant_message"
    return ev(seq, kind, turn, eid, content=text if text is not None else f"line {seq}")


def append(live, session: dict, archive: str, events: list[dict]) -> requests.Response:
    return agent_post(live, session, f"{AUDITS}/{archive}/events", {"events": events})


def appended(live, session: dict, archive: str, events: list[dict]) -> dict:
    ack = assert_ok(append(live, session, archive, events))
    assert ack == {"schema": "bailing.agent-conversation-audit-ack.v1", "conversation_id": archive,
                   "last_sequence": events[-1]["sequence"]}
    return ack


def admin_get(live, token: str | None, path: str, **params) -> requests.Response:
    return live.get(path, params=params, headers=bearer(token) if token else {})


def detail(live, token: str, archive: str, **params) -> dict:
    body = assert_ok(admin_get(live, token, f"{ADMIN}/{archive}", **params))
    assert body["schema"] == "bailing.agent-conversation-audit-detail.v1"
    return body


def all_events(live, token: str, archive: str) -> list[dict]:
    events, after, more = [], 0, True
    while more:
        page = detail(live, token, archive, after_sequence=after, limit=200)
        events += page["events"]
        after, more = page["next_after_sequence"], page["has_more"]
    return events


def stored(sql, archive: str) -> tuple:
    """(event rows, last_sequence, message_count, turn_count, text_bytes) as the database has them."""
    count = sql("SELECT count(*) FROM bz_agent_conversation_events WHERE archive_id = %s", (archive,))[0][0]
    row = sql("SELECT last_sequence, message_count, turn_count, text_bytes "
              "FROM bz_agent_conversation_archives WHERE id = %s", (archive,))[0]
    return (count, *row)


def recent(stamp: str) -> bool:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return abs(datetime.now(UTC) - moment) < timedelta(minutes=5)


def make_admin_token(cli, role: str) -> str:
    return admin_token(cli, ADMIN_NAMES[role], role)


def two_app_config(tmp_path: Path) -> Path:
    """examples/hub.json plus route `orders` and client `erp-demo` (allowed only `orders`)."""
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    doc["tool_providers"][0]["openapi"] = str(EXAMPLES / "crm.openapi.json")
    orders = copy.deepcopy(doc["routes"][0])
    orders.update(route_key="orders", name="Order desk")
    doc["routes"].append(orders)
    doc["client_apps"].append({"app_id": "erp-demo", "name": "ERP", "allowed_routes": ["orders"],
                               "enabled": True, "agent_authorize_url": "http://127.0.0.1:8200/authorize"})
    path = tmp_path / "two-apps.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def agent(issue_session) -> dict:
    return issue_session()


@pytest.fixture
def auditor(cli, configured) -> str:
    return make_admin_token(cli, "auditor")


# ============================================================== 1. the three migration modes

def session_of(run, client: str, route: str) -> dict:
    return run("sessions", "issue", "--client", client, "--routes", route,
               "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", ON_BEHALF_OF)


def probe(live, session: dict) -> bool:
    body = assert_ok(live.get(CAPABILITIES, headers=session_bearer(session)))
    assert body["schema"] == "bailing.agent-conversation-audit-capabilities.v1"
    assert body["member_bindings"] == "session-client-route.v1"
    assert isinstance(body["cross_binding_members"], bool)
    return body["cross_binding_members"]


def v2_body(writer: dict, writer_app: str, writer_route: str, other: dict) -> dict:
    return {"schema": "bailing.agent-conversation-audit-create.v2",
            "client_archive_id": str(uuid.uuid4()), "client_conversation_id": CONVERSATION,
            "members": [
                {"session_id": writer["session_id"], "client_app_id": writer_app, "route": writer_route,
                 "label": "ERP account"},
                {"session_id": other["session_id"], "client_app_id": "crm-demo", "route": ROUTE,
                 "label": "CRM account"}]}


def archive_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM bz_agent_conversation_archives").fetchone()[0]


def membership_version(url: str, archive: str):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT membership_version FROM bz_agent_conversation_archives WHERE id = %s",
                            (archive,)).fetchone()[0]


def test_the_three_migration_modes_are_read_from_the_database(empty_db, tmp_path):
    # Every file but the audit's (`db upgrade --without conversation-audit`), as the code needs.
    migrations.upgrade(empty_db, SQL_DIR, without=["conversation-audit", "cross-binding"])
    app = create_app({"database_url": empty_db, "data_dir": tmp_path / "var"})
    run = cli_of(app)
    run("config", "apply", str(two_app_config(tmp_path)))
    crm_a, crm_b = session_of(run, "crm-demo", ROUTE), session_of(run, "crm-demo", ROUTE)
    erp = session_of(run, "erp-demo", "orders")
    live = serve(app)
    try:
        # ---- before 057: probe answers, everything else is 503 conversation_audit_unavailable
        assert probe(live, crm_a) is False
        someone = str(uuid.uuid4())
        for response in (agent_post(live, crm_a, AUDITS, v1_body(crm_a, crm_b)),
                         agent_post(live, erp, AUDITS, v2_body(erp, "erp-demo", "orders", crm_a)),
                         agent_post(live, crm_b, f"{AUDITS}/{someone}/confirm", {}),
                         append(live, crm_a, someone, [ev(1, "turn_start")])):
            assert_error(response, 503, "conversation_audit_unavailable")

        # ---- 057 only: v1 works, v2 is 503 cross_binding_unavailable, no member binding fields
        assert migrations.upgrade(empty_db, SQL_DIR, with_=["conversation-audit"])[0] == \
            "057_agent_conversation_audit.sql"
        assert probe(live, crm_a) is False
        legacy = create_v1(live, crm_a, crm_b)
        appended(live, crm_a, legacy, [ev(1, "turn_start"), said(2), ev(3, "turn_end", status="completed")])
        assert_error(agent_post(live, erp, AUDITS, v2_body(erp, "erp-demo", "orders", crm_a)),
                     503, "conversation_audit_cross_binding_unavailable")
        assert archive_count(empty_db) == 1
        with psycopg.connect(empty_db) as conn:
            assert conn.execute("SELECT sequence FROM bz_agent_conversation_events WHERE archive_id = %s "
                                "ORDER BY sequence", (legacy,)).fetchall() == [(1,), (2,), (3,)]

        # ---- 058: probe true, v2 works; the 057 archive stays v1
        assert migrations.upgrade(empty_db, SQL_DIR, with_=["cross-binding"]) == \
            ["058_agent_conversation_member_bindings.sql"]
        # Admins need the whole schema, so the admin reads are checked from here on.
        run("admins", "create", "alice", "--role", "auditor", "--password-stdin", input=PASSWORD_LINE)
        token = run("admins", "token", "alice")["token"]
        assert probe(live, crm_a) is True
        created = assert_ok(agent_post(live, erp, AUDITS, v2_body(erp, "erp-demo", "orders", crm_a)), 200)
        header = created["conversation"]
        assert created["schema"] == "bailing.agent-conversation-audit.v1"
        assert (header["client_app_id"], header["route_key"], header["state"]) == ("erp-demo", "orders", "enrolling")
        assert_ok(agent_post(live, crm_a, f"{AUDITS}/{header['conversation_id']}/confirm", {}))
        bound = {m["session_id"]: m for m in detail(live, token, header["conversation_id"])["members"]}
        assert {k: bound[erp["session_id"]].get(k) for k in BINDING_KEYS} == \
            {"client_app_id": "erp-demo", "route_key": "orders", "client_name": "ERP"}
        assert {k: bound[crm_a["session_id"]].get(k) for k in BINDING_KEYS} == \
            {"client_app_id": "crm-demo", "route_key": ROUTE, "client_name": "CRM"}
        assert membership_version(empty_db, header["conversation_id"]) == 2

        view = detail(live, token, legacy)
        assert [m["session_id"] for m in view["members"]] == [crm_a["session_id"], crm_b["session_id"]]
        assert [e["sequence"] for e in view["events"]] == [1, 2, 3]
        for member in view["members"]:
            assert member["confirmed"] is True
            assert not BINDING_KEYS & member.keys(), member
        assert membership_version(empty_db, legacy) is None
        appended(live, crm_a, legacy, [ev(4, "turn_start", "t2"), said(5, "t2")])
        assert detail(live, token, legacy)["conversation"]["last_sequence"] == 5
    finally:
        live.stop()
        app.extensions["bailing"].db.dispose()


def test_admin_reads_are_503_without_the_archive_tables(server, auditor, sql):
    """The admin side of the first mode (admins themselves need the whole schema)."""
    sql("DROP TABLE bz_agent_conversation_events, bz_agent_conversation_members, "
        "bz_agent_conversation_archives CASCADE")
    for path in (ADMIN, f"{ADMIN}/{uuid.uuid4()}"):
        assert_error(admin_get(server, auditor, path), 503, "conversation_audit_unavailable")


@pytest.mark.parametrize("how", ["function", "cli"])
def test_upgrade_to_056_stops_before_the_audit_migrations(empty_db, how):
    if how == "function":
        try:
            applied = migrations.upgrade(empty_db, SQL_DIR, to=56)
        except migrations.MigrationError as err:
            pytest.fail(str(err))
    else:
        done = run_cli_process(["db", "upgrade", "--to", "056"], empty_db)
        assert done.returncode == 0, done.stderr
        applied = json.loads(done.stdout)["applied"]
    assert applied and all(int(name[:3]) < 57 for name in applied)
    assert migrations.status(empty_db, SQL_DIR).pending[0].number == 57


# ============================================================== 5. limits

def fill(sql, archive: str, count: int, turn: str = "long") -> int:
    """Rows 1..count as one valid running turn (turn_start, then messages), stored with the same
    body hashes the API would have stored; the archive counters set to match. Returns text bytes."""
    events = [ev(1, "turn_start", turn)] + [said(s, turn) for s in range(2, count + 1)]
    text_bytes = sum(len(e.get("content", "").encode()) for e in events)
    sql("""
        INSERT INTO bz_agent_conversation_events
            (archive_id, sequence, event_id, client_turn_id, kind, content, body_sha256)
        SELECT %s, s, 'e' || s, %s,
               CASE WHEN s = 1 THEN 'turn_start' WHEN s %% 2 = 0 THEN 'user_message'
                    ELSE 'assistant_message' END,
               CASE WHEN s = 1 THEN NULL ELSE 'line ' || s END, h
        FROM unnest(%s::text[]) WITH ORDINALITY AS t(h, s)""",
        (archive, turn, [sha256_json(e) for e in events]))
    sql("""UPDATE bz_agent_conversation_archives
              SET last_sequence = %s, message_count = %s, turn_count = 1, running_turn_id = %s,
                  last_turn_status = 'running', text_bytes = %s
            WHERE id = %s""", (count, count - 1, turn, text_bytes, archive))
    return text_bytes


@pytest.mark.parametrize("prefilled, batch, accepted", [
    (19_950, 50, True),    # fills to exactly 20,000
    (19_999, 1, True),
    (19_951, 50, False),   # would reach 20,001: the whole batch is refused
    (20_000, 1, False),
])
def test_an_archive_holds_at_most_20000_events(server, agent, sql, auditor, prefilled, batch, accepted):
    archive = create_v1(server, agent)
    text_bytes = fill(sql, archive, prefilled)
    # The filled rows are a valid history: an identical retry of two of them is acknowledged.
    appended(server, agent, archive, [said(prefilled - 1, "long"), said(prefilled, "long")])
    events = [said(s, "long") for s in range(prefilled + 1, prefilled + batch + 1)]

    response = append(server, agent, archive, events)

    if accepted:
        assert assert_ok(response)["last_sequence"] == MAX_EVENTS
        assert stored(sql, archive)[:2] == (MAX_EVENTS, MAX_EVENTS)
        response = append(server, agent, archive, [said(MAX_EVENTS + 1, "long")])
        ahead = MAX_EVENTS
    else:
        ahead = prefilled
    body = assert_error(response, 413, "conversation_audit_limit")
    assert body["max_events"] == MAX_EVENTS
    new_bytes = sum(len(e["content"].encode()) for e in events) if accepted else 0
    assert stored(sql, archive) == (ahead, ahead, ahead - 1, 1, text_bytes + new_bytes)
    # The last page is read by key, and ends exactly at the stored end.
    page = detail(server, auditor, archive, after_sequence=ahead - 3, limit=200)
    assert [e["sequence"] for e in page["events"]] == [ahead - 2, ahead - 1, ahead]
    assert (page["has_more"], page["next_after_sequence"]) == (False, ahead)


@pytest.mark.parametrize("text, accepted", [
    ("é" * 5, True),         # 10 UTF-8 bytes (5 characters): exactly 16 MiB
    ("é" * 5 + "a", False),  # 11 bytes: one over
])
def test_an_archive_holds_at_most_16_mib_of_text(server, agent, sql, text, accepted):
    archive = create_v1(server, agent)
    appended(server, agent, archive, [ev(1, "turn_start")])
    sql("UPDATE bz_agent_conversation_archives SET text_bytes = %s WHERE id = %s",
        (MAX_TEXT_BYTES - 10, archive))

    response = append(server, agent, archive, [said(2, text=text)])

    if accepted:
        assert assert_ok(response)["last_sequence"] == 2
        assert stored(sql, archive) == (2, 2, 1, 1, MAX_TEXT_BYTES)
        response = append(server, agent, archive, [said(3, text="x")])
    body = assert_error(response, 413, "conversation_audit_limit")
    assert body["max_archive_text_bytes"] == MAX_TEXT_BYTES
    expected = (2, 2, 1, 1, MAX_TEXT_BYTES) if accepted else (1, 1, 0, 1, MAX_TEXT_BYTES - 10)
    assert stored(sql, archive) == expected
    # A text-free event still fits in a full archive.
    if accepted:
        appended(server, agent, archive, [ev(3, "turn_end", status="completed")])


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("size, accepted", [(ENVELOPE_MAX, True), (ENVELOPE_MAX + 1, False)])
def test_the_json_envelope_is_at_most_2_mib(server, agent, sql, framing, size, accepted):
    archive = create_v1(server, agent)
    raw = json.dumps({"events": [ev(1, "turn_start"), said(2, text="hello")]}).encode()
    raw += b" " * (size - len(raw))  # JSON whitespace: the envelope grows, the text does not
    assert len(raw) == size
    data = raw if framing == "content-length" else iter([raw[i:i + 65536] for i in range(0, size, 65536)])

    response = server.post(f"{AUDITS}/{archive}/events", data=data,
                           headers={**session_bearer(agent), **JSON})

    if accepted:
        assert assert_ok(response)["last_sequence"] == 2
        assert stored(sql, archive)[:3] == (2, 2, 1)
    else:
        body = assert_error(response, 413, "conversation_audit_limit")
        assert body["max_bytes"] == ENVELOPE_MAX
        assert stored(sql, archive) == (0, 0, 0, 0, 0)


# ============================================================== concurrency

def current_last(http: requests.Session, live, token: str, archive: str) -> int:
    response = http.get(f"{live.url}{ADMIN}/{archive}", params={"limit": 1}, headers=bearer(token), timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["conversation"]["last_sequence"]


def writer_loop(live, session: dict, archive: str, token: str, name: str, batches: int,
                start: threading.Barrier, last: int = 1) -> dict:
    """Append `batches` acknowledged batches of 5 messages in turn `long`, learning the next
    sequence from each ack, or after a 409 from the archive header."""
    http = requests.Session()
    statuses: list[int] = []
    acked: list[dict] = []
    written = 0
    start.wait(timeout=30)
    try:
        while len(acked) < batches * 5 and len(statuses) < batches * 40:
            events = [said(last + 1 + i, "long", f"{name}-{written + i}", f"{name} says {written + i}")
                      for i in range(5)]
            response = http.post(f"{live.url}{AUDITS}/{archive}/events", json={"events": events},
                                 headers={**session_bearer(session), **JSON}, timeout=30)
            statuses.append(response.status_code)
            if response.status_code == 200:
                assert response.json()["last_sequence"] == events[-1]["sequence"]
                acked += events
                written += 5
                last = events[-1]["sequence"]
            elif response.status_code == 409:
                assert response.json()["error"] == "conversation_audit_conflict", response.text
                last = current_last(http, live, token, archive)
            else:
                break
    finally:
        http.close()
    return {"statuses": statuses, "acked": acked}


def test_two_writers_on_one_archive_end_contiguous_without_duplicates_or_losses(
        server, agent, sql, auditor):
    archive = create_v1(server, agent)
    appended(server, agent, archive, [ev(1, "turn_start", "long")])
    start = threading.Barrier(2)
    batches = 8

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(writer_loop, server, agent, archive, auditor, name, batches, start)
                   for name in ("a", "b")]
        results = [f.result(timeout=120) for f in futures]

    statuses = [s for r in results for s in r["statuses"]]
    assert set(statuses) <= {200, 409}, statuses
    assert statuses.count(200) == 2 * batches
    events = all_events(server, auditor, archive)
    total = 1 + 2 * batches * 5
    assert [e["sequence"] for e in events] == list(range(1, total + 1))
    assert len({e["event_id"] for e in events}) == total
    by_id = {e["event_id"]: e for e in events}
    for acked in (e for r in results for e in r["acked"]):
        got = by_id[acked["event_id"]]
        assert (got["sequence"], got["kind"], got["content"]) == \
            (acked["sequence"], acked["kind"], acked["content"])
    assert stored(sql, archive)[:4] == (total, total, total - 1, 1)


def test_writers_to_separate_archives_never_interfere(server, issue_session, sql, auditor):
    writers = [issue_session(), issue_session()]
    archives = [create_v1(server, w) for w in writers]
    for w, a in zip(writers, archives):
        appended(server, w, a, [ev(1, "turn_start", "long")])
    start = threading.Barrier(2)
    batches = 10

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(writer_loop, server, w, a, auditor, name, batches, start)
                   for w, a, name in zip(writers, archives, ("x", "y"))]
        results = [f.result(timeout=120) for f in futures]

    for archive, name, result in zip(archives, ("x", "y"), results):
        assert result["statuses"] == [200] * batches
        events = all_events(server, auditor, archive)
        assert [e["sequence"] for e in events] == list(range(1, 2 + batches * 5))
        assert [e["event_id"] for e in events[1:]] == [f"{name}-{i}" for i in range(batches * 5)]
        assert stored(sql, archive)[0] == 1 + batches * 5


# ============================================================== 6. admin read API

def test_list_headers_and_the_last_turn_status(server, agent, auditor):
    empty = assert_ok(admin_get(server, auditor, ADMIN))
    assert empty == {"schema": "bailing.agent-conversation-audit-list.v1", "items": [],
                     "has_more": False, "next_offset": None}
    archive = create_v1(server, agent)

    def header() -> dict:
        listing = assert_ok(admin_get(server, auditor, ADMIN))
        assert listing["schema"] == "bailing.agent-conversation-audit-list.v1"
        (item,) = listing["items"]
        assert set(item) == HEADER_KEYS
        return item

    first = header()
    assert first["conversation_id"] == archive
    assert (first["client_conversation_id"], first["client_app_id"], first["route_key"]) == \
        (CONVERSATION, "crm-demo", ROUTE)
    assert (first["state"], first["member_count"], first["confirmed_count"]) == ("ready", 1, 1)
    assert (first["last_sequence"], first["message_count"], first["turn_count"]) == (0, 0, 0)
    assert first["last_turn_status"] is None
    assert recent(first["created_at"]) and recent(first["updated_at"])
    uuid.UUID(first["client_archive_id"])

    appended(server, agent, archive, [ev(1, "turn_start"), said(2)])
    assert (header()["last_turn_status"], header()["last_sequence"]) == ("running", 2)
    appended(server, agent, archive, [said(3), said(4), ev(5, "turn_end", status="completed")])
    done = header()
    # Sequences count every event kind; message_count only the visible messages.
    assert (done["last_turn_status"], done["last_sequence"], done["message_count"], done["turn_count"]) == \
        ("completed", 5, 3, 1)
    appended(server, agent, archive, [ev(6, "turn_start", "t2"), ev(7, "turn_end", "t2", status="cancelled")])
    assert (header()["last_turn_status"], header()["turn_count"], header()["message_count"]) == ("cancelled", 2, 3)


def odd_digits(*params: str) -> list:
    return [pytest.param(f"{p}={d}", id=f"{p}-{name}")
            for p in params for d, name in (("\u00b2", "superscript"), ("\uff11", "fullwidth"))]


LIST_BAD = ["limit=-1", "limit=abc", "limit=1.5", "limit=", "offset=x", "limit=+5", "limit=1e2",
            "offset=-1", "offset=9007199254740992", "page=1", "limit=2&limit=3",
            *odd_digits("limit", "offset")]
DETAIL_BAD = ["limit=-1", "limit=abc", "after_sequence=-1", "after_sequence=x", "limit= 5",
              "after_sequence=99999999999999999999", "offset=0", "after=0",
              *odd_digits("limit", "after_sequence")]


@pytest.mark.parametrize("query", LIST_BAD)
def test_list_refuses_bad_paging(server, agent, auditor, query):
    create_v1(server, agent)
    body = assert_error(server.get(f"{ADMIN}?{query}", headers=bearer(auditor)), 400, "invalid_request")
    assert body["problems"] and body["problems"][0]["path"] == query.split("=")[0]


@pytest.mark.parametrize("query", DETAIL_BAD)
def test_detail_refuses_bad_paging(server, agent, auditor, query):
    archive = create_v1(server, agent)
    body = assert_error(server.get(f"{ADMIN}/{archive}?{query}", headers=bearer(auditor)), 400,
                        "invalid_request")
    assert body["problems"] and body["problems"][0]["path"] == query.split("=")[0]


@pytest.mark.parametrize("path, cap", [(ADMIN, 100), ("detail", 200)])
def test_the_page_caps_themselves_are_accepted(server, agent, auditor, path, cap):
    archive = create_v1(server, agent)
    url = f"{ADMIN}/{archive}" if path == "detail" else path
    body = assert_ok(admin_get(server, auditor, url, limit=cap))
    assert body["has_more"] is False


def test_paging_numbers_outside_their_range_are_clamped(server, agent, auditor):
    archives = [create_v1(server, agent) for _ in range(2)]
    appended(server, agent, archives[0], [ev(1, "turn_start"), said(2), said(3)])
    # limit=0 is read as 1, limit=101 as 100; an offset past the end is an empty page.
    assert len(assert_ok(admin_get(server, auditor, ADMIN, limit=0))["items"]) == 1
    assert len(assert_ok(admin_get(server, auditor, ADMIN, limit=101))["items"]) == 2
    assert assert_ok(admin_get(server, auditor, ADMIN, offset=9007199254740991))["items"] == []
    one = detail(server, auditor, archives[0], limit=0)
    assert ([e["sequence"] for e in one["events"]], one["has_more"], one["next_after_sequence"]) == ([1], True, 1)
    assert len(detail(server, auditor, archives[0], limit=100000)["events"]) == 3
    assert len(detail(server, auditor, archives[0], limit="0005")["events"]) == 3


def test_list_pages_with_has_more_and_next_offset(server, agent, auditor):
    archives = {create_v1(server, agent) for _ in range(3)}

    first = assert_ok(admin_get(server, auditor, ADMIN, limit=2))
    second = assert_ok(admin_get(server, auditor, ADMIN, limit=2, offset=first["next_offset"]))
    beyond = assert_ok(admin_get(server, auditor, ADMIN, limit=2, offset=3))

    assert (len(first["items"]), first["has_more"], first["next_offset"]) == (2, True, 2)
    assert (len(second["items"]), second["has_more"], second["next_offset"]) == (1, False, None)
    assert {i["conversation_id"] for i in first["items"] + second["items"]} == archives
    assert (beyond["items"], beyond["has_more"], beyond["next_offset"]) == ([], False, None)


def test_detail_shows_members_events_and_run_links(server, issue_session, sql, auditor):
    creator, other = issue_session(), issue_session()
    context = assert_ok(agent_post(server, creator, "/agent-api/v1/workspaces/customers/turns",
                                   {"client_conversation_id": CONVERSATION, "client_turn_id": "t1",
                             "user_message_id": "m1", "user_input": "Compare the two stores"}))
    header = assert_ok(agent_post(server, creator, AUDITS, {
        **v1_body(creator, other), "member_labels": {other["session_id"]: "Store B"}}), 200)["conversation"]
    archive = header["conversation_id"]

    enrolling = detail(server, auditor, archive)
    assert enrolling["conversation"] == header
    assert enrolling["members"] == [
        {"session_id": creator["session_id"], "display_label": creator["session_id"], "confirmed": True,
         "principal": PRINCIPAL, "on_behalf_of": ON_BEHALF_OF},
        {"session_id": other["session_id"], "display_label": "Store B", "confirmed": False}]
    assert (enrolling["events"], enrolling["has_more"], enrolling["next_after_sequence"]) == ([], False, 0)

    assert_ok(agent_post(server, other, f"{AUDITS}/{archive}/confirm", {}))
    submitted = [ev(1, "turn_start"), said(2, text="Compare the two stores"),
                 ev(3, "run_link", run_id=context["run_id"], member_session_id=creator["session_id"]),
                 said(4, text="Store A sells more.\nStore B 🙂 less."),
                 ev(5, "turn_end", status="completed")]
    appended(server, creator, archive, submitted)

    view = detail(server, auditor, archive)
    assert view["conversation"]["state"] == "ready"
    assert view["members"][1] == {"session_id": other["session_id"], "display_label": "Store B",
                                  "confirmed": True, "principal": PRINCIPAL, "on_behalf_of": ON_BEHALF_OF}
    thread_id = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (context["run_id"],))[0][0]
    for sent, got in zip(submitted, view["events"], strict=True):
        assert recent(got.pop("created_at"))
        if sent["kind"] == "run_link":
            assert got.pop("thread_id") == thread_id and isinstance(thread_id, int)
        assert got == sent


def test_detail_pages_450_events_by_sequence(server, agent, auditor):
    archive = create_v1(server, agent)
    events = [ev(1, "turn_start")] + [said(s) for s in range(2, 450)] + [ev(450, "turn_end", status="failed")]
    for i in range(0, 450, 50):
        appended(server, agent, archive, events[i:i + 50])

    pages, after, more = [], 0, True
    while more:
        page = detail(server, auditor, archive, after_sequence=after, limit=200)
        pages.append(page)
        after, more = page["next_after_sequence"], page["has_more"]

    assert [len(p["events"]) for p in pages] == [200, 200, 50]
    assert [(p["has_more"], p["next_after_sequence"]) for p in pages] == [(True, 200), (True, 400), (False, 450)]
    assert [e["sequence"] for p in pages for e in p["events"]] == list(range(1, 451))
    assert pages[0]["conversation"]["message_count"] == 448
    # The default page is 100; an after_sequence at the end is an empty last page.
    assert len(detail(server, auditor, archive)["events"]) == 100
    past = detail(server, auditor, archive, after_sequence=9000)
    assert (past["events"], past["has_more"], past["next_after_sequence"]) == ([], False, 9000)


@pytest.mark.parametrize("ref, status, code", [
    ("5f0c2a4e-8d1b-4c3a-9e7f-2b6d8a1c0e94", 404, "conversation_audit_not_found"),
    ("5F0C2A4E-8D1B-4C3A-9E7F-2B6D8A1C0E94", 404, "conversation_audit_not_found"),
    ("5f0c2a4e-8d1b-7c3a-9e7f-2b6d8a1c0e94", 400, "invalid_request"),  # 36 characters, version 7
    ("------------------------------------", 400, "invalid_request"),
    ("not-a-uuid", 404, "not_found"),
    ("5f0c2a4e8d1b4c3a9e7f2b6d8a1c0e94", 404, "not_found"),
])
def test_detail_of_an_unknown_archive_is_404(server, auditor, configured, ref, status, code):
    assert_error(admin_get(server, auditor, f"{ADMIN}/{ref}"), status, code)


@pytest.mark.parametrize("which", ["list", "detail"])
@pytest.mark.parametrize("who, status, code", [
    ("approver", 403, "forbidden"),
    ("nobody", 401, "unauthorized"),
    ("garbage", 401, "unauthorized"),
    ("agent", 403, "forbidden"),  # a known caller that may not read transcripts
    ("support", 200, None),
    ("admin", 200, None),
])
def test_admin_reads_need_runs_read(server, cli, agent, which, who, status, code):
    archive = create_v1(server, agent)
    fixed = {"nobody": None, "garbage": "bzadm_" + "x" * 43, "agent": agent["access_token"]}
    token = fixed[who] if who in fixed else make_admin_token(cli, who)
    response = admin_get(server, token, ADMIN if which == "list" else f"{ADMIN}/{archive}")
    if code is None:
        body = assert_ok(response)
        assert archive in json.dumps(body)
    else:
        body = assert_error(response, status, code)
        assert archive not in response.text and "items" not in body


# ============================================================== 7. run traces

def start_turn(live, session: dict, turn: str) -> dict:
    return assert_ok(agent_post(live, session, "/agent-api/v1/workspaces/customers/turns",
                                {"client_conversation_id": CONVERSATION, "client_turn_id": turn,
                          "user_message_id": f"m-{turn}", "user_input": f"Question of {turn}"}))


def trace(live, token: str, run_id: str) -> dict:
    body = assert_ok(admin_get(live, token, f"/admin/api/agent-runs/{run_id}"))
    assert body["run"]["run_id"] == run_id
    return body


def test_a_run_trace_links_back_to_its_archive_once_linked(server, agent, sql, auditor):
    linked, unlinked = start_turn(server, agent, "t1")["run_id"], start_turn(server, agent, "t2")["run_id"]
    before = trace(server, auditor, linked)
    assert "conversation_audit_id" not in before["run"]
    assert (before["run"]["session_id"], before["run"]["route_key"], before["run"]["client_app_id"]) == \
        (agent["session_id"], ROUTE, "crm-demo")
    assert [(m["role"], m["message_id"], m["content"]) for m in before["messages"]] == \
        [("user", "m-t1", "Question of t1")]

    archive = create_v1(server, agent)
    appended(server, agent, archive, [
        ev(1, "turn_start"), said(2, text="Question of t1"),
        ev(3, "run_link", run_id=linked, member_session_id=agent["session_id"]),
        ev(4, "turn_end", status="completed")])

    after = trace(server, auditor, linked)
    assert (after["run"]["conversation_audit_id"], after["run"]["client_turn_id"]) == (archive, "t1")
    assert after["messages"] == before["messages"]
    assert "conversation_audit_id" not in trace(server, auditor, unlinked)["run"]


def test_an_unlinked_run_trace_has_neither_audit_field(server, agent, auditor):
    run = trace(server, auditor, start_turn(server, agent, "t1")["run_id"])["run"]
    assert "conversation_audit_id" not in run and "client_turn_id" not in run


@pytest.mark.parametrize("ref", ["5f0c2a4e-8d1b-4c3a-9e7f-2b6d8a1c0e94", "not-a-uuid"])
def test_an_unknown_run_trace_is_404(server, auditor, ref):
    assert_error(admin_get(server, auditor, f"/admin/api/agent-runs/{ref}"), 404, "run_not_found")


@pytest.mark.parametrize("who, status", [("support", 200), ("auditor", 200), ("approver", 403),
                                         ("nobody", 401)])
def test_run_traces_need_runs_read(server, cli, agent, who, status):
    run_id = start_turn(server, agent, "t1")["run_id"]
    token = None if who == "nobody" else make_admin_token(cli, who)
    response = admin_get(server, token, f"/admin/api/agent-runs/{run_id}")
    if status == 200:
        assert trace(server, token, run_id)["messages"][0]["content"] == "Question of t1"
    else:
        assert_error(response, status, {403: "forbidden", 401: "unauthorized"}[status])
        assert "Question of t1" not in response.text
