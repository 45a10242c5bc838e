"""The steps of an event append (conversation_audit.events), each on its own.

The pure steps (order, replay split, limits, the turn state machine) take plain values; the steps
that read or write the database run against a real archive made through the API. The whole
append, status by status, is tested over HTTP in test_audit_agent and test_contract_audit.
"""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from admin_app import limits
from admin_app.conversation_audit import events as steps
from admin_app.conversation_audit.archives import LockedArchive, locked_archive_for_member
from admin_app.conversation_audit.availability import Availability
from admin_app.errors import ApiError
from tests.helpers import session_bearer

AUDITS = "/agent-api/v1/conversation-audits"
FULL = Availability(archives=True, cross_binding=True)


def ev(seq: int, kind: str, turn: str = "turn-1", eid: str | None = None, **fields) -> dict:
    return {"event_id": eid or f"ev-{seq}", "sequence": seq, "client_turn_id": turn, "kind": kind, **fields}


def refusal(err: pytest.ExceptionInfo[ApiError]) -> tuple[int, str, str]:
    return err.value.status, err.value.code, err.value.message


def conflict(message: str) -> tuple[int, str, str]:
    return 409, "conversation_audit_conflict", message


# ============================================================================= validation

def test_a_batch_outside_1_to_the_limit_names_the_limit():
    too_many = [ev(i, "turn_start", f"t-{i}") for i in range(1, limits.AUDIT_BATCH_MAX_EVENTS + 2)]
    for events in ([], too_many):
        with pytest.raises(ApiError) as err:
            steps.validate_batch({"events": events})
        assert refusal(err) == (400, "invalid_request",
                                f"events: must be a list of 1 to {limits.AUDIT_BATCH_MAX_EVENTS} events")
    full = too_many[:-1]
    assert steps.validate_batch({"events": full}) == full


def test_validation_lower_cases_uuids_and_leaves_the_rest_as_sent():
    run, member = str(uuid.uuid4()).upper(), str(uuid.uuid4()).upper()
    event = ev(1, "run_link", run_id=run, member_session_id=member)
    assert steps.validate_batch({"events": [event]}) == [{**event, "run_id": run.lower(),
                                                          "member_session_id": member.lower()}]


def test_a_batch_past_its_text_limit_is_413_after_every_rule_holds():
    most = limits.AUDIT_TEXT_MAX_UNITS  # one message's most, all of it one-byte characters
    full, rest = divmod(limits.AUDIT_BATCH_TEXT_MAX_BYTES, most)
    contents = ["a" * most] * full + ["a" * rest]
    at_limit = [ev(1, "turn_start")] + [ev(2 + i, "user_message", content=c) for i, c in enumerate(contents)]
    assert steps.validate_batch({"events": at_limit}) == at_limit
    over = [*at_limit, ev(len(at_limit) + 1, "assistant_message", content="b")]
    with pytest.raises(ApiError) as err:
        steps.validate_batch({"events": over})
    assert refusal(err) == (413, "conversation_audit_limit",
                            f"A batch holds at most {limits.AUDIT_BATCH_TEXT_MAX_BYTES} bytes of text.")
    assert err.value.extra == {"max_batch_text_bytes": limits.AUDIT_BATCH_TEXT_MAX_BYTES}
    # A broken rule anywhere answers first.
    with pytest.raises(ApiError) as err:
        steps.validate_batch({"events": [*over, ev(len(over) + 1, "turn_end", status="done")]})
    assert err.value.code == "invalid_request"


def test_a_sequence_past_the_archive_limit_is_413_unless_a_problem_came_first():
    past = limits.AUDIT_ARCHIVE_MAX_EVENTS + 1
    with pytest.raises(ApiError) as err:
        steps.validate_batch({"events": [ev(past, "turn_start")]})
    assert err.value.status == 413 and err.value.extra == {"max_events": limits.AUDIT_ARCHIVE_MAX_EVENTS}
    with pytest.raises(ApiError) as err:
        steps.validate_batch({"events": [ev(1, "tool_call"), ev(past, "turn_start")]})
    assert err.value.code == "invalid_request"


# ============================================================================= the writer

