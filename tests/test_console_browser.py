"""Issue 7, "Must show": the admin console in a real browser.

Debian's Chromium (/usr/bin/chromium) driven by Playwright with `executable_path` (never
`playwright install`), against the app on a real loopback HTTP server and a real PostgreSQL. Every
test signs in through the login form. The data comes from the real agent APIs over HTTP: turns,
conversation archives and their events, governed tool invocations against the demo business
system. Each test also fails on any page error, console error, Content-Security-Policy violation
or JavaScript dialog. The screenshots in docs/screenshots/ are taken here.
"""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

from playwright.sync_api import expect

from tests.browser import ADJUST, CREDIT, MERGE, NAV, ROLES, XSS, UI, Hub
from tests.helpers import make_admin


# ================================================================ each role walks its pages

def test_each_role_walks_the_pages_it_may_see_and_is_refused_the_others(hub, ui):
    """One data set, one fresh browser context per role (the roles share the setup to keep the
    file fast; each walk is independent: its own cookies, its own sign-in)."""
    archive_id, run_id = hub.traced_conversation()
    approval = hub.approval("customer_merge", MERGE)
    for role in ROLES:
        walk(hub, ui(), role, archive_id, run_id, approval)


def walk(hub: Hub, view: UI, role: str, archive_id: str, run_id: str, approval: dict) -> None:
    username = hub.admin(role)
    allowed = ROLES[role]
    page = view.page

    if role == "admin":
        view.goto("/console/login")
        view.shot("login.png", full_page=False)
    view.sign_in(username)
    expect(page.locator("header .who")).to_contain_text(f"{username} ({role})")
    # Home lands where the role's work is: support on the runs, approvers on the queue.
    expected_home = {"support": "/console/runs/", "approver": "/console/approvals/"}.get(
        role, "/console/conversations/")
    assert page.url == view.base + expected_home

    # The navigation offers exactly what the role holds.
    nav = page.locator("header nav")
    for name, permission in NAV.items():
        links = nav.get_by_role("link", name=re.compile(f"^{name}"))
        expect(links).to_have_count(1 if permission in allowed else 0)

    if "runs:read" in allowed:
        nav.get_by_role("link", name="Conversations").click()
        expect(page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()
        page.get_by_role("link", name="conv-acme-credit").click()
        expect(page.get_by_role("heading", name="Conversation conv-acme-credit")).to_be_visible()
        expect(page.locator(".bubble.user .text").first).to_have_text(re.compile("credit limit"))
        expect(page.get_by_text("End of transcript.")).to_be_visible()
        expect(page.locator("table.list").first).to_contain_text("Dana at the operations desk")

        nav.get_by_role("link", name="Runs").click()
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        # Before any lookup, the most recent runs.
        expect(page.locator("table.list")).to_contain_text(run_id)
        page.get_by_label("Look up").fill("conv-acme-credit")
        page.get_by_role("button", name="Look up").click()
        expect(page.locator("table.list tbody tr")).to_have_count(1)
        page.get_by_role("link", name=run_id).click()
        expect(page.get_by_role("heading", name=f"Run {run_id}")).to_be_visible()
        expect(page.locator("ol.timeline")).to_contain_text("customer_update_credit_limit")
    else:
        for path, secret in ((f"/console/conversations/{archive_id}", "conv-acme-credit"),
                             (f"/console/runs/{run_id}", "customer_update_credit_limit"),
                             ("/console/conversations/", "conv-acme-credit"),
                             (f"/console/conversations/{archive_id}/export.json", "credit limit")):
            refused(view, path, secret)

    if "approvals:read" in allowed:
        nav.get_by_role("link", name=re.compile("^Approvals")).click()
        expect(page.get_by_role("heading", name="Pending approvals")).to_be_visible()
        expect(nav.locator(".count")).to_have_text("2")
        expect(page.locator("table.list tbody tr[data-href]")).to_have_count(2)
        page.get_by_role("link", name="customer_merge").click()
        expect(page.get_by_role("heading", name=re.compile("Approval: customer_merge"))).to_be_visible()
        decide = page.get_by_role("button", name="Approve this snapshot")
        expect(decide).to_have_count(1 if "approvals:decide" in allowed else 0)
        nav.get_by_role("link", name=re.compile("^Approvals")).click()
        page.locator(".tabs").get_by_role("link", name="History").click()
        expect(page.get_by_role("heading", name="Decided approvals")).to_be_visible()
        expect(page.get_by_text("No approval has been decided yet.")).to_be_visible()
    else:
        for path, secret in (("/console/approvals/", "customer_merge"),
                             (f"/console/approvals/{approval['id']}", "customer_merge"),
                             (f"/console/approvals/{approval['id']}/snapshot.json?view=1", "C-100235"),
                             (f"/console/approvals/{approval['id']}/snapshot.json", "C-100235"),
                             ("/console/approvals/history", "customer_merge")):
            refused(view, path, secret)

    if "audit:read" in allowed:
        nav.get_by_role("link", name="Access log").click()
        expect(page.get_by_role("heading", name="Access log")).to_be_visible()
        rows = page.locator("table.list tbody tr")
        # This walk's reads of a transcript and a run trace are on record, under this user.
        mine = rows.filter(has_text=username)
        expect(mine.filter(has_text="transcript_view").filter(has_text=archive_id)).to_have_count(1)
        expect(mine.filter(has_text="run_trace_view").filter(has_text=run_id)).to_have_count(1)
        # One group a reading, its target named and linked (the transcript by its conversation id).
        expect(mine.filter(has_text="transcript_view").get_by_role("link", name="conv-acme-credit")).to_have_count(1)
        expect(rows.first).to_contain_text(username)
        if role == "admin":
            view.shot("access-log.png")
    else:
        refused(view, "/console/access-log", "transcript_view")

    view.sign_out()
    view.goto("/console/conversations/")
    assert page.url.startswith(view.base + "/console/login")
    view.watch.assert_clean()


def refused(view: UI, path: str, secret: str) -> None:
    """The page a role lacks: 403, "Not allowed", and none of the data it would have shown."""
    view.watch.allowed_statuses.add(403)
    response = view.goto(path, status=403)
    expect(view.page.get_by_role("heading", name="Not allowed")).to_be_visible()
    body = response.text()
    assert secret not in body, (path, secret)
    assert secret not in view.page.content()


# ================================================================ a long transcript, scrolled to its end

def long_transcript(hub: Hub, turns: int) -> tuple[str, int]:
    """An archive of `turns` completed turns (4 events each), appended through the agent API in
    batches of 50; returns (archive id, last sequence)."""
    archive_id = hub.archive("conv-long-shift", "Night shift, Lisbon warehouse")
    events: list[dict] = []
    for n in range(1, turns + 1):
        events += hub.exchange(archive_id, len(events) + 1, f"turn-{n}",
                               f"Question {n}: how many pallets in aisle {n}?",
                               f"Answer {n}: aisle {n} holds {n % 37 + 3} pallets.")
    hub.append(archive_id, events)
    return archive_id, len(events)


def test_a_long_transcript_scrolls_page_by_page_to_its_end(hub, ui, sql):
    archive_id, last = long_transcript(hub, 500)
    assert last == 2000
    assert sql("SELECT last_sequence FROM bz_agent_conversation_archives WHERE id = %s", (archive_id,)) == [(2000,)]
    username = hub.admin("support")
    view = ui()
    page = view.page
    fragments: list[str] = []
    page.on("request", lambda r: fragments.append(r.url) if f"/{archive_id}/events" in r.url else None)
    view.sign_in(username)
    view.goto(f"/console/conversations/{archive_id}")
    events = page.locator("[data-sequence]")
    # The first page only: never the whole archive at once, never a first-N cutoff either.
    expect(events).to_have_count(200)
    expect(page.get_by_text("End of transcript.")).to_have_count(0)

    view.scroll_transcript_to_end()
    expect(page.locator(".transcript .more")).to_have_count(0)

    sequences = [int(s) for s in
                 page.eval_on_selector_all("[data-sequence]", "els => els.map(e => e.dataset.sequence)")]
    assert len(sequences) == len(set(sequences)), "a sequence is shown twice"
    assert sequences == list(range(1, last + 1)), "a sequence is missing or out of order"
    expect(page.locator(f"#seq-{last}")).to_be_visible()
    expect(page.locator(f"#seq-{last}")).to_contain_text("ended")
    expect(page.locator(f"#seq-{last - 1} .bubble.assistant")).to_contain_text("Answer 500: aisle 500")
    # Nine more pages, each asked for once with the keyset of the page before it.
    afters = sorted(int(re.search(r"after=(\d+)", u).group(1)) for u in fragments)
    assert afters == list(range(200, last, 200)), afters

    # Jump to a sequence: the page reopens there, and its link keeps the place.
    page.get_by_label("Jump to sequence").fill("1500")
    page.get_by_role("button", name="Go").click()
    # (Not expect_navigation: the reading position's replaceState is a navigation to Playwright.)
    page.wait_for_url(re.compile(r"[?&]at=1500(&|#|$)"))
    # A window around it: some events before, the target highlighted and in view.
    expect(page.get_by_text("Showing sequences 1450 to 1649 around #1500.")).to_be_visible()
    expect(events.first).to_have_attribute("data-sequence", "1450")
    expect(page.locator("#seq-1500")).to_have_attribute("aria-current", "location")
    expect(page.locator("#seq-1500")).to_be_in_viewport()
    link = page.locator("#seq-1501 a.seq")
    assert link.get_attribute("href").endswith(f"/console/conversations/{archive_id}?at=1501#seq-1501")
    with page.expect_navigation():
        link.click()
    expect(events.first).to_have_attribute("data-sequence", "1451")
    expect(page.locator("#seq-1501")).to_be_in_viewport()
    view.watch.assert_clean()


# ================================================================ approvals: snapshot on demand, decisions

def test_an_approver_opens_the_snapshot_and_decides(hub, ui, sql):
    merge = hub.approval("customer_merge", MERGE)
    credit = hub.approval("customer_update_credit_limit", CREDIT)
    adjust = hub.approval("inventory_adjust", ADJUST)
    username = hub.admin("approver")
    view = ui()
    page = view.page
    view.sign_in(username)
    assert page.url == view.base + "/console/approvals/"
    expect(page.locator("header nav .count")).to_have_text("3")
    rows = page.locator("table.list tbody tr[data-href]")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("customer_merge")
    expect(rows.nth(0)).to_contain_text("source_customer_id, target_customer_id")
    expect(rows.nth(1)).to_contain_text("customer_update_credit_limit")
    # The queue holds bounded summaries and sizes, never a snapshot view nor a hash fragment (the
    # full hash is on the approval's page).
    expect(page.locator("[data-snapshot]")).to_have_count(0)
    size = len(json.dumps(MERGE, sort_keys=True, separators=(",", ":")).encode("utf-8"))
    expect(rows.nth(0).locator("td").nth(5)).to_contain_text(f"{size} bytes")
    expect(rows.nth(0)).not_to_contain_text(merge["args_hash"][:12])
    view.shot("approvals.png")

    # ---- open one: a small snapshot shows at once, as a tree; its exact bytes one click away
    rows.nth(0).get_by_role("link", name="customer_merge").click()
    expect(page.get_by_role("heading", name=re.compile(r"Approval: customer_merge\s+pending"))).to_be_visible()
    expect(page.locator("[data-snapshot-body]")).to_contain_text("Same company, registered twice")
    expect(page.locator(".snapshot-facts")).to_contain_text(merge["args_hash"])
    page.get_by_role("button", name="Raw (exact bytes)").click()
    snapshot = page.locator("pre[data-snapshot]")
    expect(snapshot).to_be_visible()
    assert json.loads(snapshot.text_content()) == MERGE
    search = page.get_by_label("Search in snapshot")
    search.fill("c-1002")
    expect(page.locator("[data-snapshot-hits]")).to_have_text("2 found")
    search.fill("nowhere in this snapshot")
    expect(page.locator("[data-snapshot-hits]")).to_have_text("not found")
    search.fill("VAT numbers")
    expect(page.locator("[data-snapshot-hits]")).to_have_text("1 found")
    assert page.evaluate("window.getSelection().toString()") == "VAT numbers"
    assert sql("SELECT username, target FROM bz_access_log WHERE action = 'snapshot_view'") == \
        [(username, merge["id"])]
    view.shot("approval-snapshot.png")

    # ---- approve
    with page.expect_navigation():
        page.get_by_role("button", name="Approve this snapshot").click()
    expect(page.locator(".flash.ok")).to_have_text("Approved: the agent's resume will run exactly this snapshot.")
    expect(page.get_by_role("heading", name=re.compile(r"Approval: customer_merge\s+approved"))).to_be_visible()
    expect(page.locator("dl.header-grid")).to_contain_text(f"approved by {username}")
    expect(page.get_by_role("button", name="Approve this snapshot")).to_have_count(0)
    assert sql("SELECT status, decided_by FROM bz_tool_approvals WHERE id = %s", (merge["id"],)) == \
        [("approved", username)]

    # ---- deny without a reason: a clear message, still pending; then with one
    view.goto(f"/console/approvals/{adjust['id']}")
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page.locator(".flash.error")).to_have_text("A denial needs a reason.")
    expect(page.get_by_role("heading", name=re.compile(r"inventory_adjust\s+pending"))).to_be_visible()
    assert sql("SELECT status FROM bz_tool_approvals WHERE id = %s", (adjust["id"],)) == [("pending",)]
    page.get_by_label("Reason (required to deny)").fill("The count sheet shows 12 units missing, not 150.")
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page.locator(".flash.ok")).to_contain_text("Denied")
    expect(page.get_by_role("heading", name=re.compile(r"inventory_adjust\s+denied"))).to_be_visible()
    expect(page.locator("dl.header-grid")).to_contain_text(f"denied by {username}")
    expect(page.locator("dl.header-grid")).to_contain_text("“The count sheet shows 12 units missing, not 150.”")

    # ---- a stale page: someone else decided meanwhile (same session, another request)
    view.goto(f"/console/approvals/{credit['id']}")
    form = page.locator(".decide form")
    other = page.request.post(view.base + f"/console/approvals/{credit['id']}/decide", max_redirects=0, form={
        "csrf_token": form.locator("input[name=csrf_token]").get_attribute("value"),
        "args_hash": credit["args_hash"], "decision": "approve"})
    assert other.status == 303
    page.get_by_label("Reason (required to deny)").fill("Too high for this customer.")
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page.locator(".flash.error")).to_have_text("This approval was already decided; nothing was changed.")
    expect(page.get_by_role("heading", name=re.compile(r"customer_update_credit_limit\s+approved"))).to_be_visible()
    assert sql("SELECT status, decision_reason FROM bz_tool_approvals WHERE id = %s", (credit["id"],)) == \
        [("approved", None)]

    # ---- nothing pending any more; the history names who decided, when and why
    page.locator("header nav").get_by_role("link", name=re.compile("^Approvals")).click()
    expect(page.get_by_text("Nothing is waiting for approval.")).to_be_visible()
    expect(page.locator("header nav .count")).to_have_count(0)
    page.locator(".tabs").get_by_role("link", name="History").click()
    history = page.locator("table.list tbody tr[data-href]")
    expect(history).to_have_count(3)
    expect(history.filter(has_text="inventory_adjust")).to_contain_text(f"denied by {username}")
    expect(history.filter(has_text="inventory_adjust")).to_contain_text("12 units missing")
    expect(history.filter(has_text="customer_merge")).to_contain_text(f"approved by {username}")
    expect(history.locator("time")).to_have_count(3)
    view.watch.assert_clean()


