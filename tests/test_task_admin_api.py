"""The administrators' task API, /admin/api/agent-tasks (TASK_CONTROL.md §9): who may use it,
create and its idempotency, every body rule, the list and detail pages, the controls and their
replays, conflicts and state rules, and what the views never show (§8.2, §9.6).

Every refusal is checked for its status and code, `Cache-Control: no-store`, and that nothing was
written: the row counts of every table a refusal must not write and the task's state, revision
and ledger sequence."""
from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from tests.helpers import admin_token, apply_config, assert_error, assert_ok, bearer
from tests.task_world import (AGENT, CUSTOMER, READ, ROUTE, TASKS, WRITE, Member, World, binding, stored,
                              task_config)

Send = Callable[[], requests.Response]

TASK_KEYS = {"schema_version", "task_id", "state", "revision", "ledger_sequence", "scope_hash", "member_count",
             "policy", "counters", "metering", "snapshot_is_dispatch_permission", "members", "created_at",
             "updated_at"}
SNAPSHOT_KEYS = TASK_KEYS - {"members", "created_at", "updated_at"} | {"member"}
MEMBER_KEYS = {"session_id", "client_app_id", "workspace", "client_conversation_id", "allowed_tools"}
INVOCATION_KEYS = {"session_id", "invocation_id", "run_id", "job_id", "tool", "readonly", "budget_state",
                   "permit_state", "outcome", "terminal", "attempt", "approval_id"}



# ----------------------------------------------------------------------------- helpers

def enrolled(world: World) -> int:
    return int(world.sql("SELECT count(*) FROM bz_agent_sessions WHERE task_enrolled")[0][0])


def refused(world: World, send: Send, status: int, code: str, *task_ids: str, label: str = "") -> dict:
    """`send` is refused with `status`/`code` and writes nothing (no row, no enrolment, no change
    to the named tasks)."""
    before, marked = stored(world, *task_ids), enrolled(world)
    response = send()
    assert response.status_code == status, (label, response.text)
    body = assert_error(response, status, code)
    assert stored(world, *task_ids) == before, label
    assert enrolled(world) == marked, label
    return body


def raw_post(world: World, path: str, data: bytes | str, token: str | None = None) -> requests.Response:
    return world.server.post(path, data=data, headers={**bearer(token or world.admin),
                                                       "Content-Type": "application/json"})


def deadline(seconds: float) -> tuple[str, float]:
    moment = datetime.now(UTC) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z", \
        time.monotonic() + seconds + 0.05


def listed(world: World, **params: Any) -> dict:
    return assert_ok(world.server.get(TASKS, params=params, headers=world.admin_headers))


def revoke(world: World, member: Member) -> None:
    code, _out, err = world.cli("sessions", "revoke", member.session_id)
    assert code == 0, err


# ----------------------------------------------------------------------------- create

