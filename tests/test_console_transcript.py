"""Issue 19, transcript reading on the server: windows around any position, loading before and
after it, jump to the end, search inside one transcript, long messages, the Markdown view, hidden
characters made visible, the access log of each page, and the refusals of bad parameters."""
from __future__ import annotations

import re
from html import unescape

import pytest
import requests

from admin_app.console import conversations
from tests.helpers import PASSWORD

NEEDLE = "Quokka-7 <b>pallet</b>"
LONG = "line of a long report\n" * 200  # 4,400 characters, 200 lines
SPOOF = "invoice approved\u202edegnahc ton\u200b"


def _sequences(html: str) -> list[int]:
    return [int(s) for s in re.findall(r'data-sequence="(\d+)"', html)]


def _sentinel(html: str, kind: str) -> str | None:
    found = re.findall(rf'<div class="{kind}" hx-get="([^"]+)" hx-trigger="revealed"', html)
    assert len(found) <= 1
    return unescape(found[0]) if found else None


class Reader:
    def __init__(self, base: str, username: str):
        self.base, self.http = base, requests.Session()
        page = self.http.get(base + "/console/login", timeout=60)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        done = self.http.post(base + "/console/login", allow_redirects=False, timeout=60,
                              data={"username": username, "password": PASSWORD, "csrf_token": token})
        assert done.status_code == 303, done.text

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.http.get(self.base + path, allow_redirects=False, timeout=60, **kwargs)


@pytest.fixture
def transcript(hub):
    """An archive of 1,000 events (250 turns); turn 100 asks the needle, turn 120 sends a long
    report, turn 130 a spoofing message. Returns (archive id, a signed-in support reader)."""
    archive_id = hub.archive("conv-transcript", "Ops \u202eevil label")
    events: list[dict] = []
    for n in range(1, 251):
        question = {100: f"Where is {NEEDLE}?", 130: SPOOF}.get(n, f"Question {n}")
        answer = LONG if n == 120 else f"Answer {n}"
        events += hub.exchange(archive_id, len(events) + 1, f"turn-{n}", question, answer)
    hub.append(archive_id, events)
    return archive_id, Reader(hub.server.url, hub.admin("support"))


def reads(sql, archive_id: str) -> list[tuple]:
    return sql("SELECT action, first_sequence, last_sequence FROM bz_access_log WHERE target = %s ORDER BY id",
               (archive_id,))


def test_a_window_around_a_target_loads_earlier_and_later_events(transcript, sql):
    archive_id, reader = transcript
    page = reader.get(f"/console/conversations/{archive_id}?at=500")
    assert page.status_code == 200
    assert _sequences(page.text) == list(range(450, 650))
    target = r'class="event [a-z_]+ target" id="seq-500" data-sequence="500" aria-current="location"'
    assert re.search(target, page.text)
    assert page.text.count('aria-current="location"') == 1
    assert _sentinel(page.text, "earlier") == f"/console/conversations/{archive_id}/events?before=450"
    assert _sentinel(page.text, "more") == f"/console/conversations/{archive_id}/events?after=649"

    earlier = reader.get(_sentinel(page.text, "earlier"), headers={"HX-Request": "true"})
    assert earlier.status_code == 200 and "<html" not in earlier.text
    assert _sequences(earlier.text) == list(range(250, 450))  # ascending, just before 450
    assert _sentinel(earlier.text, "earlier") == f"/console/conversations/{archive_id}/events?before=250"
    assert _sentinel(earlier.text, "more") is None and "End of transcript" not in earlier.text
    first = reader.get(f"/console/conversations/{archive_id}/events?before=201")
    assert _sequences(first.text) == list(range(1, 201)) and _sentinel(first.text, "earlier") is None

    later = reader.get(_sentinel(page.text, "more"), headers={"HX-Request": "true"})
    assert _sequences(later.text) == list(range(650, 850))
    # Each page shown is one read, with the sequences it showed.
    assert reads(sql, archive_id) == [("transcript_view", 450, 649), ("transcript_view", 250, 449),
                                      ("transcript_view", 1, 200), ("transcript_view", 650, 849)]


