"""Task control in the console (TASK_CONTROL.md §12), in Debian's Chromium: the list with each
task's usage, a task with its members, linked invocations and bound runs (paged), pause, resume
and cancel with their confirmations, a stale form refused with the fresh snapshot shown, the
create form (acknowledgement required, local deadline sent as UTC, the request id kept or renewed
as the refusal requires), a viewer without clients:write, refreshes that change nothing, and
agents' text escaped in the session picker.

The tasks come from the admin API and the members act over the agent APIs (tests/task_world.py);
the console server is the same in-process app, so a test may narrow a page size or grant a role
a permission with monkeypatch."""
from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from admin_app.console import tasks as console_tasks
from admin_app.identity import roles
from admin_app.tasks import rules
from tests.browser import XSS
from tests.helpers import make_admin
from tests.test_console_a11y_browser import check
from tests.task_world import BIG, CUSTOMER, READ, SMALL, WRITE, binding

ADMIN = "task-admin"  # the world's administrator (tests/task_world.py), password PASSWORD
ROWS = "table.list.tasks tbody tr[data-task-id]"


def task_row(sql, task_id: str) -> tuple:
    return sql("SELECT state, revision, ledger_sequence, write_reserved, write_consumed, active_permits, "
               "updated_at FROM bz_agent_tasks WHERE task_id = %s", (task_id,))[0]


def ledger(sql, task_id: str) -> list[tuple]:
    return sql("SELECT sequence, event, actor FROM bz_agent_task_events WHERE task_id = %s ORDER BY sequence",
               (task_id,))


def everything(sql, task_id: str) -> dict:
    """What a read must never change: the task, its ledger, its records, the calls and approvals."""
    return {"task": task_row(sql, task_id), "ledger": ledger(sql, task_id),
            "records": sql("SELECT invocation_id, budget_state, permit_state, outcome, is_terminal, attempt "
                           "FROM bz_agent_task_invocations WHERE task_id = %s ORDER BY invocation_id", (task_id,)),
            "calls": sql("SELECT invocation_id, status FROM bz_tool_invocations ORDER BY invocation_id"),
            "approvals": sql("SELECT id, status, consumed_at FROM bz_tool_approvals ORDER BY id"),
            "sessions": sql("SELECT id, revoked_at, task_enrolled FROM bz_agent_sessions ORDER BY id")}


def signed_in(ui, name: str = ADMIN):
    view = ui()
    view.sign_in(name)
    return view


def open_control(page, label: str):
    """Open a control's confirmation (a disclosure) and return its confirm button."""
    box = page.locator("details.control", has=page.locator("summary", has_text=f"{label}…"))
    box.locator("summary").click()
    button = box.get_by_role("button", name=f"Confirm: {label.lower()} the task")
    expect(button).to_be_visible()
    return box, button


def load_all(page, table: str, rows, count: int) -> None:
    """Bring each "load more" row of `table` into view (htmx loads it when revealed) until none is left."""
    for _ in range(3 * count):
        if rows.count() >= count and page.locator(f"{table} tr.more").count() == 0:
            break
        page.evaluate("s => { const m = document.querySelector(s); if (m) m.scrollIntoView({block: 'center'}); }",
                      f"{table} tr.more")
        page.wait_for_timeout(250)
    expect(rows).to_have_count(count)
    expect(page.locator(f"{table} tr.more")).to_have_count(0)


