"""The approval queue as a team of approvers works it, in Debian's Chromium: two approvers on one
queue (rows decided elsewhere leave an open page, nothing pending is skipped or shown twice,
arrivals are added), filters kept in the URL with "decide and open the next", and what led to a
request (the user's message of the run) beside an expired approval that can no longer be
decided."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from admin_app.console import approvals as approvals_view
from tests.browser import ADJUST, CREDIT, MERGE, XSS

# The queue asks every LIVE_SECONDS which rows are still pending: a change shows within two cycles.
CYCLE_MS = (approvals_view.LIVE_SECONDS * 2 + 3) * 1000
ROWS = "table.list tbody tr[data-approval-id]"


def credit(n: int) -> dict:
    return {**CREDIT, "credit_limit": 20_000 + n}


def shown_ids(page) -> list[str]:
    return page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.approvalId)")


def pending_ids(sql) -> set[str]:
    return {str(row[0]) for row in sql("SELECT id FROM bz_tool_approvals WHERE status = 'pending'")}


def test_two_approvers_on_one_queue_see_every_pending_approval_exactly_once(hub, ui, sql):
    made = [hub.approval("customer_update_credit_limit", credit(n))["id"] for n in range(56)]
    one_name, two_name = hub.admin("approver", "approver-one"), hub.admin("approver", "approver-two")
    one, two = ui(), ui()
    one.sign_in(one_name)
    two.sign_in(two_name)
    page = one.page
    expect(page.locator(ROWS)).to_have_count(50)
    first_page = shown_ids(page)
    assert first_page == made[:50]  # oldest first
    expect(page.locator("[data-queue-count]")).to_have_text("56")

    # ---- the other approver decides five of the rows the first one is looking at
    for approval_id in first_page[10:15]:
        two.goto(f"/console/approvals/{approval_id}")
        with two.page.expect_navigation():
            two.page.get_by_role("button", name="Approve this snapshot").click()
        expect(two.page.locator(".flash.ok")).to_contain_text("Approved")
    decided = set(first_page[10:15])

    # ---- they leave the first approver's open page by themselves, and the count follows
    expect(page.locator(ROWS)).to_have_count(45, timeout=CYCLE_MS)
    assert set(shown_ids(page)).isdisjoint(decided)
    expect(page.locator("[data-queue-count]")).to_have_text("51")
    expect(page.locator("[data-queue-notice]")).to_contain_text("decided elsewhere")

    # ---- scrolling on loads the rest: every pending approval once, none decided
    page.locator("tr.more").scroll_into_view_if_needed()
    expect(page.locator(ROWS)).to_have_count(51)
    seen = shown_ids(page)
    assert len(seen) == len(set(seen)) == 51
    assert set(seen) == pending_ids(sql) == set(made) - decided

    # ---- an approval made now is added at the end of the open queue
    arrival = hub.approval("customer_merge", MERGE)["id"]
    expect(page.locator(ROWS)).to_have_count(52, timeout=CYCLE_MS)
    seen = shown_ids(page)
    assert seen[-1] == arrival and len(set(seen)) == 52
    assert set(seen) == pending_ids(sql)
    one.watch.assert_clean()
    two.watch.assert_clean()


def test_filters_stay_in_the_url_and_decide_and_next_keeps_to_them(hub, ui, sql):
    merge = hub.approval("customer_merge", MERGE)["id"]
    credits = [hub.approval("customer_update_credit_limit", credit(n))["id"] for n in range(3)]
    adjust = hub.approval("inventory_adjust", ADJUST)["id"]
    view = ui()
    page = view.page
    view.sign_in(hub.admin("approver"))
    expect(page.locator(ROWS)).to_have_count(5)

    # ---- filter by tool: the choices are the tools waiting; the URL holds the filter
    page.get_by_label("Tool").select_option("customer_update_credit_limit")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert "tool=customer_update_credit_limit" in page.url
    expect(page.locator(ROWS)).to_have_count(3)
    assert shown_ids(page) == credits
    expect(page.locator("[data-queue-count]")).to_have_text("3")
    page.reload()
    expect(page.get_by_label("Tool")).to_have_value("customer_update_credit_limit")
    expect(page.locator(ROWS)).to_have_count(3)

    # ---- approve and open the next: the next one of this view, not of the whole queue
    page.locator(ROWS).first.get_by_role("link", name="customer_update_credit_limit").click()
    expect(page).to_have_url(re.compile(rf"/console/approvals/{credits[0]}\?tool=customer_update_credit_limit$"))
    page.get_by_label(re.compile("then open the next approval")).check()
    with page.expect_navigation():
        page.get_by_role("button", name="Approve this snapshot").click()
    expect(page).to_have_url(re.compile(rf"/console/approvals/{credits[1]}\?tool=customer_update_credit_limit$"))
    expect(page.locator(".flash.ok")).to_contain_text("Approved")
    # The choice is remembered: the next page has it ticked already.
    expect(page.get_by_label(re.compile("then open the next approval"))).to_be_checked()
    page.get_by_label("Reason (required to deny)").fill("Over the limit the finance team agreed.")
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page).to_have_url(re.compile(rf"/console/approvals/{credits[2]}\?"))
    with page.expect_navigation():
        page.get_by_role("button", name="Approve this snapshot").click()
    # The view is done: back to it, with the other tools still waiting in the whole queue.
    expect(page).to_have_url(re.compile(r"/console/approvals/\?tool=customer_update_credit_limit$"))
    expect(page.locator(".flash.ok").last).to_have_text("Nothing else is waiting in this queue.")
    expect(page.get_by_text("Nothing in this view is waiting for approval.")).to_be_visible()
    expect(page.locator("header nav .count")).to_have_text("2")
    assert sql("SELECT status FROM bz_tool_approvals WHERE id = ANY(%s::uuid[]) ORDER BY created_at",
               (credits,)) == [("approved",), ("denied",), ("approved",)]
    assert pending_ids(sql) == {merge, adjust}

    # ---- a filter value that does not fit is named, and nothing is listed
    view.watch.allowed_statuses.add(400)
    view.goto("/console/approvals/?risk=urgent&age=forever", status=400)
    expect(page.locator(".form-errors")).to_contain_text("Risk: “urgent” is not one of low, medium, high.")
    expect(page.locator(".form-errors")).to_contain_text("Waiting longer than: “forever”")
    expect(page.locator(ROWS)).to_have_count(0)
    view.watch.assert_clean()


def test_the_approver_sees_what_the_user_asked_and_an_expired_approval_cannot_be_decided(hub, ui, sql):
    question = f"Raise ACME's limit to 20,000 please {XSS}"
    run_id = hub.turn("conv-limit", "turn-1", question)["run_id"]
    asked = hub.approval("customer_update_credit_limit", CREDIT, run_id)
    lapsed = hub.approval("customer_merge", MERGE)
    sql("UPDATE bz_tool_approvals SET created_at = now() - interval '2 hours', "
        "expires_at = now() - interval '1 hour' WHERE id = %s", (lapsed["id"],))

    # ---- someone who may read runs sees the user's message, as text, and the read is logged
    view = ui()
    page = view.page
    view.sign_in(hub.admin("admin"))
    view.goto(f"/console/approvals/{asked['id']}")
    context = page.locator("section.context")
    expect(context.locator("blockquote.user-request")).to_have_text(question)
    expect(context.get_by_role("link", name=run_id)).to_have_attribute("href", f"/console/runs/{run_id}")
    assert page.evaluate("window.__xss") is None
    assert sql("SELECT action, target FROM bz_access_log WHERE target = %s", (run_id,)) == \
        [("run_trace_view", run_id)]

    # ---- the expired one: marked, no form, out of the queue, in the history
    view.goto(f"/console/approvals/{lapsed['id']}")
    expect(page.locator("h1")).to_contain_text("expired")
    expect(page.get_by_text("it can no longer be decided")).to_be_visible()
    expect(page.get_by_role("button", name="Approve this snapshot")).to_have_count(0)
    view.goto("/console/approvals/")
    assert shown_ids(page) == [asked["id"]]
    view.goto("/console/approvals/history")
    expect(page.locator("table.list tbody tr").filter(has_text="customer_merge")).to_contain_text("expired")
    view.watch.assert_clean()

    # ---- an approver without runs:read sees the run, not the message, and reads nothing logged
    runs_read = "SELECT count(*) FROM bz_access_log WHERE action = 'run_trace_view'"
    before = sql(runs_read)
    other = ui()
    other.sign_in(hub.admin("approver"))
    other.goto(f"/console/approvals/{asked['id']}")
    expect(other.page.locator("section.context")).to_contain_text(run_id)
    expect(other.page.locator("blockquote.user-request")).to_have_count(0)
    expect(other.page.locator("section.context")).not_to_contain_text("Raise ACME")
    assert sql(runs_read) == before == [(1,)]
    other.watch.assert_clean()
