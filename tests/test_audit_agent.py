"""Issue 5, items 2, 3, 4 and 8: the agent side of Conversation Audit.

Capabilities probe, v1 and v2 creation, member confirmation, event append and the revalidation
of every frozen member, over real HTTP against a live server and a real PostgreSQL. Every refusal
asserts its status, its error code and that nothing was written: the rows of the archive, member
and event tables (archive headers included) are the same before and after.
"""
from __future__ import annotations

import copy
import json
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import psycopg
import pytest

from admin_app import create_app, migrations
from tests.conftest import EXAMPLES, SQL_DIR, serve
from tests.helpers import admin_token, assert_error, bearer, session_bearer

AUDITS = "/agent-api/v1/conversation-audits"
ROUTE = "customers"
CONV = "conversation-stable-id"
ARCHIVE = "323e4567-e89b-42d3-a456-426614174001"
RECORD = "bailing.agent-conversation-audit.v1"
ACK = "bailing.agent-conversation-audit-ack.v1"
CREATE_V2 = "bailing.agent-conversation-audit-create.v2"
DETAIL = "bailing.agent-conversation-audit-detail.v1"

INVALID = "invalid_request"
AUTHZ = "conversation_audit_authorization_invalid"
NOT_FOUND = "conversation_audit_not_found"
NO_ENDPOINT = "not_found"
NOT_READY = "conversation_audit_not_ready"
CONFLICT = "conversation_audit_conflict"
LIMIT = "conversation_audit_limit"

TABLES = ("bz_agent_conversation_archives", "bz_agent_conversation_members",
          "bz_agent_conversation_events")
HEADER_KEYS = {"conversation_id", "client_archive_id", "client_conversation_id", "client_app_id",
               "route_key", "state", "member_count", "confirmed_count", "last_sequence",
               "message_count", "turn_count", "last_turn_status", "created_at", "updated_at"}


# ----------------------------------------------------------------------------- configuration

def hub_doc() -> dict:
    """examples/hub.json (its provider is already applied) plus an ERP app with route orders."""
    doc = json.loads((EXAMPLES / "hub.json").read_text())
    del doc["tool_providers"]
    doc["routes"].append({"route_key": "orders", "name": "Order desk", "enabled": True,
                          "audience": {"enabled": False},
                          "agent_client": {"enabled": True, "instructions": "Be exact."}})
    doc["client_apps"].append({"app_id": "erp-demo", "name": "ERP", "allowed_routes": ["orders"],
                               "enabled": True})
    return doc


def route_of(doc: dict, key: str) -> dict:
    return next(r for r in doc["routes"] if r["route_key"] == key)


def client_of(doc: dict, app_id: str) -> dict:
    return next(c for c in doc["client_apps"] if c["app_id"] == app_id)


@pytest.fixture
def reconfigure(cli, configured, tmp_path):
    """Apply the two-app configuration, optionally changed by `change(doc)`."""

    def apply(change=None):
        doc = hub_doc()
        if change is not None:
            change(doc)
        path = tmp_path / f"hub-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(doc))
        code, out, err = cli("config", "apply", str(path))
        assert code == 0, err
        return out

    apply()
    return apply


@pytest.fixture
def people(reconfigure, issue_session):
    """Three CRM sessions (a creator, b and c) and one ERP session (e), each its own bearer."""
    return SimpleNamespace(a=issue_session(), b=issue_session(), c=issue_session(),
                           e=issue_session(client="erp-demo", routes="orders"))


@pytest.fixture
def admin(cli):
    return bearer(admin_token(cli, "reader", "support"))


# ----------------------------------------------------------------------------- requests

def sid(who: dict) -> str:
    return who["session_id"]


def v1(creator: dict, *others: dict, ids: list | None = None, archive: str = ARCHIVE,
       route: str = ROUTE, conversation: str = CONV, labels: dict | None = None) -> dict:
    body = {"client_archive_id": archive, "client_conversation_id": conversation, "route": route,
            "member_session_ids": ids if ids is not None else [sid(creator)] + [sid(o) for o in others]}
    if labels is not None:
        body["member_labels"] = labels
    return body


def member(who: dict, app: str, route: str, label: str | None = None) -> dict:
    entry = {"session_id": sid(who), "client_app_id": app, "route": route}
    if label is not None:
        entry["label"] = label
    return entry


def crm(who: dict, label: str | None = None) -> dict:
    return member(who, "crm-demo", "customers", label)


def erp(who: dict, label: str | None = None) -> dict:
    return member(who, "erp-demo", "orders", label)


def v2(*members: dict, archive: str = ARCHIVE, conversation: str = CONV) -> dict:
    return {"schema": CREATE_V2, "client_archive_id": archive, "client_conversation_id": conversation,
            "members": list(members)}


def create(server, who: dict, body):
    return server.post(AUDITS, json=body, headers=session_bearer(who))


def confirm(server, who: dict, cid: str, body=None):
    return server.post(f"{AUDITS}/{cid}/confirm", json={} if body is None else body, headers=session_bearer(who))


def append(server, who: dict, cid: str, events):
    return server.post(f"{AUDITS}/{cid}/events", json={"events": events}, headers=session_bearer(who))


def header(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    # The header flat beside the schema (as the client SDK reads it), and under `conversation`.
    assert set(body) == {"schema", "conversation"} | HEADER_KEYS, body
    assert body["schema"] == RECORD
    assert {key: body[key] for key in HEADER_KEYS} == body["conversation"]
    return body["conversation"]


def ready(server, creator: dict, *others: dict, **v1_options) -> str:
    """A v1 archive whose members have all confirmed; its conversation_id."""
    cid = header(create(server, creator, v1(creator, *others, **v1_options)), 200)["conversation_id"]
    for other in others:
        header(confirm(server, other, cid))
    return cid


def ready_v2(server, writer: dict, members: list[dict], others: list[dict]) -> str:
    cid = header(create(server, writer, v2(*members)), 200)["conversation_id"]
    for other in others:
        header(confirm(server, other, cid))
    return cid


def acked(response, cid: str, last: int) -> None:
    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    assert response.json() == {"schema": ACK, "conversation_id": cid, "last_sequence": last}


def ev(seq: int, kind: str, turn: str = "turn-1", eid: str | None = None, **fields) -> dict:
    return {"event_id": f"ev-{seq}" if eid is None else eid, "sequence": seq, "client_turn_id": turn, "kind": kind,
            **fields}


def completed_turn(first: int, turn: str = "turn-1") -> list[dict]:
    return [ev(first, "turn_start", turn), ev(first + 1, "user_message", turn, content="Question?"),
            ev(first + 2, "assistant_message", turn, content="Answer."),
            ev(first + 3, "turn_end", turn, status="completed")]


def link(seq: int, run: str, who: dict, turn: str = "turn-1", eid: str | None = None) -> dict:
    return ev(seq, "run_link", turn, eid, run_id=run, member_session_id=sid(who))


def example_batch(run: str, who: dict) -> list[dict]:
    """The append example of the spec, verbatim apart from the run and member it links."""
    return [
        {"event_id": "start-1", "sequence": 1, "client_turn_id": "turn-1", "kind": "turn_start"},
        {"event_id": "user-1", "sequence": 2, "client_turn_id": "turn-1", "kind": "user_message",
         "content": "Compare the two selected stores."},
        {"event_id": "run-a", "sequence": 3, "client_turn_id": "turn-1", "kind": "run_link",
         "run_id": run, "member_session_id": sid(who)},
        {"event_id": "answer-1", "sequence": 4, "client_turn_id": "turn-1", "kind": "assistant_message",
         "content": "The complete answer shown to the user."},
        {"event_id": "end-1", "sequence": 5, "client_turn_id": "turn-1", "kind": "turn_end",
         "status": "completed"},
    ]


def run_of(server, who: dict, turn: str = "turn-1", conversation: str = CONV,
           route: str = ROUTE) -> str:
    """A real run of `who` (POST .../turns); its run_id."""
    response = server.post(f"/agent-api/v1/workspaces/{route}/turns", headers=session_bearer(who), json={
        "client_conversation_id": conversation, "client_turn_id": turn,
        "user_message_id": f"msg-{turn}", "user_input": "Compare the two selected stores."})
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def archive_row(sql, cid: str):
    rows = sql("SELECT state, member_count, confirmed_count, last_sequence, message_count, turn_count, "
               "last_turn_status, running_turn_id FROM bz_agent_conversation_archives WHERE id = %s",
               (cid,))
    assert len(rows) == 1
    return rows[0]


def detail(server, admin: dict, cid: str) -> dict:
    response = server.get(f"/admin/api/conversation-audits/{cid}", headers=admin)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["schema"] == DETAIL
    return body


# ----------------------------------------------------------------------------- nothing written

def snapshot(sql) -> dict:
    return {table: sql(f"SELECT * FROM {table} ORDER BY 1, 2") for table in TABLES}


@pytest.fixture
def unchanged(sql):
    """`with unchanged():` asserts the three archive tables hold exactly the same rows after."""

    @contextmanager
    def check():
        before = snapshot(sql)
        yield
        after = snapshot(sql)
        assert {t: len(rows) for t, rows in after.items()} == {t: len(rows) for t, rows in before.items()}
        assert after == before

    return check


# ============================================================================= capabilities

def test_capabilities_probe_advertises_cross_binding_members(server, people):
    response = server.get(f"{AUDITS}/capabilities", headers=session_bearer(people.a))
    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    assert response.json() == {"schema": "bailing.agent-conversation-audit-capabilities.v1",
                               "cross_binding_members": True,
                               "member_bindings": "session-client-route.v1"}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-token"},
                                     {"Authorization": "Basic dXNlcjpwdw=="}],
                         ids=["no-bearer", "bogus-bearer", "basic"])
