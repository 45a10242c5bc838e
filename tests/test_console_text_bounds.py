"""Hostile text on the console's pages: hidden characters in long runs, hidden and visible
characters alternating, and Markdown shaped to parse slowly cost a page at most a small multiple
of what it shows. Archives are filled through the agent API and read through the console."""
from __future__ import annotations

import re
from html import unescape

import pytest

from admin_app import limits
from admin_app.console.text import PAGE_SHARE_SPENT, TOO_MUCH_SYNTAX
from tests.test_console_transcript import Reader, _sentinel, _sequences, reads

NEL_RUN = "\x85" * limits.AUDIT_TEXT_MAX_UNITS
RUN_MARKER = ('<span class="invisible-char" title="U+0085 CONTROL CHARACTER \u00d764,000">⟨NEL \u00d764,000⟩</span>')
ALTERNATING = "a\x85" * (limits.AUDIT_TEXT_MAX_UNITS // 2)
TITLED = re.compile(r'<span class="invisible-char" title="[^"<]+">⟨[^⟩<]+⟩</span>')
TWO_MB = 2 * limits.MIB


def fill(hub, archive_id: str, turns: int, question: str, answer: str) -> None:
    # One turn an append: two messages of 64,000 characters are all one append may carry.
    for n in range(turns):
        hub.append(archive_id, hub.exchange(archive_id, 4 * n + 1, f"turn-{n + 1}", question, answer))


@pytest.fixture
def hidden_runs(hub):
    """40 messages of 64,000 U+0085 NEXT LINE: (archive id, a signed-in auditor)."""
    archive_id = hub.archive("conv-hidden-runs")
    fill(hub, archive_id, 20, NEL_RUN, NEL_RUN)
    return archive_id, Reader(hub.server.url, hub.admin("auditor"))


def test_forty_messages_of_hidden_characters_make_a_small_page_in_both_views(hidden_runs, sql, monkeypatch):
    # Bytes, not time, are checked here (bench/hostile_text.py times the page): all 40 as Markdown.
    monkeypatch.setattr(limits, "CONSOLE_MARKDOWN_SECONDS_PER_PAGE", 60)
    archive_id, reader = hidden_runs
    for view in ("", "?view=markdown"):
        page = reader.get(f"/console/conversations/{archive_id}{view}")
        assert page.status_code == 200
        assert len(page.content) < TWO_MB, len(page.content)
        assert "\x85" not in page.text
        assert page.text.count(RUN_MARKER) == 40
        assert _sequences(page.text) == list(range(1, 81)) and "End of transcript." in page.text
        assert "Shown as plain text" not in page.text
    assert page.text.count('<div class="text md clip"') == 40  # Markdown, collapsed as long messages are
    assert reads(sql, archive_id)[-1] == ("transcript_view", 1, 80)


def test_a_page_of_alternating_hidden_characters_stops_at_its_byte_budget_and_loads_the_rest(hub, sql):
    archive_id = hub.archive("conv-alternating")
    fill(hub, archive_id, 10, ALTERNATING, ALTERNATING)  # 20 messages, each ~0.33 MB as HTML
    reader = Reader(hub.server.url, hub.admin("auditor"))

    page = reader.get(f"/console/conversations/{archive_id}")
    assert page.status_code == 200 and len(page.content) < TWO_MB, len(page.content)
    first = _sequences(page.text)
    assert first[0] == 1 and 2 <= len(first) < 40 and "End of transcript." not in page.text
    assert len(TITLED.findall(page.text)) == limits.CONSOLE_MARKERS_PER_TEXT * sum(
        1 for s in first if s % 4 in (2, 3))
    assert "\x85" not in page.text and "a⟨NEL⟩a⟨NEL⟩" in page.text
    assert reads(sql, archive_id)[-1] == ("transcript_view", first[0], first[-1])

    # Following the sentinels shows every event once, each fragment within the budget too.
    shown, url = list(first), _sentinel(page.text, "more")
    while url:
        fragment = reader.get(url, headers={"HX-Request": "true"})
        assert fragment.status_code == 200 and len(fragment.content) < TWO_MB
        shown += _sequences(fragment.text)
        url = _sentinel(fragment.text, "more")
    assert shown == list(range(1, 41)) and "End of transcript." in fragment.text

    # A window around a target keeps the target and reaches out both ways as far as the budget lets it.
    window = reader.get(f"/console/conversations/{archive_id}?at=22").text
    around = _sequences(window)
    assert 22 in around and around == list(range(around[0], around[-1] + 1)) and len(around) < 40
    assert _sentinel(window, "earlier") == f"/console/conversations/{archive_id}/events?before={around[0]}"
    assert _sentinel(window, "more") == f"/console/conversations/{archive_id}/events?after={around[-1]}"

    # Read backwards, a page keeps the events nearest where it starts.
    earlier = reader.get(f"/console/conversations/{archive_id}/events?before=40").text
    back = _sequences(earlier)
    assert back[-1] == 39 and back == list(range(back[0], 40)) and back[0] > 1
    assert _sentinel(earlier, "earlier") == f"/console/conversations/{archive_id}/events?before={back[0]}"


def test_the_markdown_view_shows_slow_or_too_much_markdown_plain_and_says_why(hub, monkeypatch):
    monkeypatch.setattr(limits, "CONSOLE_MARKDOWN_SECONDS_PER_PAGE", 1e-9)  # spent by the first message
    archive_id = hub.archive("conv-markdown-bombs")
    bomb, heavy = "[" * limits.AUDIT_TEXT_MAX_UNITS, "*a* " * 1500  # 64,000 and 3,000 syntax characters
    fill(hub, archive_id, 5, bomb, heavy)
    reader = Reader(hub.server.url, hub.admin("auditor"))
    page = reader.get(f"/console/conversations/{archive_id}?view=markdown")
    assert page.status_code == 200 and len(page.content) < TWO_MB
    text = unescape(page.text)
    assert text.count(f"Shown as plain text: {TOO_MUCH_SYNTAX}.") == 5
    # The bombs cost no time: they are never parsed. The first heavy message spends the page's.
    assert page.text.count("<em>a</em>") == 1500
    assert text.count(f"Shown as plain text: {PAGE_SHARE_SPENT}.") == 4
    assert page.text.count('<div class="text md clip"') == 1
    assert page.text.count("*a* " * 1500) == 4
    assert page.text.count(bomb) == 5  # the bombs, whole, as text


def test_search_hits_in_hostile_text_are_bounded_snippets(hub):
    archive_id = hub.archive("conv-hostile-search")
    fill(hub, archive_id, 30, ("pallet\u200b" * 9200)[:limits.AUDIT_TEXT_MAX_UNITS], "Answer.")
    reader = Reader(hub.server.url, hub.admin("auditor"))
    inside = reader.get(f"/console/conversations/{archive_id}/search", params={"q": "PALLET"},
                        headers={"HX-Request": "true"})
    everywhere = reader.get("/console/conversations/", params={"q": "pallet"})
    for page, hits in ((inside, 'data-hit="'), (everywhere, "data-hit>")):
        assert page.status_code == 200
        assert page.text.count(hits) == 30 and "\u200b" not in page.text
        assert page.text.count("<mark>pallet</mark>") >= 30
        # Each snippet is a few hundred characters of the message, its markers titled or short.
        assert len(page.content) < 30 * 16 * 1024, len(page.content)
        assert 'title="U+200B ZERO WIDTH SPACE">⟨ZWSP⟩</span>' in page.text


def test_a_page_always_shows_one_event_so_reading_moves_on_whatever_the_budget(hub, monkeypatch):
    monkeypatch.setattr(limits, "CONSOLE_PAGE_TEXT_BYTES", 1)
    archive_id = hub.archive("conv-tiny-budget")
    fill(hub, archive_id, 2, "Question", "Answer")
    reader = Reader(hub.server.url, hub.admin("auditor"))
    page = reader.get(f"/console/conversations/{archive_id}").text
    shown, url = _sequences(page), _sentinel(page, "more")
    assert shown == [1, 2]  # the turn's start costs no text; the first message spends the budget
    while url:
        fragment = reader.get(url, headers={"HX-Request": "true"}).text
        assert _sequences(fragment) and fragment.count('<div class="bubble') <= 1  # one message at most
        shown += _sequences(fragment)
        url = _sentinel(fragment, "more")
    assert shown == list(range(1, 9)) and "End of transcript." in fragment
    back = reader.get(f"/console/conversations/{archive_id}/events?before=8").text
    assert _sequences(back) == [7] and _sentinel(back, "earlier").endswith("before=7")
