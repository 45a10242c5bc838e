"""The wire contract of Conversation Audit with the official Agent Client SDK and BailingHub Core:
the agent surface (/agent-api/v1/conversation-audits), the administrator reads
(/admin/api/conversation-audits) and the Core-shaped run and job traces.

One test per row of the contract: the status, every field and its type, the nesting, the schema
string and the error code. Every refusal also checks that nothing was written (the rows of the
archive, member and event tables are the same before and after).
"""
from __future__ import annotations

import copy
import json
import re
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from tests.helpers import admin_token, assert_error, bearer, session_bearer
from tests.test_tool_invocations import BIG_CREDIT, CUSTOMER, Agent, job_id_of

# The same work on any server (the answers' shapes; the SQL behind them runs in
# tests/test_audit_agent.py, on every server and on partitioned events).
pytestmark = pytest.mark.any_server

AUDITS = "/agent-api/v1/conversation-audits"
ADMIN = "/admin/api/conversation-audits"
RECORD = "bailing.agent-conversation-audit.v1"
ACK = "bailing.agent-conversation-audit-ack.v1"
CAPABILITIES = "bailing.agent-conversation-audit-capabilities.v1"
CREATE_V2 = "bailing.agent-conversation-audit-create.v2"
LIST = "bailing.agent-conversation-audit-list.v1"
DETAIL = "bailing.agent-conversation-audit-detail.v1"
CONV = "conversation-stable-id"
TABLES = ("bz_agent_conversation_archives", "bz_agent_conversation_members",
          "bz_agent_conversation_events")
ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
# The flat header: every field and its type (None where the value may be null).
HEADER_TYPES = {"conversation_id": str, "client_archive_id": str, "client_conversation_id": str,
                "client_app_id": str, "route_key": str, "state": str, "member_count": int,
                "confirmed_count": int, "last_sequence": int, "message_count": int, "turn_count": int,
                "last_turn_status": (str, type(None)), "created_at": str, "updated_at": str}


# ----------------------------------------------------------------------------- fixtures

@pytest.fixture
def two_apps(cli, configured, tmp_path):
    """examples/hub.json plus an ERP app with route `orders`."""
    from tests.test_audit_agent import hub_doc

    path = tmp_path / "two-apps.json"
    path.write_text(json.dumps(hub_doc()))
    code, _, err = cli("config", "apply", str(path))
    assert code == 0, err


@pytest.fixture
def people(two_apps, issue_session):
    """CRM sessions a, b, c and an ERP session e, each with its own bearer."""
    return SimpleNamespace(a=issue_session(), b=issue_session(), c=issue_session(),
                           e=issue_session(client="erp-demo", routes="orders"))


@pytest.fixture
def reader(cli, configured):
    return bearer(admin_token(cli, "reader", "support"))


@pytest.fixture
def unchanged(sql):
    @contextmanager
    def check():
        before = {t: sql(f"SELECT * FROM {t} ORDER BY 1, 2") for t in TABLES}
        yield
        after = {t: sql(f"SELECT * FROM {t} ORDER BY 1, 2") for t in TABLES}
        assert {t: len(r) for t, r in after.items()} == {t: len(r) for t, r in before.items()}
        assert after == before

    return check


# ----------------------------------------------------------------------------- requests

def sid(who: dict) -> str:
    return who["session_id"]


def v1(creator: dict, *others: dict, archive: str | None = None, **extra) -> dict:
    return {"client_archive_id": archive or str(uuid.uuid4()), "client_conversation_id": CONV,
            "route": "customers", "member_session_ids": [sid(creator)] + [sid(o) for o in others],
            **extra}


def crm(who: dict, **extra) -> dict:
    return {"session_id": sid(who), "client_app_id": "crm-demo", "route": "customers", **extra}


def erp(who: dict, **extra) -> dict:
    return {"session_id": sid(who), "client_app_id": "erp-demo", "route": "orders", **extra}


def v2(*members: dict, archive: str | None = None) -> dict:
    return {"schema": CREATE_V2, "client_archive_id": archive or str(uuid.uuid4()),
            "client_conversation_id": CONV, "members": list(members)}