def test_capabilities_probe_needs_an_agent_bearer(server, configured, headers):
    assert_error(server.get(f"{AUDITS}/capabilities", headers=headers), 401, "unauthorized")


def test_capabilities_probe_refuses_a_revoked_session(server, cli, people):
    assert cli("sessions", "revoke", sid(people.a))[0] == 0
    assert_error(server.get(f"{AUDITS}/capabilities", headers=session_bearer(people.a)), 401, "unauthorized")


@pytest.mark.parametrize("path", ["", "/x/confirm", "/x/events"])
def test_mutations_without_bearer_are_401_and_write_nothing(server, people, unchanged, path):
    target = AUDITS + path.replace("x", str(uuid.uuid4()))
    with unchanged():
        assert_error(server.post(target, json=v1(people.a)), 401, "unauthorized")


# ============================================================================= v1 creation

def test_v1_creation_freezes_the_group_and_an_identical_retry_returns_it(server, people, sql):
    body = v1(people.a, people.b, labels={sid(people.a): "Store A", sid(people.b): "Store B"})
    first = header(create(server, people.a, body), 200)
    assert first["client_archive_id"] == ARCHIVE and first["client_conversation_id"] == CONV
    assert (first["client_app_id"], first["route_key"]) == ("crm-demo", "customers")
    assert (first["state"], first["member_count"], first["confirmed_count"]) == ("enrolling", 2, 1)
    assert (first["last_sequence"], first["message_count"], first["turn_count"]) == (0, 0, 0)
    assert first["last_turn_status"] is None

    again = header(create(server, people.a, copy.deepcopy(body)), 200)
    assert again == first
    assert sql("SELECT count(*) FROM bz_agent_conversation_archives")[0][0] == 1
    members = sql("SELECT session_id::text, label, confirmed_at IS NOT NULL "
                  "FROM bz_agent_conversation_members ORDER BY position")
    assert members == [(sid(people.a), "Store A", True), (sid(people.b), "Store B", False)]


def test_v1_single_member_archive_is_ready_at_once(server, people):
    assert header(create(server, people.a, v1(people.a)), 200)["state"] == "ready"


V1_CHANGES = {
    "member-added": lambda b, p: b["member_session_ids"].append(sid(p.c)),
    "member-removed": lambda b, p: (b["member_session_ids"].remove(sid(p.b)),
                                    b["member_labels"].pop(sid(p.b))),
    "label-changed": lambda b, p: b["member_labels"].update({sid(p.a): "Store Z"}),
    "label-removed": lambda b, p: b["member_labels"].pop(sid(p.b)),
    "client-conversation-id": lambda b, p: b.update(client_conversation_id="another-conversation"),
}


@pytest.mark.parametrize("change", V1_CHANGES)
def test_v1_changed_retry_is_a_conflict_and_rewrites_nothing(server, people, unchanged, change):
    original = v1(people.a, people.b, labels={sid(people.a): "Store A", sid(people.b): "Store B"})
    header(create(server, people.a, original), 200)
    changed = copy.deepcopy(original)
    V1_CHANGES[change](changed, people)
    with unchanged():
        assert_error(create(server, people.a, changed), 409, CONFLICT)


def test_v1_distinct_creators_never_join_through_identical_client_ids(server, people, sql):
    mine = header(create(server, people.a, v1(people.a, people.b)), 200)
    theirs = header(create(server, people.b, v1(people.b, people.a)), 200)
    assert theirs["conversation_id"] != mine["conversation_id"]
    assert theirs["client_archive_id"] == mine["client_archive_id"] == ARCHIVE
    rows = sql("SELECT id::text, creator_session_id::text, confirmed_count, state "
               "FROM bz_agent_conversation_archives ORDER BY created_at")
    assert rows == [(mine["conversation_id"], sid(people.a), 1, "enrolling"),
                    (theirs["conversation_id"], sid(people.b), 1, "enrolling")]
    # b creating its own archive did not confirm b in a's archive.
    assert sql("SELECT confirmed_at FROM bz_agent_conversation_members WHERE archive_id = %s "
               "AND session_id = %s", (mine["conversation_id"], sid(people.b))) == [(None,)]


def test_a_creator_outside_the_members_is_404_and_writes_nothing(server, people, unchanged):
    with unchanged():
        assert_error(create(server, people.a, v1(people.a, ids=[sid(people.b), sid(people.c)])), 404, NOT_FOUND)
        assert_error(create(server, people.a, v2(crm(people.b), erp(people.e))), 404, NOT_FOUND)


V1_INVALID = {
    "unknown-field": lambda p: {**v1(p.a, p.b), "reasoning": "hidden"},
    "bad-member-uuid": lambda p: v1(p.a, ids=[sid(p.a), "not-a-uuid"]),
    "bad-client-archive-id": lambda p: v1(p.a, p.b, archive="archive-1"),
    "duplicate-member": lambda p: v1(p.a, ids=[sid(p.a), sid(p.b), sid(p.b)]),
    "label-129": lambda p: v1(p.a, p.b, labels={sid(p.a): "x" * 129}),
    "label-not-string": lambda p: v1(p.a, p.b, labels={sid(p.a): 7}),
    "label-for-non-member": lambda p: v1(p.a, p.b, labels={sid(p.c): "Store C"}),
    "route-auto": lambda p: v1(p.a, p.b, route="auto"),
    "route-uppercase": lambda p: v1(p.a, p.b, route="Customers"),
    "no-members": lambda p: v1(p.a, ids=[]),
    "members-not-a-list": lambda p: v1(p.a, ids=sid(p.a)),  # type: ignore[arg-type]
    "missing-route": lambda p: {k: v for k, v in v1(p.a).items() if k != "route"},
    "missing-client-conversation-id": lambda p: {k: v for k, v in v1(p.a).items()
                                                 if k != "client_conversation_id"},
    "empty-client-conversation-id": lambda p: v1(p.a, conversation=""),
    "v1-with-schema": lambda p: {**v1(p.a), "schema": "bailing.agent-conversation-audit-create.v1"},
}