def test_the_list_shows_every_task_with_its_usage(world, ui, monkeypatch):
    spender, reader, open_ended = world.member("conv-spend"), world.member("conv-read"), world.member("conv-open")
    spent = world.create([spender], max_write_calls=5, max_concurrent=2)
    run = spender.turn(binding(spent))["run_id"]
    assert spender.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    assert spender.invoke(WRITE, SMALL, "w2", run)["status"] == "executed"
    assert spender.invoke(READ, CUSTOMER, "r1", run)["status"] == "executed"
    reads_only = world.create([reader], max_write_calls=0, max_concurrent=1)
    unlimited = world.create([open_ended], max_write_calls=None, max_concurrent=3,
                             expires_at="2031-06-01T08:00:00.000Z")
    world.control(reads_only, "pause")

    view = signed_in(ui)
    page = view.page
    page.locator("header nav").get_by_role("link", name="Tasks").click()
    expect(page.get_by_role("heading", name="Tasks", exact=True)).to_be_visible()
    rows = page.locator(ROWS)
    expect(rows).to_have_count(3)
    # The API's order: task id, descending.
    shown = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.taskId)")
    assert shown == sorted([spent["task_id"], reads_only["task_id"], unlimited["task_id"]], reverse=True)

    row = page.locator(f"tr[data-task-id='{spent['task_id']}']")
    expect(row.locator("td[data-writes]")).to_contain_text("2 / 5")
    expect(row.locator("td[data-writes]")).to_contain_text("reserved 0 · consumed 2")
    expect(row.locator("td[data-permits]")).to_have_text("0 / 2")
    expect(row).to_contain_text("1 member")
    expect(row).to_contain_text("desk")
    expect(row).to_contain_text("no deadline")
    expect(row.locator(".badge")).to_have_text("active")
    expect(row.get_by_role("link", name=spent["task_id"][:8])).to_have_attribute("title", spent["task_id"])
    row = page.locator(f"tr[data-task-id='{reads_only['task_id']}']")
    expect(row.locator("td[data-writes]")).to_contain_text("0 / 0 (reads only)")
    expect(row.locator(".badge")).to_have_text("paused")
    row = page.locator(f"tr[data-task-id='{unlimited['task_id']}']")
    expect(row.locator("td[data-writes]")).to_contain_text("0 / no limit")
    expect(row.locator("td[data-permits]")).to_have_text("0 / 3")
    expect(row.locator("td[data-deadline] time")).to_have_attribute("datetime", "2031-06-01T08:00:00.000Z")
    check(view, "task list")

    # Paged by cursor: "load more" brings the rest, each task once.
    monkeypatch.setattr(console_tasks, "PAGE", 2)
    page.reload()
    expect(rows).to_have_count(3)  # the "load more" row is revealed at once and loads the last one
    assert page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.taskId)") == shown
    view.watch.assert_clean()


def test_an_empty_list_says_what_a_task_needs_first(world, ui):
    view = signed_in(ui)
    view.goto("/console/tasks/")
    expect(view.page.locator("p.empty")).to_contain_text("No task exists yet")
    expect(view.page.locator("p.empty")).to_contain_text("must support task binding")
    view.watch.assert_clean()