def test_history_shows_decided_approvals_while_fifty_are_pending(hub, ui):
    decided = hub.approval("customer_merge", MERGE)
    for n in range(50):
        hub.approval("customer_update_credit_limit", {"customer_id": "C-100234", "credit_limit": 20_000 + n})
    username = hub.admin("approver")
    view = ui()
    page = view.page
    view.sign_in(username)
    expect(page.locator("header nav .count")).to_have_text("51")
    view.goto(f"/console/approvals/{decided['id']}")
    page.get_by_label("Reason (required to deny)").fill("Two different companies with the same name.")
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page.get_by_role("heading", name=re.compile(r"customer_merge\s+denied"))).to_be_visible()
    view.goto("/console/approvals/history")
    expect(page.locator("table.list tbody tr").filter(has_text="customer_merge")).to_contain_text(
        f"denied by {username}", timeout=2_000)


# ================================================================ from a transcript to its run

def test_a_run_link_in_a_transcript_opens_the_run_trace_and_links_back(hub, ui):
    archive_id, run_id = hub.traced_conversation()
    username = hub.admin("support")
    view = ui()
    page = view.page
    view.sign_in(username)
    view.goto("/console/conversations/")  # support lands on the runs
    page.get_by_role("link", name="conv-acme-credit").click()
    expect(page.get_by_role("heading", name="Conversation conv-acme-credit")).to_be_visible()
    members = page.locator("table.list").first
    expect(members).to_contain_text("Dana at the operations desk")
    expect(members).to_contain_text("tenant-7:user-42")
    # A v1 archive records no member binding: the header's app and route, marked as such.
    legacy = members.locator(".legacy")
    expect(legacy).to_have_text("ops-app / desk legacy header-only information")
    expect(legacy).to_have_attribute("title", re.compile("not evidence of a recorded member binding"))
    transcript = page.locator("#transcript")
    expect(transcript.locator(".turn-head")).to_have_count(2)
    expect(transcript.locator(".bubble.user")).to_have_count(2)
    expect(transcript.locator(".bubble.assistant")).to_have_count(2)
    expect(transcript.locator(".turn-end .badge.completed")).to_have_count(2)
    expect(page.get_by_text("End of transcript.")).to_be_visible()
    view.shot("transcript.png")

    run_link = transcript.locator(".run-link a")
    expect(run_link).to_have_count(1)
    expect(run_link).to_have_text(run_id)
    with page.expect_navigation():
        run_link.click()
    assert page.url == f"{view.base}/console/runs/{run_id}"
    expect(page.get_by_role("heading", name=re.compile(f"Run {run_id}\\s+completed"))).to_be_visible()

    # The frozen context, exactly as the agent received it, behind a disclosure.
    frozen = page.locator("ol.timeline details pre")
    expect(frozen).to_be_hidden()
    page.get_by_text("Frozen context, as the agent received it").click()
    expect(frozen).to_be_visible()
    assert json.loads(frozen.text_content()) == hub.contexts[run_id]

    timeline = page.locator("ol.timeline")
    expect(timeline.locator(".bubble.user")).to_contain_text("Can ACME's credit limit go up to 20,000?")
    expect(timeline.locator(".bubble.assistant")).to_contain_text("ACME has paid on time")
    jobs = timeline.locator("li").filter(has_text="invocation")
    expect(jobs).to_have_count(2)
    expect(jobs.filter(has_text="customer_get")).to_contain_text("executed")
    expect(jobs.filter(has_text="customer_get")).to_contain_text("journal")
    expect(jobs.filter(has_text="customer_update_credit_limit")).to_contain_text("awaiting_approval")
    expect(jobs.filter(has_text="customer_update_credit_limit")).to_contain_text(re.compile(r"approval #\d+ pending"))
    expect(page.locator("dl.header-grid")).to_contain_text("turn turn-1")
    view.shot("run-trace.png")

    back = page.locator("dl.header-grid").get_by_role("link", name=archive_id)
    with page.expect_navigation():
        back.click()
    assert page.url == f"{view.base}/console/conversations/{archive_id}?at=1#seq-1"  # at the run's turn
    expect(page.get_by_role("heading", name="Conversation conv-acme-credit")).to_be_visible()
    view.watch.assert_clean()