@pytest.mark.parametrize("case", V1_INVALID)
def test_v1_invalid_creation_is_400_and_writes_nothing(server, people, unchanged, case):
    with unchanged():
        assert_error(create(server, people.a, V1_INVALID[case](people)), 400, INVALID)


UPPERCASE = {
    "v1-member": (lambda p: v1(p.a, p.b), lambda p: v1(p.a, ids=[sid(p.a), sid(p.b).upper()])),
    "v2-member": (lambda p: v2(crm(p.a), erp(p.e)),
                  lambda p: v2(crm(p.a), {**erp(p.e), "session_id": sid(p.e).upper()})),
    "v2-writer": (lambda p: v2(crm(p.a), erp(p.e)),
                  lambda p: v2({**crm(p.a), "session_id": sid(p.a).upper()}, erp(p.e))),
}


@pytest.mark.parametrize("case", UPPERCASE)
def test_an_uppercase_session_uuid_is_the_same_member(server, people, sql, unchanged, case):
    """UUIDs are case-insensitive: an upper-cased retry finds the archive, and nothing changes."""
    original, shouted = UPPERCASE[case]
    first = header(create(server, people.a, original(people)))
    with unchanged():
        assert header(create(server, people.a, shouted(people))) == first
    assert all(s == s.lower() for (s,) in sql("SELECT session_id::text FROM bz_agent_conversation_members"))


def test_v1_body_that_is_not_an_object_is_400(server, people, unchanged):
    with unchanged():
        assert_error(create(server, people.a, [v1(people.a)]), 400, INVALID)


def test_v1_label_of_128_characters_is_accepted(server, people, sql, admin):
    label = "é" * 127 + "z"
    cid = header(create(server, people.a, v1(people.a, people.b, labels={sid(people.b): label})),
                 200)["conversation_id"]
    assert sql("SELECT label FROM bz_agent_conversation_members WHERE session_id = %s",
               (sid(people.b),)) == [(label,)]
    views = {m["session_id"]: m for m in detail(server, admin, cid)["members"]}
    assert views[sid(people.b)]["display_label"] == label
    assert views[sid(people.a)]["display_label"] == sid(people.a)  # unlabelled: its session id


def test_v1_65_members_is_400_and_writes_nothing(server, people, unchanged):
    ids = [sid(people.a)] + [str(uuid.uuid4()) for _ in range(64)]
    with unchanged():
        assert_error(create(server, people.a, v1(people.a, ids=ids)), 400, INVALID)


def test_v1_64_members_are_accepted(server, people, issue_session):
    others = [issue_session() for _ in range(63)]
    conversation = header(create(server, people.a, v1(people.a, *others)), 200)
    assert (conversation["member_count"], conversation["confirmed_count"]) == (64, 1)


V1_FORBIDDEN = {
    "member-of-another-client-app": lambda p: v1(p.a, p.e),
    "route-outside-client-and-session-allowlist": lambda p: v1(p.a, p.b, route="orders"),
    "unknown-route": lambda p: v1(p.a, p.b, route="nowhere"),
    "member-session-unknown": lambda p: v1(p.a, ids=[sid(p.a), str(uuid.uuid4())]),
}


@pytest.mark.parametrize("case", V1_FORBIDDEN)
def test_v1_creation_outside_the_authorization_is_403(server, people, unchanged, case):
    with unchanged():
        assert_error(create(server, people.a, V1_FORBIDDEN[case](people)), 403, AUTHZ)


def test_v1_creation_with_a_revoked_member_is_403(server, cli, people, unchanged):
    assert cli("sessions", "revoke", sid(people.b))[0] == 0
    with unchanged():
        assert_error(create(server, people.a, v1(people.a, people.b)), 403, AUTHZ)


def test_v1_route_allowed_for_the_client_but_not_the_session_is_403(server, people, reconfigure,
                                                                     unchanged):
    reconfigure(lambda doc: client_of(doc, "crm-demo").update(allowed_routes=["customers", "orders"]))
    with unchanged():
        assert_error(create(server, people.a, v1(people.a, route="orders")), 403, AUTHZ)


def test_v1_creation_on_a_disabled_route_is_403(server, people, reconfigure, unchanged):
    reconfigure(lambda doc: route_of(doc, "customers").update(enabled=False))
    with unchanged():
        assert_error(create(server, people.a, v1(people.a, people.b)), 403, AUTHZ)


# ============================================================================= confirmation

def test_each_member_confirms_with_its_own_bearer_until_ready(server, people, sql):
    cid = header(create(server, people.a, v1(people.a, people.b, people.c)), 200)["conversation_id"]
    after_b = header(confirm(server, people.b, cid))
    assert (after_b["state"], after_b["confirmed_count"]) == ("enrolling", 2)
    after_c = header(confirm(server, people.c, cid))
    assert (after_c["state"], after_c["confirmed_count"], after_c["member_count"]) == ("ready", 3, 3)
    frozen = sql("SELECT session_id::text, principal, on_behalf_of, identity_hash IS NOT NULL "
                 "FROM bz_agent_conversation_members ORDER BY position")
    principal = {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}
    assert frozen == [(sid(w), principal, "tenant-7:user-42", True)
                      for w in (people.a, people.b, people.c)]


def test_confirming_twice_is_idempotent(server, people, sql, unchanged):
    cid = header(create(server, people.a, v1(people.a, people.b, people.c)), 200)["conversation_id"]
    first = header(confirm(server, people.b, cid))
    with unchanged():
        assert header(confirm(server, people.b, cid)) == first
        assert header(confirm(server, people.a, cid)) == first  # the creator confirmed by creating
    assert archive_row(sql, cid)[:3] == ("enrolling", 3, 2)


@pytest.mark.parametrize("body", [{"session_id": "__b__"}, {"confirmed": True}, {"x": None}, [], "yes"],
                         ids=["session-id", "confirmed", "null-field", "list", "string"])
def test_confirm_takes_an_empty_object_only(server, people, unchanged, body):
    cid = header(create(server, people.a, v1(people.a, people.b)), 200)["conversation_id"]
    if isinstance(body, dict) and body.get("session_id") == "__b__":
        body = {"session_id": sid(people.b)}
    for who in (people.a, people.b):  # nobody confirms a session named in a body
        with unchanged():
            assert_error(confirm(server, who, cid, body), 400, INVALID)


@pytest.mark.parametrize("endpoint", ["confirm", "events"])
def test_non_members_cannot_tell_an_archive_from_an_unknown_one(server, people, unchanged, endpoint):
    cid = ready(server, people.a, people.b)
    payload = {} if endpoint == "confirm" else {"events": completed_turn(1)}

    def call(who, ref):
        return server.post(f"{AUDITS}/{ref}/{endpoint}", json=payload, headers=session_bearer(who))

    with unchanged():
        outsider = assert_error(call(people.c, cid), 404, NOT_FOUND)
        unknown = assert_error(call(people.a, str(uuid.uuid4())), 404, NOT_FOUND)
        foreign_app = assert_error(call(people.e, cid), 404, NOT_FOUND)
        assert_error(call(people.a, "not-a-uuid"), 404, NO_ENDPOINT)  # no archive path at all
    assert outsider == unknown == foreign_app


