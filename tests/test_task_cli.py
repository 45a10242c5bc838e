"""`bailing-admin tasks`: list, show, create and control tasks from the command line, as the admin
API does (TASK_CONTROL.md §9): JSON on stdout; a refusal is a JSON error on stderr with exit 1,
and writes nothing. Creates and controls are made as a named admin (`--actor`), whose username
keys the request as the console's and the API's do."""
from __future__ import annotations

import json

import pytest

from admin_app.tasks import rules
from tests.helpers import make_admin
from tests.task_world import READ, SMALL, WRITE, binding

ACTOR = "task-admin"  # the world's administrator


def refused(result, code: str) -> dict:
    exit_code, out, err = result
    assert exit_code == 1, (out, err)
    assert out == ""
    assert isinstance(err, dict) and err["error"] == code, err
    assert err["message"]
    return err


def ok(result) -> dict:
    exit_code, out, err = result
    assert exit_code == 0, err
    assert isinstance(out, dict), out
    return out


def body_file(tmp_path, body, name: str = "body.json"):
    path = tmp_path / name
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(path)


def state(world, task_id: str | None = None) -> dict:
    """What a refusal must leave as it was."""
    rows = world.sql("SELECT task_id, state, revision, ledger_sequence FROM bz_agent_tasks ORDER BY task_id")
    enrolled = world.sql("SELECT id FROM bz_agent_sessions WHERE task_enrolled ORDER BY id")
    return {"stored": world.stored(), "tasks": rows, "enrolled": enrolled}


def test_create_from_a_body_file_then_list_and_show(world, tmp_path):
    member = world.member()
    body = world.create_body([member], max_write_calls=3, max_concurrent=1, request_id="cli-create-1")
    task = ok(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, body)))
    assert task["task_id"] == rules.task_id(ACTOR, "cli-create-1")
    assert task["state"] == "active" and task["revision"] == 1 and task["ledger_sequence"] == 1
    assert task["policy"] == {"max_write_calls": 3, "max_concurrent": 1, "expires_at": None}
    assert task["members"] == [member.coordinates(sorted([WRITE, READ]))]
    assert world.sql("SELECT task_enrolled FROM bz_agent_sessions WHERE id = %s", (member.session_id,)) == [(True,)]

    # The same body again is answered with the task it made; nothing new is written. The admin
    # API, for the same admin and request id, names the same task.
    before = state(world)
    assert ok(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, body))) == task
    assert world.create_raw(body).json()["task_id"] == task["task_id"]
    assert state(world) == before

    # Work under the task shows in `show`: invocation records and the bound run.
    run = member.turn(binding(task))["run_id"]
    assert member.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    shown = ok(world.cli("tasks", "show", task["task_id"]))
    assert shown["task"]["counters"] == {"write_reserved": 0, "write_consumed": 1, "active_permits": 0}
    assert [(i["tool"], i["budget_state"], i["outcome"]) for i in shown["invocations"]] == [
        (WRITE, "consumed", "confirmed_dispatched")]
    assert shown["next_cursor"] is None
    assert [r["run_id"] for r in shown["runs"]] == [run]
    # An upper-case id is the same task; the API's detail agrees.
    assert ok(world.cli("tasks", "show", task["task_id"].upper()))["task"] == world.detail(task["task_id"])["task"]

    listed = ok(world.cli("tasks", "list"))
    assert [t["task_id"] for t in listed["items"]] == [task["task_id"]] and listed["next_cursor"] is None


def test_list_pages_by_cursor(world, tmp_path):
    made = []
    for n in range(3):
        body = world.create_body([world.member(f"conv-{n}")], request_id=f"cli-page-{n}")
        made.append(ok(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, body)))["task_id"])
    first = ok(world.cli("tasks", "list", "--limit", "2"))
    assert len(first["items"]) == 2 and first["next_cursor"] == first["items"][-1]["task_id"]
    rest = ok(world.cli("tasks", "list", "--limit", "2", "--before", first["next_cursor"]))
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    seen = [t["task_id"] for t in first["items"] + rest["items"]]
    assert seen == sorted(made, reverse=True)


@pytest.mark.parametrize("args", [["--limit", "0"], ["--limit", "101"], ["--limit", "two"], ["--before", "nope"]])
def test_list_refuses_bad_paging(world, args):
    refused(world.cli("tasks", "list", *args), "TASK_INVALID_INPUT")


def test_show_refuses_an_unknown_or_malformed_task(world):
    refused(world.cli("tasks", "show", "7f0b2c1e-1111-4111-8111-111111111111"), "TASK_NOT_FOUND")
    refused(world.cli("tasks", "show", "not-a-task"), "TASK_INVALID_INPUT")