# ================================================================ hostile text is shown, never run

def test_script_and_onerror_in_messages_and_arguments_are_shown_as_text(hub, ui, sql):
    _archive_id, run_id = hub.traced_conversation(conversation="conv-hostile", question=f"Please look: {XSS}",
                                                 label=XSS, answer=f"I will not run {XSS}")
    merge = hub.approval("customer_merge", {**MERGE, "reason": XSS})
    username = hub.admin("admin")
    view = ui()
    page = view.page
    view.sign_in(username)

    def harmless() -> None:
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert page.locator("main img, main svg, main script").count() == 0
        assert view.watch.dialogs == []

    # The transcript: user and assistant bubbles, the member label.
    page.get_by_role("link", name="conv-hostile").click()
    expect(page.locator(".bubble.user .text").first).to_have_text(f"Please look: {XSS}")
    expect(page.locator(".bubble.assistant .text").first).to_have_text(f"I will not run {XSS}")
    expect(page.locator("table.list").first.get_by_text(XSS, exact=True)).to_be_visible()
    harmless()

    # The run trace: the stored user message and the frozen context.
    view.goto(f"/console/runs/{run_id}")
    expect(page.locator("ol.timeline .bubble.user .text")).to_have_text(f"Please look: {XSS}")
    page.get_by_text("Frozen context, as the agent received it").click()
    assert json.loads(page.locator("ol.timeline details pre").text_content()) == hub.contexts[run_id]
    harmless()

    # The approval: the queue's summary, the snapshot loaded by htmx, a denial reason.
    view.goto("/console/approvals/")
    expect(page.locator("td.summary").filter(has_text="<script>")).to_have_count(1)
    expect(page.locator("td.summary").filter(has_text="<script>")).to_contain_text("<script>window.__xss=1</script>")
    harmless()
    view.goto(f"/console/approvals/{merge['id']}")
    expect(page.locator("[data-snapshot-body]")).to_contain_text(XSS)  # the tree: the value as text
    harmless()
    page.get_by_role("button", name="Raw (exact bytes)").click()
    expect(page.locator("pre[data-snapshot]")).to_contain_text(json.dumps(XSS)[1:-1])
    assert json.loads(page.locator("pre[data-snapshot]").text_content())["reason"] == XSS
    harmless()
    page.get_by_label("Reason (required to deny)").fill(XSS)
    with page.expect_navigation():
        page.get_by_role("button", name="Deny").click()
    expect(page.locator("dl.header-grid")).to_contain_text(f"“{XSS}”")
    harmless()
    page.locator("header nav").get_by_role("link", name=re.compile("^Approvals")).click()
    page.locator(".tabs").get_by_role("link", name="History").click()
    expect(page.locator("table.list tbody tr").filter(has_text="customer_merge")).to_contain_text(XSS)
    harmless()
    assert sql("SELECT decision_reason FROM bz_tool_approvals WHERE id = %s", (merge["id"],)) == [(XSS,)]
    view.watch.assert_clean()