def post(server, who: dict, path: str, body=None, raw: bytes | None = None):
    if raw is not None:
        return server.post(AUDITS + path, data=raw, headers=session_bearer(who))
    return server.post(AUDITS + path, json=body, headers=session_bearer(who))


def ev(seq: int, kind: str, turn: str = "turn-1", **fields) -> dict:
    return {"event_id": f"ev-{seq}", "sequence": seq, "client_turn_id": turn, "kind": kind, **fields}


def flat_header(response) -> dict:
    """A create or confirm reply: 200, schema, the header flat beside it (every field typed)."""
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["schema"] == RECORD
    header = {key: body[key] for key in HEADER_TYPES}
    for key, kind in HEADER_TYPES.items():
        assert isinstance(body[key], kind) and not isinstance(body[key], bool), (key, body[key])
    assert ISO_MS.fullmatch(body["created_at"]) and ISO_MS.fullmatch(body["updated_at"])
    assert set(body) <= {"schema", "conversation", *HEADER_TYPES}
    return header


def ready(server, creator: dict, *others: dict) -> str:
    cid = flat_header(post(server, creator, "", v1(creator, *others)))["conversation_id"]
    for other in others:
        flat_header(post(server, other, f"/{cid}/confirm", {}))
    return cid


def turn_of(server, who: dict, turn: str = "turn-1", route: str = "customers") -> str:
    response = server.post(f"/agent-api/v1/workspaces/{route}/turns", headers=session_bearer(who), json={
        "client_conversation_id": CONV, "client_turn_id": turn, "user_message_id": f"msg-{turn}",
        "user_input": "Compare the two stores."})
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


# ============================================================================= §2.19 agent surface

def test_capabilities(server, people):
    response = server.get(f"{AUDITS}/capabilities", headers=session_bearer(people.a))
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    assert response.json() == {"schema": CAPABILITIES, "cross_binding_members": True,
                               "member_bindings": "session-client-route.v1"}


def test_v1_create_is_200_with_the_flat_header_and_so_is_an_identical_retry(server, people, sql):
    body = v1(people.a, people.b, member_labels={sid(people.b): "Store B"})
    first = flat_header(post(server, people.a, "", body))
    assert first["client_archive_id"] == body["client_archive_id"]
    assert (first["client_conversation_id"], first["client_app_id"], first["route_key"]) == \
        (CONV, "crm-demo", "customers")
    assert (first["state"], first["member_count"], first["confirmed_count"]) == ("enrolling", 2, 1)
    assert (first["last_sequence"], first["message_count"], first["turn_count"],
            first["last_turn_status"]) == (0, 0, 0, None)
    uuid.UUID(first["conversation_id"])
    assert flat_header(post(server, people.a, "", copy.deepcopy(body))) == first
    assert sql("SELECT count(*) FROM bz_agent_conversation_archives")[0][0] == 1


def test_v1_members_are_normalised_so_a_reordered_upper_cased_retry_is_the_same(server, people, sql,
                                                                                 unchanged):
    body = v1(people.a, people.b, people.c, member_labels={sid(people.c): "Store C"})
    first = flat_header(post(server, people.a, "", body))
    shuffled = {**body, "client_archive_id": body["client_archive_id"].upper(),
                "member_session_ids": [sid(people.c).upper(), sid(people.a), sid(people.b).upper()],
                "member_labels": {sid(people.c).upper(): "Store C"}}
    with unchanged():
        assert flat_header(post(server, people.a, "", shuffled)) == first
    assert sql("SELECT count(*) FROM bz_agent_conversation_members")[0][0] == 3


def test_v2_create_puts_the_writers_binding_in_the_header_wherever_it_stands(server, people, unchanged):
    body = v2(crm(people.a, label="CRM account"), erp(people.e, label="ERP account"))
    header = flat_header(post(server, people.e, "", body))  # the writer is not the first member
    assert (header["client_app_id"], header["route_key"], header["state"]) == ("erp-demo", "orders", "enrolling")
    assert (header["member_count"], header["confirmed_count"]) == (2, 1)
    reordered = {**body, "members": list(reversed(body["members"]))}
    reordered["members"][0] = {**reordered["members"][0], "session_id": sid(people.e).upper()}
    with unchanged():
        assert flat_header(post(server, people.e, "", reordered)) == header


