"""Every public task refusal on the agent paths where TASK_CONTROL.md §10.1 says it arises, and
what a refusal leaves behind: nothing (§7.2, I-10), except the committed `blocked` transition of
§5. Also the resume of an approved call under a paused task (§8.6), the release on denial (§6.7)
and the degradation of §11.3 when task tables are partly or wholly missing.

Each refusal is checked the same way: the status and code, `Cache-Control: no-store`, the row
counts of every table a refusal must not write (`world.stored()`), the task's state, revision and
ledger sequence, and that no business request was sent."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from tests.helpers import assert_error, assert_ok, bearer
from tests.task_world import (AGENT, BIG, BINDING_SCHEMA, CUSTOMER, READ, ROUTE, SMALL, TASK_TABLES,
                              TASKS, WRITE, WRITTEN, Member, World, approve, binding, counters, iid, stored)

CAPS = AGENT + "/task-control/capabilities"
CONTACTS = "customer_contacts_list"  # a read the member lists do not name unless told

Send = Callable[[], requests.Response]



# ----------------------------------------------------------------------------- helpers

def task_row(world: World, task_id: str) -> tuple[str, int, int]:
    """(state, revision, ledger_sequence) as stored."""
    [row] = world.sql("SELECT state, revision, ledger_sequence FROM bz_agent_tasks WHERE task_id = %s",
                      (task_id,))
    return row[0], int(row[1]), int(row[2])


def refused(world: World, send: Send, status: int, code: str, *task_ids: str) -> dict:
    """`send` is refused with `status`/`code` and writes nothing: no row in any table a refusal
    must not write, no change to the named tasks, no business request."""
    before = stored(world, *task_ids)
    sent = len(world.business.executions())
    body = assert_error(send(), status, code)
    assert stored(world, *task_ids) == before
    assert len(world.business.executions()) == sent
    return body


def labelled(world: World, send: Send, status: int, code: str, label: str, *task_ids: str) -> dict:
    """`refused`, naming the case when it fails (for tables of cases checked in one test)."""
    try:
        return refused(world, send, status, code, *task_ids)
    except AssertionError as err:
        raise AssertionError(f"{label}: {err}") from err


def blocks(world: World, send: Send, task_id: str) -> None:
    """`send` is refused with TASK_SCOPE_BLOCKED, and the only thing committed is the block: the
    task `blocked` with revision and ledger +1, and its one `scope_blocked` event."""
    before, [(state, revision, ledger)] = stored(world, task_id)
    assert state in ("active", "paused")
    sent = len(world.business.executions())
    assert_error(send(), 409, "TASK_SCOPE_BLOCKED")
    after = {**before, "bz_agent_task_events": before["bz_agent_task_events"] + 1}
    assert stored(world, task_id) == (after, [("blocked", revision + 1, ledger + 1)])
    assert world.sql("SELECT event, detail->>'revision' FROM bz_agent_task_events WHERE task_id = %s "
                     "AND sequence = %s", (task_id, ledger + 1)) == [("scope_blocked", str(revision + 1))]
    assert len(world.business.executions()) == sent


def approval_row(world: World, name: str) -> tuple[str, Any]:
    [row] = world.sql("SELECT a.status, a.consumed_at FROM bz_tool_approvals a JOIN bz_tool_invocations i "
                      "ON i.id = a.job_id WHERE i.invocation_id = %s", (iid(name),))
    return row[0], row[1]


def complete(member: Member, run_id: str) -> None:
    body = {"assistant_message_id": f"done-{run_id[:8]}", "status": "completed", "content": "Done."}
    assert_ok(member.server.post(f"{AGENT}/runs/{run_id}/complete", json=body, headers=member.headers))


def status_of(response: requests.Response) -> str:
    body = assert_ok(response)
    return body["result"]["status"] if body.get("read_only") is True else body["status"]


def deadline(seconds: float) -> tuple[str, float]:
    """An `expires_at` about `seconds` ahead, and the monotonic time just after it."""
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return text, time.monotonic() + seconds + 0.05


def wait_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def other_conversation(member: Member, conversation: str = "conv-2") -> Member:
    return Member(member.server, member.session, conversation)


def enrolled_session(world: World) -> Member:
    """A session enrolled by the operator CLI (`sessions issue --task-enrolled`), in no task."""
    code, out, err = world.cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                               "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}',
                               "--on-behalf-of", "tenant-7:user-42", "--task-enrolled")
    assert code == 0, err
    return Member(world.server, out, "conv-1")


# ----------------------------------------------------------------------------- TASK_REQUIRED

REQUIRED: dict[str, Callable[[Member, str], requests.Response]] = {
    "turn without binding": lambda m, run: m.turn_raw(None),
    "search without run_id": lambda m, run: m.search_raw(None),
    "search with an unbound run": lambda m, run: m.search_raw(run),
    "search of the run's input with an unbound run": lambda m, run: m.search_raw(run, query=None),
    "read without run id": lambda m, run: m.invoke_raw(READ, CUSTOMER, "new-read", None),
    "write without run id": lambda m, run: m.invoke_raw(WRITE, SMALL, "new-write", None),
    "read on an unbound run": lambda m, run: m.invoke_raw(READ, CUSTOMER, "new-read", run),
    "write on an unbound run": lambda m, run: m.invoke_raw(WRITE, SMALL, "new-write", run),
    "replay of a pre-enrolment invocation": lambda m, run: m.invoke_raw(WRITE, BIG, "pre", None),
    "resume of a pre-enrolment invocation": lambda m, run: m.resume_raw("pre"),
    "receipt of a pre-enrolment invocation": lambda m, run: m.receipt_raw("pre"),
    "receipt of a pre-enrolment read": lambda m, run: m.receipt_raw("pre-read"),
}


@pytest.mark.parametrize("path", list(REQUIRED))
def test_an_enrolled_session_cannot_act_unbound(world, path):
    member = world.member()
    # Before enrolment: an unbound run, an executed read and an approved write waiting for its resume.
    run = member.turn(None)["run_id"]
    assert member.invoke(READ, CUSTOMER, "pre-read", None)["status"] == "executed"
    waiting = member.invoke(WRITE, BIG, "pre", None)
    assert waiting["status"] == "awaiting_approval"
    approve(world, waiting)
    task = world.create([member])  # enrols the session
    sent = len(world.business.executions())
    refused(world, lambda: REQUIRED[path](member, run), 409, "TASK_REQUIRED", task["task_id"])
    # The approved pre-enrolment call stays approved and unused; nothing reached the business system.
    assert approval_row(world, "pre") == ("approved", None)
    assert len(world.business.executions()) == sent == 1
    # A bound turn still works: enrolment asks for a task, it does not lock the session out.
    assert member.turn(binding(task))["task_binding"] == binding(task)


@pytest.mark.parametrize("path", ["turn", "search", "read", "write"])
def test_a_session_enrolled_by_the_operator_is_task_required_without_any_task(world, path):
    member = enrolled_session(world)
    caps = assert_ok(world.server.get(CAPS, headers=member.headers))
    assert caps["supported"] is True and caps["mode"] == "required"
    send = {"turn": lambda: member.turn_raw(None), "search": lambda: member.search_raw(None),
            "read": lambda: member.invoke_raw(READ, CUSTOMER, "r", None),
            "write": lambda: member.invoke_raw(WRITE, SMALL, "w", None)}[path]
    refused(world, send, 409, "TASK_REQUIRED")


# ----------------------------------------------------------------------------- TASK_UNSUPPORTED

@pytest.mark.parametrize("schema", ["bailing.agent-task-binding.v2", "bailing.agent-task-binding.v0", "",
                                    "BAILING.AGENT-TASK-BINDING.V1"])
def test_a_binding_of_another_schema_is_unsupported(world, schema):
    member = world.member()
    task = world.create([member])
    refused(world, lambda: member.turn_raw({**binding(task), "schema_version": schema}), 501, "TASK_UNSUPPORTED",
            task["task_id"])


# ----------------------------------------------------------------------------- TASK_INVALID_INPUT

def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


BAD_BINDINGS: dict[str, Callable[[dict], Any]] = {
    "null": lambda b: None,
    "a string": lambda b: b["task_id"],
    "an array": lambda b: [b],
    "empty": lambda b: {},
    "without schema_version": lambda b: _without(b, "schema_version"),
    "without task_id": lambda b: _without(b, "task_id"),
    "without scope_hash": lambda b: _without(b, "scope_hash"),
    "with an extra key": lambda b: {**b, "member": "conv-1"},
    "schema_version not a string": lambda b: {**b, "schema_version": 1},
    "task_id not a string": lambda b: {**b, "task_id": 7},
    "task_id not a UUID": lambda b: {**b, "task_id": "task-1"},
    "task_id without hyphens": lambda b: {**b, "task_id": b["task_id"].replace("-", "")},
    "task_id version 0": lambda b: {**b, "task_id": "00000000-0000-0000-0000-000000000000"},
    "task_id version 6": lambda b: {**b, "task_id": b["task_id"][:14] + "6" + b["task_id"][15:]},
    "task_id of another variant": lambda b: {**b, "task_id": b["task_id"][:19] + "c" + b["task_id"][20:]},
    "task_id with spaces": lambda b: {**b, "task_id": f" {b['task_id']} "},
    "scope_hash upper case": lambda b: {**b, "scope_hash": b["scope_hash"].upper()},
    "scope_hash too short": lambda b: {**b, "scope_hash": b["scope_hash"][:63]},
    "scope_hash too long": lambda b: {**b, "scope_hash": b["scope_hash"] + "0"},
    "scope_hash not hex": lambda b: {**b, "scope_hash": "g" * 64},
    "scope_hash null": lambda b: {**b, "scope_hash": None},
}


def turn_with(member: Member, raw_binding: Any) -> requests.Response:
    """A turn whose `task_binding` is exactly `raw_binding` (null included)."""
    body = {"client_conversation_id": member.conversation, "client_turn_id": "t-raw", "user_message_id": "m-raw",
            "user_input": "Raise the credit limit.", "task_binding": raw_binding}
    return member.server.post(f"{AGENT}/workspaces/{ROUTE}/turns", json=body, headers=member.headers)


def test_a_malformed_binding_is_invalid_input(world):
    """Each malformed binding in turn (one hub for all: the cases are pure format checks)."""
    member = world.member()
    task = world.create([member])
    for case, bad in BAD_BINDINGS.items():
        labelled(world, lambda bad=bad: turn_with(member, bad(binding(task))), 400, "TASK_INVALID_INPUT", case,
                 task["task_id"])
    # The same turn key then still takes a good binding: nothing of the refused turns was kept.
    assert assert_ok(turn_with(member, binding(task)))["task_binding"] == binding(task)


def test_a_binding_with_an_upper_case_task_id_is_the_same_binding(world):
    member = world.member()
    task = world.create([member])
    turn = member.turn({**binding(task), "task_id": task["task_id"].upper()})
    assert turn["task_binding"] == binding(task)  # normalised to lower case, echoed as the task's


BAD_SNAPSHOTS: dict[str, dict[str, Any]] = {
    "task id of zeros": {"task": "00000000-0000-0000-0000-000000000000"},
    "task id of hex without the UUID shape": {"task": "0123456789abcdef0123456789abcdef0123"},
    "task id version 6": {"task": "9732feb7-11a4-6a72-a6fb-8f39ebf61199"},
    "task id with hyphens out of place": {"task": "9732feb711a4-4a72-a6fb-8f39ebf6-1199"},
    "missing workspace": {"params": {"workspace": None}},
    "empty workspace": {"params": {"workspace": ""}},
    "workspace auto": {"params": {"workspace": "auto"}},
    "workspace upper case": {"params": {"workspace": "DESK"}},
    "workspace of one character": {"params": {"workspace": "d"}},
    "workspace of 65 characters": {"params": {"workspace": "d" * 65}},
    "workspace starting with a hyphen": {"params": {"workspace": "-desk"}},
    "missing conversation": {"params": {"client_conversation_id": None}},
    "empty conversation": {"params": {"client_conversation_id": ""}},
    "conversation with a space": {"params": {"client_conversation_id": "conv 1"}},
    "conversation with surrounding spaces": {"params": {"client_conversation_id": " conv-1 "}},
    "conversation starting with a dot": {"params": {"client_conversation_id": ".conv"}},
    "conversation of 129 characters": {"params": {"client_conversation_id": "c" * 129}},
    "conversation with a non-ASCII letter": {"params": {"client_conversation_id": "convé"}},
    "conversation with a newline": {"params": {"client_conversation_id": "conv\n1"}},
}


def test_a_malformed_snapshot_request_is_invalid_input(world):
    member = world.member()
    task = world.create([member])
    for case, spec in BAD_SNAPSHOTS.items():
        query = {"workspace": ROUTE, "client_conversation_id": member.conversation, **spec.get("params", {})}
        query = {k: v for k, v in query.items() if v is not None}
        task_id = spec.get("task", task["task_id"])
        labelled(world, lambda t=task_id, q=query: world.server.get(f"{AGENT}/tasks/{t}", params=q,
                                                                    headers=member.headers),
                 400, "TASK_INVALID_INPUT", case, task["task_id"])


@pytest.mark.parametrize("segment", ["not-a-task", "9732feb7-11a4-4a72-a6fb-8f39ebf6119", "g" * 36,
                                     "9732feb7-11a4-4a72-a6fb-8f39ebf611999"])
def test_a_snapshot_path_that_is_no_task_id_names_no_endpoint(world, segment):
    member = world.member()
    task = world.create([member])
    refused(world, lambda: member.snapshot_raw(segment), 404, "not_found", task["task_id"])


def test_the_snapshot_ignores_other_query_parameters_and_accepts_an_upper_case_id(world):
    member = world.member()
    task = world.create([member])
    snap = assert_ok(member.snapshot_raw(task["task_id"].upper(), extra="1", limit="zzz"))
    assert snap["task_id"] == task["task_id"]


# ----------------------------------------------------------------------------- TASK_SCOPE_BLOCKED

def blocked_world(world: World) -> tuple[Member, Member, dict, str]:
    """Members A and B of one task; B has a bound run with an executed read and an approved write
    waiting for its resume; then A's session is revoked. (A, B, task, B's run)"""
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b], max_write_calls=None)
    run = b.turn(binding(task))["run_id"]
    assert b.invoke(READ, CUSTOMER, "b-read", run)["status"] == "executed"
    waiting = b.invoke(WRITE, BIG, "b-big", run)
    assert waiting["status"] == "awaiting_approval"
    approve(world, waiting)
    code, _out, err = world.cli("sessions", "revoke", a.session_id)
    assert code == 0, err
    assert task_row(world, task["task_id"])[:2] == ("active", 1)  # revoking verifies nothing
    return a, b, task, run


BLOCKING: dict[str, Callable[[Member, dict, str], requests.Response]] = {
    "snapshot": lambda b, task, run: b.snapshot_raw(task["task_id"]),
    "bound turn": lambda b, task, run: b.turn_raw(binding(task)),
    "search with the bound run": lambda b, task, run: b.search_raw(run),
    "new read": lambda b, task, run: b.invoke_raw(READ, CUSTOMER, "b-read-2", run),
    "new write": lambda b, task, run: b.invoke_raw(WRITE, SMALL, "b-write", run),
    "replay of an executed read": lambda b, task, run: b.invoke_raw(READ, CUSTOMER, "b-read", run),
    "resume of the approved write": lambda b, task, run: b.resume_raw("b-big"),
    "receipt": lambda b, task, run: b.receipt_raw("b-read"),
}


@pytest.mark.parametrize("path", list(BLOCKING))
def test_revoking_one_member_blocks_the_whole_task(world, path):
    _a, b, task, run = blocked_world(world)
    blocks(world, lambda: BLOCKING[path](b, task, run), task["task_id"])
    assert approval_row(world, "b-big") == ("approved", None)
    # Blocked stays blocked: a second failing verification moves nothing and writes nothing.
    refused(world, lambda: BLOCKING[path](b, task, run), 409, "TASK_SCOPE_BLOCKED", task["task_id"])
    assert len(world.business.executions()) == 1  # the read before the revocation, nothing since


@pytest.mark.parametrize("state", ["paused", "blocked", "cancelled"])
def test_a_failed_verification_answers_scope_blocked_whatever_the_state(world, state):
    _a, b, task, run = blocked_world(world)
    if state == "paused":
        world.control(task, "pause")
        blocks(world, lambda: b.turn_raw(binding(task)), task["task_id"])  # paused → blocked
    elif state == "blocked":
        blocks(world, lambda: b.snapshot_raw(task["task_id"]), task["task_id"])
    else:
        world.control(task, "cancel")
    after = task_row(world, task["task_id"])
    for send in BLOCKING.values():  # blocked and cancelled do not move on a failed verification
        refused(world, lambda send=send: send(b, task, run), 409, "TASK_SCOPE_BLOCKED", task["task_id"])
    assert task_row(world, task["task_id"])[0] == ("cancelled" if state == "cancelled" else "blocked")
    assert task_row(world, task["task_id"]) == after


def test_a_stranger_cannot_block_a_task(world):
    a, b, task, _run = blocked_world(world)
    untouched = task_row(world, task["task_id"])
    stranger = world.member("conv-b")
    refused(world, lambda: stranger.snapshot_raw(task["task_id"]), 409, "TASK_MEMBER_MISMATCH", task["task_id"])
    refused(world, lambda: stranger.turn_raw(binding(task)), 409, "TASK_MEMBER_MISMATCH", task["task_id"])
    # B outside its member coordinates is a stranger too.
    elsewhere = other_conversation(b, "conv-a")
    refused(world, lambda: elsewhere.snapshot_raw(task["task_id"]), 409, "TASK_MEMBER_MISMATCH", task["task_id"])
    refused(world, lambda: elsewhere.turn_raw(binding(task)), 409, "TASK_MEMBER_MISMATCH", task["task_id"])
    # The revoked member's own bearer no longer authenticates: it cannot block anything either.
    refused(world, lambda: a.snapshot_raw(task["task_id"]), 401, "unauthorized", task["task_id"])
    assert task_row(world, task["task_id"]) == untouched
    blocks(world, lambda: b.snapshot_raw(task["task_id"]), task["task_id"])


# ----------------------------------------------------------------------------- TASK_MEMBER_MISMATCH

def test_who_is_not_a_member_gets_member_mismatch(world):
    member, stranger = world.member(), world.member()
    task = world.create([member])
    tid = task["task_id"]
    refused(world, lambda: stranger.snapshot_raw(tid), 409, "TASK_MEMBER_MISMATCH", tid)
    refused(world, lambda: stranger.turn_raw(binding(task)), 409, "TASK_MEMBER_MISMATCH", tid)
    # An unknown task reads the same as someone else's.
    refused(world, lambda: member.snapshot_raw(str(uuid.uuid4())), 409, "TASK_MEMBER_MISMATCH", tid)
    refused(world, lambda: member.turn_raw({**binding(task), "task_id": str(uuid.uuid4())}), 409,
            "TASK_MEMBER_MISMATCH", tid)
    # The member itself, in another conversation: neither its snapshot nor a bound turn there.
    refused(world, lambda: member.snapshot_raw(tid, client_conversation_id="conv-2"), 409,
            "TASK_MEMBER_MISMATCH", tid)
    refused(world, lambda: other_conversation(member).turn_raw(binding(task)), 409, "TASK_MEMBER_MISMATCH", tid)
    assert task_row(world, tid) == ("active", 1, 1)


# ----------------------------------------------------------------------------- TASK_BINDING_CONFLICT

def test_a_binding_with_another_scope_hash_conflicts(world):
    member = world.member()
    task = world.create([member])
    other = world.create([member], tools=[READ])
    assert other["scope_hash"] != task["scope_hash"]
    for scope in (other["scope_hash"], "0" * 64):
        refused(world, lambda s=scope: member.turn_raw({**binding(task), "scope_hash": s}), 409,
                "TASK_BINDING_CONFLICT", task["task_id"], other["task_id"])
    # Each binding with its own task's hash is admitted, and echoed with that task's values.
    assert member.turn(binding(other))["task_binding"] == binding(other)
    assert member.turn(binding(task))["task_binding"] == binding(task)


def test_a_turn_key_cannot_change_its_binding(world):
    member = world.member()
    task = world.create([member])
    other = world.create([member], tools=[READ])
    member.turn_raw(binding(task), turn="t1")
    # The same turn key with another binding is another request (§8.3): 409 turn_conflict.
    refused(world, lambda: member.turn_raw(binding(other), turn="t1"), 409, "turn_conflict",
            task["task_id"], other["task_id"])


# ----------------------------------------------------------------------------- paused / cancelled / expired

def dispatch_paths(member: Member, task: dict, run: str) -> dict[str, Send]:
    return {
        "new bound turn": lambda: member.turn_raw(binding(task)),
        "replay of the bound turn": lambda: member.turn_raw(binding(task), turn="t1"),
        "search with the bound run": lambda: member.search_raw(run),
        "new write": lambda: member.invoke_raw(WRITE, SMALL, "w-new", run),
        "new write needing approval": lambda: member.invoke_raw(WRITE, BIG, "w-big", run),
        "new read": lambda: member.invoke_raw(READ, CUSTOMER, "r-new", run),
    }


PATHS = ["new bound turn", "replay of the bound turn", "search with the bound run", "new write",
         "new write needing approval", "new read"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("action", "code"), [("pause", "TASK_PAUSED"), ("cancel", "TASK_CANCELLED")])
def test_a_paused_or_cancelled_task_starts_no_new_work(world, action, code, path):
    member = world.member()
    task = world.create([member])
    run = member.turn_raw(binding(task), turn="t1").json()["run_id"]
    world.control(task, action)
    refused(world, dispatch_paths(member, task, run)[path], 409, code, task["task_id"])


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_a_paused_or_cancelled_task_stays_readable(world, action):
    member = world.member()
    task = world.create([member])
    run = member.turn(binding(task))["run_id"]
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    state = world.control(task, action)["state"]
    before = stored(world, task["task_id"])
    assert assert_ok(member.snapshot_raw(task["task_id"]))["state"] == state
    assert status_of(member.receipt_raw("r1")) == "executed"
    assert status_of(member.invoke_raw(READ, CUSTOMER, "r1", run)) == "executed"  # a stable result replays
    assert status_of(member.resume_raw("r1")) == "executed"
    assert stored(world, task["task_id"]) == before
    assert len(world.business.executions()) == 1


def test_an_expired_task_starts_no_new_work_but_stays_readable(world):
    member = world.member()
    expires_at, after = deadline(3)  # a turn and a read must fit before it, even on a busy machine
    task = world.create([member], expires_at=expires_at)
    run = member.turn_raw(binding(task), turn="t1").json()["run_id"]
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    assert time.monotonic() < after - 0.05, "too slow to act before the deadline"
    wait_until(after)
    for send in dispatch_paths(member, task, run).values():
        refused(world, send, 409, "TASK_EXPIRED", task["task_id"])
    # Expiry is not a stored state and resets nothing: still readable, its counters kept.
    snap = assert_ok(member.snapshot_raw(task["task_id"]))
    assert snap["state"] == "active" and snap["policy"]["expires_at"] == expires_at
    assert status_of(member.receipt_raw("r1")) == "executed"
    assert status_of(member.invoke_raw(READ, CUSTOMER, "r1", run)) == "executed"
    # Paused and expired: paused comes first (§4.5).
    world.control(task, "pause")
    refused(world, lambda: member.turn_raw(binding(task)), 409, "TASK_PAUSED", task["task_id"])
    refused(world, lambda: member.invoke_raw(READ, CUSTOMER, "r2", run), 409, "TASK_PAUSED", task["task_id"])


# ----------------------------------------------------------------------------- TASK_WRITE_BUDGET_EXHAUSTED

@pytest.mark.parametrize(("spent", "budget"), [("nothing", 0), ("an executed write", 1),
                                               ("a write awaiting approval", 1), ("both", 2)])
def test_the_write_budget_counts_reserved_and_consumed_writes(world, spent, budget):
    member = world.member()
    task = world.create([member], max_write_calls=budget)
    run = member.turn(binding(task))["run_id"]
    if spent in ("an executed write", "both"):
        assert member.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    if spent in ("a write awaiting approval", "both"):
        assert member.invoke(WRITE, BIG, "w-big", run)["status"] == "awaiting_approval"
    used = counters(world, task["task_id"])
    assert used[0] + used[1] == budget and used[2] == 0
    refused(world, lambda: member.invoke_raw(WRITE, SMALL, "w2", run), 409, "TASK_WRITE_BUDGET_EXHAUSTED",
            task["task_id"])
    refused(world, lambda: member.invoke_raw(WRITE, BIG, "w3", run), 409, "TASK_WRITE_BUDGET_EXHAUSTED",
            task["task_id"])
    # A read costs no budget; a replay of a write already admitted charges nothing again.
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    if spent in ("an executed write", "both"):
        assert member.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    assert counters(world, task["task_id"]) == used
    # The refused invocation ids were never taken: they work once budget exists (a new task).
    assert world.sql("SELECT count(*) FROM bz_tool_invocations WHERE invocation_id IN (%s, %s)",
                     (iid("w2"), iid("w3"))) == [(0,)]


# ----------------------------------------------------------------------------- TASK_CONCURRENCY_EXHAUSTED

def test_an_unknown_outcome_keeps_its_permit_and_fills_the_task(world):
    member = world.member()
    task = world.create([member], max_write_calls=None, max_concurrent=1)
    run = member.turn(binding(task))["run_id"]
    waiting = member.invoke(WRITE, BIG, "w-big", run)
    approve(world, waiting)
    world.business.fault(WRITE, "drop_response", 1)
    assert member.invoke(WRITE, SMALL, "w-lost", run)["status"] == "reconciliation_required"
    assert counters(world, task["task_id"]) == (2, 0, 1)  # the lost write keeps reservation and permit
    assert len(world.business.executions(WRITE)) == 1
    tid = task["task_id"]
    refused(world, lambda: member.invoke_raw(READ, CUSTOMER, "r1", run), 409, "TASK_CONCURRENCY_EXHAUSTED", tid)
    refused(world, lambda: member.invoke_raw(WRITE, SMALL, "w2", run), 409, "TASK_CONCURRENCY_EXHAUSTED", tid)
    # The approved write cannot get a permit either, and its approval is not used up.
    refused(world, lambda: member.resume_raw("w-big"), 409, "TASK_CONCURRENCY_EXHAUSTED", tid)
    assert approval_row(world, "w-big") == ("approved", None)
    # The lost write itself is never sent again: its resume reads the unknown outcome.
    assert status_of(member.resume_raw("w-lost")) == "reconciliation_required"
    assert counters(world, tid) == (2, 0, 1)
    assert len(world.business.executions(WRITE)) == 1


def test_a_call_in_flight_holds_the_only_permit(world):
    member = world.member()
    task = world.create([member], max_write_calls=None, max_concurrent=1)
    tid = task["task_id"]
    run = member.turn(binding(task))["run_id"]
    revision = member.revision()
    world.business.fault(WRITE, "delay", 1, delay_ms=3000)
    outcome: dict[str, requests.Response] = {}
    held = threading.Thread(target=lambda: outcome.update(
        r=requests.post(world.server.url + AGENT + "/tool-invocations", headers=member.headers, timeout=30,
                        json=member.invoke_body(WRITE, SMALL, "w-held", run, revision))), daemon=True)
    held.start()
    stop = time.monotonic() + 10
    while not world.business.executions(WRITE):  # recorded before the business system waits
        assert time.monotonic() < stop, "the held write never reached the business system"
        time.sleep(0.01)
    assert counters(world, tid) == (1, 0, 1)
    before = stored(world)[0]
    for name, tool, arguments in (("r1", READ, CUSTOMER), ("w2", WRITE, SMALL)):
        body = member.invoke_body(tool, arguments, name, run, revision)
        assert_error(world.server.post(AGENT + "/tool-invocations", json=body, headers=member.headers), 409,
                     "TASK_CONCURRENCY_EXHAUSTED")
    assert held.is_alive()  # the refusals above were made while the write was in flight
    after = stored(world)[0]
    # Only the held call's own settlement may land meanwhile (one event, no new row elsewhere).
    assert {k: v for k, v in after.items() if k != "bz_agent_task_events"} == \
           {k: v for k, v in before.items() if k != "bz_agent_task_events"}
    assert after["bz_agent_task_events"] - before["bz_agent_task_events"] in (0, 1)
    held.join(timeout=20)
    assert status_of(outcome["r"]) == "executed"
    assert counters(world, tid) == (0, 1, 0)
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"  # the permit is free again
    assert len(world.business.executions()) == 2


# ----------------------------------------------------------------------------- TASK_TOOL_NOT_ALLOWED

@pytest.mark.parametrize(("allowed", "tool", "arguments"), [
    ([WRITE], READ, CUSTOMER),                 # reads are checked too
    ([READ], WRITE, SMALL),
    ([READ], WRITE, BIG),                      # no approval is asked for a tool the task does not allow
    ([WRITE, READ], CONTACTS, CUSTOMER),       # in the catalog and the search results, not in the task
    (["Customer_get", WRITE], READ, CUSTOMER),  # exact, case-sensitive names
])
def test_a_tool_outside_the_members_list_is_not_allowed(world, allowed, tool, arguments):
    member = world.member()
    task = world.create([member], tools=allowed)
    run = member.turn(binding(task))["run_id"]
    refused(world, lambda: member.invoke_raw(tool, arguments, "call", run), 409, "TASK_TOOL_NOT_ALLOWED",
            task["task_id"])
    assert counters(world, task["task_id"]) == (0, 0, 0)
    # Search is not narrowed to the task's tools (I-16): the refused tool is still listed.
    found = assert_ok(world.server.post(f"{AGENT}/workspaces/{ROUTE}/capabilities/search", headers=member.headers,
                                        json={"run_id": run, "query": tool.replace("_", " "), "limit": 12}))
    assert tool in [t["name"] for t in found["tools"]]


def test_another_members_tools_do_not_count(world):
    reader, writer = world.member("conv-r"), world.member("conv-w")
    body = world.create_body([reader, writer])
    body["members"][0]["allowed_tools"], body["members"][1]["allowed_tools"] = [READ], [WRITE]
    task = assert_ok(world.create_raw(body))
    run = reader.turn(binding(task))["run_id"]
    refused(world, lambda: reader.invoke_raw(WRITE, SMALL, "w", run), 409, "TASK_TOOL_NOT_ALLOWED",
            task["task_id"])
    assert reader.invoke(READ, CUSTOMER, "r", run)["status"] == "executed"


# ----------------------------------------------------------------------------- precedence (§10.3)

def test_refusals_come_in_the_specified_order(world):
    member, stranger = world.member(), world.member()
    reads_only = world.create([member], tools=[READ], max_write_calls=0)
    run_z = member.turn(binding(reads_only))["run_id"]
    paused = world.create([member], tools=[READ])
    run_p = member.turn(binding(paused))["run_id"]
    world.control(paused, "pause")
    tids = (reads_only["task_id"], paused["task_id"])
    wrong = {**binding(paused), "scope_hash": "0" * 64}
    # Turn: membership, then the scope hash, then dispatchability.
    refused(world, lambda: stranger.turn_raw(wrong), 409, "TASK_MEMBER_MISMATCH", *tids)
    refused(world, lambda: member.turn_raw(wrong), 409, "TASK_BINDING_CONFLICT", *tids)
    # New invocation: catalog revision and tool, then dispatchability, then the tool list, then budget.
    refused(world, lambda: member.invoke_raw(READ, CUSTOMER, "x", run_p, revision="0" * 64), 409,
            "capability_changed", *tids)
    refused(world, lambda: member.invoke_raw("no_such_tool", {}, "x", run_p), 404, "tool_not_found", *tids)
    refused(world, lambda: member.invoke_raw(WRITE, SMALL, "x", run_p), 409, "TASK_PAUSED", *tids)
    refused(world, lambda: member.invoke_raw(WRITE, SMALL, "x", run_z), 409, "TASK_TOOL_NOT_ALLOWED", *tids)
    # Search: an enrolled session's foreign run counts as unbound; a stranger's is simply not found.
    foreign = stranger.turn(None)["run_id"]
    refused(world, lambda: member.search_raw(foreign), 409, "TASK_REQUIRED", *tids)
    refused(world, lambda: stranger.search_raw(run_z), 404, "run_not_found", *tids)
    # Invoke: another session's run is not this session's turn.
    refused(world, lambda: stranger.invoke_raw(READ, CUSTOMER, "x", run_z), 409, "agent_run_conflict", *tids)


# ----------------------------------------------------------------------------- TASK_RUN_INACTIVE

@pytest.mark.parametrize("path", ["new read", "new write", "search with the run", "replay of the turn"])
def test_a_completed_run_takes_no_new_work(world, path):
    member = world.member()
    task = world.create([member])
    run = member.turn_raw(binding(task), turn="t1").json()["run_id"]
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    waiting = member.invoke(WRITE, BIG, "w-big", run)
    complete(member, run)
    send = {"new read": lambda: member.invoke_raw(READ, CUSTOMER, "r2", run),
            "new write": lambda: member.invoke_raw(WRITE, SMALL, "w2", run),
            "search with the run": lambda: member.search_raw(run),
            "replay of the turn": lambda: member.turn_raw(binding(task), turn="t1")}[path]
    refused(world, send, 409, "TASK_RUN_INACTIVE", task["task_id"])
    # Its original invocations can still be replayed, inspected and, once approved, resumed.
    assert status_of(member.invoke_raw(READ, CUSTOMER, "r1", run)) == "executed"
    assert status_of(member.receipt_raw("r1")) == "executed"
    approve(world, waiting)
    assert status_of(member.resume_raw("w-big")) == "executed"
    assert counters(world, task["task_id"]) == (0, 1, 0)


# ----------------------------------------------------------------------------- resume, approval and pause

def test_an_approved_call_waits_out_a_pause_and_then_runs_exactly_once(world):
    member = world.member()
    task = world.create([member], max_write_calls=3)
    tid = task["task_id"]
    run = member.turn(binding(task))["run_id"]
    waiting = member.invoke(WRITE, BIG, "w-big", run)
    assert waiting["status"] == "awaiting_approval"
    assert counters(world, tid) == (1, 0, 0)
    # Resuming before the decision changes nothing.
    assert status_of(member.resume_raw("w-big")) == "awaiting_approval"
    approve(world, waiting)
    task = world.control(task, "pause")
    # The receipt is a read: it shows the approval and dispatches nothing.
    receipt = assert_ok(member.receipt_raw("w-big"))
    assert receipt["approval"]["status"] == "approved" and receipt["result"]["status"] == "awaiting_approval"
    refused(world, lambda: member.resume_raw("w-big"), 409, "TASK_PAUSED", tid)
    assert approval_row(world, "w-big") == ("approved", None)
    assert world.business.executions() == []
    assert counters(world, tid) == (1, 0, 0)
    world.control(task, "resume")  # adds no budget and runs nothing by itself
    assert world.business.executions() == []
    assert status_of(member.resume_raw("w-big")) == "executed"
    assert status_of(member.resume_raw("w-big")) == "executed"  # a replay
    assert status_of(member.invoke_raw(WRITE, BIG, "w-big", run)) == "executed"
    assert len(world.business.executions(WRITE)) == 1
    assert counters(world, tid) == (0, 1, 0)
    status, consumed_at = approval_row(world, "w-big")
    assert status == "approved" and consumed_at is not None
    [row] = world.detail(tid)["invocations"]
    assert (row["budget_state"], row["permit_state"], row["outcome"], row["terminal"], row["attempt"]) == \
           ("consumed", "settled", "confirmed_dispatched", True, 1)


@pytest.mark.parametrize(("action", "code"), [("cancel", "TASK_CANCELLED"), ("pause", "TASK_PAUSED")])
def test_a_refused_resume_leaves_the_approval_unused(world, action, code):
    member = world.member()
    task = world.create([member])
    run = member.turn(binding(task))["run_id"]
    approve(world, member.invoke(WRITE, BIG, "w-big", run))
    world.control(task, action)
    for _ in range(2):
        refused(world, lambda: member.resume_raw("w-big"), 409, code, task["task_id"])
    assert approval_row(world, "w-big") == ("approved", None)
    assert counters(world, task["task_id"]) == (1, 0, 0)


def test_a_denial_releases_the_reservation(world):
    member = world.member()
    task = world.create([member], max_write_calls=1)
    tid = task["task_id"]
    run = member.turn(binding(task))["run_id"]
    waiting = member.invoke(WRITE, BIG, "w-big", run)
    assert counters(world, tid) == (1, 0, 0)
    refused(world, lambda: member.invoke_raw(WRITE, SMALL, "w2", run), 409, "TASK_WRITE_BUDGET_EXHAUSTED", tid)
    approve(world, waiting, "deny")
    assert status_of(member.resume_raw("w-big")) == "denied"
    assert status_of(member.resume_raw("w-big")) == "denied"  # repeating it changes nothing
    assert counters(world, tid) == (0, 0, 0)
    [row] = world.detail(tid)["invocations"]
    assert (row["budget_state"], row["permit_state"], row["outcome"], row["terminal"], row["attempt"]) == \
           ("released", "none", "confirmed_not_dispatched", True, 0)
    assert row["approval_id"] == waiting["approval"]["id"]
    # The released unit of budget is usable again.
    assert member.invoke(WRITE, SMALL, "w2", run)["status"] == "executed"
    assert len(world.business.executions(WRITE)) == 1


# ----------------------------------------------------------------------------- degradation (§11.3)

def counts_without(world: World, dropped: set[str]) -> dict[str, int]:
    return {t: int(world.sql(f"SELECT count(*) FROM {t}")[0][0]) for t in WRITTEN if t not in dropped}


def expect(send: Send, status: int, code: str, label: str) -> None:
    response = send()
    assert response.status_code == status, (label, response.text)
    assert_error(response, status, code)


def drop(world: World, *tables: str) -> None:
    for table in tables:
        world.sql(f"DROP TABLE {table} CASCADE")


def admin_calls(world: World, task_id: str, member: Member) -> dict[str, Send]:
    h = world.admin_headers
    return {
        "list": lambda: world.server.get(TASKS, headers=h),
        "create": lambda: world.create_raw(world.create_body([member])),
        "detail": lambda: world.server.get(f"{TASKS}/{task_id}", headers=h),
        "control": lambda: world.control_raw(task_id, "pause", 1),
    }


@pytest.mark.parametrize("table", TASK_TABLES)
def test_partial_task_storage_refuses_every_session(world, table):
    enrolled, free = world.member(), world.member()
    task = world.create([enrolled])
    run = enrolled.turn(binding(task))["run_id"]
    free_run = free.turn(None)["run_id"]
    drop(world, table)
    dropped = {table}
    before = counts_without(world, dropped)
    calls: dict[str, Send] = {
        "capabilities": lambda: world.server.get(CAPS, headers=free.headers),
        "unbound turn": lambda: free.turn_raw(None),
        "search": lambda: free.search_raw(None),
        "search with a run": lambda: free.search_raw(free_run),
        "read without run": lambda: free.invoke_raw(READ, CUSTOMER, "r", None),
        "read on a run": lambda: free.invoke_raw(READ, CUSTOMER, "r", free_run),
        "snapshot": lambda: enrolled.snapshot_raw(task["task_id"]),
        "bound turn": lambda: enrolled.turn_raw(binding(task)),
        "managed read": lambda: enrolled.invoke_raw(READ, CUSTOMER, "m", run),
        **admin_calls(world, task["task_id"], free),
    }
    for name, send in calls.items():
        expect(send, 503, "TASK_UNAVAILABLE", name)
    assert counts_without(world, dropped) == before
    assert world.business.executions() == []


def test_absent_task_storage_refuses_anything_that_needs_a_task(world):
    member, free = world.member(), world.member()
    task = world.create([member])
    run = member.turn(binding(task))["run_id"]
    assert member.invoke(READ, CUSTOMER, "m-read", run)["status"] == "executed"
    drop(world, *reversed(TASK_TABLES))
    assert world.sql("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bz_agent_task%'") == [(0,)]
    caps = assert_ok(world.server.get(CAPS, headers=free.headers))
    assert (caps["supported"], caps["mode"], caps["inspect_invocation"]) == (False, "optional", False)
    # Unbound turns and searches of a session in no task go on as before.
    turn = free.turn(None)
    assert "task_binding" not in turn
    assert assert_ok(free.search_raw(None))["tools"]
    assert assert_ok(free.search_raw(turn["run_id"]))["run_id"] == turn["run_id"]
    before = counts_without(world, set(TASK_TABLES))
    sent = len(world.business.executions())
    # Anything that needs a task is unsupported.
    calls: dict[str, Send] = {
        "binding of a session in no task": lambda: free.turn_raw(binding(task)),
        "binding of a member": lambda: member.turn_raw(binding(task)),
        "snapshot": lambda: member.snapshot_raw(task["task_id"]),
        "new call on a run that was managed": lambda: member.invoke_raw(READ, CUSTOMER, "m-read-2", run),
        "replay of a managed call": lambda: member.invoke_raw(READ, CUSTOMER, "m-read", run),
        "receipt of a managed call": lambda: member.receipt_raw("m-read"),
        "resume of a managed call": lambda: member.resume_raw("m-read"),
        **{f"admin {k}": v for k, v in admin_calls(world, task["task_id"], free).items()},
    }
    for name, send in calls.items():
        expect(send, 501, "TASK_UNSUPPORTED", name)
    # The enrolled member stays enrolled: no unbound way out (I-25).
    caps = assert_ok(world.server.get(CAPS, headers=member.headers))
    assert (caps["supported"], caps["mode"]) == (False, "required")
    expect(lambda: member.turn_raw(None), 409, "TASK_REQUIRED", "unbound turn of the member")
    expect(lambda: member.invoke_raw(READ, CUSTOMER, "m-read-3", None), 409, "TASK_REQUIRED", "unbound call")
    assert counts_without(world, set(TASK_TABLES)) == before
    assert len(world.business.executions()) == sent


def test_absent_task_storage_leaves_unmanaged_calls_as_they_were(world):
    free = world.member()
    run = free.turn(None)["run_id"]
    waiting = free.invoke(WRITE, BIG, "w-big", run)
    drop(world, *reversed(TASK_TABLES))
    response = free.invoke_raw(READ, CUSTOMER, "r1", None)
    assert len(world.business.executions()) == 1  # the request did leave the hub
    assert status_of(response) == "executed"
    assert world.sql("SELECT state FROM bz_tool_journal j JOIN bz_tool_invocations i ON i.id = j.job_id "
                     "WHERE i.invocation_id = %s", (iid("r1"),)) == [("completed",)]
    assert free.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    approve(world, waiting)
    assert status_of(free.resume_raw("w-big")) == "executed"
    assert len(world.business.executions()) == 3


@pytest.mark.parametrize("path", ["turn", "search", "read", "write", "binding"])
def test_absent_task_storage_keeps_an_operator_enrolled_session_blocked(world, path):
    drop(world, *reversed(TASK_TABLES))
    member = enrolled_session(world)
    caps = assert_ok(world.server.get(CAPS, headers=member.headers))
    assert (caps["supported"], caps["mode"]) == (False, "required")
    before = counts_without(world, set(TASK_TABLES))
    fake = {"schema_version": BINDING_SCHEMA, "task_id": str(uuid.uuid4()), "scope_hash": "a" * 64}
    send, status, code = {
        "turn": (lambda: member.turn_raw(None), 409, "TASK_REQUIRED"),
        "search": (lambda: member.search_raw(None), 409, "TASK_REQUIRED"),
        "read": (lambda: member.invoke_raw(READ, CUSTOMER, "r", None), 409, "TASK_REQUIRED"),
        "write": (lambda: member.invoke_raw(WRITE, SMALL, "w", None), 409, "TASK_REQUIRED"),
        "binding": (lambda: member.turn_raw(fake), 501, "TASK_UNSUPPORTED"),
    }[path]
    assert_error(send(), status, code)
    assert counts_without(world, set(TASK_TABLES)) == before
    assert world.business.executions() == []


def test_capabilities_and_the_agent_paths_need_an_agent_bearer(world):
    member = world.member()
    task = world.create([member])
    for headers in ({}, bearer("not-a-token"), world.admin_headers):
        refused(world, lambda h=headers: world.server.get(CAPS, headers=h), 401, "unauthorized", task["task_id"])
        refused(world, lambda h=headers: world.server.get(f"{AGENT}/tasks/{task['task_id']}", headers=h,
                                                params={"workspace": ROUTE, "client_conversation_id": "conv-1"}),
                401, "unauthorized", task["task_id"])