# ================================================================ keyboard and time zone comforts

def conversation_list(hub: Hub) -> list[str]:
    """Five archives with different last turn states; their client conversation IDs, newest first."""
    made = []
    for n, (name, status) in enumerate([("conv-returns-desk", "completed"), ("conv-invoice-dispute", "failed"),
                                        ("conv-stock-count", "cancelled"), ("conv-new-supplier", None),
                                        ("conv-credit-review", "running")]):
        archive_id = hub.archive(name, f"Operator {n + 1}")
        if status is not None:
            events = hub.exchange(archive_id, 1, "turn-1", f"Start of {name}", f"Reply in {name}")
            if status == "running":
                events = events[:2]
            else:
                events[-1]["status"] = status
            hub.append(archive_id, events)
        made.append(name)
    return made[::-1]


def test_j_k_and_enter_navigate_the_list_and_the_time_switch_changes_times(hub, ui):
    names = conversation_list(hub)
    username = hub.admin("auditor")
    view = ui(timezone_id="Asia/Tokyo", locale="en-GB")
    page = view.page
    view.sign_in(username)
    rows = page.locator("table[data-nav-list] tbody tr[data-href]")
    expect(rows).to_have_count(5)
    assert [r.split("\n")[0].strip() for r in rows.all_inner_texts()] == names
    view.shot("conversations.png")
    selected = page.locator("table[data-nav-list] tr.selected")

    def selected_name() -> str:
        expect(selected).to_have_count(1)
        return selected.locator("td a").first.inner_text()

    expect(selected).to_have_count(0)
    page.keyboard.press("j")
    assert selected_name() == names[0]
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert selected_name() == names[2]
    page.keyboard.press("k")
    assert selected_name() == names[1]
    for _ in range(9):
        page.keyboard.press("j")
    assert selected_name() == names[4]  # stops at the last row

    # Typing j or k in the search box types; it does not move the selection.
    search = page.get_by_label("Search")
    search.click()
    page.keyboard.type("jkj")
    expect(search).to_have_value("jkj")
    assert selected_name() == names[4]
    search.fill("")
    page.keyboard.press("Enter")  # submits the (empty) filter form, as Enter in a field does
    page.wait_for_load_state()
    expect(rows).to_have_count(5)
    page.locator("h1").click()
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert selected_name() == names[1]
    href = selected.get_attribute("data-href")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == view.base + href
    expect(page.get_by_role("heading", name=f"Conversation {names[1]}")).to_be_visible()

    # The UTC/local switch: declared zone (UTC) first, then the browser's zone (Tokyo, UTC+9).
    toggle = page.locator("#zone-toggle")
    expect(toggle).to_have_text("Times: UTC")
    times = page.locator("main time[datetime]")
    assert times.count() >= 3
    first = times.first
    stamp = datetime.fromisoformat(first.get_attribute("datetime").replace("Z", "+00:00"))
    utc_text = stamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    expect(first).to_have_text(utc_text)
    toggle.click()
    expect(toggle).to_have_text("Times: local")
    tokyo = stamp.astimezone(timezone(timedelta(hours=9)))
    expect(first).to_have_text(tokyo.strftime("%d/%m/%Y, %H:%M:%S") + " (local)")
    assert all(t.endswith("(local)") for t in times.all_inner_texts())
    # The choice is kept across pages.
    page.locator("header nav").get_by_role("link", name="Conversations").click()
    expect(page.locator("#zone-toggle")).to_have_text("Times: local")
    assert all(t.endswith("(local)") for t in page.locator("main time[datetime]").all_inner_texts())
    page.locator("#zone-toggle").click()
    expect(page.locator("#zone-toggle")).to_have_text("Times: UTC")
    assert all(t.endswith(" UTC") for t in page.locator("main time[datetime]").all_inner_texts())
    view.watch.assert_clean()