def test_jump_to_start_and_end_render_only_a_window(transcript):
    archive_id, reader = transcript
    start = reader.get(f"/console/conversations/{archive_id}")
    assert _sequences(start.text) == list(range(1, 201))
    assert _sentinel(start.text, "earlier") is None and 'aria-current' not in start.text
    assert f'href="/console/conversations/{archive_id}?at=1"' in start.text
    assert f'href="/console/conversations/{archive_id}?at=end"' in start.text
    for path in ("?at=end", "?at=1000"):
        end = reader.get(f"/console/conversations/{archive_id}{path}")
        assert end.status_code == 200
        assert _sequences(end.text) == list(range(801, 1001))
        assert 'id="seq-1000" data-sequence="1000" aria-current="location"' in end.text
        assert "End of transcript." in end.text
        assert _sentinel(end.text, "earlier") == f"/console/conversations/{archive_id}/events?before=801"
    one = reader.get(f"/console/conversations/{archive_id}?at=1")
    assert _sequences(one.text) == list(range(1, 151)) and _sentinel(one.text, "earlier") is None


BAD_AT = "“at” must be a sequence of this transcript, from 1 to 1000, or “end”."
BAD_BEFORE = "“before” must be a sequence number, a whole number from 1 to 2147483647."
BAD_AFTER = "“after” must be a sequence number, a whole number from 0 to 2147483647."
NO_QUERY = "Type the words to look for in this transcript."


def test_bad_at_before_after_and_search_are_refused_with_a_400_page_and_nothing_read(transcript, sql):
    archive_id, reader = transcript
    base = f"/console/conversations/{archive_id}"
    refusals = [(f"?at={at}", BAD_AT) for at in ("0", "1001", "-3", "abc", "9" * 12, "%D9%A3", "1.5", "END")]
    refusals += [(f"/events?before={b}", BAD_BEFORE) for b in ("0", "x", "1.5", "9" * 12)]
    refusals += [(f"/events?after={a}", BAD_AFTER) for a in ("-1", "abc", "9" * 12, "1.5")]
    refusals += [("/events?before=10&after=5", "Ask for the events “before” a sequence or “after” it, not both."),
                 ("/search", NO_QUERY), ("/search?q=+++", NO_QUERY),
                 ("/search?q=" + "x" * 201, "A search inside a transcript is at most 200 characters."),
                 ("/search?q=answer&after=-1", BAD_AFTER)]
    for path, message in refusals:
        for headers in ({}, {"HX-Request": "true"}):
            response = reader.get(base + path, headers=headers)
            assert response.status_code == 400, path
            assert message in unescape(response.text), (path, response.text[-2000:])
            assert "Question" not in response.text and "data-hit" not in response.text
    assert reads(sql, archive_id) == []