def locked(creator: uuid.UUID, state: str = "ready") -> LockedArchive:
    return LockedArchive(SimpleNamespace(creator_session_id=creator, state=state), [], [], [])


def test_only_the_writer_hears_of_its_batch_and_then_of_the_archive_state():
    writer, other = uuid.uuid4(), uuid.uuid4()
    bad_batch = ApiError("invalid_request", "events: bad")
    with pytest.raises(ApiError) as err:
        steps.check_writer(locked(writer), SimpleNamespace(id=other), bad_batch)
    assert err.value.code == "conversation_audit_not_found"
    with pytest.raises(ApiError) as err:
        steps.check_writer(locked(writer, "enrolling"), SimpleNamespace(id=writer), bad_batch)
    assert err.value is bad_batch
    with pytest.raises(ApiError) as err:
        steps.check_writer(locked(writer, "enrolling"), SimpleNamespace(id=writer), None)
    assert refusal(err) == (409, "conversation_audit_not_ready", "Some members have not confirmed yet.")
    steps.check_writer(locked(writer), SimpleNamespace(id=writer), None)


def test_the_earlier_use_lookup_asks_for_the_batch_ids_and_the_turns_it_may_repeat():
    archive = uuid.uuid4()
    sql, params = steps.earlier_use_lookup(archive, [ev(1, "turn_start", "t-b"), ev(2, "user_message", "t-b"),
                                                     ev(3, "run_link", "t-a")])
    assert sql == steps._EARLIER_USE
    assert params == {"id": archive, "ids": '["ev-1", "ev-2", "ev-3"]', "turns": '["t-a", "t-b"]'}
    rows = [SimpleNamespace(what="event", value="ev-1"), SimpleNamespace(what="turn", value="t-a")]
    assert steps.earlier_use(rows) == ({"ev-1"}, {"t-a"})


# ============================================================================= order and replay

@pytest.mark.parametrize(("events", "message"), [
    ([ev(2, "user_message"), ev(1, "turn_start")], "Sequences in a batch must be ordered and contiguous."),
    ([ev(1, "turn_start"), ev(3, "turn_end")], "Sequences in a batch must be ordered and contiguous."),
    ([ev(1, "turn_start"), ev(1, "user_message", eid="b")], "Sequences in a batch must be ordered and contiguous."),
    ([ev(1, "turn_start", eid="x"), ev(2, "user_message", eid="x")], "An event_id occurs twice in the batch."),
])
def test_a_batch_out_of_order_or_with_an_id_twice_is_a_conflict(events, message):
    with pytest.raises(ApiError) as err:
        steps.check_order(events)
    assert refusal(err) == conflict(message)


def test_ordered_batches_pass():
    steps.check_order([ev(7, "turn_start"), ev(8, "user_message")])


def test_replayed_events_must_be_identical_and_the_new_ones_continue_the_archive():
    events = [ev(3, "user_message"), ev(4, "turn_end"), ev(5, "turn_start", "turn-2")]
    hashes = ["h3", "h4", "h5"]
    stored = {3: ("ev-3", "h3"), 4: ("ev-4", "h4")}
    assert steps.split_replayed(events, hashes, 4, stored) == [(events[2], "h5")]
    assert steps.split_replayed(events, hashes, 5, {**stored, 5: ("ev-5", "h5")}) == []
    assert steps.split_replayed(events, hashes, 2, {}) == list(zip(events, hashes))
    for changed in ({**stored, 4: ("ev-4", "other")}, {**stored, 4: ("other-id", "h4")}, {3: stored[3]}):
        with pytest.raises(ApiError) as err:
            steps.split_replayed(events, hashes, 4, changed)
        assert refusal(err) == conflict("Event 4 differs from the stored event.")
    with pytest.raises(ApiError) as err:  # a gap after the stored events
        steps.split_replayed(events, hashes, 1, {})
    assert refusal(err) == conflict("The next sequence is 2.")


# ============================================================================= limits and ids

def new(*events: dict) -> list[tuple[dict, str]]:
    return [(e, "digest") for e in events]