def test_create_is_idempotent_for_the_same_body_in_any_order(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    body = world.create_body([a, b], tools=[WRITE, READ], max_write_calls=7, max_concurrent=3)
    first = assert_ok(world.create_raw(body))
    assert set(first) == TASK_KEYS
    assert (first["state"], first["revision"], first["ledger_sequence"], first["member_count"]) == \
           ("active", 1, 1, 2)
    assert first["members"] == sorted(first["members"], key=lambda m: json.dumps(
        [m["session_id"], m["workspace"], m["client_conversation_id"]], separators=(",", ":")))
    assert all(m["allowed_tools"] == sorted([WRITE, READ]) for m in first["members"])
    snapshot = stored(world, first["task_id"])
    for again in (body,
                  {**body, "members": list(reversed(body["members"]))},
                  {**body, "members": [{**m, "allowed_tools": list(reversed(m["allowed_tools"])),
                                        "session_id": m["session_id"].upper()} for m in body["members"]]},
                  {"policy": body["policy"], "members": body["members"], "request_id": body["request_id"]}):
        assert assert_ok(world.create_raw(again)) == first  # 200 both times, the same task, nothing new
        assert stored(world, first["task_id"]) == snapshot
    # The replay answers the task as it is now, without verifying members again.
    paused = world.control(first, "pause")
    revoke(world, a)
    assert assert_ok(world.create_raw(body)) == paused
    assert stored(world, first["task_id"])[1] == [("paused", 2, 2)]


@pytest.mark.parametrize("change", ["policy", "tools", "members", "conversation", "deadline"])
def test_the_same_request_id_with_another_body_conflicts(world, change):
    a, b = world.member("conv-a"), world.member("conv-b")
    body = world.create_body([a, b])
    task = assert_ok(world.create_raw(body))
    other = json.loads(json.dumps(body))
    if change == "policy":
        other["policy"]["max_write_calls"] = None
    elif change == "tools":
        other["members"][0]["allowed_tools"] = [READ]
    elif change == "members":
        other["members"] = other["members"][:1]
    elif change == "conversation":
        other["members"][1]["client_conversation_id"] = "conv-c"
    else:
        other["policy"]["expires_at"] = "2099-01-01T00:00:00.000Z"
    refused(world, lambda: world.create_raw(other), 409, "TASK_CONFLICT", task["task_id"])


def test_the_task_id_derives_from_the_admin_and_the_request_id(world):
    member = world.member()
    token = admin_token(world.cli, "demo-admin", "admin")
    body = world.create_body([member], request_id="create-2026-01-15-shop")
    task = assert_ok(world.create_raw(body, token))
    assert task["task_id"] == "9732feb7-11a4-4a72-a6fb-8f39ebf61199"  # the test vector of §3.3
    # Another admin with the same request id creates another task.
    other = assert_ok(world.create_raw(body))
    assert other["task_id"] != task["task_id"] and other["scope_hash"] == task["scope_hash"]
    assert world.sql("SELECT created_by FROM bz_agent_tasks ORDER BY created_by") == [("demo-admin",),
                                                                                       ("task-admin",)]


def test_identical_creates_racing_both_succeed(world):
    member = world.member()
    body = world.create_body([member])
    answers: list[requests.Response] = []
    barrier = threading.Barrier(4)

    def send() -> None:
        barrier.wait()
        answers.append(requests.post(world.server.url + TASKS, json=body, headers=world.admin_headers, timeout=30))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    views = [assert_ok(r) for r in answers]
    assert len(views) == 4 and all(v == views[0] for v in views)
    assert world.sql("SELECT count(*) FROM bz_agent_tasks") == [(1,)]
    assert world.sql("SELECT count(*) FROM bz_agent_task_events") == [(1,)]


def test_create_normalises_and_enrols(world):
    member, bystander = world.member(), world.member()
    body = {"request_id": "normalise",
            "members": [{**member.coordinates(["zeta_tool", WRITE, "Alpha"]),
                         "session_id": member.session_id.upper()}],
            "policy": {"max_write_calls": 1e3, "max_concurrent": 2.0, "expires_at": "2099-02-28T12:00:00.1Z"}}
    task = assert_ok(world.create_raw(body))
    assert task["members"][0]["session_id"] == member.session_id.lower()
    assert task["members"][0]["allowed_tools"] == ["Alpha", WRITE, "zeta_tool"]  # unknown names are kept (I-02)
    assert task["policy"] == {"max_write_calls": 1000, "max_concurrent": 2, "expires_at": "2099-02-28T12:00:00.100Z"}
    assert task["counters"] == {"write_reserved": 0, "write_consumed": 0, "active_permits": 0}
    assert world.sql("SELECT id::text, task_enrolled FROM bz_agent_sessions WHERE id IN (%s, %s) ORDER BY 2",
                     (member.session_id, bystander.session_id)) == [(bystander.session_id, False),
                                                                    (member.session_id, True)]
    # Creating a task dispatches nothing and binds no run.
    assert world.sql("SELECT count(*) FROM bz_agent_task_runs") == [(0,)]
    assert world.business.executions() == []
    # A null budget and a zero budget are different tasks, both valid.
    for budget in (None, 0):
        made = assert_ok(world.create_raw(world.create_body([member], max_write_calls=budget)))
        assert made["policy"]["max_write_calls"] == budget


def test_the_largest_valid_values_are_accepted(world):
    member = world.member()
    body = world.create_body([member], max_write_calls=1_000_000_000, max_concurrent=10_000)
    tools = ["T" + "x" * 63] + [f"tool_{i}" for i in range(255)]
    body["members"] = [{**member.coordinates(tools if i == 0 else [READ]),
                        "client_conversation_id": f"c{i:02d}" + "." * 125} for i in range(64)]
    body["request_id"] = "r" * 126 + "\U0001f600"  # 128 UTF-16 code units; an emoji is fine
    body["policy"]["expires_at"] = "9999-12-31T23:59:59.999Z"
    task = assert_ok(world.create_raw(body))
    assert task["member_count"] == 64 and len(task["members"][0]["allowed_tools"]) == 256
    assert len(task["members"][0]["client_conversation_id"]) == 128
    assert task["policy"] == {"max_write_calls": 1_000_000_000, "max_concurrent": 10_000,
                              "expires_at": "9999-12-31T23:59:59.999Z"}
    assert world.sql("SELECT count(*) FROM bz_agent_task_members") == [(64,)]
    assert world.sql("SELECT count(*) FROM bz_agent_task_enforcements") == [(1,)]  # one session, marked once


# ----------------------------------------------------------------------------- who may use it

ANY_CALL: dict[str, Callable[[World, str, str], requests.Response]] = {
    "list": lambda w, tok, tid: w.server.get(TASKS, headers=bearer(tok)),
    "create": lambda w, tok, tid: w.server.post(TASKS, json={"request_id": "x", "members": [], "policy": {}},
                                                headers=bearer(tok)),
    "detail": lambda w, tok, tid: w.server.get(f"{TASKS}/{tid}", headers=bearer(tok)),
    "control": lambda w, tok, tid: w.server.post(f"{TASKS}/{tid}/control", headers=bearer(tok),
                                                 json={"request_id": "p", "expected_revision": 1, "action": "pause"}),
}


def test_an_agent_bearer_can_neither_create_nor_control(world):
    member = world.member()
    task = world.create([member])
    body = world.create_body([member])
    tokens = [member.session["access_token"], member.session.get("refresh_token"), "not-a-token", ""]
    for token in [t for t in tokens if t is not None]:
        if token:  # (create_raw falls back to the admin's token for an empty one)
            refused(world, lambda t=token: world.create_raw(body, t), 401, "unauthorized", task["task_id"])
        for name, call in ANY_CALL.items():
            refused(world, lambda c=call, t=token: c(world, t, task["task_id"]), 401, "unauthorized",
                    task["task_id"], label=name)
    refused(world, lambda: world.server.post(TASKS, json=body), 401, "unauthorized", task["task_id"])


@pytest.mark.parametrize("role", ["auditor", "approver", "support"])
def test_roles_without_the_clients_permissions_are_forbidden(world, role):
    member = world.member()
    task = world.create([member])
    token = admin_token(world.cli, f"a-{role}", role)
    refused(world, lambda: world.create_raw(world.create_body([member]), token), 403, "forbidden", task["task_id"])
    for name, call in ANY_CALL.items():
        refused(world, lambda c=call: c(world, token, task["task_id"]), 403, "forbidden", task["task_id"],
                label=name)


# ----------------------------------------------------------------------------- create body rules

def _set(path: str, value: Any) -> Callable[[dict], dict]:
    """A mutation of a valid create body: `path` like `members.0.workspace` set to `value`
    (the sentinel DELETE removes the key)."""
    def mutate(body: dict) -> dict:
        body = json.loads(json.dumps(body))
        *parents, last = path.split(".")
        node: Any = body
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        if value is DELETE:
            del node[key]
        else:
            node[key] = value
        return body
    return mutate


DELETE = object()
M = "members.0."
BAD_BODIES: dict[str, Callable[[dict], Any]] = {
    # the body
    "an array": lambda b: [b],
    "a string": lambda b: "task",
    "null": lambda b: None,
    "a number": lambda b: 1,
    "empty object": lambda b: {},
    "an extra key": lambda b: {**b, "task_id": str(uuid.uuid4())},
    "no request_id": _set("request_id", DELETE),
    "no members": _set("members", DELETE),
    "no policy": _set("policy", DELETE),
    # request_id
    "request_id empty": _set("request_id", ""),
    "request_id with a leading space": _set("request_id", " create-1"),
    "request_id with a trailing tab": _set("request_id", "create-1\t"),
    "request_id with a trailing no-break space": _set("request_id", "create-1\u00a0"),
    "request_id with a leading BOM": _set("request_id", "\ufeffcreate-1"),
    "request_id with a newline": _set("request_id", "create\n1"),
    "request_id with DEL": _set("request_id", "create\u007f1"),
    "request_id with NUL": _set("request_id", "create\u00001"),
    "request_id of 129 characters": _set("request_id", "r" * 129),
    "request_id of 65 emoji (130 code units)": _set("request_id", "\U0001f600" * 65),
    "request_id a number": _set("request_id", 12),
    "request_id null": _set("request_id", None),
    # members
    "members empty": _set("members", []),
    "members an object": lambda b: {**b, "members": b["members"][0]},
    "members null": _set("members", None),
    "a member that is a string": _set("members.0", "member"),
    "a member with an extra key": lambda b: _set("members.0.token", "secret")(b),
    "a member with a body": lambda b: _set("members.0.body", {})(b),
    "a member without allowed_tools": _set(M + "allowed_tools", DELETE),
    "a member without session_id": _set(M + "session_id", DELETE),
    "session_id not a UUID": _set(M + "session_id", "session-1"),
    "session_id of zeros": _set(M + "session_id", "00000000-0000-0000-0000-000000000000"),
    "session_id version 6": _set(M + "session_id", "11111111-1111-6111-8111-111111111111"),
    "session_id of another variant": _set(M + "session_id", "11111111-1111-4111-c111-111111111111"),
    "session_id without hyphens": _set(M + "session_id", "11111111111141118111111111111111"),
    "session_id in braces": _set(M + "session_id", "{11111111-1111-4111-8111-111111111111}"),
    "session_id a number": _set(M + "session_id", 1),
    "client_app_id empty": _set(M + "client_app_id", ""),
    "client_app_id untrimmed": _set(M + "client_app_id", "ops-app "),
    "client_app_id of 65 characters": _set(M + "client_app_id", "a" * 65),
    "client_app_id with a control character": _set(M + "client_app_id", "ops\u0001app"),
    "client_app_id null": _set(M + "client_app_id", None),
    "workspace auto": _set(M + "workspace", "auto"),
    "workspace upper case": _set(M + "workspace", "Desk"),
    "workspace of one character": _set(M + "workspace", "d"),
    "workspace of 65 characters": _set(M + "workspace", "d" * 65),
    "workspace starting with an underscore": _set(M + "workspace", "_desk"),
    "workspace with a dot": _set(M + "workspace", "desk.1"),
    "workspace empty": _set(M + "workspace", ""),
    "conversation empty": _set(M + "client_conversation_id", ""),
    "conversation with surrounding spaces": _set(M + "client_conversation_id", " conv-1 "),
    "conversation with a newline": _set(M + "client_conversation_id", "conv\n1"),
    "conversation with a non-ASCII letter": _set(M + "client_conversation_id", "convé"),
    "conversation with a combining accent": _set(M + "client_conversation_id", "conve\u0301"),
    "conversation starting with a colon": _set(M + "client_conversation_id", ":conv"),
    "conversation of 129 characters": _set(M + "client_conversation_id", "c" * 129),
    "conversation a number": _set(M + "client_conversation_id", 1),
    "allowed_tools empty": _set(M + "allowed_tools", []),
    "allowed_tools a wildcard": _set(M + "allowed_tools", ["*"]),
    "allowed_tools a prefix wildcard": _set(M + "allowed_tools", ["customer_*"]),
    "allowed_tools a duplicate": _set(M + "allowed_tools", [READ, READ]),
    "allowed_tools an empty name": _set(M + "allowed_tools", [""]),
    "allowed_tools a name starting with a digit": _set(M + "allowed_tools", ["1tool"]),
    "allowed_tools a name with a hyphen": _set(M + "allowed_tools", ["customer-get"]),
    "allowed_tools a name of 65 characters": _set(M + "allowed_tools", ["t" * 65]),
    "allowed_tools a number": _set(M + "allowed_tools", [1]),
    "allowed_tools a string": _set(M + "allowed_tools", READ),
    "allowed_tools 257 names": _set(M + "allowed_tools", [f"tool_{i}" for i in range(257)]),
    "65 members": lambda b: {**b, "members": [{**b["members"][0], "client_conversation_id": f"c-{i}"}
                                              for i in range(65)]},
    "the same member twice": lambda b: {**b, "members": [b["members"][0], dict(b["members"][0])]},
    "the same member twice, in two cases": lambda b: {**b, "members": [
        b["members"][0], {**b["members"][0], "session_id": b["members"][0]["session_id"].upper()}]},
    # policy
    "policy null": _set("policy", None),
    "policy an array": _set("policy", [5, 2, None]),
    "policy with an extra key": _set("policy.max_tokens", 10),
    "policy without max_write_calls": _set("policy.max_write_calls", DELETE),
    "policy without max_concurrent": _set("policy.max_concurrent", DELETE),
    "policy without expires_at": _set("policy.expires_at", DELETE),
    "max_write_calls -1": _set("policy.max_write_calls", -1),
    "max_write_calls 0.5": _set("policy.max_write_calls", 0.5),
    "max_write_calls a string": _set("policy.max_write_calls", "120"),
    "max_write_calls true": _set("policy.max_write_calls", True),
    "max_write_calls false": _set("policy.max_write_calls", False),
    "max_write_calls above 10^9": _set("policy.max_write_calls", 1_000_000_001),
    "max_write_calls 2^53-1": _set("policy.max_write_calls", 2**53 - 1),
    "max_write_calls 2^53": _set("policy.max_write_calls", 2**53),
    "max_concurrent 0": _set("policy.max_concurrent", 0),
    "max_concurrent -1": _set("policy.max_concurrent", -1),
    "max_concurrent 0.5": _set("policy.max_concurrent", 0.5),
    "max_concurrent a string": _set("policy.max_concurrent", "2"),
    "max_concurrent null": _set("policy.max_concurrent", None),
    "max_concurrent true": _set("policy.max_concurrent", True),
    "max_concurrent 10001": _set("policy.max_concurrent", 10_001),
    "expires_at Feb 30": _set("policy.expires_at", "2099-02-30T00:00:00.000Z"),
    "expires_at Feb 29 of a common year": _set("policy.expires_at", "2099-02-29T12:00:00Z"),
    "expires_at 24:00": _set("policy.expires_at", "2099-01-01T24:00:00Z"),
    "expires_at minute 60": _set("policy.expires_at", "2099-01-01T12:60:00Z"),
    "expires_at second 60": _set("policy.expires_at", "2099-01-01T12:00:60Z"),
    "expires_at month 13": _set("policy.expires_at", "2099-13-01T00:00:00Z"),
    "expires_at with an offset": _set("policy.expires_at", "2099-01-01T00:00:00+08:00"),
    "expires_at +00:00": _set("policy.expires_at", "2099-01-01T00:00:00+00:00"),
    "expires_at without a zone": _set("policy.expires_at", "2099-01-01T00:00:00"),
    "expires_at lower-case z": _set("policy.expires_at", "2099-01-01T00:00:00z"),
    "expires_at with a space": _set("policy.expires_at", "2099-01-01 00:00:00Z"),
    "expires_at four fraction digits": _set("policy.expires_at", "2099-01-01T00:00:00.1234Z"),
    "expires_at an empty fraction": _set("policy.expires_at", "2099-01-01T00:00:00.Z"),
    "expires_at a date only": _set("policy.expires_at", "2099-01-01"),
    "expires_at year 0001": _set("policy.expires_at", "0001-01-01T00:00:00Z"),
    "expires_at year 0999": _set("policy.expires_at", "0999-12-31T23:59:59Z"),
    "expires_at a five-digit year": _set("policy.expires_at", "10000-01-01T00:00:00Z"),
    "expires_at garbage": _set("policy.expires_at", "tomorrow"),
    "expires_at empty": _set("policy.expires_at", ""),
    "expires_at a number": _set("policy.expires_at", 4102444800000),
}


def test_every_body_rule_of_create_is_invalid_input(world):
    """Each violation in turn, on one hub: all of them are checks of the body alone."""
    member = world.member()
    good = world.create_body([member])
    for case, mutate in BAD_BODIES.items():
        refused(world, lambda m=mutate: world.create_raw(m(good)), 400, "TASK_INVALID_INPUT", label=case)
    assert enrolled(world) == 0
    assert_ok(world.create_raw(good))  # the unmutated body is fine


UNREADABLE = [b"{", b"", b"   ", b"[]", b"null", b'"text"', b"1", b"\xff\xfe{}",
              b'{"request_id": "a", "request_id": "b"}', b"{} {}", b"NaN", b"{'request_id': 'a'}"]


def test_an_unreadable_body_is_invalid_input(world):
    member = world.member()
    task = world.create([member])
    for target in (TASKS, f"{TASKS}/{task['task_id']}/control"):
        for data in UNREADABLE:
            refused(world, lambda t=target, d=data: raw_post(world, t, d), 400, "TASK_INVALID_INPUT",
                    task["task_id"], label=f"{target} {data!r}")


def test_oversize_bodies_are_refused_with_413(world):
    member = world.member()
    task = world.create([member])
    body = world.create_body([member])
    text = json.dumps(body)
    at_limit = text[:-1] + " " * (64 * 1024 - len(text)) + "}"
    assert len(at_limit.encode()) == 64 * 1024
    refused(world, lambda: raw_post(world, TASKS, at_limit[:-1] + " }"), 413, "TASK_INVALID_INPUT",
            task["task_id"])
    refused(world, lambda: raw_post(world, TASKS, "x" * (1024 * 1024)), 413, "TASK_INVALID_INPUT", task["task_id"])
    assert_ok(raw_post(world, TASKS, at_limit))  # 64 KiB exactly is still read
    control = json.dumps({"request_id": "pause-1", "expected_revision": 1, "action": "pause"})
    padded = control[:-1] + " " * (4 * 1024 - len(control)) + "}"
    target = f"{TASKS}/{task['task_id']}/control"
    refused(world, lambda: raw_post(world, target, padded[:-1] + " }"), 413, "TASK_INVALID_INPUT", task["task_id"])
    assert assert_ok(raw_post(world, target, padded))["state"] == "paused"


BAD_CONTROLS: list[dict[str, Any]] = [
    {}, {"request_id": "p", "expected_revision": 1}, {"request_id": "p", "action": "pause"},
    {"expected_revision": 1, "action": "pause"},
    {"request_id": "p", "expected_revision": 1, "action": "pause", "reason": "x"},
    {"request_id": "p", "expected_revision": 1, "action": "stop"},
    {"request_id": "p", "expected_revision": 1, "action": "Pause"},
    {"request_id": "p", "expected_revision": 1, "action": None},
    {"request_id": "p", "expected_revision": 0, "action": "pause"},
    {"request_id": "p", "expected_revision": -1, "action": "pause"},
    {"request_id": "p", "expected_revision": 1.5, "action": "pause"},
    {"request_id": "p", "expected_revision": "1", "action": "pause"},
    {"request_id": "p", "expected_revision": True, "action": "pause"},
    {"request_id": "p", "expected_revision": 2**53, "action": "pause"},
    {"request_id": "", "expected_revision": 1, "action": "pause"},
    {"request_id": " p", "expected_revision": 1, "action": "pause"},
    {"request_id": "r" * 129, "expected_revision": 1, "action": "pause"},
    {"request_id": 1, "expected_revision": 1, "action": "pause"},
]


def test_every_body_rule_of_control_is_invalid_input(world):
    member = world.member()
    task = world.create([member])
    for body in BAD_CONTROLS:
        refused(world, lambda b=body: world.server.post(f"{TASKS}/{task['task_id']}/control", json=b,
                                                        headers=world.admin_headers),
                400, "TASK_INVALID_INPUT", task["task_id"], label=json.dumps(body))
    # The same body with each rule met is accepted.
    assert assert_ok(world.control_raw(task["task_id"], "pause", 1.0))["revision"] == 2


# ----------------------------------------------------------------------------- create refusals

def _second_route(world: World, tmp_path) -> None:
    """A second route `back-office` the client app allows, but that the test sessions do not."""
    config = task_config(world.business.url)
    route = json.loads(json.dumps(config["routes"][0]))
    route.update(route_key="back-office", name="Back office")
    config["routes"].append(route)
    config["client_apps"][0]["allowed_routes"] = [ROUTE, "back-office"]
    apply_config(world.cli, tmp_path, config)


@pytest.mark.parametrize("cause", ["revoked session", "unknown session", "session of another client app",
                                   "workspace not allowed to the session", "unknown workspace",
                                   "session without an on-behalf-of subject", "one bad member among good ones"])
def test_a_member_that_does_not_verify_creates_nothing(world, tmp_path, cause):
    member, good = world.member(), world.member("conv-good")
    coordinates = member.coordinates([READ])
    members = [coordinates]
    if cause in ("revoked session", "one bad member among good ones"):
        revoke(world, member)
        if cause == "one bad member among good ones":
            members = [good.coordinates([READ]), coordinates]
    elif cause == "unknown session":
        coordinates["session_id"] = str(uuid.uuid4())
    elif cause == "session of another client app":
        coordinates["client_app_id"] = "crm-app"
    elif cause == "workspace not allowed to the session":
        _second_route(world, tmp_path)
        coordinates["workspace"] = "back-office"
    elif cause == "unknown workspace":
        coordinates["workspace"] = "nowhere"
    else:
        code, out, err = world.cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                                   "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": []}')
        assert code == 0, err
        coordinates["session_id"] = out["session_id"]
    body = {"request_id": "create-1", "members": members,
            "policy": {"max_write_calls": 5, "max_concurrent": 2, "expires_at": None}}
    refused(world, lambda: world.create_raw(body), 409, "TASK_SCOPE_BLOCKED")
    assert enrolled(world) == 0
    assert world.sql("SELECT count(*) FROM bz_agent_task_enforcements") == [(0,)]