def test_search_inside_a_transcript_lists_marked_escaped_hits_with_a_count(transcript, sql, monkeypatch):
    archive_id, reader = transcript
    hits = reader.get(f"/console/conversations/{archive_id}/search", params={"q": "quokka-7 <B>"},
                      headers={"HX-Request": "true"})
    assert hits.status_code == 200 and "<html" not in hits.text
    assert "1 message contains “quokka-7 &lt;B&gt;”." in hits.text
    assert 'data-hit="398"' in hits.text  # turn 100's user message
    assert f'href="/console/conversations/{archive_id}?at=398#seq-398"' in hits.text
    assert "Where is <mark>Quokka-7 &lt;b&gt;</mark>pallet&lt;/b&gt;?" in hits.text
    assert "<b>" not in hits.text
    assert reads(sql, archive_id) == [("transcript_view", 398, 398)]  # the one hit it showed

    # Keyset pages of 50 with the total; the same URL opened as a link is a whole page.
    first = reader.get(f"/console/conversations/{archive_id}/search", params={"q": "answer"},
                       headers={"HX-Request": "true"})
    assert "249 messages contain “answer”." in first.text  # every answer but the long report
    shown = [int(s) for s in re.findall(r'data-hit="(\d+)"', first.text)]
    assert len(shown) == 50 and shown == sorted(shown) and shown[0] == 3
    more = unescape(re.search(r'class="more-hits" href="([^"]+)"', first.text).group(1))
    assert f"after={shown[-1]}" in more
    second = reader.get(more)
    assert second.status_code == 200 and "<html" in second.text
    nxt = [int(s) for s in re.findall(r'data-hit="(\d+)"', second.text)]
    assert nxt[0] > shown[-1] and len(nxt) == 50
    # Counting stops past a cap, so a word in every message costs what a rare one does.
    monkeypatch.setattr(conversations, "COUNT_CAP", 100)
    capped = reader.get(f"/console/conversations/{archive_id}/search", params={"q": "answer"})
    assert "More than 100 messages contain “answer”." in capped.text
    assert len(re.findall(r'data-hit="(\d+)"', capped.text)) == 50
    # A percent sign or an underscore is looked for as itself.
    none = reader.get(f"/console/conversations/{archive_id}/search", params={"q": "%"})
    assert "No message contains “%”." in unescape(none.text) and "data-hit" not in none.text


def test_long_messages_collapse_and_hidden_characters_show_as_markers(transcript):
    archive_id, reader = transcript
    page = reader.get(f"/console/conversations/{archive_id}?at=479").text
    report = re.search(r'<div class="text clip" id="text-479" dir="auto">', page)
    assert report, "the long report opens collapsed"
    assert ('data-expand aria-expanded="false" aria-controls="text-479" '
            'data-label="Show all (4,400 characters)">Show all (4,400 characters)</button>') in page
    assert '<div class="text" id="text-478" dir="auto">Question 120</div>' in page  # short: not clipped

    spoof = reader.get(f"/console/conversations/{archive_id}?at=518").text
    assert "\u202e" not in spoof and "\u200b" not in spoof
    assert ('invoice approved<span class="invisible-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨RLO⟩</span>'
            'degnahc ton<span class="invisible-char" title="U+200B ZERO WIDTH SPACE">⟨ZWSP⟩</span>') in spoof
    # The member label too, isolated from the text around it.
    assert ('<bdi>Ops <span class="invisible-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨RLO⟩</span>'
            'evil label</bdi>') in spoof


def test_the_markdown_view_is_kept_in_every_link_and_never_raw_html(hub):
    archive_id = hub.archive("conv-markdown")
    hostile = ('**bold** [site](https://example.com) [bad](javascript:alert(1)) <img src=x onerror=alert(1)>\n\n'
               '<script>alert(2)</script>')
    hub.append(archive_id, hub.exchange(archive_id, 1, "t1", hostile, "- one\n- two"))
    reader = Reader(hub.server.url, hub.admin("auditor"))
    plain = reader.get(f"/console/conversations/{archive_id}").text
    assert "**bold**" in plain and "<strong>" not in plain
    assert f'href="/console/conversations/{archive_id}?view=markdown">Markdown view</a>' in plain
    page = reader.get(f"/console/conversations/{archive_id}?view=markdown&at=2").text
    assert "<strong>bold</strong>" in page and "<li>one</li>" in page
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">site</a>' in page
    assert "javascript:" not in page.replace("[bad](javascript:alert(1))", "")
    assert "<img" not in page and "<script>alert" not in page and "&lt;script&gt;alert(2)" in page
    assert f'/console/conversations/{archive_id}?at=2&amp;view=markdown#seq-2' in page
    assert f'href="/console/conversations/{archive_id}?at=2">Plain text view</a>' in page
