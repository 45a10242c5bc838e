"""Task control end to end over HTTP (TASK_CONTROL.md §13.4): an administrator creates a task, a
member binds its turns, and the hub meters, pauses, cancels and settles its tool calls."""
from __future__ import annotations

import pytest

from tests.helpers import assert_error, assert_ok
from tests.task_world import BIG, READ, SMALL, WRITE, CUSTOMER, binding

CAPS = "/agent-api/v1/task-control/capabilities"


def test_a_member_reads_its_task_binds_a_turn_and_spends_the_budget(world):
    member = world.member()
    caps = assert_ok(world.server.get(CAPS, headers=member.headers))
    assert caps["supported"] is True and caps["mode"] == "optional"
    task = world.create([member], max_write_calls=2, max_concurrent=2)
    caps = assert_ok(world.server.get(CAPS, headers=member.headers))
    assert caps["mode"] == "required"
    snap = assert_ok(member.snapshot_raw(task["task_id"]))
    assert snap["task_id"] == task["task_id"] and snap["member_count"] == 1
    assert snap["snapshot_is_dispatch_permission"] is False
    # Enrolled: an unbound turn is refused, and creates nothing.
    before = world.stored()
    assert_error(member.turn_raw(None), 409, "TASK_REQUIRED")
    assert world.stored() == before
    turn = member.turn(binding(task))
    assert turn["task_binding"] == binding(task)
    run = turn["run_id"]
    assert member.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    assert member.invoke(WRITE, SMALL, "w2", run)["status"] == "executed"
    before = world.stored()
    assert_error(member.invoke_raw(WRITE, SMALL, "w3", run), 409, "TASK_WRITE_BUDGET_EXHAUSTED")
    assert world.stored() == before
    assert member.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    assert world.counters(task["task_id"]) == {"write_reserved": 0, "write_consumed": 2, "active_permits": 0}
    assert len(world.business.executions("customer_update_credit_limit")) == 2


def test_the_binding_is_normalised_echoed_frozen_with_the_run_and_replayed(world, sql):
    member = world.member()
    task = world.create([member])
    upper = {**binding(task), "task_id": task["task_id"].upper()}
    response = member.turn_raw(upper, turn="t-1")
    context = assert_ok(response)
    assert context["task_binding"] == binding(task)  # at the top level, task id in lower case
    assert "task_binding" not in context["context"]
    assert assert_ok(member.turn_raw(binding(task), turn="t-1")) == context  # the same turn, replayed
    run = context["run_id"]
    assert sql("SELECT task_binding FROM bz_runs WHERE id = %s", (run,)) == [(binding(task),)]
    assert sql("SELECT task_id::text, session_id::text FROM bz_agent_task_runs WHERE run_id = %s", (run,)) \
        == [(task["task_id"], member.session_id)]
    # The same turn key with another task's binding is another request.
    other = world.create([member])
    before = world.stored()
    assert_error(member.turn_raw(binding(other), turn="t-1"), 409, "turn_conflict")
    assert world.stored() == before
    # Search with the bound run is admitted; without a run it is not.
    assert assert_ok(member.search_raw(run))["run_id"] == run
    assert_error(member.search_raw(None), 409, "TASK_REQUIRED")


def test_a_run_keeps_its_task_and_its_invocations_are_charged_once(world, sql):
    member = world.member()
    task = world.create([member], max_write_calls=3)
    run = member.turn(binding(task))["run_id"]
    first = member.invoke(WRITE, SMALL, "once", run)
    assert first["status"] == "executed"
    # A replay of the same original call is answered from the record: no charge, no request.
    assert member.invoke(WRITE, SMALL, "once", run) == first
    assert world.counters(task["task_id"]) == {"write_reserved": 0, "write_consumed": 1, "active_permits": 0}
    assert len(world.business.executions(WRITE)) == 1
    [row] = world.detail(task["task_id"])["invocations"]
    assert row == {"session_id": member.session_id, "invocation_id": row["invocation_id"], "run_id": run,
                   "job_id": row["job_id"], "tool": WRITE, "readonly": False, "budget_state": "consumed",
                   "permit_state": "settled", "outcome": "confirmed_dispatched", "terminal": True, "attempt": 1,
                   "approval_id": None}
    # The task id is never sent to the business system.
    [execution] = world.business.executions(WRITE)
    assert task["task_id"] not in str(execution)