def test_the_archive_event_limit_holds_exactly():
    at_limit = limits.AUDIT_ARCHIVE_MAX_EVENTS - 2
    assert steps.check_limits(at_limit, 0, new(ev(1, "turn_start"), ev(2, "turn_end"))) == 0
    with pytest.raises(ApiError) as err:
        steps.check_limits(at_limit + 1, 0, new(ev(1, "turn_start"), ev(2, "turn_end")))
    assert refusal(err) == (413, "conversation_audit_limit",
                            f"An archive holds at most {limits.AUDIT_ARCHIVE_MAX_EVENTS} events.")


def test_the_archive_text_limit_holds_exactly_and_counts_utf8_bytes():
    events = new(ev(1, "user_message", content="é" * 10), ev(2, "assistant_message", content="abc"))
    room = limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES - 23
    assert steps.check_limits(5, room, events) == 23
    with pytest.raises(ApiError) as err:
        steps.check_limits(5, room + 1, events)
    assert refusal(err) == (413, "conversation_audit_limit",
                            f"An archive holds at most {limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES} bytes of text.")
    assert err.value.extra == {"max_archive_text_bytes": limits.AUDIT_ARCHIVE_MAX_TEXT_BYTES}


def test_an_event_id_stored_before_is_a_conflict():
    steps.check_ids_unused(new(ev(5, "turn_start")), {"ev-1"})
    with pytest.raises(ApiError) as err:
        steps.check_ids_unused(new(ev(5, "turn_start"), ev(6, "turn_end", eid="ev-1")), {"ev-1"})
    assert refusal(err) == conflict("event_id ev-1 is already used in this archive.")


def test_a_run_is_linked_once_per_batch():
    steps.check_runs_linked_once([{"run_id": "r1"}, {"kind": "turn_start"}, {"run_id": "r2"}])
    with pytest.raises(ApiError) as err:
        steps.check_runs_linked_once([{"run_id": "r1"}, {"run_id": "r1"}])
    assert refusal(err) == conflict("A run may be linked only once.")


# ============================================================================= turns

def test_a_completed_turn_counts_its_messages_and_leaves_its_status():
    outcome = steps.apply_turns(None, None, set(), [
        ev(1, "turn_start"), ev(2, "user_message"), ev(3, "run_link"), ev(4, "assistant_message"),
        ev(5, "turn_end", status="failed")])
    assert outcome == steps.TurnOutcome(running=None, status="failed", messages=2, turns=1, checked=5)


def test_a_batch_may_leave_a_turn_running_and_a_late_link_changes_nothing():
    outcome = steps.apply_turns(None, "completed", {"turn-1"},
                                [ev(5, "run_link"), ev(6, "turn_start", "turn-2"), ev(7, "user_message", "turn-2")])
    assert outcome == steps.TurnOutcome(running="turn-2", status="running", messages=1, turns=1, checked=3)
    assert steps.apply_turns("turn-2", "running", {"turn-1", "turn-2"}, [ev(8, "run_link")]) == \
        steps.TurnOutcome(running="turn-2", status="running", messages=0, turns=0, checked=1)


TURN_CONFLICTS = {
    # name: (running turn, turns started before, events, index refused, message)
    "start-while-running": ("turn-1", {"turn-1"}, [ev(2, "turn_start", "turn-2")], 0,
                            "Turn turn-1 is still running; end it before starting another."),
    "started-in-an-earlier-batch": (None, {"turn-1"}, [ev(5, "turn_start")], 0,
                                    "Turn turn-1 was already started in this archive."),
    "started-twice-in-the-batch": (None, set(), [ev(1, "turn_start"), ev(2, "turn_end", status="completed"),
                                                 ev(3, "turn_start")], 2,
                                   "Turn turn-1 was already started in this archive."),
    "user-message-without-turn": (None, {"turn-1"}, [ev(5, "user_message")], 0,
                                  "user_message ev-5 is not in the current running turn."),
    "assistant-message-of-another-turn": ("turn-1", {"turn-1"}, [ev(2, "assistant_message", "turn-2")], 0,
                                          "assistant_message ev-2 is not in the current running turn."),
    "turn-end-without-turn": (None, {"turn-1"}, [ev(5, "turn_end", status="failed")], 0,
                              "turn_end ev-5 does not end the current running turn."),
    "turn-end-of-another-turn": ("turn-1", {"turn-1"}, [ev(2, "run_link"), ev(3, "turn_end", "turn-2")], 1,
                                 "turn_end ev-3 does not end the current running turn."),
    "link-of-a-turn-never-started": ("turn-1", {"turn-1"}, [ev(2, "run_link", "turn-9")], 0,
                                     "run_link ev-2 names a turn that was never started."),
}