def test_a_member_on_a_workspace_of_its_own_verifies(world, tmp_path):
    _second_route(world, tmp_path)
    code, out, err = world.cli("sessions", "issue", "--client", "ops-app", "--routes", f"{ROUTE},back-office",
                               "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}',
                               "--on-behalf-of", "tenant-7:user-42")
    assert code == 0, err
    member = Member(world.server, out, "conv-1")
    body = world.create_body([member])
    body["members"].append({**body["members"][0], "workspace": "back-office"})  # the same session twice
    task = assert_ok(world.create_raw(body))
    assert [m["workspace"] for m in task["members"]] == ["back-office", ROUTE]
    assert task["member_count"] == 2


@pytest.mark.parametrize("moment", ["past", "a second ago", "2000-01-01T00:00:00Z"])
def test_a_deadline_not_in_the_future_is_expired(world, moment):
    member = world.member()
    if moment == "past":
        expires_at = "2020-06-01T00:00:00.000Z"
    elif moment == "a second ago":
        expires_at = deadline(-1)[0]
    else:
        expires_at = moment
    refused(world, lambda: world.create_raw(world.create_body([member], expires_at=expires_at)), 409,
            "TASK_EXPIRED")
    assert enrolled(world) == 0


# ----------------------------------------------------------------------------- list

