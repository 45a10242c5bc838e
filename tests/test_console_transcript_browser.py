"""Issue 19, transcript reading in Chromium: a window around any position that grows in both
directions without moving what the reader looks at, jump to the end, the target highlighted,
long messages collapsed and expanded from the keyboard, the Markdown view safe, hidden characters
visible, the reading position kept across Back and reload, and search inside one transcript."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.browser import XSS, Hub


def shift(hub: Hub, turns: int, conversation: str = "conv-night-shift", run_turn: int | None = None,
          special: dict[int, str] | None = None) -> tuple[str, str | None]:
    """An archive of `turns` completed turns (4 events each, 5 for the turn with a real run link);
    `special` gives some turns their own question. Returns (archive id, run id)."""
    run_id = None
    if run_turn is not None:
        run_id = hub.turn(conversation, f"turn-{run_turn}", "Count the pallets")["run_id"]
        hub.complete(run_id, "Counted.")
    archive_id = hub.archive(conversation, "Night shift")
    events: list[dict] = []
    for n in range(1, turns + 1):
        question = (special or {}).get(n, f"Question {n}: how many pallets in aisle {n}?")
        events += hub.exchange(archive_id, len(events) + 1, f"turn-{n}", question, f"Answer {n}.",
                               run_id if n == run_turn else None)
    hub.append(archive_id, events)
    return archive_id, run_id


def top_of(page, selector: str) -> float:
    return page.eval_on_selector(selector, "el => el.getBoundingClientRect().top")


def test_a_window_grows_both_ways_around_its_highlighted_target_and_jumps_to_the_end(hub, ui):
    archive_id, _ = shift(hub, 300)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    view.goto(f"/console/conversations/{archive_id}?at=1000")
    events = page.locator("[data-sequence]")
    expect(events).to_have_count(200)
    target = page.locator("#seq-1000")
    expect(target).to_have_class(re.compile(r"\btarget\b"))
    expect(target).to_have_attribute("aria-current", "location")
    expect(target).to_be_in_viewport()
    expect(target).to_be_focused()
    assert events.first.get_attribute("data-sequence") == "950"

    # Scroll up to the sentinel: 200 earlier events go in above, and what was on screen stays put.
    page.eval_on_selector(".earlier", "el => el.scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, -1)  # a real scroll, which htmx watches for revealed sentinels
    before = top_of(page, "#seq-950")
    expect(events).to_have_count(400)
    assert events.first.get_attribute("data-sequence") == "750"
    assert abs(top_of(page, "#seq-950") - before) < 2, "the reader's place moved"
    sequences = [int(s) for s in
                 page.eval_on_selector_all("[data-sequence]", "els => els.map(e => e.dataset.sequence)")]
    assert sequences == list(range(750, 1150))

    # Scroll down to the end of the window: later events load below.
    page.eval_on_selector(".transcript .more", "el => el.scrollIntoView()")
    page.mouse.wheel(0, 1)
    expect(events).to_have_count(451)
    expect(page.get_by_text("End of transcript.")).to_be_visible()

    page.get_by_role("link", name="Jump to end").click()
    page.wait_for_url(re.compile(r"at=end"))
    expect(page.locator("#seq-1200")).to_be_in_viewport()
    expect(page.locator("#seq-1200")).to_have_attribute("aria-current", "location")
    expect(page.get_by_text("End of transcript.")).to_be_visible()
    expect(events).to_have_count(200)  # a window, never the whole archive
    page.get_by_role("link", name="Jump to start").click()
    page.wait_for_url(re.compile(r"at=1$"))
    assert events.first.get_attribute("data-sequence") == "1"
    view.axe("transcript at a target")
    view.watch.assert_clean()


LONG = "\n".join(f"Line {n} of the incident report." for n in range(1, 401))


def test_long_messages_collapse_markdown_is_safe_and_hidden_characters_are_visible(hub, ui):
    archive_id = hub.archive("conv-reading", "Desk \u202eenolc")
    hostile = ("**Total** is [here](https://example.com) and [there](javascript:window.__xss=3)\n\n"
               + XSS + "\n\npay to\u202e 0001 \u200bnow")
    events = hub.exchange(archive_id, 1, "t1", hostile, LONG)
    hub.append(archive_id, events)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    view.goto(f"/console/conversations/{archive_id}")

    text = page.locator("#text-3")
    clipped = text.bounding_box()["height"]
    assert clipped < 450, clipped
    button = page.locator("#seq-3 button[data-expand]")
    expect(button).to_have_accessible_name(f"Show all ({len(LONG):,} characters)")
    expect(button).to_have_attribute("aria-expanded", "false")
    button.focus()
    page.keyboard.press("Enter")
    expect(button).to_have_attribute("aria-expanded", "true")
    expect(button).to_have_text("Show less")
    assert text.bounding_box()["height"] > 4 * clipped
    page.keyboard.press("Space")
    expect(button).to_have_attribute("aria-expanded", "false")
    assert text.bounding_box()["height"] == clipped

    # The override and the zero-width space are markers, not behaviour.
    question = page.locator("#text-2")
    expect(question.locator(".invisible-char")).to_have_count(2)
    expect(question).to_contain_text("pay to⟨RLO⟩ 0001 ⟨ZWSP⟩now")
    assert "\u202e" not in question.inner_text()
    expect(page.locator("table.list bdi").first).to_have_text("Desk ⟨RLO⟩enolc")
    view.axe("plain transcript")

    page.get_by_role("link", name="Markdown view").click()
    page.wait_for_url(re.compile(r"view=markdown"))
    expect(page.locator("#text-2 strong")).to_have_text("Total")
    link = page.locator("#text-2 a")
    expect(link).to_have_count(1)
    expect(link).to_have_attribute("href", "https://example.com")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(page.locator("#text-2 img, #text-2 svg, #text-2 script")).to_have_count(0)
    expect(page.locator("#text-2")).to_contain_text("<script>window.__xss=1</script>")
    expect(page.locator("#text-2 .invisible-char")).to_have_count(2)
    assert page.evaluate("window.__xss") is None
    view.axe("markdown transcript")
    view.shot("transcript-markdown.png")
    view.watch.assert_clean()


def test_back_and_reload_return_to_the_reading_position(hub, ui):
    archive_id, run_id = shift(hub, 300, conversation="conv-back", run_turn=226)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("support"))
    view.goto(f"/console/conversations/{archive_id}")
    events = page.locator("[data-sequence]")
    entries = page.evaluate("history.length")
    for loaded in (400, 600, 800, 1000, 1200, 1201):  # 1,201 events: turn 226 has its run link
        page.eval_on_selector(".transcript .more", "el => el.scrollIntoView()")
        page.mouse.wheel(0, 1)
        expect(events).to_have_count(loaded)
    expect(page.get_by_text("End of transcript.")).to_be_visible()

    page.eval_on_selector("#seq-900", "el => el.scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, 1)
    page.wait_for_url(re.compile(r"\?at=90[01]$"))  # replaced as the reader scrolls
    at = page.url.rsplit("=", 1)[1]
    assert page.evaluate("history.length") == entries  # replaced, never pushed

    page.locator(f"a[href='/console/runs/{run_id}']").click()
    page.wait_for_url(f"**/console/runs/{run_id}")  # (a replaceState would satisfy expect_navigation)
    expect(page.get_by_role("heading", name=f"Run {run_id}")).to_be_visible()
    page.go_back()
    page.wait_for_url(re.compile(rf"at={at}$"))
    expect(page.locator(f"#seq-{at}")).to_be_in_viewport()
    expect(page.locator("#seq-900")).to_be_in_viewport()

    page.reload()
    expect(page.locator(f"#seq-{at}")).to_be_in_viewport()
    expect(page.locator(f"#seq-{at}")).to_have_attribute("aria-current", "location")
    view.watch.assert_clean()


def test_search_inside_a_transcript_links_to_each_hit(hub, ui):
    archive_id, _ = shift(hub, 100, conversation="conv-search",
                          special={40: "Where did the <b>blue crate</b> go?", 90: "The BLUE CRATE is in aisle 9."})
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    view.goto(f"/console/conversations/{archive_id}")
    box = page.get_by_label("Search in this transcript")
    box.fill("blue crate")
    box.press("Enter")
    hits = page.locator("#transcript-hits [data-hit]")
    expect(hits).to_have_count(2)
    expect(page.locator("#transcript-hits")).to_contain_text("2 messages contain “blue crate”.")
    expect(hits.first.locator("mark")).to_have_text("blue crate")
    expect(hits.first).to_contain_text("<b>")  # shown as text
    expect(hits.nth(1).locator("mark")).to_have_text("BLUE CRATE")
    assert page.url.endswith(f"/console/conversations/{archive_id}")  # a fragment, the page stays
    view.axe("transcript search")
    with page.expect_navigation():
        hits.nth(1).get_by_role("link", name="#358").click()
    assert re.search(r"\?at=358#seq-358$", page.url)
    expect(page.locator("#seq-358")).to_be_in_viewport()
    expect(page.locator("#seq-358")).to_have_attribute("aria-current", "location")
    view.watch.assert_clean()