def test_an_approval_waits_with_its_reservation_and_a_pause_keeps_it_unconsumed(world, sql, cli):
    from tests.helpers import admin_token
    member = world.member()
    task = world.create([member], max_write_calls=2)
    run = member.turn(binding(task))["run_id"]
    waiting = member.invoke(WRITE, BIG, "big", run)
    assert waiting["status"] == "awaiting_approval"
    assert world.counters(task["task_id"]) == {"write_reserved": 1, "write_consumed": 0, "active_permits": 0}
    approver = admin_token(cli, "ann", "approver")
    [approval] = world.server.get("/admin/api/tool-approvals?status=pending",
                                  headers={"Authorization": f"Bearer {approver}"}).json()["items"]
    decided = world.server.post(f"/admin/api/tool-approvals/{approval['id']}/approve", json={
        "args_hash": approval["args_hash"]}, headers={"Authorization": f"Bearer {approver}"})
    assert decided.status_code == 200, decided.text
    paused = world.control(task, "pause")
    # The receipt stays readable; the resume is refused and uses nothing up.
    assert member.receipt_raw("big").status_code == 200
    assert_error(member.resume_raw("big"), 409, "TASK_PAUSED")
    assert sql("SELECT status, consumed_at FROM bz_tool_approvals") == [("approved", None)]
    assert world.business.executions(WRITE) == []
    world.control(paused, "resume")
    assert assert_ok(member.resume_raw("big"))["status"] == "executed"
    assert assert_ok(member.resume_raw("big"))["status"] == "executed"  # a replay sends nothing
    assert len(world.business.executions(WRITE)) == 1
    assert world.counters(task["task_id"]) == {"write_reserved": 0, "write_consumed": 1, "active_permits": 0}


def test_an_agent_on_the_official_client_reads_its_task_binds_and_is_stopped(world, tmp_path):
    from admin_app.agent_sdk import AgentClient, HubError
    from admin_app.agent_sdk.models import TaskBinding, TokenSet
    from admin_app.agent_sdk.session_store import SessionStore, session_record
    import time

    member = world.member()
    task = world.create([member], max_write_calls=1)
    s = member.session
    store = SessionStore(tmp_path / "agent" / "session.json")
    store.save(session_record(world.server.url, TokenSet(s["access_token"], s["refresh_token"], 900, 86400,
                                                          s["session_id"], "ops-app"), None, time.time()))
    client = AgentClient(store)
    caps = client.task_control_capabilities()
    assert caps.supported is True and caps.mode == "required"
    view = client.task(task["task_id"], workspace="desk", client_conversation_id=member.conversation)
    assert view.state == "active" and view.scope_hash == task["scope_hash"] and view.member_count == 1
    context = client.turn("desk", client_conversation_id=member.conversation, client_turn_id="sdk-1",
                          user_message_id="sdk-1-msg", user_input="Raise the limit.",
                          task_binding=TaskBinding(view.task_id, view.scope_hash))
    revision = context.capability_revision
    done = client.invoke("desk", capability_revision=revision, agent_run_id=context.run_id, tool=WRITE,
                         arguments=SMALL)
    assert done.state == "executed"
    with pytest.raises(HubError) as spent:
        client.invoke("desk", capability_revision=revision, agent_run_id=context.run_id, tool=WRITE, arguments=SMALL)
    assert (spent.value.status, spent.value.public_code) == (409, "TASK_WRITE_BUDGET_EXHAUSTED")
    world.control(world.detail(task["task_id"])["task"], "pause")
    with pytest.raises(HubError) as paused:
        client.invoke("desk", capability_revision=revision, agent_run_id=context.run_id, tool=READ,
                      arguments=CUSTOMER)
    assert (paused.value.status, paused.value.public_code) == (409, "TASK_PAUSED")
    world.control(world.detail(task["task_id"])["task"], "cancel")
    with pytest.raises(HubError) as cancelled:
        client.turn("desk", client_conversation_id=member.conversation, client_turn_id="sdk-2",
                    user_message_id="sdk-2-msg", user_input="Again.", task_binding=TaskBinding(view.task_id,
                                                                                                view.scope_hash))
    assert (cancelled.value.status, cancelled.value.public_code) == (409, "TASK_CANCELLED")
    assert client.task(task["task_id"], workspace="desk",
                       client_conversation_id=member.conversation).state == "cancelled"


def test_a_record_outside_the_rules_is_task_record_invalid_and_sends_nothing(world, sql):
    member = world.member()
    task = world.create([member])
    run = member.turn(binding(task))["run_id"]
    assert member.invoke(WRITE, BIG, "corrupt", run)["status"] == "awaiting_approval"
    # A permit held without any attempt is no state the rules allow.
    sql("UPDATE bz_agent_task_invocations SET permit_state = 'held'")
    before = world.stored()
    assert_error(member.receipt_raw("corrupt"), 409, "TASK_RECORD_INVALID")
    assert_error(member.resume_raw("corrupt"), 409, "TASK_RECORD_INVALID")
    assert world.stored() == before
    assert world.business.executions() == []


def test_a_database_failure_on_task_paths_is_503_task_unavailable_never_unsupported(world, sql):
    member = world.member()
    task = world.create([member])
    # Every table is there, but reading members fails: a failure, not a hub without tasks.
    sql("ALTER TABLE bz_agent_task_members RENAME COLUMN identity_hash TO identity_digest")
    assert_error(member.snapshot_raw(task["task_id"]), 503, "TASK_UNAVAILABLE")
    response = world.server.get(f"/admin/api/agent-tasks/{task['task_id']}", headers=world.admin_headers)
    assert_error(response, 503, "TASK_UNAVAILABLE")
    assert world.server.get(CAPS, headers=member.headers).json()["supported"] is True
