"""Issue 19, support triage in a real browser: the runs list with its filters and prefix lookup,
the unresolved calls with a real `reconciliation_required` (a business response dropped by the
demo system), and a run's trace as one timeline in true order with millisecond times, the call's
reason and what to do, and links to its approval and to the archive at its turn."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser import Hub


def broken_run(hub: Hub, business) -> tuple[str, str]:
    """The traced conversation plus a read whose response the business system drops."""
    archive_id, run_id = hub.traced_conversation(conversation="conv-support-case")
    business.fault("customer_get", "drop_response", 1)
    lost = hub.invoke("customer_get", {"customer_id": "C-100235"}, run_id)
    assert lost["status"] == "reconciliation_required", lost
    return archive_id, run_id


def test_support_filters_the_runs_and_finds_one_by_a_prefix(hub, ui, business):
    _archive_id, run_id = broken_run(hub, business)
    other = hub.turn("conv-unfinished", "turn-1", "still thinking")["run_id"]
    [(invocation_id,)] = hub.sql("SELECT invocation_id FROM bz_tool_invocations WHERE run_id = %s "
                                 "AND status = 'reconciliation_required'", (run_id,))
    view = ui()
    page = view.page
    view.sign_in(hub.admin("support"))
    page.locator("header nav").get_by_role("link", name="Runs").click()
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    rows = page.locator("table.list tbody tr[data-href]")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text(other)  # newest first
    view.axe("runs list")

    page.get_by_label("Status").select_option("completed")
    with page.expect_navigation():
        page.get_by_role("button", name="Look up").click()
    assert "status=completed" in page.url
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(run_id)

    page.get_by_label("Status").select_option("")
    page.get_by_label("Look up").fill(invocation_id[:10])
    with page.expect_navigation():
        page.get_by_role("button", name="Look up").click()
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.matched")).to_have_text("invocation ID")

    # A lookup too short to narrow: 400, the form, and why.
    view.watch.allowed_statuses.add(400)
    page.get_by_label("Look up").fill("abc")
    with page.expect_navigation():
        page.get_by_role("button", name="Look up").click()
    expect(page.get_by_role("alert")).to_have_text(
        "Look up needs at least 4 and at most 191 characters of an ID (this one has 3).")
    expect(page.get_by_label("Look up")).to_have_value("abc")
    view.axe("runs list with an error")
    view.watch.assert_clean()


def test_the_unresolved_calls_lead_to_a_timeline_in_true_order(hub, ui, business, sql):
    archive_id, run_id = broken_run(hub, business)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("admin"))
    view.goto("/console/runs/")
    page.get_by_role("link", name="Unresolved calls").click()
    expect(page.get_by_role("heading", name="Unresolved calls")).to_be_visible()
    rows = page.locator("table.list tbody tr")
    expect(rows).to_have_count(2)  # the lost read and the write awaiting approval
    expect(rows.first).to_contain_text("reconciliation_required")
    expect(rows.first).to_contain_text("transport_failure")
    expect(rows.nth(1)).to_contain_text("awaiting_approval")
    view.axe("unresolved calls")
    view.shot("unresolved-calls.png")
    page.get_by_label("State").select_option("reconciliation_required")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    with page.expect_navigation():
        rows.first.get_by_role("link", name="run trace").click()
    assert page.url.startswith(f"{view.base}/console/runs/{run_id}#call-")

    # One timeline: run, user message, read, write, answer, run completed, lost read (made last).
    entries = page.locator("ol.timeline > li.entry")
    expect(entries).to_have_count(7)
    kinds = [entries.nth(i).get_attribute("class") for i in range(7)]
    assert [k.replace("entry ", "") for k in kinds] == [
        "run", "message", "call executed", "call awaiting_approval", "message", "run", "call reconciliation_required"]
    times = page.locator("ol.timeline > li.entry > .at time").all_text_contents()
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", t) for t in times), times
    assert times == sorted(times)
    # In local time too, the timeline keeps its milliseconds.
    page.locator("#zone-toggle").click()
    local = page.locator("ol.timeline > li.entry > .at time").all_text_contents()
    assert all(re.search(r"\d\d:\d\d:\d\d[.,]\d{3}.* \(local\)$", t) for t in local), local
    page.locator("#zone-toggle").click()
    lost = page.locator("li.call.reconciliation_required")
    expect(lost).to_contain_text("transport_failure")
    expect(lost).to_contain_text("does not know whether the business system applied it")
    expect(lost).to_contain_text("Check in the business system")
    expect(lost.locator("dl.call-facts")).to_contain_text("Idempotency key")
    expect(lost).to_contain_text(re.compile(r"took \d"))
    expect(lost.locator("ol.milestones")).to_contain_text("journal finished: uncertain")
    view.axe("run trace")
    view.shot("run-timeline.png")

    # From the write to its approval, and back; then to the archive at the run's turn.
    with page.expect_navigation():
        page.locator("li.call.awaiting_approval").get_by_role("link", name=re.compile(r"approval #\d+")).click()
    expect(page.get_by_role("heading", name=re.compile("Approval: customer_update_credit_limit"))).to_be_visible()
    page.go_back()
    with page.expect_navigation():
        page.locator("dl.header-grid").get_by_role("link", name=archive_id).click()
    assert page.url == f"{view.base}/console/conversations/{archive_id}?at=1#seq-1"
    expect(page.locator("#seq-1")).to_be_visible()
    view.watch.assert_clean()