def test_the_detail_shows_members_invocations_and_bound_runs(world, ui, monkeypatch):
    one, two = world.member("conv-one"), world.member("conv-two")
    task = world.create([one, two], max_write_calls=5, max_concurrent=2)
    first = one.turn(binding(task))["run_id"]
    assert one.invoke(WRITE, SMALL, "w1", first)["status"] == "executed"
    assert one.invoke(READ, CUSTOMER, "r1", first)["status"] == "executed"
    waiting = one.invoke(WRITE, BIG, "w-big", first)  # an approval: reserved, no permit yet
    assert waiting["status"] == "awaiting_approval"
    second = two.turn(binding(task))["run_id"]
    assert two.invoke(WRITE, SMALL, "w2", second)["status"] == "executed"

    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task['task_id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(task["task_id"][:8])
    expect(page.locator("[data-task-id]")).to_have_text(task["task_id"])
    expect(page.get_by_text("This snapshot is not a dispatch permission")).to_be_visible()
    expect(page.locator("[data-revision]")).to_have_text("1")
    expect(page.locator("[data-usage-writes]")).to_contain_text("3 / 5")
    expect(page.locator("[data-usage-writes]")).to_contain_text("reserved 1 · consumed 2")
    expect(page.locator("[data-usage-permits]")).to_contain_text("0 / 2")

    members = page.locator("table.members tbody tr")
    expect(members).to_have_count(2)
    for member in (one, two):
        row = members.filter(has_text=member.session_id)
        expect(row).to_contain_text("ops-app / desk")
        expect(row).to_contain_text(member.conversation)
        expect(row).to_contain_text(f"{READ}, {WRITE}")

    calls = page.locator("table.invocations tbody tr[data-job-id]")
    expect(calls).to_have_count(4)
    big = calls.filter(has=page.locator("td", has_text=WRITE)).filter(has_text="reserved")
    expect(big).to_have_count(1)
    expect(big).to_contain_text("no permit")
    expect(big).to_contain_text("pending")
    expect(big).to_contain_text("not finished")
    read = calls.filter(has_text="no write charge")
    expect(read).to_have_count(1)
    expect(read).to_contain_text("settled")
    expect(read).to_contain_text("confirmed sent")
    counted = calls.filter(has_text="counted")
    expect(counted).to_have_count(2)
    expect(counted.first).to_contain_text("finished")
    expect(page.get_by_text("“Confirmed sent” means the request reached the business system")).to_be_visible()

    runs = page.locator("table.runs tbody tr[data-run-id]")
    expect(runs).to_have_count(2)
    assert page.eval_on_selector_all("table.runs tbody tr[data-run-id]", "rows => rows.map(r => r.dataset.runId)") \
        == [second, first]  # newest binding first
    check(view, "task detail")  # axe wide and at 375 px (no sideways scroll), contrast in dark

    # The ids open: the run links to its trace (this admin may read runs).
    big.locator("summary").click()
    expect(big.get_by_role("link", name=first)).to_be_visible()
    expect(big.get_by_role("link", name=waiting["approval"]["id"])).to_be_visible()
    page.locator("table.runs").get_by_role("link", name=second).click()
    expect(page.get_by_role("heading", name=f"Run {second}")).to_be_visible()

    # Paged: small pages, "load more" brings every record and run once.
    monkeypatch.setattr(console_tasks, "INVOCATIONS_PAGE", 1)
    monkeypatch.setattr(console_tasks, "RUNS_PAGE", 1)
    view.goto(f"/console/tasks/{task['task_id']}")
    load_all(page, "table.invocations", calls, 4)
    load_all(page, "table.runs", runs, 2)
    jobs = page.eval_on_selector_all("table.invocations tbody tr[data-job-id]",
                                     "rows => rows.map(r => r.dataset.jobId)")
    assert jobs == sorted(set(jobs), reverse=True)
    view.watch.assert_clean()


def test_pause_resume_and_cancel_through_the_page(world, ui, sql):
    member = world.member()
    task = world.create([member])
    task_id = task["task_id"]
    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task_id}")
    # Offered for an active task: pause and cancel, not resume.
    expect(page.locator("details.control")).to_have_count(2)
    expect(page.locator("details.control summary")).to_have_text(["Pause…", "Cancel…"])

    box, confirm = open_control(page, "Pause")
    expect(box).to_contain_text("Calls already in flight keep going")
    form = box.locator("form")
    fields = {name: form.locator(f"input[name={name}]").get_attribute("value")
              for name in ("csrf_token", "action", "request_id", "expected_revision")}
    assert fields["expected_revision"] == "1" and fields["action"] == "pause"
    with page.expect_navigation():
        confirm.click()
    assert page.url == view.base + f"/console/tasks/{task_id}"  # 303 to the page itself
    expect(page.locator(".flash.ok")).to_contain_text("Paused")
    expect(page.locator("h1 .badge")).to_have_text("paused")
    expect(page.locator("[data-revision]")).to_have_text("2")
    expect(page.locator("details.control summary")).to_have_text(["Resume…", "Cancel…"])
    assert task_row(sql, task_id)[:2] == ("paused", 2)

    # The same form sent again (its answer lost) is the same request: nothing more happens.
    again = page.request.post(view.base + f"/console/tasks/{task_id}/control", form=fields, max_redirects=0)
    assert again.status == 303
    assert task_row(sql, task_id)[:3] == ("paused", 2, 2)
    page.reload()
    expect(page.locator(".flash.ok")).to_contain_text("The task is at revision 2.")

    box, confirm = open_control(page, "Resume")
    expect(box).to_contain_text("adds no budget")
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.ok")).to_contain_text("Resumed")
    expect(page.locator("h1 .badge")).to_have_text("active")
    expect(page.locator("[data-revision]")).to_have_text("3")

    box, confirm = open_control(page, "Cancel")
    expect(box).to_contain_text("final")
    expect(box).to_contain_text("stay task-required")
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.ok")).to_contain_text("Cancelled")
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    expect(page.locator(".explain.alert.cancelled")).to_contain_text("cannot continue")
    expect(page.locator("details.control")).to_have_count(0)
    assert task_row(sql, task_id)[:2] == ("cancelled", 4)
    assert [(event, actor) for _, event, actor in ledger(sql, task_id)] == [
        ("created", ADMIN), ("pause", ADMIN), ("resume", ADMIN), ("cancel", ADMIN)]
    view.axe("a cancelled task")
    view.watch.assert_clean()


