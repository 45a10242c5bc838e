"""Hostile text in Chromium: a transcript of 40 messages of 64,000 hidden characters opens as
a small page, each message one marker with its count, in the plain and the Markdown view; a
transcript of alternating hidden characters loads the rest of itself as the reader scrolls."""
from __future__ import annotations

from playwright.sync_api import expect

from tests.test_console_text_bounds import ALTERNATING, NEL_RUN, TWO_MB, fill


def test_forty_messages_of_hidden_characters_open_with_one_marker_each(hub, ui):
    archive_id = hub.archive("conv-hidden-runs")
    fill(hub, archive_id, 20, NEL_RUN, NEL_RUN)
    view = ui()
    page = view.page
    view.sign_in(hub.admin("auditor"))
    for query in ("", "?view=markdown"):
        response = view.goto(f"/console/conversations/{archive_id}{query}")
        assert len(response.body()) < TWO_MB
        expect(page.locator("[data-sequence]")).to_have_count(80)
        markers = page.locator(".bubble .invisible-char")
        expect(markers).to_have_count(40)
        expect(markers.first).to_have_text("⟨NEL \u00d764,000⟩")
        expect(markers.first).to_have_attribute("title", "U+0085 CONTROL CHARACTER \u00d764,000")
        expect(markers.first).to_be_visible()
        expect(page.get_by_text("End of transcript.")).to_be_visible()
        assert page.evaluate("document.body.innerText.includes('\\u0085')") is False
    view.watch.assert_clean()


def test_a_transcript_past_the_page_budget_loads_the_rest_as_the_reader_scrolls(hub, ui):
    archive_id = hub.archive("conv-alternating")
    fill(hub, archive_id, 10, ALTERNATING, ALTERNATING)
    view = ui()
    view.sign_in(hub.admin("auditor"))
    response = view.goto(f"/console/conversations/{archive_id}")
    assert len(response.body()) < TWO_MB and response.body().count(b"data-sequence=") < 40
    events = view.page.locator("[data-sequence]")
    view.scroll_transcript_to_end()
    expect(events).to_have_count(40)
    sequences = view.page.eval_on_selector_all("[data-sequence]", "els => els.map(e => +e.dataset.sequence)")
    assert sequences == list(range(1, 41))
    view.watch.assert_clean()