def test_a_creator_outside_the_members_is_404(server, people, unchanged):
    with unchanged():
        assert_error(post(server, people.a, "", v1(people.b)), 404, "conversation_audit_not_found")
        assert_error(post(server, people.a, "", v2(crm(people.b), erp(people.e))), 404,
                     "conversation_audit_not_found")
        # the bearer's session named with another app is no writer either
        assert_error(post(server, people.a, "", v2({**crm(people.a), "client_app_id": "erp-demo"}, erp(people.e))),
                     404, "conversation_audit_not_found")


CREATE_400 = {
    "v1-schema": lambda p: {**v1(p.a), "schema": "bailing.agent-conversation-audit-create.v1"},
    "v2-top-level-route": lambda p: {**v2(crm(p.a)), "route": "customers"},
    "v1-hub-url": lambda p: {**v1(p.a), "hub_url": "https://hub.example"},
    "v2-hub-url": lambda p: {**v2(crm(p.a)), "hub_url": "https://hub.example"},
    "v2-member-session-ids": lambda p: {**v2(crm(p.a)), "member_session_ids": [sid(p.a)]},
    "v2-member-labels": lambda p: {**v2(crm(p.a)), "member_labels": {}},
    "v2-upper-case-app-id": lambda p: v2(crm(p.a), {**erp(p.e), "client_app_id": "ERP-demo"}),
    "v1-route-auto": lambda p: {**v1(p.a), "route": "auto"},
    "v2-route-auto": lambda p: v2(crm(p.a), {**erp(p.e), "route": "auto"}),
    "v1-label-129": lambda p: v1(p.a, member_labels={sid(p.a): "x" * 129}),
    "v2-label-129": lambda p: v2(crm(p.a, label="x" * 129)),
    "v1-label-blank": lambda p: v1(p.a, member_labels={sid(p.a): " "}),
    "v2-label-control": lambda p: v2(crm(p.a, label="bell\u0007")),
    "v2-access-token-member-field": lambda p: v2({**crm(p.a), "access_token": p.a["access_token"]}),
    "v1-65-members": lambda p: v1(p.a, *[{"session_id": str(uuid.uuid4())} for _ in range(64)]),
    "v2-no-members": lambda p: v2(),
    "v1-uuid-version-7": lambda p: v1(p.a, archive="5f0c2a4e-8d1b-7c3a-9e7f-2b6d8a1c0e94"),
    "v1-conversation-id-with-space": lambda p: {**v1(p.a), "client_conversation_id": "a b"},
    "v1-conversation-id-129": lambda p: {**v1(p.a), "client_conversation_id": "c" * 129},
    "v1-duplicate-member-by-case": lambda p: {**v1(p.a), "member_session_ids": [sid(p.a), sid(p.a).upper()]},
}


@pytest.mark.parametrize("case", CREATE_400)
def test_create_refusals_are_400_and_write_nothing(server, people, unchanged, case):
    with unchanged():
        assert_error(post(server, people.a, "", CREATE_400[case](people)), 400, "invalid_request")


def test_confirm_is_200_with_the_flat_header_and_takes_no_body_or_an_empty_object(server, people):
    cid = flat_header(post(server, people.a, "", v1(people.a, people.b, people.c)))["conversation_id"]
    after_b = flat_header(post(server, people.b, f"/{cid}/confirm", raw=b""))  # no body at all
    assert (after_b["conversation_id"], after_b["state"], after_b["confirmed_count"]) == (cid, "enrolling", 2)
    after_c = flat_header(post(server, people.c, f"/{cid}/confirm", {}))
    assert (after_c["state"], after_c["confirmed_count"], after_c["member_count"]) == ("ready", 3, 3)


def test_confirm_naming_a_session_is_400_and_by_a_non_member_404(server, people, unchanged):
    cid = flat_header(post(server, people.a, "", v1(people.a, people.b)))["conversation_id"]
    with unchanged():
        assert_error(post(server, people.a, f"/{cid}/confirm", {"session_id": sid(people.b)}), 400, "invalid_request")
        assert_error(post(server, people.b, f"/{cid}/confirm", {"session_id": sid(people.b)}), 400, "invalid_request")
        assert_error(post(server, people.c, f"/{cid}/confirm", {}), 404, "conversation_audit_not_found")
        assert_error(post(server, people.e, f"/{cid}/confirm", {}), 404, "conversation_audit_not_found")