def test_a_stale_form_shows_the_conflict_and_the_fresh_snapshot_and_applies_nothing(world, ui, sql):
    member = world.member()
    task = world.create([member])
    task_id = task["task_id"]
    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task_id}")
    _box, confirm = open_control(page, "Cancel")
    stale_request = page.locator("details.control.cancel input[name=request_id]").get_attribute("value")

    world.control(task, "pause")  # meanwhile, through the API: revision 2
    events = ledger(sql, task_id)
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.error")).to_contain_text("TASK_REVISION_CONFLICT")
    expect(page.locator(".flash.error")).to_contain_text("Nothing was changed")
    # The task as it is now, and a new form for it; nothing was cancelled or retried.
    expect(page.locator("h1 .badge")).to_have_text("paused")
    expect(page.locator("[data-revision]")).to_have_text("2")
    assert task_row(sql, task_id)[:2] == ("paused", 2)
    assert ledger(sql, task_id) == events
    expect(page.locator("details.control summary")).to_have_text(["Resume…", "Cancel…"])
    cancel = page.locator("details.control.cancel")
    expect(cancel.locator("input[name=expected_revision]")).to_have_value("2")
    assert cancel.locator("input[name=request_id]").get_attribute("value") != stale_request
    view.axe("task detail after a conflict")
    view.watch.assert_clean()


def test_resume_of_a_group_that_no_longer_verifies_blocks_the_task(world, ui, sql):
    member = world.member()
    task = world.create([member])
    world.control(task, "pause")
    code, _, err = world.cli("sessions", "revoke", member.session_id)
    assert code == 0, err
    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task['task_id']}")
    expect(page.locator("h1 .badge")).to_have_text("paused")  # reading verified nothing
    _box, confirm = open_control(page, "Resume")
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.error")).to_contain_text("TASK_SCOPE_BLOCKED")
    expect(page.locator("h1 .badge")).to_have_text("blocked")
    expect(page.locator(".explain.alert.blocked")).to_contain_text("pause and resume")
    expect(page.locator("details.control summary")).to_have_text(["Pause…", "Cancel…"])
    assert task_row(sql, task["task_id"])[:2] == ("blocked", 3)
    view.watch.assert_clean()