@pytest.mark.parametrize("case", TURN_CONFLICTS)
def test_every_turn_conflict_names_the_event_and_says_how_far_the_batch_passed(case):
    running, started, events, index, message = TURN_CONFLICTS[case]
    outcome = steps.apply_turns(running, "running" if running else "completed", set(started), events)
    assert (outcome.checked, outcome.conflict) == (index, message)


def test_the_state_machine_does_not_change_the_turns_it_is_given():
    started = {"turn-1"}
    steps.apply_turns(None, None, started, [ev(5, "turn_start", "turn-2")])
    assert started == {"turn-1"}


# ============================================================================= with the database

@pytest.fixture
def hub(app, issue_session):
    """A ready two-member archive whose writer stored one running turn; the app's test client."""
    client = app.test_client()
    writer, other = issue_session(), issue_session()
    created = client.post(AUDITS, headers=session_bearer(writer), json={
        "client_archive_id": str(uuid.uuid4()), "client_conversation_id": "steps",
        "route": "customers", "member_session_ids": [writer["session_id"], other["session_id"]]})
    cid = created.get_json()["conversation_id"]
    assert client.post(f"{AUDITS}/{cid}/confirm", headers=session_bearer(other), json={}).status_code == 200
    stored = client.post(f"{AUDITS}/{cid}/events", headers=session_bearer(writer), json={
        "events": [ev(1, "turn_start"), ev(2, "user_message", content="Question?")]})
    assert stored.status_code == 200, stored.get_data(as_text=True)
    return SimpleNamespace(app=app, client=client, writer=writer, other=other, cid=uuid.UUID(cid))


def member_of(who: dict) -> SimpleNamespace:
    return SimpleNamespace(id=uuid.UUID(who["session_id"]))


def test_the_locked_read_runs_the_named_lookup_in_its_round_trip(hub):
    database = hub.app.extensions["bailing"].db
    with database.session() as db:
        archive = locked_archive_for_member(
            db, member_of(hub.other), hub.cid, FULL,
            lookup=steps.earlier_use_lookup(hub.cid, [ev(2, "user_message", eid="ev-2"),
                                                      ev(3, "run_link", "turn-1", eid="new")]))
        assert archive.header.last_sequence == 2
        assert [str(m.session_id) for m in archive.members] == [hub.writer["session_id"], hub.other["session_id"]]
        assert steps.earlier_use(archive.looked_up) == ({"ev-2"}, {"turn-1"})
        checked = archive.check_bindings()
        assert (checked.header, checked.members, checked.looked_up) == \
            (archive.header, archive.members, archive.looked_up)
        assert locked_archive_for_member(db, member_of(hub.writer), hub.cid, FULL).looked_up == []


def test_the_locked_read_is_404_for_a_session_not_a_member(hub, issue_session):
    with hub.app.extensions["bailing"].db.session() as db, pytest.raises(ApiError) as err:
        locked_archive_for_member(db, member_of(issue_session()), hub.cid, FULL)
    assert err.value.code == "conversation_audit_not_found"


def test_the_bindings_check_refuses_a_revoked_member(hub, cli):
    assert cli("sessions", "revoke", hub.other["session_id"])[0] == 0
    with hub.app.extensions["bailing"].db.session() as db:
        archive = locked_archive_for_member(db, member_of(hub.writer), hub.cid, FULL)
        with pytest.raises(ApiError) as err:
            archive.check_bindings()
    assert err.value.status == 403 and err.value.code == "conversation_audit_authorization_invalid"