def test_events_are_acknowledged_and_an_identical_retry_gets_the_identical_ack(server, people, sql):
    cid = ready(server, people.a, people.b)
    batch = [ev(1, "turn_start"), ev(2, "user_message", content="  Question?\n"),
             ev(3, "assistant_message", content="Answer."), ev(4, "turn_end", status="completed")]
    first = post(server, people.a, f"/{cid}/events", {"events": batch})
    assert first.status_code == 200 and first.headers["Cache-Control"] == "no-store"
    assert first.json() == {"schema": ACK, "conversation_id": cid, "last_sequence": 4}
    again = post(server, people.a, f"/{cid}/events", {"events": copy.deepcopy(batch)})
    assert again.status_code == 200 and again.json() == first.json()
    # leading and trailing blanks are kept exactly
    assert sql("SELECT content FROM bz_agent_conversation_events WHERE sequence = 2") == [("  Question?\n",)]


def test_only_the_writer_appends_in_v2(server, people, unchanged):
    cid = flat_header(post(server, people.e, "", v2(crm(people.a), erp(people.e))))["conversation_id"]
    flat_header(post(server, people.a, f"/{cid}/confirm", {}))
    with unchanged():
        assert_error(post(server, people.a, f"/{cid}/events", {"events": [ev(1, "turn_start")]}), 404,
                     "conversation_audit_not_found")


EVENTS_REFUSED = {
    # name: (batch, status, code)
    "single-space": ([ev(1, "turn_start"), ev(2, "user_message", content=" ")], 400, "invalid_request"),
    "nul": ([ev(1, "turn_start"), ev(2, "user_message", content="a\u0000b")], 400, "invalid_request"),
    "control-character": ([ev(1, "turn_start"), ev(2, "user_message", content="a\u001bb")], 400,
                          "invalid_request"),
    "64001-characters": ([ev(1, "turn_start"), ev(2, "user_message", content="a" * 64001)], 400,
                         "invalid_request"),
    "51-events": ([ev(1, "turn_start")] + [ev(n, "user_message", content="x") for n in range(2, 52)], 400,
                  "invalid_request"),
    "sequence-20001": ([ev(20001, "turn_start")], 413, "conversation_audit_limit"),
    "5-times-64000-characters": ([ev(1, "turn_start")] + [ev(n, "user_message", content="a" * 64000)
                                                         for n in range(2, 7)], 413, "conversation_audit_limit"),
    "event-id-pattern": ([{**ev(1, "turn_start"), "event_id": "ev 1"}], 400, "invalid_request"),
    "run-link-bad-uuid": ([ev(1, "turn_start"), ev(2, "run_link", run_id="run-1",
                                                   member_session_id=str(uuid.uuid4()))], 400, "invalid_request"),
}


@pytest.mark.parametrize("case", EVENTS_REFUSED)
def test_event_rules_and_limits(server, people, unchanged, case):
    cid = ready(server, people.a, people.b)
    batch, status, code = EVENTS_REFUSED[case]
    with unchanged():
        assert_error(post(server, people.a, f"/{cid}/events", {"events": batch}), status, code)


def test_64000_characters_and_a_first_sequence_of_20000_are_within_the_limits(server, people, sql):
    cid = ready(server, people.a, people.b)
    response = post(server, people.a, f"/{cid}/events",
                    {"events": [ev(1, "turn_start"), ev(2, "user_message", content="é" * 64000)]})
    assert response.status_code == 200, response.text
    # 20 000 itself is no limit (a gap is what refuses it here)
    assert_error(post(server, people.a, f"/{cid}/events", {"events": [ev(20000, "turn_end", status="completed")]}),
                 409, "conversation_audit_conflict")