def test_create_through_the_form(world, ui, sql):
    member = world.member()
    code, hostile, err = world.cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                                   "--principal", json.dumps({"id": "<b>boss</b>" + XSS[:40], "tenant": "t7"}),
                                   "--on-behalf-of", "t7:boss", "--device-label", XSS[:120])
    assert code == 0, err
    view = ui(timezone_id="Europe/Berlin")
    view.sign_in(ADMIN)
    page = view.page
    view.goto("/console/tasks/")
    page.get_by_role("link", name="Create a task").click()
    expect(page.get_by_role("heading", name="Create a task")).to_be_visible()
    request_id = page.locator("input[name=request_id]").get_attribute("value")

    # Agents' own text is shown as text.
    picker = page.locator("select[name=m0-pick]")
    option = picker.locator(f"option[value='{hostile['session_id']}']")
    expect(option).to_contain_text(XSS[:120])
    expect(option).to_contain_text("<b>boss</b>")
    assert page.evaluate("window.__xss") is None
    assert page.locator("select[name=m0-pick] script, select[name=m0-pick] img, select[name=m0-pick] b").count() == 0

    first = page.locator("fieldset.member").first
    picker.select_option(member.session_id)
    expect(first.get_by_label("Workspace")).to_have_value("desk")  # the one route it may use
    expect(first.get_by_label("Session id", exact=True)).to_be_disabled()
    first.get_by_label(re.compile("^Conversation id")).fill("conv-form")
    first.get_by_label(re.compile("^Tools")).fill("customer_get, *")
    page.get_by_label("Write limit").fill("3")
    page.get_by_label(re.compile("^Calls in flight")).fill("1")
    page.get_by_label(re.compile("^Deadline")).fill("2031-06-01T10:00")
    expect(page.locator("[data-deadline-note]")).to_contain_text("2031-06-01T08:00:00Z")

    # The acknowledgement is required: the browser holds the form back, and so does the server.
    page.get_by_role("button", name="Create the task").click()
    assert page.url.endswith("/console/tasks/new")
    assert sql("SELECT count(*) FROM bz_agent_tasks")[0][0] == 0
    page.locator("input[name=acknowledge]").evaluate("box => box.removeAttribute('required')")
    with page.expect_navigation():
        page.get_by_role("button", name="Create the task").click()
    expect(page.locator(".flash.error")).to_contain_text("Tick the acknowledgement")
    assert sql("SELECT count(*) FROM bz_agent_tasks")[0][0] == 0
    # Nothing was sent: what was entered and the request stay.
    expect(page.locator("input[name=request_id]")).to_have_value(request_id)
    first = page.locator("fieldset.member").first
    expect(first.get_by_label(re.compile("^Tools"))).to_have_value("customer_get, *")
    expect(page.get_by_label("Write limit")).to_have_value("3")

    # A definitive refusal (a wildcard is no tool name): correct it; the next try is a new request.
    page.get_by_label(re.compile("I understand that the selected sessions")).check()
    with page.expect_navigation():
        page.get_by_role("button", name="Create the task").click()
    expect(page.locator(".flash.error")).to_contain_text("TASK_INVALID_INPUT")
    assert sql("SELECT count(*) FROM bz_agent_tasks")[0][0] == 0
    renewed = page.locator("input[name=request_id]").get_attribute("value")
    assert renewed != request_id
    first = page.locator("fieldset.member").first
    expect(first.get_by_label("Workspace")).to_have_value("desk")
    first.get_by_label(re.compile("^Tools")).fill(f"{READ}\n{WRITE}")
    expect(page.get_by_label(re.compile("^Deadline"))).to_have_value("2031-06-01T10:00")
    page.get_by_label(re.compile("I understand that the selected sessions")).check()
    check(view, "create form")
    with page.expect_navigation():
        page.get_by_role("button", name="Create the task").click()

    task_id = rules.task_id(ADMIN, renewed)
    assert page.url == view.base + f"/console/tasks/{task_id}"
    expect(page.locator(".flash.ok")).to_contain_text("Task created")
    expect(page.locator("h1 .badge")).to_have_text("active")
    detail = world.detail(task_id)["task"]
    assert detail["policy"] == {"max_write_calls": 3, "max_concurrent": 1, "expires_at": "2031-06-01T08:00:00.000Z"}
    assert detail["members"] == [{"session_id": member.session_id, "client_app_id": "ops-app", "workspace": "desk",
                                  "client_conversation_id": "conv-form", "allowed_tools": [READ, WRITE]}]
    assert sql("SELECT task_enrolled FROM bz_agent_sessions WHERE id = %s", (member.session_id,)) == [(True,)]
    # The form starts afresh after a success.
    view.goto("/console/tasks/new")
    assert page.locator("input[name=request_id]").get_attribute("value") not in (request_id, renewed)
    view.watch.assert_clean()


