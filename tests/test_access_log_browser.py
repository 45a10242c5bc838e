"""Issue 19 item 3 in Chromium: one reading of a long transcript is ONE row of the access log, with
the range it read, linked back to the transcript; the row opens to its individual reads; filters
live in the URL; the page passes axe and logs no error or CSP violation."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.test_console_browser import long_transcript

DASH = "\u2013"  # between the ends of a range, as the page writes it


def test_one_reading_of_a_long_transcript_is_one_group(hub, ui, sql):
    archive_id, last = long_transcript(hub, 500)
    assert last == 2000
    reader = hub.admin("auditor", "night-auditor")
    view = ui()
    page = view.page
    view.sign_in(reader)
    view.goto(f"/console/conversations/{archive_id}")
    view.scroll_transcript_to_end()
    [(pages,)] = sql("SELECT count(*) FROM bz_access_log WHERE username = %s AND action = 'transcript_view'",
                     (reader,))
    assert pages > 1  # every page read is on record...

    page.locator("header nav").get_by_role("link", name="Access log").click()
    expect(page.get_by_role("heading", name="Access log")).to_be_visible()
    groups = page.locator("table.access-log tbody tr.access-group")
    expect(groups).to_have_count(1)  # ...and shown as one reading
    group = groups.first
    expect(group).to_contain_text(reader)
    expect(group).to_contain_text("transcript_view")
    expect(group).to_contain_text("conv-long-shift")
    expect(group).to_contain_text(f"1{DASH}2,000")
    expect(group).to_contain_text(f"{pages} reads")
    link = group.get_by_role("link", name="conv-long-shift")
    assert link.get_attribute("href") == f"/console/conversations/{archive_id}?at=1"
    view.axe("access log")
    view.shot("access-log-grouped.png")

    # A filter is kept in the URL; a bad one says what is wrong.
    page.get_by_label("Person").fill(reader)
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"person=night-auditor"))
    expect(groups).to_have_count(1)
    view.watch.allowed_statuses.add(400)
    view.goto("/console/access-log?from=soon", status=400)
    expect(page.get_by_role("alert")).to_contain_text("“From” is a date written YYYY-MM-DD.")

    # The group opens to its individual reads, one a page of the transcript.
    view.goto(f"/console/access-log?person={reader}")
    groups.first.get_by_role("link", name=re.compile(r"reads$")).click()
    expect(page.get_by_role("heading", name=f"Reads by {reader}")).to_be_visible()
    expect(page.locator("table.access-log tbody tr")).to_have_count(pages)
    expect(page.locator("table.access-log tbody tr").last).to_contain_text(f"1{DASH}200")
    view.axe("one group")
    view.watch.assert_clean()