def test_run_link_uuids_are_case_insensitive(server, people, sql):
    cid = ready(server, people.a, people.b)
    run = turn_of(server, people.a)
    batch = [ev(1, "turn_start"), ev(2, "run_link", run_id=run.upper(), member_session_id=sid(people.a).upper())]
    response = post(server, people.a, f"/{cid}/events", {"events": batch})
    assert response.status_code == 200, response.text
    assert sql("SELECT run_id::text, member_session_id::text FROM bz_agent_conversation_events "
               "WHERE kind = 'run_link'") == [(run, sid(people.a))]


@pytest.mark.parametrize("path", ["", "/{cid}/confirm", "/{cid}/events"])
def test_every_post_reads_at_most_2_mib(server, people, unchanged, path):
    cid = flat_header(post(server, people.a, "", v1(people.a, people.b)))["conversation_id"]
    padding = json.dumps({"events": [], "pad": "x" * (2 * 1024 * 1024)}).encode()
    with unchanged():
        assert_error(post(server, people.b if "confirm" in path else people.a, path.format(cid=cid), raw=padding),
                     413, "conversation_audit_limit")


@pytest.mark.parametrize("method, path", [
    ("GET", ""), ("GET", "/{cid}"), ("GET", "/{cid}/events"), ("GET", "/{cid}/confirm"),
    ("PUT", ""), ("DELETE", "/{cid}"), ("POST", "/{cid}"), ("POST", "/{cid}/members"),
    ("POST", "/not-an-archive/events"), ("POST", "/capabilities"),
])
def test_anything_else_under_the_base_is_404_not_found_without_text(server, people, unchanged, method, path):
    cid = ready(server, people.a, people.b)
    stored = post(server, people.a, f"/{cid}/events",
                  {"events": [ev(1, "turn_start"), ev(2, "user_message", content="Secret question")]})
    assert stored.status_code == 200
    with unchanged():
        response = server.request(method, AUDITS + path.format(cid=cid), headers=session_bearer(people.a), json={})
        assert_error(response, 404, "not_found")
    assert "Secret question" not in response.text


def test_a_36_character_archive_reference_that_is_no_uuid_is_400(server, people, unchanged):
    ready(server, people.a, people.b)
    with unchanged():
        assert_error(post(server, people.a, "/" + "-" * 36 + "/confirm", {}), 400, "invalid_request")


# ============================================================================= §4.1 admin reads

def test_admin_list_shape_default_limit_and_clamping(server, people, reader):
    cids = [flat_header(post(server, people.a, "", v1(people.a)))["conversation_id"] for _ in range(51)]
    response = server.get(ADMIN, headers=reader)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    body = response.json()
    assert set(body) == {"schema", "items", "has_more", "next_offset"}
    assert (body["schema"], len(body["items"]), body["has_more"], body["next_offset"]) == (LIST, 50, True, 50)
    for item in body["items"]:
        assert set(item) == set(HEADER_TYPES)
        for key, kind in HEADER_TYPES.items():
            assert isinstance(item[key], kind), (key, item[key])
    # newest updated first
    assert [i["conversation_id"] for i in body["items"]] == list(reversed(cids))[:50]
    rest = server.get(ADMIN, params={"offset": "50", "limit": "1000"}, headers=reader).json()
    assert (len(rest["items"]), rest["has_more"], rest["next_offset"]) == (1, False, None)
    clamped = server.get(ADMIN, params={"limit": "0"}, headers=reader).json()
    assert (len(clamped["items"]), clamped["has_more"], clamped["next_offset"]) == (1, True, 1)


@pytest.mark.parametrize("query", ["limit=-1", "limit=1.0", "offset=abc", "limit=9007199254740992"])
def test_admin_list_numbers_must_be_plain_safe_integers(server, people, reader, query):
    assert_error(server.get(f"{ADMIN}?{query}", headers=reader), 400, "invalid_request")