def test_a_retryable_failure_keeps_the_same_request(world, ui, sql, monkeypatch):
    """A failure whose outcome is not known keeps the request id: the next press repeats the same
    request, which the hub answers with the task it made, never a second one."""
    from admin_app.errors import ApiError
    from admin_app.tasks import admin as service

    member = world.member()
    real = service.create
    calls = []

    def flaky(db, actor, body):
        calls.append(body["request_id"])
        if len(calls) == 1:
            real(db, actor, body)
            db.commit()  # committed, then the answer is lost
            raise ApiError("TASK_UNAVAILABLE")
        return real(db, actor, body)

    monkeypatch.setattr(service, "create", flaky)
    view = signed_in(ui)
    page = view.page
    view.goto("/console/tasks/new")
    first = page.locator("fieldset.member").first  # this time the ids are typed, not picked
    first.get_by_label("Session id", exact=True).fill(member.session_id.upper())
    first.get_by_label("Client app id").fill("ops-app")
    first.get_by_label("Workspace").select_option("desk")
    first.get_by_label(re.compile("^Conversation id")).fill("conv-retry")
    first.get_by_label(re.compile("^Tools")).fill(READ)
    page.get_by_label("Reads only (0 write calls)").check()
    page.get_by_label(re.compile("I understand that the selected sessions")).check()
    with page.expect_navigation():
        page.get_by_role("button", name="Create the task").click()
    expect(page.locator(".flash.error")).to_contain_text("TASK_UNAVAILABLE")
    expect(page.locator(".flash.error")).to_contain_text("repeats the same request")
    expect(page.locator("input[name=request_id]")).to_have_value(calls[0])
    page.get_by_label(re.compile("I understand that the selected sessions")).check()
    with page.expect_navigation():
        page.get_by_role("button", name="Create the task").click()
    expect(page.locator(".flash.ok")).to_contain_text("Task created")
    assert calls[0] == calls[1]
    assert sql("SELECT count(*) FROM bz_agent_tasks")[0][0] == 1
    assert world.detail(rules.task_id(ADMIN, calls[0]))["task"]["members"][0]["session_id"] == member.session_id
    view.watch.assert_clean()


def test_a_control_whose_outcome_is_unknown_is_offered_again_as_the_same_request(world, ui, sql, monkeypatch):
    from admin_app.errors import ApiError
    from admin_app.tasks import admin as service

    task = world.create([world.member()])
    real = service.control
    sent = []

    def flaky(db, actor, task_ref, body):
        sent.append(body["request_id"])
        if len(sent) == 1:
            raise ApiError("TASK_UNAVAILABLE")
        return real(db, actor, task_ref, body)

    monkeypatch.setattr(service, "control", flaky)
    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task['task_id']}")
    _box, confirm = open_control(page, "Pause")
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.error")).to_contain_text("TASK_UNAVAILABLE")
    expect(page.locator(".flash.error")).to_contain_text("repeats the same request")
    expect(page.locator("details.control.pause input[name=request_id]")).to_have_value(sent[0])
    assert task_row(sql, task["task_id"])[:2] == ("active", 1)
    _box, confirm = open_control(page, "Pause")
    with page.expect_navigation():
        confirm.click()
    expect(page.locator(".flash.ok")).to_contain_text("Paused")
    assert sent[0] == sent[1]
    # Once it went through, the next form is a new request.
    _box, _confirm = open_control(page, "Cancel")
    assert page.locator("details.control.cancel input[name=request_id]").get_attribute("value") != sent[0]
    view.watch.assert_clean()


def test_a_failed_load_shows_the_error_never_an_empty_list(world, ui, monkeypatch):
    from admin_app.errors import ApiError
    from admin_app.tasks import admin as service

    task = world.create([world.member()])

    def unsupported(*_args, **_kwargs):
        raise ApiError("TASK_UNSUPPORTED")

    monkeypatch.setattr(service, "list_tasks", unsupported)
    monkeypatch.setattr(service, "detail", unsupported)
    view = signed_in(ui)
    view.watch.allowed_statuses.add(501)
    view.goto("/console/tasks/", status=501)
    expect(view.page.get_by_role("alert")).to_contain_text("The tasks could not be loaded (TASK_UNSUPPORTED)")
    expect(view.page.locator("p.empty")).to_have_count(0)
    view.goto(f"/console/tasks/{task['task_id']}", status=501)
    expect(view.page.get_by_role("alert")).to_contain_text("could not be loaded (TASK_UNSUPPORTED)")
    expect(view.page.locator("details.control")).to_have_count(0)
    view.watch.assert_clean()


