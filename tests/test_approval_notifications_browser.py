"""The console's notification deliveries page in Debian's Chromium: reached from the approvals'
tabs, each delivery with its channel, its approval (linked), attempts, status, last error (from a
receiver: untrusted, shown as text) and next attempt; the missing public URL said; filters by
status; axe-clean at 1280 and 375 px."""
from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.browser import CREDIT, XSS, Hub
from tests.helpers import apply_config
from tests.test_approval_notifications import SECRET, SECRET_ENV, Receiver, deliver

HARMLESS = """() => window.__xss === undefined
  && document.querySelectorAll("table script, table img, table svg").length === 0"""


def test_deliveries_and_their_failures_are_listed_linked_and_escaped(hub: Hub, ui, cli, sql, app, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv(SECRET_ENV, SECRET)
    receiver = Receiver()
    receiver.fail, receiver.reason = 5, XSS  # a receiver's own words, in its status line
    try:
        apply_config(cli, tmp_path, {"approval_notifications": [
            {"name": "ops-hook", "kind": "webhook", "url": receiver.url, "secret_env": SECRET_ENV},
            {"name": "approvers", "kind": "email", "to": ["approvers@example.com"]}]})
        out = hub.invoke("customer_update_credit_limit", CREDIT)
        assert out["status"] == "awaiting_approval", out
        number, approval_id = out["approval_id"], out["approval"]["id"]
        report = deliver(app)  # the suite's app has no SMTP server: that is the e-mail's failure
        assert report.retrying == 2 and len(receiver.requests) == 1
    finally:
        receiver.stop()

    view = ui()
    page = view.page
    view.sign_in(hub.admin("approver"))
    view.goto("/console/approvals/")
    with page.expect_navigation():
        page.locator("p.tabs").get_by_role("link", name="Notifications").click()
    expect(page.get_by_role("heading", name="Approval notifications")).to_be_visible()
    expect(page.locator("p.tabs a[aria-current=page]")).to_have_text("Notifications")
    expect(page.get_by_text("BAILING_PUBLIC_URL is not set")).to_be_visible()

    rows = page.locator("table.list tbody tr")
    expect(rows).to_have_count(2)
    hook = rows.filter(has_text="ops-hook")
    expect(hook).to_contain_text(f"#{number} customer_update_credit_limit")
    expect(hook).to_contain_text("webhook")
    expect(hook.locator("td").nth(3)).to_have_text("1")
    expect(hook.locator(".badge")).to_have_text("pending")
    expect(hook.locator("td").nth(5)).to_have_text(f"HTTP 500 {XSS}")  # the markup shown as text
    expect(hook.locator("td").nth(6).locator("time")).to_be_visible()
    expect(rows.filter(has_text="approvers")).to_contain_text("BAILING_SMTP_HOST is not set")
    assert page.evaluate(HARMLESS)
    assert json.dumps(SECRET) not in page.content()
    view.axe("notification deliveries")
    view.shot("approval-notifications.png")

    # Filters by status keep their place in the URL.
    with page.expect_navigation():
        page.get_by_role("link", name="delivered", exact=True).click()
    assert page.url.endswith("status=delivered")
    expect(page.get_by_text("No notification is delivered.")).to_be_visible()
    with page.expect_navigation():
        page.get_by_role("link", name="pending", exact=True).click()
    expect(rows).to_have_count(2)

    # At 375 px the page still fits and passes axe.
    page.set_viewport_size({"width": 375, "height": 800})
    view.axe("notification deliveries at 375 px")

    # The approval is one click away.
    with page.expect_navigation():
        hook.get_by_role("link", name=f"#{number} customer_update_credit_limit").click()
    assert page.url.endswith(f"/console/approvals/{approval_id}")
    view.watch.assert_clean()


def test_the_page_is_refused_without_approvals_read(hub: Hub, ui):
    view = ui()
    view.watch.allowed_statuses.add(403)
    view.sign_in(hub.admin("support"))
    view.goto("/console/notifications/", status=403)
    expect(view.page.get_by_role("heading", name="Approval notifications")).to_have_count(0)
    view.watch.assert_clean()