def test_admin_detail_members_events_and_paging(server, people, reader, sql):
    run = turn_of(server, people.a)
    body = v2(crm(people.a, label="CRM account"), erp(people.e))
    cid = flat_header(post(server, people.a, "", body))["conversation_id"]
    enrolling = server.get(f"{ADMIN}/{cid}", headers=reader).json()
    members = {m["session_id"]: m for m in enrolling["members"]}
    assert set(members[sid(people.e)]) == {"session_id", "display_label", "confirmed", "client_app_id",
                                           "client_name", "route_key"}
    assert members[sid(people.e)]["display_label"] == sid(people.e)  # unlabelled: its session id
    assert members[sid(people.e)]["confirmed"] is False
    assert (enrolling["events"], enrolling["has_more"], enrolling["next_after_sequence"]) == ([], False, 0)

    flat_header(post(server, people.e, f"/{cid}/confirm", {}))
    batch = [ev(1, "turn_start"), ev(2, "user_message", content="Q"),
             ev(3, "run_link", run_id=run, member_session_id=sid(people.a)),
             ev(4, "assistant_message", content="A"), ev(5, "turn_end", status="failed")]
    assert post(server, people.a, f"/{cid}/events", {"events": batch}).status_code == 200

    response = server.get(f"{ADMIN}/{cid}", headers=reader)
    assert response.status_code == 200 and response.headers["Cache-Control"] == "no-store"
    view = response.json()
    assert set(view) == {"schema", "conversation", "members", "events", "has_more", "next_after_sequence"}
    assert view["schema"] == DETAIL
    assert set(view["conversation"]) == set(HEADER_TYPES)
    assert (view["conversation"]["message_count"], view["conversation"]["turn_count"],
            view["conversation"]["last_turn_status"]) == (2, 1, "failed")
    writer = next(m for m in view["members"] if m["session_id"] == sid(people.a))
    assert writer == {"session_id": sid(people.a), "display_label": "CRM account", "confirmed": True,
                      "client_app_id": "crm-demo", "client_name": "CRM", "route_key": "customers",
                      "principal": {"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]},
                      "on_behalf_of": "tenant-7:user-42"}
    kinds = {e["kind"]: e for e in view["events"]}
    for e in view["events"]:
        assert ISO_MS.fullmatch(e.pop("created_at"))
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]
    assert kinds["turn_start"] == {"event_id": "ev-1", "sequence": 1, "client_turn_id": "turn-1", "kind": "turn_start"}
    assert kinds["user_message"] == {**batch[1]}
    assert kinds["run_link"] == {**batch[2], "thread_id": thread} and isinstance(thread, int)
    assert kinds["turn_end"] == {**batch[4]}
    assert (view["has_more"], view["next_after_sequence"]) == (False, 5)

    page = server.get(f"{ADMIN}/{cid}", params={"limit": "1"}, headers=reader).json()
    assert ([e["sequence"] for e in page["events"]], page["has_more"], page["next_after_sequence"]) == ([1], True, 1)
    page = server.get(f"{ADMIN}/{cid}", params={"after_sequence": "4", "limit": "500"}, headers=reader).json()
    assert ([e["sequence"] for e in page["events"]], page["has_more"], page["next_after_sequence"]) == ([5], False, 5)
    assert_error(server.get(f"{ADMIN}/{cid}", params={"after_sequence": "-1"}, headers=reader), 400, "invalid_request")


@pytest.mark.parametrize("ref, status, code", [
    ("6f1c2a3e-8d4b-4c5a-9e7f-0a1b2c3d4e5f", 404, "conversation_audit_not_found"),
    ("x" * 36, 404, "not_found"),  # not of the archive path's characters
    ("0" * 36, 400, "invalid_request"),
    ("12345678-1234-0234-8234-123456789012", 400, "invalid_request"),  # version 0
    ("short", 404, "not_found"),
])
def test_admin_detail_references(server, reader, configured, ref, status, code):
    assert_error(server.get(f"{ADMIN}/{ref}", headers=reader), status, code)


@pytest.mark.parametrize("method, path", [("POST", ""), ("DELETE", "/{cid}"), ("GET", "/{cid}/events"),
                                          ("PUT", "/{cid}")])
def test_admin_audits_are_read_only(server, people, reader, unchanged, method, path):
    cid = ready(server, people.a)
    with unchanged():
        assert_error(server.request(method, ADMIN + path.format(cid=cid), headers=reader, json={}), 404, "not_found")