def test_the_conversation_list_loads_more_rows_as_it_scrolls_and_keeps_filters_in_the_url(hub, ui):
    names = [f"conv-bulk-{n:03d}" for n in range(57)]
    for name in names:
        hub.archive(name)
    username = hub.admin("support")
    view = ui()
    page = view.page
    view.sign_in(username)
    view.goto("/console/conversations/")  # support lands on the runs
    rows = page.locator("table[data-nav-list] tbody tr[data-href]")
    expect(rows).to_have_count(50)
    expect(page.locator("tr.more")).to_have_count(1)
    page.keyboard.press("End")
    expect(rows).to_have_count(57)
    expect(page.locator("tr.more")).to_have_count(0)
    shown = list(page.locator("table[data-nav-list] tbody tr[data-href] td:first-child a").all_inner_texts())
    assert shown == names[::-1], "rows missing, repeated or out of order across the page boundary"
    # j moves into the rows that arrived by scrolling too.
    for _ in range(56):
        page.keyboard.press("j")
    expect(page.locator("tr.selected td a").first).to_have_text(names[1])
    page.keyboard.press("j")
    expect(page.locator("tr.selected td a").first).to_have_text(names[0])

    # Filters live in the URL: a reload or a shared link shows the same view.
    page.get_by_label("Search").fill("bulk-01")
    page.get_by_label("State").select_option("ready")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    assert "q=bulk-01" in page.url and "state=ready" in page.url
    expect(rows).to_have_count(10)
    page.reload()
    expect(page.get_by_label("Search")).to_have_value("bulk-01")
    expect(page.get_by_label("State")).to_have_value("ready")
    expect(rows).to_have_count(10)
    page.get_by_label("State").select_option("enrolling")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No conversations match these filters.")).to_be_visible()
    view.watch.assert_clean()