def test_a_viewer_without_clients_write_sees_no_forms_and_is_refused(world, ui, sql, monkeypatch):
    member = world.member()
    task = world.create([member])
    monkeypatch.setitem(roles.ROLES, "auditor", roles.ROLES["auditor"] | {"clients:read"})
    make_admin(world.cli, "task-viewer", "auditor")
    view = signed_in(ui, "task-viewer")
    page = view.page
    page.locator("header nav").get_by_role("link", name="Tasks").click()
    expect(page.locator(ROWS)).to_have_count(1)
    expect(page.get_by_role("link", name="Create a task")).to_have_count(0)
    page.locator(ROWS).first.get_by_role("link").click()
    expect(page.locator("h1 .badge")).to_have_text("active")
    expect(page.locator("details.control")).to_have_count(0)
    expect(page.locator("form[action$='/control']")).to_have_count(0)

    view.watch.allowed_statuses.add(403)
    view.goto("/console/tasks/new", status=403)
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    before = everything(sql, task["task_id"])
    for path, form in ((f"/console/tasks/{task['task_id']}/control",
                        {"action": "cancel", "request_id": "viewer-cancel", "expected_revision": "1"}),
                       ("/console/tasks/", {"request_id": "viewer-create", "acknowledge": "yes"})):
        refused = page.request.post(view.base + path, form={"csrf_token": csrf, **form}, max_redirects=0)
        assert refused.status == 403, path
    assert everything(sql, task["task_id"]) == before

    # A role without clients:read sees neither the link nor the pages.
    make_admin(world.cli, "support-user", "support")
    other = signed_in(ui, "support-user")
    expect(other.page.locator("header nav").get_by_role("link", name="Tasks")).to_have_count(0)
    other.watch.allowed_statuses.add(403)
    other.goto("/console/tasks/", status=403)
    other.goto(f"/console/tasks/{task['task_id']}", status=403)
    view.watch.assert_clean()
    other.watch.assert_clean()


def test_refreshing_task_pages_changes_nothing(world, ui, sql):
    """Reads only: no member is verified (a revoked member does not block the task on a refresh),
    no approval is used, no call is resumed, no counter or revision moves."""
    one, two = world.member("conv-a"), world.member("conv-b")
    task = world.create([one, two], max_write_calls=3)
    run = one.turn(binding(task))["run_id"]
    assert one.invoke(WRITE, SMALL, "w1", run)["status"] == "executed"
    waiting = one.invoke(WRITE, BIG, "w-big", run)
    approval = waiting["approval"]
    detail = world.server.get(f"/admin/api/tool-approvals/{approval['id']}", headers=world.admin_headers).json()
    decided = world.server.post(f"/admin/api/tool-approvals/{approval['id']}/approve", headers=world.admin_headers,
                                json={"args_hash": detail["args_hash"], "reason": "ok"})
    assert decided.status_code == 200, decided.text
    code, _, err = world.cli("sessions", "revoke", two.session_id)
    assert code == 0, err
    executions = len(world.business.executions())
    before = everything(sql, task["task_id"])
    assert before["task"][0] == "active"

    view = signed_in(ui)
    page = view.page
    view.goto(f"/console/tasks/{task['task_id']}")
    for _ in range(3):
        page.reload()
        expect(page.locator("[data-revision]")).to_have_text("1")
    view.goto("/console/tasks/")
    page.reload()
    expect(page.locator(ROWS)).to_have_count(1)
    view.goto(f"/console/tasks/{task['task_id']}")
    expect(page.locator("h1 .badge")).to_have_text("active")
    assert everything(sql, task["task_id"]) == before
    assert len(world.business.executions()) == executions
    view.watch.assert_clean()


@pytest.mark.parametrize("path", ["/console/tasks/not-a-task", "/console/tasks/7f0b2c1e-1111-4111-8111-111111111111"])
def test_an_unknown_task_is_not_found(world, ui, path):
    view = signed_in(ui)
    view.watch.allowed_statuses.add(404)
    view.goto(path, status=404)
    expect(view.page.get_by_role("heading", name="Not found")).to_be_visible()
    view.watch.assert_clean()