def test_no_event_is_accepted_before_every_member_confirmed(server, people, sql, unchanged):
    cid = header(create(server, people.a, v1(people.a, people.b, people.c)), 200)["conversation_id"]
    header(confirm(server, people.b, cid))
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(1)), 409, NOT_READY)
        assert_error(append(server, people.a, cid, [ev(1, "turn_start")]), 409, NOT_READY)
    header(confirm(server, people.c, cid))
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)


def test_confirm_revalidates_the_whole_group(server, cli, people, unchanged):
    cid = header(create(server, people.a, v1(people.a, people.b, people.c)), 200)["conversation_id"]
    assert cli("sessions", "revoke", sid(people.c))[0] == 0
    with unchanged():
        assert_error(confirm(server, people.b, cid), 403, AUTHZ)


# ============================================================================= v2 creation

@pytest.mark.parametrize("writer_name", ["a", "e"])
def test_v2_writer_is_the_member_of_the_creating_bearer(server, people, sql, admin, writer_name):
    writer = getattr(people, writer_name)
    other = people.e if writer_name == "a" else people.a
    body = v2(crm(people.a, "CRM account"), erp(people.e, "ERP account"))
    created = header(create(server, writer, body), 200)
    expected = ("crm-demo", "customers") if writer_name == "a" else ("erp-demo", "orders")
    assert (created["client_app_id"], created["route_key"]) == expected
    assert (created["state"], created["member_count"], created["confirmed_count"]) == ("enrolling", 2, 1)
    cid = created["conversation_id"]
    assert sql("SELECT creator_session_id::text, membership_version FROM bz_agent_conversation_archives "
               "WHERE id = %s", (cid,)) == [(sid(writer), 2)]
    assert header(create(server, writer, copy.deepcopy(body)), 200) == created

    # The writer confirming again is a no-op; it cannot confirm for the other member.
    assert header(confirm(server, writer, cid))["confirmed_count"] == 1
    assert_error(confirm(server, writer, cid, {"session_id": sid(other)}), 400, INVALID)
    assert header(confirm(server, other, cid))["state"] == "ready"

    view = detail(server, admin, cid)
    assert (view["conversation"]["client_app_id"], view["conversation"]["route_key"]) == expected
    members = {m["session_id"]: m for m in view["members"]}
    assert {k: members[sid(people.a)][k] for k in ("client_app_id", "client_name", "route_key",
                                                   "display_label", "confirmed")} == \
        {"client_app_id": "crm-demo", "client_name": "CRM", "route_key": "customers",
         "display_label": "CRM account", "confirmed": True}
    assert {k: members[sid(people.e)][k] for k in ("client_app_id", "client_name", "route_key",
                                                   "display_label", "confirmed")} == \
        {"client_app_id": "erp-demo", "client_name": "ERP", "route_key": "orders",
         "display_label": "ERP account", "confirmed": True}


def test_v2_changed_retry_is_a_conflict(server, people, unchanged):
    body = v2(crm(people.a, "CRM account"), erp(people.e))
    header(create(server, people.a, body), 200)
    changed = copy.deepcopy(body)
    changed["members"][0]["label"] = "Other"
    with unchanged():
        assert_error(create(server, people.a, changed), 409, CONFLICT)


V2_INVALID = {
    "mixed-route": lambda p: {**v2(crm(p.a), erp(p.e)), "route": "customers"},
    "mixed-member-session-ids": lambda p: {**v2(crm(p.a), erp(p.e)),
                                           "member_session_ids": [sid(p.a), sid(p.e)]},
    "mixed-member-labels": lambda p: {**v2(crm(p.a), erp(p.e)), "member_labels": {sid(p.a): "A"}},
    "same-session-twice": lambda p: v2(crm(p.a), crm(p.a, "again"), erp(p.e)),
    "same-session-two-routes": lambda p: v2(crm(p.a), member(p.a, "crm-demo", "orders")),
    "zero-members": lambda p: v2(),
    "members-not-a-list": lambda p: {**v2(), "members": crm(p.a)},
    "member-missing-route": lambda p: v2(crm(p.a), {k: v for k, v in erp(p.e).items() if k != "route"}),
    "member-missing-client-app-id": lambda p: v2(crm(p.a), {"session_id": sid(p.e), "route": "orders"}),
    "member-unknown-field": lambda p: v2(crm(p.a), {**erp(p.e), "principal": {"id": "x"}}),
    "member-route-auto": lambda p: v2(crm(p.a), member(p.e, "erp-demo", "auto")),
    "member-route-uppercase": lambda p: v2(crm(p.a), member(p.e, "erp-demo", "Orders")),
    "member-app-uppercase": lambda p: v2(crm(p.a), member(p.e, "ERP-demo", "orders")),
    "member-bad-session-uuid": lambda p: v2(crm(p.a), {**erp(p.e), "session_id": "erp-session"}),
    "member-label-129": lambda p: v2(crm(p.a), erp(p.e, "x" * 129)),
    "unknown-top-level-field": lambda p: {**v2(crm(p.a)), "metadata": {}},
    "wrong-schema": lambda p: {**v2(crm(p.a)), "schema": "bailing.agent-conversation-audit-create.v3"},
    "missing-client-archive-id": lambda p: {k: v for k, v in v2(crm(p.a)).items()
                                            if k != "client_archive_id"},
}


@pytest.mark.parametrize("case", V2_INVALID)
def test_v2_invalid_creation_is_400_and_writes_nothing(server, people, unchanged, case):
    with unchanged():
        assert_error(create(server, people.a, V2_INVALID[case](people)), 400, INVALID)


def test_v2_label_of_128_characters_is_accepted(server, people):
    header(create(server, people.a, v2(crm(people.a, "x" * 128), erp(people.e, "y" * 128))), 200)


def test_v2_65_members_is_400(server, people, unchanged):
    members = [crm(people.a)] + [{"session_id": str(uuid.uuid4()), "client_app_id": "crm-demo",
                                  "route": "customers"} for _ in range(64)]
    with unchanged():
        assert_error(create(server, people.a, v2(*members)), 400, INVALID)


V2_FORBIDDEN = {
    "member-app-not-its-sessions": lambda p: (p.a, v2(crm(p.a), member(p.e, "crm-demo", "customers"))),
    "member-route-outside-its-allowlist": lambda p: (p.a, v2(crm(p.a), member(p.e, "erp-demo",
                                                                                "customers"))),
    "writer-route-outside-its-allowlist": lambda p: (p.a, v2(member(p.a, "crm-demo", "orders"),
                                                             erp(p.e))),
    "member-unknown-app": lambda p: (p.a, v2(crm(p.a), member(p.e, "nowhere-app", "orders"))),
    "member-unknown-session": lambda p: (p.a, v2(crm(p.a), {**erp(p.e), "session_id": str(uuid.uuid4())})),
}


@pytest.mark.parametrize("case", V2_FORBIDDEN)
def test_v2_creation_outside_each_members_authorization_is_403(server, people, unchanged, case):
    who, body = V2_FORBIDDEN[case](people)
    with unchanged():
        assert_error(create(server, who, body), 403, AUTHZ)


WRITER_NOT_FOUND = {
    "writer-app-not-the-bearers": lambda p: (p.a, v2(member(p.a, "erp-demo", "orders"), erp(p.e))),
    "erp-writer-claims-crm": lambda p: (p.e, v2(crm(p.a), member(p.e, "crm-demo", "customers"))),
}