@pytest.mark.parametrize("path", ["", "/{cid}"])
def test_admin_reads_without_runs_read_are_403_forbidden(server, cli, people, path):
    cid = ready(server, people.a)
    approver = bearer(admin_token(cli, "ann", "approver"))
    for headers in (approver, session_bearer(people.a)):  # an admin without runs:read, an agent bearer
        body = assert_error(server.get(ADMIN + path.format(cid=cid), headers=headers), 403, "forbidden")
        assert cid not in json.dumps(body)
    assert_error(server.get(ADMIN + path.format(cid=cid)), 401, "unauthorized")


# ============================================================================= §4.2 traces

TRACE_EVENT_KEYS = {"ts", "event", "stage", "severity", "title", "summary", "detail", "source"}
INVOCATION_KEYS = {"job_id", "invocation_id", "tool", "status", "state", "ok", "business_status",
                   "approval_status", "approval_id", "event_count", "created_at", "updated_at"}


def run_trace(server, headers, thread: int | str, run: str):
    return server.get(f"/admin/api/threads/{thread}/agent-runs/{run}/trace", headers=headers)


def test_run_trace_of_a_completed_linked_run(server, people, reader, sql):
    run = turn_of(server, people.a)
    done = server.post(f"/agent-api/v1/runs/{run}/complete", headers=session_bearer(people.a), json={
        "assistant_message_id": "answer-1", "content": "The answer.", "status": "completed",
        "model": "gpt-test", "runtime": "local-runtime", "usage": {"input_tokens": 12, "output_tokens": 3}})
    assert done.status_code == 200, done.text
    cid = ready(server, people.a)
    linked = post(server, people.a, f"/{cid}/events",
                  {"events": [ev(1, "turn_start"), ev(2, "run_link", run_id=run, member_session_id=sid(people.a))]})
    assert linked.status_code == 200, linked.text
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]

    response = run_trace(server, reader, thread, run)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"kind", "run", "trace", "invocations"} and body["kind"] == "agent_client_run"
    r = body["run"]
    assert set(r) == {"run_id", "thread_id", "client_app_id", "route_key", "status", "model", "runtime",
                      "usage", "created_at", "updated_at", "completed_at", "governance",
                      "conversation_audit_id", "client_turn_id"}
    assert (r["run_id"], r["thread_id"], r["client_app_id"], r["route_key"], r["status"]) == \
        (run, thread, "crm-demo", "customers", "completed")
    assert (r["model"], r["runtime"], r["usage"]) == ("gpt-test", "local-runtime",
                                                      {"input_tokens": 12, "output_tokens": 3})
    assert all(ISO_MS.fullmatch(r[k]) for k in ("created_at", "updated_at", "completed_at"))
    assert r["governance"] == {"planner": "local_agent", "execution": "bailinghub_governed",
                               "hidden_reasoning_sync": False, "tool_payloads": "summary_only"}
    assert (r["conversation_audit_id"], r["client_turn_id"]) == (cid, "turn-1")
    summary, events = body["trace"]["summary"], body["trace"]["events"]
    assert set(summary) - {"duration_ms"} == {"event_count", "tool_invocations", "approvals", "warning_count",
                                              "error_count", "partial"}
    assert (summary["event_count"], summary["tool_invocations"], summary["approvals"], summary["partial"]) == \
        (2, 0, 0, False)
    assert [(e["event"], e["stage"], e["source"]) for e in events] == [
        ("agent_client_run_started", "launch", "local_agent"),
        ("agent_client_run_completed", "delivery", "local_agent")]
    for e in events:
        assert set(e) == TRACE_EVENT_KEYS and ISO_MS.fullmatch(e["ts"])
    assert body["invocations"] == []
    assert "The answer." not in response.text  # visible text stays in the messages trace


def test_run_trace_of_an_unlinked_open_run_has_no_audit_fields(server, people, reader, sql):
    run = turn_of(server, people.a)
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]
    body = run_trace(server, reader, thread, run).json()
    assert "conversation_audit_id" not in body["run"] and "client_turn_id" not in body["run"]
    assert (body["run"]["completed_at"], body["run"]["model"], body["run"]["usage"]) == (None, None, None)
    assert [e["event"] for e in body["trace"]["events"]] == ["agent_client_run_started"]