def test_times_in_a_page_loaded_while_scrolling_follow_the_local_switch(hub, ui):
    archive_id, last = long_transcript(hub, 60)  # 240 events: a second page
    username = hub.admin("support")
    view = ui(timezone_id="Asia/Tokyo", locale="en-GB")
    page = view.page
    view.sign_in(username)
    view.goto(f"/console/conversations/{archive_id}")
    expect(page.locator("[data-sequence]")).to_have_count(200)  # the second page is not loaded yet
    page.locator("#zone-toggle").click()
    expect(page.locator("#zone-toggle")).to_have_text("Times: local")
    page.keyboard.press("End")
    expect(page.get_by_text("End of transcript.")).to_be_visible()
    expect(page.locator("[data-sequence]")).to_have_count(last)
    # The second page arrived after the switch (htmx, outerHTML swap) and follows it too.
    late = page.locator(f"#seq-{last - 3} time")
    expect(late).to_have_text(re.compile(r"\(local\)$"))
    assert all(t.endswith("(local)") for t in page.locator("main time[datetime]").all_inner_texts())
    page.locator("#zone-toggle").click()
    expect(late).to_have_text(re.compile(r" UTC$"))
    view.watch.assert_clean()


# ================================================================ Content-Security-Policy and page errors

STRICT_CSP = ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
              "form-action 'self'", "base-uri 'none'")