@pytest.mark.parametrize("case", WRITER_NOT_FOUND)
def test_v2_without_a_member_of_the_bearers_session_and_app_is_404(server, people, unchanged, case):
    """The writer is the member of the bearer's own session and app; without one, no archive."""
    who, body = WRITER_NOT_FOUND[case](people)
    with unchanged():
        assert_error(create(server, who, body), 404, NOT_FOUND)


def test_v2_creation_with_a_revoked_member_is_403(server, cli, people, unchanged):
    assert cli("sessions", "revoke", sid(people.e))[0] == 0
    with unchanged():
        assert_error(create(server, people.a, v2(crm(people.a), erp(people.e))), 403, AUTHZ)


def test_v2_events_wait_for_every_member_and_only_the_writer_appends(server, people, unchanged):
    cid = header(create(server, people.e, v2(crm(people.a), erp(people.e))), 200)["conversation_id"]
    with unchanged():
        assert_error(append(server, people.e, cid, completed_turn(1)), 409, NOT_READY)
    header(confirm(server, people.a, cid))
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(1)), 404, NOT_FOUND)
    acked(append(server, people.e, cid, completed_turn(1)), cid, 4)


# ============================================================================= events

def test_the_spec_example_batch_is_acknowledged_and_an_identical_retry_too(server, people, sql,
                                                                          admin):
    cid = ready(server, people.a, people.b)
    run = run_of(server, people.a)
    batch = example_batch(run, people.a)
    acked(append(server, people.a, cid, batch), cid, 5)
    acked(append(server, people.a, cid, copy.deepcopy(batch)), cid, 5)
    acked(append(server, people.a, cid, batch[2:4]), cid, 4)  # a partial identical retry
    assert sql("SELECT count(*) FROM bz_agent_conversation_events")[0][0] == 5
    assert archive_row(sql, cid)[3:7] == (5, 2, 1, "completed")

    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]
    events = detail(server, admin, cid)["events"]
    assert [e["event_id"] for e in events] == ["start-1", "user-1", "run-a", "answer-1", "end-1"]
    linked = events[2]
    assert (linked["run_id"], linked["member_session_id"], linked["thread_id"]) == \
        (run, sid(people.a), thread)


def test_an_append_continues_where_the_last_batch_ended(server, people, sql):
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    acked(append(server, people.a, cid, completed_turn(5, "turn-2")[:2]), cid, 6)
    # A batch overlapping stored events identically and adding new ones.
    acked(append(server, people.a, cid, completed_turn(5, "turn-2")), cid, 8)
    assert archive_row(sql, cid)[3:8] == (8, 4, 2, "completed", None)


CONFLICTS = {
    # name: (stored prefix, refused batch)
    "different-content-at-stored-sequence": (
        completed_turn(1), [ev(2, "user_message", content="Question!")]),
    "different-event-id-at-stored-sequence": (
        completed_turn(1), [ev(2, "user_message", eid="other-id", content="Question?")]),
    "reused-event-id-at-new-sequence": (
        completed_turn(1), [ev(5, "turn_start", "turn-2", eid="ev-1")]),
    "event-id-twice-in-batch": (
        [], [ev(1, "turn_start", eid="same"), ev(2, "user_message", eid="same", content="x")]),
    "gap": (completed_turn(1), [ev(6, "turn_start", "turn-2")]),
    "first-sequence-not-1": ([], [ev(2, "turn_start")]),
    "unordered-batch": ([], [ev(2, "user_message", content="x"), ev(1, "turn_start")]),
    "repeated-sequence-in-batch": ([], [ev(1, "turn_start"), ev(1, "user_message", eid="b", content="x")]),
    "user-message-after-turn-end": (completed_turn(1), [ev(5, "user_message", content="late")]),
    "assistant-message-without-turn": ([], [ev(1, "assistant_message", content="hello")]),
    "user-message-of-another-turn": ([ev(1, "turn_start")],
                                     [ev(2, "user_message", "turn-2", content="x")]),
    "turn-end-of-another-turn": ([ev(1, "turn_start")],
                                 [ev(2, "turn_end", "turn-2", status="completed")]),
    "turn-end-without-running-turn": (completed_turn(1), [ev(5, "turn_end", status="failed")]),
    "turn-start-while-running": ([ev(1, "turn_start")], [ev(2, "turn_start", "turn-2")]),
    "turn-started-twice": (completed_turn(1), [ev(5, "turn_start")]),
    "turn-started-twice-in-batch": ([], [ev(1, "turn_start"), ev(2, "turn_end", status="completed"),
                                         ev(3, "turn_start")]),
    "run-link-of-never-started-turn": (
        [ev(1, "turn_start")], [ev(2, "run_link", "turn-9", run_id=str(uuid.uuid4()),
                                   member_session_id="00000000-0000-4000-8000-000000000000")]),
}


@pytest.mark.parametrize("case", CONFLICTS)
def test_event_history_conflicts_are_409_and_write_nothing(server, people, unchanged, case):
    prefix, batch = copy.deepcopy(CONFLICTS[case])
    cid = ready(server, people.a, people.b)
    if prefix:
        acked(append(server, people.a, cid, prefix), cid, len(prefix))
    with unchanged():
        assert_error(append(server, people.a, cid, batch), 409, CONFLICT)


def test_a_late_run_link_attaches_to_its_completed_turn_and_changes_no_newer_turn(server, people, sql,
                                                                                  admin):
    cid = ready(server, people.a, people.b)
    run_a = run_of(server, people.a, "turn-1")
    run_b = run_of(server, people.b, "turn-1")
    acked(append(server, people.a, cid, completed_turn(1) + [ev(5, "turn_start", "turn-2"),
                                                             ev(6, "user_message", "turn-2", content="Next?")]),
          cid, 6)
    assert archive_row(sql, cid)[6:8] == ("running", "turn-2")
    acked(append(server, people.a, cid, [link(7, run_a, people.a), link(8, run_b, people.b)]), cid, 8)
    assert archive_row(sql, cid)[3:8] == (8, 3, 2, "running", "turn-2")
    # turn-2 is still the running turn; turn-1 was not reopened.
    assert_error(append(server, people.a, cid, [ev(9, "assistant_message", "turn-1", content="x")]), 409,
                 CONFLICT)
    acked(append(server, people.a, cid, [ev(9, "turn_end", "turn-2", status="cancelled")]), cid, 9)
    assert archive_row(sql, cid)[6:8] == ("cancelled", None)
    threads = dict(sql("SELECT id::text, thread_id FROM bz_runs"))
    links = {e["run_id"]: e["thread_id"] for e in detail(server, admin, cid)["events"]
             if e["kind"] == "run_link"}
    assert links == {run_a: threads[run_a], run_b: threads[run_b]}
    assert threads[run_a] != threads[run_b]


def _run_link_case(case: str, server, p, cid: str) -> list[dict]:
    """The refused batch of one run_link case (after turn-1 completed and turn-2 started)."""
    if case == "run-of-another-session":
        return [link(6, run_of(server, p.b), p.a)]
    if case == "run-of-another-conversation":
        return [link(6, run_of(server, p.a, conversation="conv-other"), p.a)]
    if case == "run-of-another-turn":
        return [link(6, run_of(server, p.a, "turn-1"), p.a, turn="turn-2")]
    if case == "run-of-another-route":
        return [link(6, run_of(server, p.e, route="orders"), p.e)]
    if case == "member-not-in-archive":
        return [link(6, run_of(server, p.c), p.c)]
    if case == "unknown-run":
        return [link(6, str(uuid.uuid4()), p.a)]
    if case == "same-run-twice-in-batch":
        run = run_of(server, p.a)
        return [link(6, run, p.a), link(7, run, p.a)]
    if case == "same-run-linked-again":
        run = run_of(server, p.a)
        acked(append(server, p.a, cid, [link(6, run, p.a)]), cid, 6)
        return [link(7, run, p.a)]
    if case == "same-run-in-another-archive":
        run = run_of(server, p.a)
        other = ready(server, p.a, p.b, archive=str(uuid.uuid4()))
        acked(append(server, p.a, other, [ev(1, "turn_start"), link(2, run, p.a)]), other, 2)
        return [link(6, run, p.a)]
    raise AssertionError(case)