def test_create_refusals_write_nothing(world, tmp_path):
    member = world.member()
    good = world.create_body([member], request_id="cli-refused")
    make_admin(world.cli, "auditor-user", "auditor")
    make_admin(world.cli, "gone-admin", "admin")
    code, _, err = world.cli("admins", "disable", "gone-admin")
    assert code == 0, err
    before = state(world)
    path = body_file(tmp_path, good)
    refused(world.cli("tasks", "create", "--actor", "nobody", "--file", path), "admin_not_found")
    refused(world.cli("tasks", "create", "--actor", "auditor-user", "--file", path), "forbidden")
    refused(world.cli("tasks", "create", "--actor", "gone-admin", "--file", path), "admin_disabled")
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", str(tmp_path / "missing.json")),
            "invalid_request")
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, "{not json", "bad.json")),
            "TASK_INVALID_INPUT")
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, "[]", "list.json")),
            "TASK_INVALID_INPUT")
    wildcard = {**good, "members": [member.coordinates(["*"])]}
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, wildcard, "w.json")),
            "TASK_INVALID_INPUT")
    past = {**good, "policy": {**good["policy"], "expires_at": "2001-01-01T00:00:00Z"}}
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, past, "p.json")),
            "TASK_EXPIRED")
    assert state(world) == before

    # A member whose session is revoked cannot be frozen.
    code, _, err = world.cli("sessions", "revoke", member.session_id)
    assert code == 0, err
    before = state(world)
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", path), "TASK_SCOPE_BLOCKED")
    assert state(world) == before

    # The same request id with other content is a conflict, not a second task.
    other = world.member("conv-other")
    first = world.create_body([other], request_id="cli-twice")
    ok(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, first, "one.json")))
    changed = {**first, "policy": {**first["policy"], "max_concurrent": 9}}
    before = state(world)
    refused(world.cli("tasks", "create", "--actor", ACTOR, "--file", body_file(tmp_path, changed, "two.json")),
            "TASK_CONFLICT")
    assert state(world) == before


def test_create_reads_the_body_from_standard_input(world):
    body = world.create_body([world.member()], request_id="cli-stdin")
    task = ok(world.cli("tasks", "create", "--actor", ACTOR, "--file", "-", input=json.dumps(body)))
    assert task["task_id"] == rules.task_id(ACTOR, "cli-stdin")


def control(world, task_id: str, action: str, revision, request_id: str, actor: str = ACTOR):
    return world.cli("tasks", "control", task_id, "--actor", actor, "--action", action,
                     "--expected-revision", str(revision), "--request-id", request_id)


def test_pause_resume_cancel_and_their_refusals(world):
    member = world.member()
    task = world.create([member])
    task_id = task["task_id"]
    paused = ok(control(world, task_id, "pause", 1, "cli-pause-1"))
    assert (paused["state"], paused["revision"]) == ("paused", 2)
    # The same request again (its answer lost) is a replay: nothing moves.
    before = state(world)
    assert ok(control(world, task_id, "pause", 1, "cli-pause-1")) == paused
    assert state(world) == before

    # Refusals, each writing nothing.
    refused(control(world, task_id, "cancel", 1, "cli-stale"), "TASK_REVISION_CONFLICT")
    refused(control(world, task_id, "pause", 2, "cli-pause-1"), "TASK_CONTROL_CONFLICT")  # reused id
    refused(control(world, task_id, "stop", 2, "cli-stop"), "TASK_INVALID_INPUT")
    refused(control(world, task_id, "cancel", "two", "cli-two"), "TASK_INVALID_INPUT")
    refused(control(world, task_id, "cancel", 0, "cli-zero"), "TASK_INVALID_INPUT")
    refused(control(world, "7f0b2c1e-1111-4111-8111-111111111111", "cancel", 1, "cli-x"), "TASK_NOT_FOUND")
    refused(control(world, task_id, "cancel", 2, "cli-nobody", actor="nobody"), "admin_not_found")
    assert state(world) == before

    resumed = ok(control(world, task_id, "resume", 2, "cli-resume"))
    assert (resumed["state"], resumed["revision"]) == ("active", 3)
    refused(control(world, task_id, "resume", 3, "cli-resume-again"), "TASK_CONTROL_CONFLICT")
    cancelled = ok(control(world, task_id, "cancel", 3, "cli-cancel"))
    assert (cancelled["state"], cancelled["revision"]) == ("cancelled", 4)
    before = state(world)
    refused(control(world, task_id, "resume", 4, "cli-after"), "TASK_CANCELLED")
    assert state(world) == before
    events = world.sql("SELECT event, actor FROM bz_agent_task_events WHERE task_id = %s ORDER BY sequence",
                       (task_id,))
    assert events == [("created", ACTOR), ("pause", ACTOR), ("resume", ACTOR), ("cancel", ACTOR)]


def test_a_resume_that_fails_verification_blocks_the_task(world):
    member = world.member()
    task = world.create([member])
    ok(control(world, task["task_id"], "pause", 1, "cli-pause"))
    code, _, err = world.cli("sessions", "revoke", member.session_id)
    assert code == 0, err
    refused(control(world, task["task_id"], "resume", 2, "cli-resume"), "TASK_SCOPE_BLOCKED")
    # The block stands (the one write a refusal keeps); the resume itself was not recorded.
    shown = ok(world.cli("tasks", "show", task["task_id"]))["task"]
    assert (shown["state"], shown["revision"]) == ("blocked", 3)
    events = world.sql("SELECT event FROM bz_agent_task_events WHERE task_id = %s ORDER BY sequence",
                       (task["task_id"],))
    assert events == [("created",), ("pause",), ("scope_blocked",)]
