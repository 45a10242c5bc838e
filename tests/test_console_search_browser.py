"""Issue 19, search across archives in Chromium: an auditor finds messages by their content and
opens one at its event, finds an archive by an 8-character ID prefix, narrows by principal and
tenant, sorts by a column header and reads the total; a filter that does not fit is named on the
page. Data goes through the agent API; each page passes axe-core and the strict-CSP watch."""
from __future__ import annotations

import re
import uuid

from playwright.sync_api import expect

from tests.browser import AUDITS, ROUTE, Hub
from tests.helpers import session_bearer

ROWS = "table[data-nav-list] tbody tr[data-href]"


def second_member(hub: Hub) -> dict:
    """Another agent session on the same route, for a principal of tenant-9."""
    code, out, err = hub.cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                             "--principal", '{"id": "user-77", "tenant": "tenant-9"}')
    assert code == 0, err
    return out


def archive_as(hub: Hub, session: dict, conversation: str, events: list[dict]) -> str:
    body = {"client_archive_id": str(uuid.uuid4()), "client_conversation_id": conversation,
            "route": ROUTE, "member_session_ids": [session["session_id"]]}
    response = hub.server.post(AUDITS, headers=session_bearer(session), json=body)
    assert response.status_code == 200, response.text
    archive_id = response.json()["conversation"]["conversation_id"]
    response = hub.server.post(f"{AUDITS}/{archive_id}/events", headers=session_bearer(session),
                               json={"events": events})
    assert response.status_code == 200, response.text
    return archive_id


def search_for(page, **fields: str) -> None:
    for label, value in fields.items():
        page.get_by_label(label, exact=True).fill(value)
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()


def test_an_auditor_finds_a_message_by_its_content_and_opens_it_at_its_event(hub, ui):
    archive_id = hub.archive("conv-warehouse", "Night shift, Lisbon")
    events: list[dict] = []
    for n in range(1, 31):
        answer = f"Aisle {n} holds {n + 3} pallets." if n != 17 else "Aisle 17 has a broken forklift <b>today</b>."
        events += hub.exchange(archive_id, len(events) + 1, f"turn-{n}", f"Question {n}: aisle {n}?", answer)
    hub.append(archive_id, events)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    view.goto("/console/conversations/")
    search_for(page, Search="broken forklift")
    assert "q=broken+forklift" in page.url
    hits = page.locator("[data-hit]")
    expect(hits).to_have_count(1)
    expect(page.locator("[data-hits-total]")).to_have_text("1 message")
    expect(hits.locator("mark")).to_have_text("broken forklift")
    expect(hits.locator("td.snippet")).to_contain_text("<b>today</b>")  # the text as written, escaped
    expect(hits.locator("td.snippet b")).to_have_count(0)
    view.axe("content search results")
    view.shot("search.png")
    sequence = 17 * 4 - 1  # the assistant message of turn 17
    with page.expect_navigation():
        hits.get_by_role("link", name=f"#{sequence}").click()
    assert page.url.endswith(f"/console/conversations/{archive_id}?at={sequence}#seq-{sequence}")
    expect(page.locator(f"#seq-{sequence}")).to_be_visible()
    expect(page.locator(f"#seq-{sequence}")).to_contain_text("forklift")

    # A common word: a hit in every other message, with a total.
    view.goto("/console/conversations/?q=pallets")
    expect(page.locator("[data-hits-total]")).to_have_text("29 messages")
    expect(page.locator("[data-hit]").first.locator("mark")).to_have_text("pallets")
    view.watch.assert_clean()


def test_an_id_prefix_principal_tenant_sort_and_totals(hub, ui):
    first = hub.archive("conv-alpha-search")
    hub.append(first, hub.exchange(first, 1, "turn-1", "hello", "hi"))
    other = second_member(hub)
    second = archive_as(hub, other, "conv-beta-search",
                        hub.exchange("", 1, "turn-1", "one", "two") + hub.exchange("", 5, "turn-2", "three", "four"))
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    view.goto("/console/conversations/")
    rows = page.locator(ROWS)
    expect(rows).to_have_count(2)
    expect(page.locator("[data-total]")).to_have_text("2 conversations")

    search_for(page, Search=second[:8])  # the prefix `q=c656db38` style, from the issue
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("conv-beta-search")
    expect(page.locator("[data-total]")).to_have_text("1 conversation")

    search_for(page, Search="", Principal="user-42")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("conv-alpha-search")
    search_for(page, Principal="", Tenant="tenant-9")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("conv-beta-search")
    view.axe("filtered by tenant")

    # Sort by the events column: the header is a link and says how the list is sorted.
    search_for(page, Tenant="")
    events_header = page.get_by_role("columnheader", name=re.compile("^Events"))
    with page.expect_navigation():
        events_header.get_by_role("link").click()
    expect(events_header).to_have_attribute("aria-sort", "descending")
    expect(rows.first).to_contain_text("conv-beta-search")
    with page.expect_navigation():
        events_header.get_by_role("link").click()
    expect(events_header).to_have_attribute("aria-sort", "ascending")
    expect(rows.first).to_contain_text("conv-alpha-search")
    assert "sort=events" in page.url and "dir=asc" in page.url
    # Filtering again keeps the order.
    page.get_by_label("State").select_option("ready")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert "sort=events" in page.url and "dir=asc" in page.url
    expect(rows.first).to_contain_text("conv-alpha-search")
    view.axe("sorted list")
    view.watch.assert_clean()


def test_a_filter_that_does_not_fit_is_named_on_the_page(hub, ui):
    hub.archive("conv-still-here")
    view = ui()
    page = view.page
    view.sign_in(hub.admin("support"))
    view.watch.allowed_statuses.add(400)
    view.goto("/console/conversations/?state=archived&from=2026-13-01", status=400)
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("State: “archived” is not one of enrolling, ready.")
    expect(alert).to_contain_text("From: “2026-13-01” is not a date (YYYY-MM-DD).")
    expect(page.locator(ROWS)).to_have_count(0)
    expect(page.get_by_label("Search", exact=True)).to_be_visible()  # the form is there to fix it
    view.axe("refused filters")
    view.watch.assert_clean()