RUN_LINK_CASES = ["run-of-another-session", "run-of-another-conversation", "run-of-another-turn",
                  "run-of-another-route", "member-not-in-archive", "unknown-run",
                  "same-run-twice-in-batch", "same-run-linked-again", "same-run-in-another-archive"]


@pytest.mark.parametrize("case", RUN_LINK_CASES)
def test_run_links_are_checked_against_the_persisted_run(server, people, unchanged, case):
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1) + [ev(5, "turn_start", "turn-2")]), cid, 5)
    batch = _run_link_case(case, server, people, cid)
    with unchanged():
        assert_error(append(server, people.a, cid, batch), 409, CONFLICT)


@pytest.mark.parametrize("case", ["crm-run-as-erp-member", "erp-run-as-crm-member", "accepted"])
def test_v2_run_links_are_checked_against_the_member_they_name(server, people, sql, unchanged, case):
    cid = ready_v2(server, people.a, [crm(people.a), erp(people.e)], [people.e])
    run_a, run_e = run_of(server, people.a), run_of(server, people.e, route="orders")
    acked(append(server, people.a, cid, [ev(1, "turn_start")]), cid, 1)
    if case == "accepted":
        acked(append(server, people.a, cid, [link(2, run_a, people.a), link(3, run_e, people.e)]), cid, 3)
        stored = dict(sql("SELECT run_id::text, thread_id FROM bz_agent_conversation_events "
                          "WHERE kind = 'run_link'"))
        assert stored == dict(sql("SELECT id::text, thread_id FROM bz_runs"))
        return
    run, named = (run_a, people.e) if case == "crm-run-as-erp-member" else (run_e, people.a)
    with unchanged():
        assert_error(append(server, people.a, cid, [link(2, run, named)]), 409, CONFLICT)


INVALID_EVENTS = {
    "unknown-kind": [ev(1, "tool_result", content="x")],
    "kind-missing": [{"event_id": "e1", "sequence": 1, "client_turn_id": "turn-1"}],
    "kind-not-a-string": [ev(1, 7)],  # type: ignore[arg-type]
    "reasoning-field": [ev(1, "turn_start"), ev(2, "assistant_message", content="x", reasoning="hidden")],
    "metadata-field": [ev(1, "turn_start", metadata={"k": "v"})],
    "content-on-turn-start": [ev(1, "turn_start", content="x")],
    "status-on-message": [ev(1, "turn_start"), ev(2, "user_message", content="x", status="completed")],
    "missing-content": [ev(1, "turn_start"), ev(2, "user_message")],
    "content-not-a-string": [ev(1, "turn_start"), ev(2, "user_message", content=["x"])],
    "content-with-nul": [ev(1, "turn_start"), ev(2, "user_message", content="a\u0000b")],
    "content-single-space": [ev(1, "turn_start"), ev(2, "user_message", content=" ")],
    "content-only-blanks": [ev(1, "turn_start"), ev(2, "assistant_message", content="\n\t \u00a0\u3000")],
    "content-control-char": [ev(1, "turn_start"), ev(2, "user_message", content="bell\u0007")],
    "content-delete-char": [ev(1, "turn_start"), ev(2, "user_message", content="del\u007f")],
    "event-id-with-space": [ev(1, "turn_start", eid="event 1")],
    "event-id-129": [ev(1, "turn_start", eid="e" * 129)],
    "turn-id-leading-dash": [ev(1, "turn_start", turn="-turn")],
    "sequence-beyond-safe-integer": [ev(2**53, "turn_start")],
    "content-lone-surrogate": [ev(1, "turn_start"), ev(2, "user_message", content="a\ud800b")],
    "wrong-status": [ev(1, "turn_start"), ev(2, "turn_end", status="done")],
    "missing-status": [ev(1, "turn_start"), ev(2, "turn_end")],
    "run-link-missing-member": [ev(1, "turn_start"), ev(2, "run_link", run_id=str(uuid.uuid4()))],
    "run-link-bad-run-id": [ev(1, "turn_start"),
                            ev(2, "run_link", run_id="run-1", member_session_id=str(uuid.uuid4()))],
    "sequence-zero": [ev(0, "turn_start")],
    "sequence-string": [ev("1", "turn_start")],  # type: ignore[arg-type]
    "sequence-float": [ev(1.5, "turn_start")],  # type: ignore[arg-type]
    "missing-event-id": [{"sequence": 1, "client_turn_id": "turn-1", "kind": "turn_start"}],
    "empty-event-id": [ev(1, "turn_start", eid="")],
    "missing-client-turn-id": [{"event_id": "e1", "sequence": 1, "kind": "turn_start"}],
    "event-not-an-object": ["turn_start"],
    "no-events": [],
}


@pytest.mark.parametrize("case", INVALID_EVENTS)
def test_invalid_events_are_400_and_write_nothing(server, people, unchanged, case):
    cid = ready(server, people.a, people.b)
    with unchanged():
        assert_error(append(server, people.a, cid, copy.deepcopy(INVALID_EVENTS[case])), 400, INVALID)


@pytest.mark.parametrize("kind", [["turn_start"], {"k": "turn_start"}], ids=["list", "object"])
def test_an_unhashable_kind_is_400(server, people, unchanged, kind):
    cid = ready(server, people.a, people.b)
    with unchanged():
        assert_error(append(server, people.a, cid, [ev(1, kind)]), 400, INVALID)


@pytest.mark.parametrize("envelope", [{"events": [ev(1, "turn_start")], "metadata": {}}, {},
                                      {"events": {"0": ev(1, "turn_start")}}],
                         ids=["unknown-top-level-field", "no-events-key", "events-not-a-list"])
def test_invalid_event_envelopes_are_400(server, people, unchanged, envelope):
    cid = ready(server, people.a, people.b)
    with unchanged():
        response = server.post(f"{AUDITS}/{cid}/events", json=envelope, headers=session_bearer(people.a))
        assert_error(response, 400, INVALID)


FORTY_NINTH_PLUS_ONE = {
    "unknown-field": (ev(50, "assistant_message", content="x", metadata={}), 400, INVALID),
    "unknown-kind": (ev(50, "reasoning", content="x"), 400, INVALID),
    "turn-conflict": (ev(50, "turn_end", "turn-9", status="completed"), 409, CONFLICT),
    "sequence-gap": (ev(51, "assistant_message", content="x"), 409, CONFLICT),
    "text-too-long": (ev(50, "assistant_message", content="x" * 64001), 400, INVALID),
    "sequence-over-20000": (ev(20001, "assistant_message", content="x"), 413, LIMIT),
    "foreign-run-link": (ev(50, "run_link", run_id=str(uuid.uuid4()),
                            member_session_id=str(uuid.uuid4())), 409, CONFLICT),
}


