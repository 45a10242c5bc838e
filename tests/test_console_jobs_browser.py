"""Client API jobs in Debian's Chromium: from the runs list to the Jobs tab, filtered to finished
jobs, to one job's page and its timeline (claim, tool call with its approval, result, callback),
each page clean (no page error, no CSP violation) and accessible (axe)."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.helpers import make_admin
from tests.jobs_world import seed_call, seed_callback, seed_event, seed_job


def test_support_finds_a_finished_job_and_reads_its_timeline(ui, sql, cli):
    make_admin(cli, "sue", "support")
    done = seed_job(sql, status="done", created_at="2026-02-01T09:00:00Z", executor_id="runner-1",
                    input_text="Look up customer <b>C-1001</b>", result={"text": "Found C-1001"})
    seed_event(sql, done, "received", at="2026-02-01T09:00:00Z")
    seed_event(sql, done, "dispatched", "runner-1", {"executor_id": "runner-1"}, at="2026-02-01T09:00:01Z")
    seed_call(sql, done, "customer_update_credit_limit", "awaiting_approval", approval="pending",
              at="2026-02-01T09:00:02Z")
    seed_event(sql, done, "finished", "runner-1", {"status": "done"}, at="2026-02-01T09:00:05Z")
    seed_callback(sql, done, state="delivered", attempts=((200, None),), at="2026-02-01T09:00:06Z")
    seed_job(sql, status="queued", created_at="2026-02-02T09:00:00Z")

    view = ui()
    page = view.page
    view.sign_in("sue")
    page.locator("header nav").get_by_role("link", name="Runs").click()
    page.locator("p.tabs").get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    rows = page.locator("table.list tbody tr[data-href]")
    expect(rows).to_have_count(2)
    view.axe("jobs list")

    page.get_by_label("Status").select_option("done")
    with page.expect_navigation():
        page.get_by_role("button", name="Look up").click()
    assert "status=done" in page.url
    expect(rows).to_have_count(1)
    page.get_by_role("link", name=done).click()
    expect(page.get_by_role("heading", name=f"Job {done} done")).to_be_visible()
    expect(page.locator("#value-input pre")).to_have_text("Look up customer <b>C-1001</b>")
    entries = page.locator("ol.timeline > li")
    expect(entries).to_have_count(5)
    expect(entries.nth(0)).to_contain_text("Job received")
    expect(entries.nth(1)).to_contain_text("Claimed by an executor")
    expect(entries.nth(2)).to_contain_text("customer_update_credit_limit")
    expect(entries.nth(2)).to_contain_text("approval #")
    expect(entries.nth(3)).to_contain_text("Job finished")
    expect(entries.nth(4)).to_contain_text("attempt 1: HTTP 200")
    view.axe("job page")
    view.watch.assert_clean()