def test_every_console_page_runs_under_a_strict_csp_without_violations_or_errors(hub, ui):
    archive_id, run_id = hub.traced_conversation()
    merge = hub.approval("customer_merge", MERGE)
    username = hub.admin("admin")
    view = ui()
    page = view.page
    documents = []
    page.on("response", lambda r: documents.append(r) if r.request.resource_type == "document" else None)

    # A wrong password first (401 page), then the real sign-in.
    view.watch.allowed_statuses.add(401)
    view.goto("/console/login")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill("not the password")
    with page.expect_navigation():
        page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    view.sign_in(username)

    visits = [
        ("/console/conversations/", "Conversations"),
        ("/console/conversations/?state=ready&q=acme", "Conversations"),
        (f"/console/conversations/{archive_id}", "Conversation conv-acme-credit"),
        (f"/console/conversations/{archive_id}?at=3", "Conversation conv-acme-credit"),
        ("/console/runs/", "Runs"),
        (f"/console/runs/?run_id={run_id}", "Runs"),
        (f"/console/runs/{run_id}", f"Run {run_id}"),
        ("/console/approvals/", "Pending approvals"),
        (f"/console/approvals/{merge['id']}", "Approval: customer_merge"),
        ("/console/approvals/history", "Decided approvals"),
        ("/console/access-log", "Access log"),
        ("/console/records/", "Records"),
        ("/console/admins/", "Admins"),
        (f"/console/admins/{username}", username),
        ("/console/account", "Your account"),
    ]
    for path, heading in visits:
        view.goto(path)
        expect(page.locator("h1")).to_contain_text(heading)
        # htmx is loaded and working on every page: the pending count polled into the navigation.
        expect(page.locator("header nav .count")).to_have_text("2")
    view.goto(f"/console/approvals/{merge['id']}")
    page.get_by_role("button", name="Raw (exact bytes)").click()
    expect(page.locator("pre[data-snapshot]")).to_be_visible()
    page.get_by_label("Search in snapshot").fill("C-100235")
    expect(page.locator("[data-snapshot-hits]")).to_have_text("1 found")
    page.locator("#zone-toggle").click()
    page.keyboard.press("j")
    page.wait_for_load_state("networkidle")

    assert len(documents) >= len(visits) + 3
    for response in documents:
        policy = response.header_value("content-security-policy") or ""
        assert all(part in policy for part in STRICT_CSP), (response.url, policy)
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, (response.url, policy)
    view.watch.assert_clean()

    # The watch is not blind: an inline script is refused by the policy and reported.
    page.evaluate("""() => { const s = document.createElement("script");
                             s.textContent = "window.__inline = 1"; document.body.appendChild(s); }""")
    for _ in range(40):
        if view.watch.csp:
            break
        page.wait_for_timeout(50)
    assert page.evaluate("typeof window.__inline") == "undefined"
    assert [v["directive"] for v in view.watch.csp] == ["script-src-elem"], view.watch.csp