@pytest.mark.parametrize("case", FORTY_NINTH_PLUS_ONE)
def test_a_batch_of_49_valid_events_and_1_invalid_stores_none(server, people, unchanged, case):
    cid = ready(server, people.a, people.b)
    valid = [ev(1, "turn_start")] + [ev(n, "user_message", content=f"message {n}") for n in range(2, 50)]
    bad, status, code = FORTY_NINTH_PLUS_ONE[case]
    assert len(valid) == 49
    with unchanged():
        assert_error(append(server, people.a, cid, valid + [bad]), status, code)
    acked(append(server, people.a, cid, valid), cid, 49)  # the 49 alone were fine


def test_only_the_writer_appends(server, people, unchanged):
    cid = ready(server, people.a, people.b, people.c)
    unknown = assert_error(append(server, people.a, str(uuid.uuid4()), completed_turn(1)), 404, NOT_FOUND)
    with unchanged():
        for confirmed_member in (people.b, people.c):
            assert assert_error(append(server, confirmed_member, cid, completed_turn(1)), 404, NOT_FOUND) == unknown


def test_a_batch_holds_at_most_50_events(server, people, unchanged):
    cid = ready(server, people.a, people.b)
    batch = [ev(1, "turn_start")] + [ev(n, "user_message", content="x") for n in range(2, 52)]
    assert len(batch) == 51
    with unchanged():
        assert_error(append(server, people.a, cid, batch), 400, INVALID)
    acked(append(server, people.a, cid, batch[:50]), cid, 50)


@pytest.mark.parametrize("content,accepted", [
    ("a" * 64000, True), ("😀" * 32000, True), ("a" * 64001, False), ("😀" * 32000 + "a", False),
    ("é" * 64000, True), ("😀" * 31999 + "abc", False)],
    ids=["64000-ascii", "64000-units-of-emoji", "64001-ascii", "64001-units-emoji", "64000-latin1",
         "64001-units-mixed"])
def test_a_visible_text_holds_at_most_64000_utf16_units(server, people, sql, unchanged, content,
                                                        accepted):
    cid = ready(server, people.a, people.b)
    batch = [ev(1, "turn_start"), ev(2, "user_message", content=content)]
    if accepted:
        acked(append(server, people.a, cid, batch), cid, 2)
        assert sql("SELECT content FROM bz_agent_conversation_events WHERE sequence = 2") == [(content,)]
    else:
        with unchanged():
            assert_error(append(server, people.a, cid, batch), 400, INVALID)


@pytest.mark.parametrize("tail,accepted", [(6144, True), (6145, False)], ids=["256KiB", "256KiB+1"])
def test_a_batch_holds_at_most_256_kib_of_utf8_text(server, people, unchanged, tail, accepted):
    cid = ready(server, people.a, people.b)
    batch = [ev(1, "turn_start")] + [ev(n, "user_message", content="a" * 64000) for n in range(2, 6)]
    batch.append(ev(6, "assistant_message", content="b" * tail))
    assert sum(len(e.get("content", "").encode()) for e in batch) == 256 * 1024 - 6144 + tail
    if accepted:
        acked(append(server, people.a, cid, batch), cid, 6)
    else:
        with unchanged():
            assert_error(append(server, people.a, cid, batch), 413, LIMIT)


def test_batch_text_is_counted_in_utf8_bytes_not_characters(server, people, unchanged):
    cid = ready(server, people.a, people.b)
    # 2 x 45,000 three-byte characters: 90,000 characters but 270,000 bytes.
    batch = [ev(1, "turn_start")] + [ev(n, "user_message", content="€" * 45000) for n in (2, 3)]
    with unchanged():
        assert_error(append(server, people.a, cid, batch), 413, LIMIT)


TEXTS = ["   leading spaces and trailing   ", "line 1\nline 2\n\nline 4\n", "windows\r\nline\r\n",
         "emoji 😀 family 👩‍👩‍👧 flag 🇨🇳", "tab\tand\u00a0nbsp and zero\u200bwidth", "\n  surrounded by blanks  \n",
         "中文：比较两家门店。", "quotes \"double\" 'single' \\ backslash </script>", "é (NFC) vs é (NFD)"]  # noqa: RUF001 - CJK text on purpose


def test_text_is_stored_exactly_as_sent(server, people, sql, admin):
    cid = ready(server, people.a, people.b)
    batch = [ev(1, "turn_start")] + [ev(n, "user_message" if n % 2 else "assistant_message", content=t)
                                     for n, t in enumerate(TEXTS, start=2)]
    acked(append(server, people.a, cid, batch), cid, len(batch))
    stored = [row[0] for row in sql("SELECT content FROM bz_agent_conversation_events "
                                    "WHERE content IS NOT NULL ORDER BY sequence")]
    assert stored == TEXTS
    shown = [e["content"] for e in detail(server, admin, cid)["events"] if "content" in e]
    assert shown == TEXTS


def test_the_creator_needs_no_other_member_to_link_its_own_runs(server, people, sql):
    """A single-member archive is ready at once and links the creator's own run."""
    cid = header(create(server, people.a, v1(people.a)), 200)["conversation_id"]
    acked(append(server, people.a, cid, example_batch(run_of(server, people.a), people.a)), cid, 5)
    assert archive_row(sql, cid)[3:7] == (5, 2, 1, "completed")


# ============================================================================= revalidation

def _set_session(sql, who, assignment: str, *params):
    sql(f"UPDATE bz_agent_sessions SET {assignment} WHERE id = %s", (*params, sid(who)))


V1_BREAKS = {
    "member-revoked": lambda p, cli, sql, conf: cli("sessions", "revoke", sid(p.b)),
    "member-refresh-expired": lambda p, cli, sql, conf: _set_session(
        sql, p.b, "refresh_expires_at = now() - interval '1 second'"),
    "member-principal-changed": lambda p, cli, sql, conf: _set_session(
        sql, p.b, "principal = %s::jsonb", json.dumps({"id": "user-43", "tenant": "tenant-7",
                                                       "roles": ["clerk"]})),
    "member-on-behalf-of-changed": lambda p, cli, sql, conf: _set_session(
        sql, p.b, "on_behalf_of = %s", "tenant-7:user-43"),
    "member-route-dropped-from-session": lambda p, cli, sql, conf: _set_session(
        sql, p.b, "allowed_routes = %s", ["orders"]),
    "creator-principal-changed": lambda p, cli, sql, conf: _set_session(
        sql, p.a, "principal = %s::jsonb", json.dumps({"id": "someone-else"})),
    "route-disabled": lambda p, cli, sql, conf: conf(
        lambda d: route_of(d, "customers").update(enabled=False)),
    "route-removed-from-client-allowlist": lambda p, cli, sql, conf: conf(
        lambda d: client_of(d, "crm-demo").update(allowed_routes=[])),
    "audience-excludes-members": lambda p, cli, sql, conf: conf(
        lambda d: route_of(d, "customers").update(audience={"enabled": True, "tenants": ["tenant-8"]})),
}


@pytest.mark.parametrize("case", V1_BREAKS)
def test_v1_append_revalidates_every_frozen_member(server, people, cli, sql, reconfigure, unchanged,
                                                   case):
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    V1_BREAKS[case](people, cli, sql, reconfigure)
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(5, "turn-2")), 403, AUTHZ)
        assert_error(append(server, people.a, cid, completed_turn(5, "turn-2")[:1]), 403, AUTHZ)
    # The group is never reduced: both members stay, and the text is not saved for the rest.
    assert archive_row(sql, cid)[:4] == ("ready", 2, 2, 4)