def test_the_replay_read_returns_the_stored_events_a_batch_repeats(hub):
    with hub.app.extensions["bailing"].db.session() as db:
        header = locked_archive_for_member(db, member_of(hub.writer), hub.cid, FULL).header
        stored = steps.stored_replayed(db, header, [ev(2, "user_message"), ev(3, "turn_end")])
        assert list(stored) == [2] and stored[2][0] == "ev-2"
        assert steps.stored_replayed(db, header, [ev(3, "turn_end")]) == {}


def run_of(hub, who: dict, turn: str = "turn-1") -> str:
    response = hub.client.post("/agent-api/v1/workspaces/customers/turns", headers=session_bearer(who), json={
        "client_conversation_id": "steps", "client_turn_id": turn, "user_message_id": f"msg-{turn}",
        "user_input": "Question?"})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["run_id"]


def test_run_links_are_verified_in_order_against_the_run_and_the_member(hub):
    mine, theirs = run_of(hub, hub.writer), run_of(hub, hub.other)
    good = ev(3, "run_link", run_id=mine, member_session_id=hub.writer["session_id"])
    wrong_member = ev(4, "run_link", run_id=theirs, member_session_id=hub.writer["session_id"])
    stranger = ev(5, "run_link", run_id=theirs, member_session_id=str(uuid.uuid4()))
    with hub.app.extensions["bailing"].db.session() as db:
        archive = locked_archive_for_member(db, member_of(hub.writer), hub.cid, FULL).check_bindings()
        threads = steps.verify_run_links(db, archive, [good])
        (thread,) = db.execute(text("SELECT thread_id FROM bz_runs WHERE id = :id"), {"id": mine}).one()
        assert threads == {"ev-3": thread}
        for links, message in (
                ([good, wrong_member], "run_link ev-4: the run does not belong to this member's conversation turn."),
                ([stranger, wrong_member], "run_link ev-5: member_session_id is not a member of this archive.")):
            with pytest.raises(ApiError) as err:
                steps.verify_run_links(db, archive, links)
            assert refusal(err) == conflict(message)


def test_the_write_stores_rows_and_counters_only_at_commit(hub, sql):
    rows = [{**ev(3, "assistant_message", content="Answer."), "thread_id": None, "body_sha256": "3" * 64},
            {**ev(4, "turn_end", status="completed"), "thread_id": None, "body_sha256": "4" * 64}]
    turns = steps.TurnOutcome(running=None, status="completed", messages=1, turns=0, checked=2)
    with hub.app.extensions["bailing"].db.session() as db:
        archive = locked_archive_for_member(db, member_of(hub.writer), hub.cid, FULL).check_bindings()
        steps.write_batch(db, archive, rows, turns, 7, 4)
        assert sql("SELECT count(*) FROM bz_agent_conversation_events")[0][0] == 2
    assert sql("SELECT sequence, kind, content, status, body_sha256 FROM bz_agent_conversation_events "
               "WHERE sequence > 2 ORDER BY sequence") == [
        (3, "assistant_message", "Answer.", None, "3" * 64), (4, "turn_end", None, "completed", "4" * 64)]
    assert sql("SELECT last_sequence, message_count, turn_count, text_bytes, running_turn_id, "
               "last_turn_status FROM bz_agent_conversation_archives") == [(4, 2, 1, 9 + 7, None, "completed")]


def test_a_link_before_a_turn_conflict_is_verified_first_and_after_one_never(hub):
    """The whole append: the first failing check answers, event by event."""
    unknown = {"run_id": str(uuid.uuid4()), "member_session_id": hub.writer["session_id"]}
    for batch, message in (
            ([ev(3, "run_link", **unknown), ev(4, "turn_start", "turn-2")],
             "run_link ev-3: the run does not belong to this member's conversation turn."),
            ([ev(3, "turn_start", "turn-2"), ev(4, "run_link", **unknown)],
             "Turn turn-1 is still running; end it before starting another.")):
        response = hub.client.post(f"{AUDITS}/{hub.cid}/events", headers=session_bearer(hub.writer),
                                   json={"events": batch})
        assert (response.status_code, response.get_json()["message"]) == (409, message)