def test_the_list_pages_are_stable_complete_and_ordered(world):
    member = world.member()
    made = {world.create([member])["task_id"] for _ in range(7)}
    everything = listed(world, limit=100)
    ids = [t["task_id"] for t in everything["items"]]
    assert set(ids) == made and ids == sorted(ids, reverse=True) and everything["next_cursor"] is None
    assert all(set(t) == TASK_KEYS for t in everything["items"])
    for size in (1, 2, 3, 6, 7):
        pages, cursor = [], None
        while True:
            page = listed(world, limit=size, **({"before": cursor} if cursor else {}))
            assert len(page["items"]) <= size
            pages.extend(t["task_id"] for t in page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert cursor == page["items"][-1]["task_id"] and len(page["items"]) == size
        assert pages == ids, size
    # A cursor is any task id, known or not; an empty `before` is no cursor; upper case is fine.
    assert listed(world, before=ids[2].upper())["items"] == everything["items"][3:]
    assert listed(world, before="")["items"] == everything["items"]
    assert listed(world, before="ffffffff-ffff-4fff-bfff-ffffffffffff")["items"] == everything["items"]
    assert listed(world, before="00000000-0000-4000-8000-000000000000") == {"items": [], "next_cursor": None}
    assert listed(world, extra="ignored")["items"] == everything["items"]


def test_the_list_holds_thirty_by_default(world):
    member = world.member()
    for _ in range(31):
        world.create([member])
    page = listed(world)
    assert len(page["items"]) == 30 and page["next_cursor"] == page["items"][-1]["task_id"]
    assert len(listed(world, before=page["next_cursor"])["items"]) == 1
    assert len(listed(world, limit=100)["items"]) == 31


BAD_PAGES = [{"limit": "0"}, {"limit": "101"}, {"limit": "-1"}, {"limit": ""}, {"limit": "abc"}, {"limit": "1.0"},
             {"limit": " 1"}, {"limit": "1e1"}, {"limit": "+5"}, {"limit": "٣"}, {"limit": "99999999999999999999"},
             {"before": "not-a-uuid"}, {"before": "00000000-0000-0000-0000-000000000000"},
             {"before": "9732feb7-11a4-4a72-a6fb-8f39ebf6119"}, {"before": " 9732feb7-11a4-4a72-a6fb-8f39ebf61199"}]


def test_bad_list_paging_is_invalid_input(world):
    member = world.member()
    task = world.create([member])
    for params in BAD_PAGES:
        refused(world, lambda p=params: world.server.get(TASKS, params=p, headers=world.admin_headers), 400,
                "TASK_INVALID_INPUT", task["task_id"], label=str(params))
    for limit in ("1", "100", "030"):
        assert len(listed(world, limit=limit)["items"]) == 1


# ----------------------------------------------------------------------------- detail

def test_detail_of_an_unknown_or_malformed_task_id(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    refused(world, lambda: world.server.get(f"{TASKS}/{uuid.uuid4()}", headers=world.admin_headers), 404,
            "TASK_NOT_FOUND", tid)
    refused(world, lambda: world.control_raw(str(uuid.uuid4()), "pause", 1), 404, "TASK_NOT_FOUND", tid)
    for bad in ("not-a-uuid", "0" * 36, "00000000-0000-0000-0000-000000000000", tid.replace("-", ""),
                tid[:14] + "6" + tid[15:], tid + "0"):
        refused(world, lambda b=bad: world.server.get(f"{TASKS}/{b}", headers=world.admin_headers), 400,
                "TASK_INVALID_INPUT", tid, label=bad)
        refused(world, lambda b=bad: world.control_raw(b, "pause", 1), 400, "TASK_INVALID_INPUT", tid, label=bad)
    detail = assert_ok(world.server.get(f"{TASKS}/{tid.upper()}", headers=world.admin_headers))
    assert detail == {"task": task, "invocations": [], "next_cursor": None}


def test_the_invocations_of_a_task_page_by_job_id(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b], max_write_calls=None, max_concurrent=3)
    tid = task["task_id"]
    runs = {a.session_id: a.turn(binding(task))["run_id"], b.session_id: b.turn(binding(task))["run_id"]}
    for i in range(3):
        a.invoke(READ, CUSTOMER, f"a-read-{i}", runs[a.session_id])
        b.invoke(READ, CUSTOMER, f"b-read-{i}", runs[b.session_id])
    b.invoke(WRITE, {"customer_id": "C-100234", "credit_limit": 700}, "b-write", runs[b.session_id])
    jobs = {r[0]: (r[1], r[2]) for r in world.sql(
        "SELECT id::text, session_id::text, invocation_id FROM bz_tool_invocations")}
    full = world.detail(tid, limit=100)
    rows = full["invocations"]
    assert len(rows) == 7 and full["next_cursor"] is None
    assert [r["job_id"] for r in rows] == sorted(jobs, reverse=True)
    for r in rows:
        assert set(r) == INVOCATION_KEYS
        assert (r["session_id"], r["invocation_id"]) == jobs[r["job_id"]]
        assert r["run_id"] == runs[r["session_id"]]
        assert r["terminal"] is True and r["attempt"] == 1 and r["permit_state"] == "settled"
        assert r["outcome"] == "confirmed_dispatched" and r["approval_id"] is None
        assert (r["readonly"], r["budget_state"]) == ((False, "consumed") if r["tool"] == WRITE else (True, None))
    assert "C-100234" not in json.dumps(full)  # no arguments, no results
    for size in (1, 2, 3, 7):
        seen, cursor = [], None
        while True:
            page = world.detail(tid, limit=size, **({"before": cursor} if cursor else {}))
            assert page["task"] == full["task"]
            seen.extend(page["invocations"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert cursor == page["invocations"][-1]["job_id"]
        assert seen == rows, size
    assert world.detail(tid)["invocations"] == rows  # default 30
    for params in BAD_PAGES:
        refused(world, lambda p=params: world.server.get(f"{TASKS}/{tid}", params=p, headers=world.admin_headers),
                400, "TASK_INVALID_INPUT", tid, label=str(params))


# ----------------------------------------------------------------------------- control

def test_a_control_replay_answers_the_current_task(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    paused = assert_ok(world.control_raw(tid, "pause", 1, request_id="pause-1"))
    assert (paused["state"], paused["revision"], paused["ledger_sequence"]) == ("paused", 2, 2)
    assert world.sql("SELECT event, actor, detail FROM bz_agent_task_events WHERE task_id = %s AND sequence = 2",
                     (tid,)) == [("pause", "task-admin", {"revision": 2})]
    assert assert_ok(world.control_raw(tid, "pause", 1, request_id="pause-1")) == paused  # a lost answer, again
    resumed = assert_ok(world.control_raw(tid, "resume", 2, request_id="resume-1"))
    assert (resumed["state"], resumed["revision"]) == ("active", 3)
    snapshot = stored(world, tid)
    # The first request again: the task as it is now, nothing moved.
    assert assert_ok(world.control_raw(tid, "pause", 1, request_id="pause-1")) == resumed
    assert stored(world, tid) == snapshot
    # The same request id for anything else is a conflict.
    for action, revision in (("cancel", 1), ("pause", 3), ("resume", 1)):
        refused(world, lambda a=action, r=revision: world.control_raw(tid, a, r, request_id="pause-1"), 409,
                "TASK_CONTROL_CONFLICT", tid, label=action)
    # Another admin's request ids are theirs: the same id is a new request.
    other = admin_token(world.cli, "other-admin", "admin")
    assert assert_ok(world.control_raw(tid, "pause", 3, request_id="pause-1", token=other))["revision"] == 4
    assert world.sql("SELECT actor FROM bz_agent_task_events WHERE task_id = %s AND sequence = 4",
                     (tid,)) == [("other-admin",)]


def test_a_stale_revision_conflicts_and_changes_nothing(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    run = member.turn(binding(task))["run_id"]
    member.invoke(READ, CUSTOMER, "r1", run)  # traffic moves the ledger, never the revision
    assert stored(world, tid)[1] == [("active", 1, 4)]
    world.control(task, "pause")
    for action, revision in (("resume", 1), ("cancel", 1), ("pause", 1), ("resume", 3), ("resume", 4)):
        refused(world, lambda a=action, r=revision: world.control_raw(tid, a, r), 409, "TASK_REVISION_CONFLICT",
                tid, label=f"{action}@{revision}")
    assert stored(world, tid)[1] == [("paused", 2, 5)]


def test_controls_follow_the_state_machine(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    refused(world, lambda: world.control_raw(tid, "resume", 1), 409, "TASK_CONTROL_CONFLICT", tid)
    paused = assert_ok(world.control_raw(tid, "pause", 1, request_id="first-pause"))
    paused_again = world.control(paused, "pause")  # allowed; the revision still moves
    assert (paused_again["state"], paused_again["revision"]) == ("paused", 3)
    cancelled = world.control(paused_again, "cancel")
    assert (cancelled["state"], cancelled["revision"]) == ("cancelled", 4)
    for action in ("pause", "resume", "cancel"):
        for revision in (4, 3):  # a stale revision is checked before the transition (§9.5, §10.3)
            refused(world, lambda a=action, r=revision: world.control_raw(tid, a, r), 409,
                    "TASK_CANCELLED" if revision == 4 else "TASK_REVISION_CONFLICT", tid, label=action)
    # A replay of an earlier control is still a replay: the cancelled task as it is.
    assert assert_ok(world.control_raw(tid, "pause", 1, request_id="first-pause")) == cancelled
    # Cancel is final and leaves the sessions enrolled.
    assert world.sql("SELECT task_enrolled FROM bz_agent_sessions WHERE id = %s", (member.session_id,)) == [(True,)]
    assert_error(member.turn_raw(None), 409, "TASK_REQUIRED")


def test_cancel_works_from_active_and_blocked(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    first, second = world.create([a, b]), world.create([a, b])
    assert world.control(first, "cancel")["state"] == "cancelled"
    revoke(world, a)
    assert_error(b.snapshot_raw(second["task_id"]), 409, "TASK_SCOPE_BLOCKED")
    assert stored(world, second["task_id"])[1] == [("blocked", 2, 2)]
    assert assert_ok(world.control_raw(second["task_id"], "cancel", 2))["state"] == "cancelled"


def test_admin_reads_pause_and_cancel_verify_nobody(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b])
    tid = task["task_id"]
    revoke(world, a)
    before = stored(world, tid)
    assert world.detail(tid)["task"] == task
    assert listed(world)["items"] == [task]
    assert stored(world, tid) == before == (before[0], [("active", 1, 1)])
    paused = world.control(task, "pause")
    assert (paused["state"], paused["revision"]) == ("paused", 2)
    cancelled = world.control(paused, "cancel")
    assert (cancelled["state"], cancelled["revision"], cancelled["ledger_sequence"]) == ("cancelled", 3, 3)


def test_resume_after_the_deadline_is_expired(world):
    member = world.member()
    expires_at, after = deadline(2)
    body = world.create_body([member], expires_at=expires_at)
    task = assert_ok(world.create_raw(body))
    paused = world.control(task, "pause")
    time.sleep(max(0.0, after - time.monotonic()))
    tid = task["task_id"]
    refused(world, lambda: world.control_raw(tid, "resume", 2), 409, "TASK_EXPIRED", tid)
    refused(world, lambda: world.control_raw(tid, "resume", 2), 409, "TASK_EXPIRED", tid)
    # A create replay still answers the task (the deadline is checked only when it is created).
    assert assert_ok(world.create_raw(body)) == paused
    # Pause and cancel still work on an expired task; the views show the stored state.
    assert listed(world)["items"][0]["state"] == "paused"
    again = world.control(paused, "pause")
    assert world.control(again, "cancel")["state"] == "cancelled"


def test_a_blocked_task_is_resumed_only_through_pause_and_a_fresh_verification(world, tmp_path):
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b])
    tid = task["task_id"]
    # The route stops offering the Agent Client Runtime: the group no longer verifies.
    config = task_config(world.business.url)
    config["routes"][0]["agent_client"] = {"enabled": False}
    apply_config(world.cli, tmp_path, config)
    paused = world.control(task, "pause")  # pause does not verify
    assert paused["state"] == "paused"
    # Resume verifies first: the task is blocked (committed) although the control is refused.
    before, _ = stored(world, tid)
    assert_error(world.control_raw(tid, "resume", 2), 409, "TASK_SCOPE_BLOCKED")
    assert stored(world, tid) == ({**before, "bz_agent_task_events": before["bz_agent_task_events"] + 1},
                                  [("blocked", 3, 3)])
    # Still broken: resume from blocked fails verification again, and blocked does not move.
    refused(world, lambda: world.control_raw(tid, "resume", 3), 409, "TASK_SCOPE_BLOCKED", tid)
    # Fixed: resume from blocked is still not allowed (pause first) ...
    apply_config(world.cli, tmp_path, task_config(world.business.url))
    refused(world, lambda: world.control_raw(tid, "resume", 3), 409, "TASK_CONTROL_CONFLICT", tid)
    paused = assert_ok(world.control_raw(tid, "pause", 3))
    assert (paused["state"], paused["revision"]) == ("paused", 4)
    # ... then resume verifies the whole group again and the task is active.
    resumed = assert_ok(world.control_raw(tid, "resume", 4))
    assert (resumed["state"], resumed["revision"]) == ("active", 5)
    run = b.turn(binding(task))["run_id"]
    assert b.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"


def test_a_blocked_task_with_the_cause_still_there_stays_blocked(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b])
    tid = task["task_id"]
    revoke(world, a)
    assert_error(b.snapshot_raw(tid), 409, "TASK_SCOPE_BLOCKED")
    assert world.control_raw(tid, "pause", 2).status_code == 200
    before, _ = stored(world, tid)
    assert_error(world.control_raw(tid, "resume", 3), 409, "TASK_SCOPE_BLOCKED")
    assert stored(world, tid) == ({**before, "bz_agent_task_events": before["bz_agent_task_events"] + 1},
                                  [("blocked", 4, 4)])


# ----------------------------------------------------------------------------- routing and views

def test_other_methods_and_paths_are_not_found(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    calls = [("PUT", TASKS), ("PATCH", TASKS), ("DELETE", TASKS),
             ("POST", f"{TASKS}/{tid}"), ("PUT", f"{TASKS}/{tid}"), ("PATCH", f"{TASKS}/{tid}"),
             ("DELETE", f"{TASKS}/{tid}"), ("GET", f"{TASKS}/{tid}/control"), ("PUT", f"{TASKS}/{tid}/control"),
             ("DELETE", f"{TASKS}/{tid}/control"), ("GET", f"{TASKS}/{tid}/events"),
             ("POST", f"{TASKS}/{tid}/members"), ("POST", f"{TASKS}/{tid}/abandon"),
             ("POST", f"{TASKS}/{tid}/control/pause"), ("GET", f"{TASKS}/{tid}/invocations"),
             ("GET", f"{TASKS}/a/b/c")]
    # An admin is told there is nothing there; a caller without a valid token only that it needs one.
    for token, status, code in ((world.admin, 404, "not_found"), (None, 401, "unauthorized")):
        for method, path in calls:
            headers = bearer(token) if token else {}
            refused(world, lambda m=method, p=path, h=headers: world.server.request(
                m, p, headers=h, json={"request_id": "x", "expected_revision": 1, "action": "pause"}),
                status, code, tid, label=f"{method} {path}")


def test_the_views_keep_internal_values_out(world):
    a, b = world.member("conv-a"), world.member("conv-b")
    task = world.create([a, b])
    tid = task["task_id"]
    run = a.turn(binding(task))["run_id"]
    a.invoke(READ, CUSTOMER, "r1", run)
    world.control(task, "pause")
    secrets = [v for row in world.sql("SELECT identity_hash, member_key FROM bz_agent_task_members") for v in row]
    secrets += [v for row in world.sql("SELECT create_key, create_hash FROM bz_agent_tasks") for v in row]
    secrets += [v for (v,) in world.sql("SELECT request_key FROM bz_agent_task_events WHERE request_key IS NOT NULL")]
    assert len(set(secrets)) == 7  # the `created` event's request key is the create key
    admin_views = [world.detail(tid), listed(world), assert_ok(world.create_raw(world.create_body([a])))]
    for view in admin_views:
        text = json.dumps(view)
        assert not any(s in text for s in secrets)
        assert "created_by" not in text and "task-admin" not in text and "identity" not in text
        assert "request_key" not in text and "create_" not in text
    detail = world.detail(tid)["task"]
    assert set(detail) == TASK_KEYS and all(set(m) == MEMBER_KEYS for m in detail["members"])
    # The agent's snapshot: its own member only, the whole group counted, nothing of the others.
    snap = assert_ok(a.snapshot_raw(tid))
    assert set(snap) == SNAPSHOT_KEYS and set(snap["member"]) == MEMBER_KEYS
    assert snap["member"] == {**a.coordinates(sorted([WRITE, READ]))}
    assert snap["member_count"] == 2 and snap["snapshot_is_dispatch_permission"] is False
    assert {k: v for k, v in snap.items() if k != "member"} == \
           {k: v for k, v in detail.items() if k not in ("members", "created_at", "updated_at")}
    text = json.dumps(snap)
    assert b.session_id not in text and "conv-b" not in text and not any(s in text for s in secrets)
    assert snap["ledger_sequence"] >= snap["revision"] >= 1
    assert assert_ok(b.snapshot_raw(tid))["member"]["session_id"] == b.session_id


def test_every_answer_is_no_store_json(world):
    member = world.member()
    task = world.create([member])
    tid = task["task_id"]
    answers = [world.server.get(TASKS, headers=world.admin_headers),
               world.server.get(f"{TASKS}/{tid}", headers=world.admin_headers),
               world.create_raw(world.create_body([member])), world.control_raw(tid, "pause", 1),
               world.server.get(TASKS, params={"limit": "0"}, headers=world.admin_headers),
               world.server.get(TASKS),
               world.server.get(f"{TASKS}/{uuid.uuid4()}", headers=world.admin_headers),
               world.server.request("DELETE", TASKS),
               member.snapshot_raw(tid),
               world.server.get(f"{AGENT}/task-control/capabilities", headers=member.headers)]
    for response in answers:
        assert response.headers.get("Cache-Control") == "no-store", (response.request.url, response.status_code)
        assert response.headers.get("Content-Type", "").startswith("application/json")