V2_BREAKS = {
    "erp-member-revoked": lambda p, cli, sql, conf: cli("sessions", "revoke", sid(p.e)),
    "erp-member-refresh-expired": lambda p, cli, sql, conf: _set_session(
        sql, p.e, "refresh_expires_at = now() - interval '1 second'"),
    "erp-member-principal-changed": lambda p, cli, sql, conf: _set_session(
        sql, p.e, "principal = %s::jsonb", json.dumps({"id": "user-43"})),
    "erp-client-disabled": lambda p, cli, sql, conf: conf(
        lambda d: client_of(d, "erp-demo").update(enabled=False)),
    "orders-route-disabled": lambda p, cli, sql, conf: conf(
        lambda d: route_of(d, "orders").update(enabled=False)),
    "orders-removed-from-erp-allowlist": lambda p, cli, sql, conf: conf(
        lambda d: client_of(d, "erp-demo").update(allowed_routes=[])),
    "orders-audience-excludes-erp-member": lambda p, cli, sql, conf: conf(
        lambda d: route_of(d, "orders").update(audience={"enabled": True, "roles": ["manager"]})),
}


@pytest.mark.parametrize("case", V2_BREAKS)
def test_v2_append_revalidates_every_members_own_binding(server, people, cli, sql, reconfigure,
                                                        unchanged, case):
    cid = ready_v2(server, people.a, [crm(people.a), erp(people.e)], [people.e])
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    V2_BREAKS[case](people, cli, sql, reconfigure)
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(5, "turn-2")), 403, AUTHZ)
    assert archive_row(sql, cid)[:4] == ("ready", 2, 2, 4)


WRITER_BREAKS = {
    "writer-revoked": lambda p, cli, conf: cli("sessions", "revoke", sid(p.a)),
    "writer-client-disabled": lambda p, cli, conf: conf(
        lambda d: client_of(d, "crm-demo").update(enabled=False)),
}


@pytest.mark.parametrize("case", WRITER_BREAKS)
def test_a_writer_whose_own_bearer_fails_is_401_and_writes_nothing(server, people, cli, sql,
                                                                   reconfigure, unchanged, case):
    """In v1 every member shares the writer's client: disabling it (or revoking the writer) fails
    bearer authentication itself, which the error table answers 401 before any archive check."""
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    WRITER_BREAKS[case](people, cli, reconfigure)
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(5, "turn-2")), 401, "unauthorized")
    assert archive_row(sql, cid)[:4] == ("ready", 2, 2, 4)


def test_revalidation_refuses_even_an_identical_retry_of_stored_events(server, people, cli, unchanged):
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    assert cli("sessions", "revoke", sid(people.b))[0] == 0
    with unchanged():
        assert_error(append(server, people.a, cid, completed_turn(1)), 403, AUTHZ)


# ============================================================================= no transcript reads

@pytest.mark.parametrize("suffix", ["/{cid}", "/{cid}/events", "/{cid}/confirm", "/{cid}/members",
                                    "/{cid}/transcript", "", "/unknown/sub/path"])
def test_there_is_no_agent_transcript_read(server, people, suffix):
    cid = ready(server, people.a, people.b)
    acked(append(server, people.a, cid, completed_turn(1)), cid, 4)
    for who in (people.a, people.b):
        response = server.get(AUDITS + suffix.format(cid=cid), headers=session_bearer(who))
        body = assert_error(response, 404, NO_ENDPOINT)
        assert "Question?" not in response.text and "Answer." not in response.text
        assert set(body) == {"error", "message"}


def test_unknown_agent_archive_endpoints_are_404(server, people, unchanged):
    cid = ready(server, people.a, people.b)
    with unchanged():
        for path in (f"/{cid}/members", f"/{cid}/events/1", "/capabilities/x"):
            assert_error(server.post(AUDITS + path, json={}, headers=session_bearer(people.a)), 404, NO_ENDPOINT)


# ============================================================================= remaining error rows

def test_a_storage_failure_is_500_without_exception_text(server, people, sql, unchanged):
    cid = ready(server, people.a, people.b)
    sql("CREATE FUNCTION bz_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'secret-storage-detail-4711'; END $$")
    sql("CREATE TRIGGER bz_test_fail BEFORE INSERT ON bz_agent_conversation_events "
        "FOR EACH ROW EXECUTE FUNCTION bz_test_fail()")
    with unchanged():
        response = append(server, people.a, cid, completed_turn(1))
        body = assert_error(response, 500, "conversation_audit_internal_error")
    assert set(body) == {"error", "message"}
    for leak in ("secret-storage-detail", "Traceback", "plpgsql", "psycopg", "bz_agent"):
        assert leak not in response.text


@pytest.fixture
def hub_at(databases, tmp_path):
    """A second hub on its own database migrated without a feature (`db upgrade --without`): every
    other file applied, as the running code needs; (server, database url, sessions)."""
    from admin_app.cli import main

    started = []

    def start(without: str):
        url = databases.create()
        migrations.upgrade(url, SQL_DIR, without=[without])
        application = create_app({"database_url": url, "data_dir": tmp_path / f"var-{without}"})
        live = serve(application)
        started.append((application, live))
        runner = application.test_cli_runner()

        def cli(*args):
            result = runner.invoke(main, list(args))
            assert result.exit_code == 0, result.output
            return json.loads(result.stdout)

        cli("config", "apply", str(EXAMPLES / "hub.json"))
        sessions = [cli("sessions", "issue", "--client", "crm-demo", "--routes", "customers",
                        "--principal", '{"id": "user-42"}') for _ in range(2)]
        return live, url, sessions

    yield start
    for application, live in started:
        live.stop()
        application.extensions["bailing"].db.dispose()


def _archive_count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM bz_agent_conversation_archives").fetchone()[0]


def test_without_057_every_archive_endpoint_is_503_unavailable(hub_at):
    live, _url, (a, b) = hub_at("conversation-audit")  # no 057
    probe = live.get(f"{AUDITS}/capabilities", headers=session_bearer(a))
    assert probe.status_code == 200 and probe.json()["cross_binding_members"] is False
    cid = str(uuid.uuid4())
    for response in (live.post(AUDITS, json=v1(a, b), headers=session_bearer(a)),
                     live.post(AUDITS, json=v2(crm(a), crm(b)), headers=session_bearer(a)),
                     live.post(f"{AUDITS}/{cid}/confirm", json={}, headers=session_bearer(b)),
                     live.post(f"{AUDITS}/{cid}/events", json={"events": completed_turn(1)},
                               headers=session_bearer(a))):
        assert_error(response, 503, "conversation_audit_unavailable")
    assert_error(live.post(AUDITS, json=v1(a, b)), 401, "unauthorized")


def test_with_057_only_v1_works_and_v2_is_503_cross_binding_unavailable(hub_at):
    live, url, (a, b) = hub_at("cross-binding")  # 057 without 058
    probe = live.get(f"{AUDITS}/capabilities", headers=session_bearer(a))
    assert probe.status_code == 200, probe.text
    assert probe.json() == {"schema": "bailing.agent-conversation-audit-capabilities.v1",
                            "cross_binding_members": False,
                            "member_bindings": "session-client-route.v1"}
    assert_error(live.post(AUDITS, json=v2(crm(a), crm(b)), headers=session_bearer(a)), 503,
                 "conversation_audit_cross_binding_unavailable")
    assert _archive_count(url) == 0
    cid = header(live.post(AUDITS, json=v1(a, b), headers=session_bearer(a)), 200)["conversation_id"]
    assert header(live.post(f"{AUDITS}/{cid}/confirm", json={}, headers=session_bearer(b)))["state"] == "ready"
    acked(live.post(f"{AUDITS}/{cid}/events", json={"events": completed_turn(1)}, headers=session_bearer(a)), cid, 4)
    assert _archive_count(url) == 1