def test_the_browser_finds_every_resource_it_asks_for(cli, ui):
    make_admin(cli, "support-user", "support")
    view = ui()
    view.sign_in("support-user")
    expect(view.page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    view.page.wait_for_load_state("networkidle")
    view.watch.assert_clean()
    assert view.watch.favicon_errors == []


def test_an_admin_disables_a_colleague_whose_open_browser_is_signed_out(hub, ui, sql):
    boss, colleague = hub.admin("admin"), hub.admin("auditor")
    theirs = ui()
    theirs.sign_in(colleague)
    expect(theirs.page.get_by_role("heading", name="Conversations", exact=True)).to_be_visible()

    view = ui()
    page = view.page
    view.sign_in(boss)
    page.locator("header nav").get_by_role("link", name="Admins").click()
    expect(page.get_by_role("heading", name="Admins", exact=True)).to_be_visible()
    page.locator("#admins").get_by_role("link", name=colleague).click()
    with page.expect_navigation():
        page.get_by_role("button", name="Disable").click()
    expect(page.get_by_role("status")).to_have_text("Disabled; their sessions ended.")
    assert sql("SELECT disabled FROM bz_admins WHERE username = %s", (colleague,)) == [(True,)]
    page.get_by_role("link", name="All admins").click()
    expect(page.locator("#admin-events tbody tr").first).to_contain_text(f"{boss}admin_disabled{colleague}")

    theirs.goto("/console/conversations/")
    expect(theirs.page.get_by_role("heading", name="Sign in")).to_be_visible()
    view.watch.assert_clean()


def test_sign_out_everywhere_from_the_account_page(hub, ui):
    username = hub.admin("support")
    first, second = ui(), ui()
    first.sign_in(username)
    second.sign_in(username)
    page = first.page
    page.locator("header .who").get_by_role("link", name=re.compile(username)).click()
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    with page.expect_navigation():
        page.get_by_role("button", name="Sign out everywhere").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    second.goto("/console/conversations/")
    expect(second.page.get_by_role("heading", name="Sign in")).to_be_visible()