def test_run_trace_refusals(server, cli, people, reader, sql):
    run = turn_of(server, people.a)
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]
    assert_error(run_trace(server, reader, thread + 1000, run), 404, "not_found")  # not on that thread
    assert_error(run_trace(server, reader, thread, str(uuid.uuid4())), 404, "not_found")
    assert_error(run_trace(server, reader, thread, "not-a-uuid"), 404, "not_found")
    assert_error(run_trace(server, reader, "x", run), 404, "not_found")
    assert_error(run_trace(server, bearer(admin_token(cli, "ann", "approver")), thread, run), 403, "forbidden")


@pytest.fixture
def tools_agent(server, governed) -> Agent:
    return Agent(server, governed)


@pytest.fixture
def tools_reader(cli, tools_agent) -> dict:
    """A support token on the governed hub (without `configured`, which would replace its config)."""
    return bearer(admin_token(cli, "reader", "support"))


def test_run_trace_lists_its_tool_invocations_and_the_job_trace(server, tools_agent, tools_reader, sql):
    reader = tools_reader
    turn = server.post("/agent-api/v1/workspaces/desk/turns", headers=tools_agent.headers, json={
        "client_conversation_id": "conv-1", "client_turn_id": "turn-1", "user_message_id": "msg-1",
        "user_input": "What is the credit limit of our Berlin customer?"})
    assert turn.status_code == 200, turn.text
    run = turn.json()["run_id"]
    assert tools_agent.invoke("customer_get", CUSTOMER, "inv-read", run_id=run)["status"] == "executed"
    assert tools_agent.invoke("customer_update_credit_limit", BIG_CREDIT, "inv-write",
                              run_id=run)["status"] == "awaiting_approval"
    thread = sql("SELECT thread_id FROM bz_runs WHERE id = %s", (run,))[0][0]

    body = run_trace(server, reader, thread, run).json()
    assert (body["trace"]["summary"]["tool_invocations"], body["trace"]["summary"]["approvals"]) == (2, 1)
    rows = {i["tool"]: i for i in body["invocations"]}
    for row in rows.values():
        assert set(row) - {"duration_ms"} == INVOCATION_KEYS
    read, write = rows["customer_get"], rows["customer_update_credit_limit"]
    assert (read["status"], read["ok"], read["business_status"], read["approval_status"]) == \
        ("executed", True, 200, None)
    assert (write["status"], write["ok"], write["approval_status"]) == ("awaiting_approval", None, "pending")
    assert isinstance(write["approval_id"], int)
    tool_events = [e for e in body["trace"]["events"] if e["source"] == "hub_governance"]
    assert {e["tool_job_id"] for e in tool_events} == {read["job_id"], write["job_id"]}
    assert sum(r["event_count"] for r in rows.values()) == len(tool_events)
    call = next(e for e in tool_events if e["event"] == "tool_call")
    assert call["detail"]["argument_keys"] == ["customer_id"] and "C-100234" not in json.dumps(call)
    assert "50000" not in json.dumps(body)  # argument values never reach a trace

    job = server.get(f"/admin/api/runs/{job_id_of(sql, 'inv-write')}/trace", headers=reader)
    assert job.status_code == 200, job.text
    trace = job.json()
    assert set(trace) == {"job", "trace", "approvals", "messages", "lookup", "debug_bundle", "debug_report"}
    assert trace["job"]["raw_input"] is None and trace["job"]["tool"] == "customer_update_credit_limit"
    assert trace["job"]["run_id"] == run
    assert set(trace["trace"]) == {"summary", "events"}
    summary = trace["trace"]["summary"]
    assert (summary["approvals"], summary["tool_calls"], summary["message_count"]) == (1, 0, 1)
    assert summary["stage_count"]["approval"] == 1 and sum(summary["stage_count"].values()) == summary["event_count"]
    assert len(trace["approvals"]) == 1
    assert trace["approvals"][0]["status"] == "pending" and trace["approvals"][0]["id"] == write["approval_id"]
    assert [m["role"] for m in trace["messages"]] == ["user"]
    assert "50000" not in job.text
    assert_error(server.get(f"/admin/api/runs/{uuid.uuid4()}/trace", headers=reader), 404, "not_found")
    assert_error(server.get("/admin/api/runs/not-a-job/trace", headers=reader), 404, "not_found")
