"""Issue 19: untrusted text in the console. `reveal` escapes and makes hidden characters
visible; `markdown` renders CommonMark with no raw HTML and sanitises it; `snippet` marks a
search hit. Unit tests, no database."""
from __future__ import annotations

import re

import pytest
from markupsafe import Markup

from admin_app import limits
from admin_app.console.text import (PAGE_SHARE_SPENT, TOO_DEEP, TOO_MUCH_SYNTAX, Markers, Page, markdown, marked,
                                    reveal, snippet, syntax_chars)
from admin_app.untrusted_text import HIDDEN, describe

# Pure Python: no database.
pytestmark = pytest.mark.any_server


def marker(short: str, title: str) -> str:
    return f'<span class="invisible-char" title="{title}">⟨{short}⟩</span>'


def test_reveal_escapes_and_replaces_bidi_overrides_and_zero_width_characters():
    out = reveal('pay <b>"A"</b> & \u202eB\u200b\u2066C\u2069\ufeff')
    assert isinstance(out, Markup)
    assert out == ("pay &lt;b&gt;&#34;A&#34;&lt;/b&gt; &amp; " + marker("RLO", "U+202E RIGHT-TO-LEFT OVERRIDE")
                   + "B" + marker("ZWSP", "U+200B ZERO WIDTH SPACE") + marker("LRI", "U+2066 LEFT-TO-RIGHT ISOLATE")
                   + "C" + marker("PDI", "U+2069 POP DIRECTIONAL ISOLATE")
                   + marker("BOM", "U+FEFF ZERO WIDTH NO-BREAK SPACE"))


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x7f", "\x85", "\u00ad", "\u061c", "\u180e",
                                  "\u200c", "\u200d", "\u200e", "\u200f", "\u2028", "\u202a", "\u202b",
                                  "\u202c", "\u202d", "\u2060", "\u2067", "\u2068", "\u3164", "\U000e0001"])
def test_every_hidden_character_becomes_a_marker_and_never_stays_in_the_output(char):
    out = reveal(f"a{char}b")
    assert char not in out
    shape = r'a<span class="invisible-char" title="U\+[0-9A-F]{4,5} [A-Z0-9 -]+">⟨[^⟩<]+⟩</span>b'
    assert re.fullmatch(shape, out), out


def test_newlines_tabs_and_ordinary_text_in_any_script_stay_as_they_are():
    text = "line 1\n\tline 2 — العربية עברית 中文 emoji 👍🏽 e\u0301"
    assert reveal(text) == text
    assert HIDDEN.search(text) is None
    assert reveal(None) == "" and reveal(42) == "42"


def test_tag_characters_spell_out_what_they_hide_escaped():
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "<hi>")
    assert reveal("ok" + smuggled) == ("ok" + marker("TAG &lt;", "U+E003C TAG LESS-THAN SIGN")
                                       + marker("TAG h", "U+E0068 TAG LATIN SMALL LETTER H")
                                       + marker("TAG i", "U+E0069 TAG LATIN SMALL LETTER I")
                                       + marker("TAG &gt;", "U+E003E TAG GREATER-THAN SIGN"))
    assert describe("\x1b") == ("ESC", "U+001B CONTROL CHARACTER")
    assert describe("\u0091") == ("U+0091", "U+0091 CONTROL CHARACTER")


def test_markdown_renders_commonmark():
    out = markdown("# Title\n\n**bold** _it_ `code`\n\n- one\n- two\n\n3. three\n\n> quoted\n\n```\nblock\n```")
    assert isinstance(out, Markup)
    for part in ("<h1>Title</h1>", "<strong>bold</strong>", "<em>it</em>", "<code>code</code>",
                 "<li>one</li>", '<ol start="3">', "<blockquote>", "<pre><code>block\n</code></pre>"):
        assert part in out, (part, out)


@pytest.mark.parametrize("source", [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "<div onclick=alert(1)>\n\n*inside*\n\n</div>",
    "<!-- comment --><iframe src=https://evil.example></iframe>",
    "<style>body{display:none}</style>",
    "<svg onload=alert(1)></svg>",
])
def test_raw_html_in_markdown_is_shown_as_text(source):
    out = markdown(source)
    assert not re.search(r"<(script|img|a|div|iframe|style|svg)\b", out), out
    assert "&lt;" in out


@pytest.mark.parametrize("source", [
    "[x](javascript:alert(1))", "[x](JaVaScRiPt:alert(1))", "[x]( javascript:alert(1))",
    "[x](&#106;avascript:alert(1))", "[x](data:text/html;base64,PHNjcmlwdD4=)", "[x](vbscript:msgbox)",
    "[x](file:///etc/passwd)", "[x](/console/admins)", "<javascript:alert(1)>",
    "![pixel](https://tracker.example/p.png)", '[x](https://ok.example "t" onmouseover=alert(1))',
])
def test_links_are_only_http_https_and_mailto_and_images_never_load(source):
    out = markdown(source)
    assert "<img" not in out
    for href in re.findall(r'href="([^"]*)"', out):
        assert href.startswith(("https://", "http://", "mailto:")), out
    assert "onmouseover=" not in out.replace("onmouseover=alert(1))", "")


def test_allowed_links_get_rel_and_nothing_else():
    out = markdown("[site](https://example.com/a?b=1&c=2) <mailto:ops@example.com> [w](http://x.example)")
    assert '<a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer nofollow">site</a>' in out
    assert '<a href="mailto:ops@example.com" rel="noopener noreferrer nofollow">mailto:ops@example.com</a>' in out
    assert '<a href="http://x.example" rel="noopener noreferrer nofollow">w</a>' in out


def test_nested_markdown_and_hidden_characters_in_markdown():
    out = markdown("> - **[a `b\u202e` c](https://e.example)**\n>   - _deep \u200b_")
    assert "<blockquote>" in out and out.count("<ul>") == 2
    assert '<a href="https://e.example" rel="noopener noreferrer nofollow">a <code>b' in out
    assert "\u202e" not in out and "\u200b" not in out
    assert out.count('class="invisible-char"') == 2
    fenced = markdown("```html\n<script>x</script>\u202e\n```")
    assert fenced == ("<pre><code>&lt;script&gt;x&lt;/script&gt;" + marker("RLO", "U+202E RIGHT-TO-LEFT OVERRIDE")
                      + "\n</code></pre>\n")
    assert "\u202e" not in markdown("[a](https://e.example/\u202e)")


def test_a_hostile_class_or_style_does_not_survive_the_sanitizer():
    # Only the markers' own class is allowed: nothing in a message can produce an element.
    out = markdown('text <span class="invisible-char x" style="color:red">fake</span>')
    assert "<span" not in out and "&lt;span" in out


def test_snippet_marks_the_match_escaped_and_revealed():
    content = "a" * 100 + "Find <the> NEEDLE\u202e here" + "z" * 100
    out = snippet(content, "<THE> needle")
    assert out.startswith("…") and out.endswith("…")
    assert "<mark>&lt;the&gt; NEEDLE</mark>" in out
    assert marker("RLO", "U+202E RIGHT-TO-LEFT OVERRIDE") in out
    assert snippet("short text", "short") == "<mark>short</mark> text"
    assert snippet("no match here", "zzz") == "no match here"
    assert snippet("%_ literal", "%_") == "<mark>%_</mark> literal"


def test_marked_marks_every_match_escaped_and_revealed():
    out = marked("Pallets <b>and</b> PALLETS\u200b and pallets", "pallets")
    assert out.count("<mark>") == 3 and "<mark>PALLETS</mark>" in out
    assert "&lt;b&gt;and&lt;/b&gt;" in out and "<b>" not in out
    assert marker("ZWSP", "U+200B ZERO WIDTH SPACE") in out
    assert marked("nothing to find", "zzz") == "nothing to find"
    assert marked("a.b a*b", "a*b") == "a.b <mark>a*b</mark>"  # the term is text, not a pattern


# ---------------------------------------------------------------- bounds on hostile text

FULL = limits.CONSOLE_MARKERS_PER_TEXT
TITLED = re.compile(r'<span class="invisible-char" title="[^"<]+">⟨[^⟩<]+⟩</span>')


def test_a_run_of_one_hidden_character_is_one_marker_with_its_count():
    out = reveal("a" + "\x85" * 64000 + "b" + "\u202e\u202e" + "c")
    assert out == ("a" + marker("NEL \u00d764,000", "U+0085 CONTROL CHARACTER \u00d764,000") + "b"
                   + marker("RLO \u00d72", "U+202E RIGHT-TO-LEFT OVERRIDE \u00d72") + "c")
    # Different hidden characters side by side stay separate, each named.
    assert reveal("\u200b\u200b\u2066") == (marker("ZWSP \u00d72", "U+200B ZERO WIDTH SPACE \u00d72")
                                             + marker("LRI", "U+2066 LEFT-TO-RIGHT ISOLATE"))


def test_past_its_titled_markers_a_text_shows_each_run_by_its_short_name():
    text = "a\x85" * 32000
    out = reveal(text)
    assert "\x85" not in out
    assert len(TITLED.findall(out)) == FULL
    assert out.count("⟨NEL⟩") == 32000 and out.count("a") >= 32000
    assert out.endswith("a⟨NEL⟩") and out.startswith("a" + marker("NEL", "U+0085 CONTROL CHARACTER"))
    # Each text has its own markers; the parts of one text share theirs.
    assert len(TITLED.findall(reveal("a\x85" * (FULL + 5)))) == FULL
    shared = Markers()
    parts = [reveal("\u200ba" * 40, shared), reveal("\u200ba" * 40, shared)]
    assert [len(TITLED.findall(p)) for p in parts] == [40, FULL - 40]


@pytest.mark.parametrize("text", [
    "\x85" * 64000,                                            # one long run
    "a\x85" * 32000,                                           # alternating visible and hidden
    "\x01\x02" * 32000,                                        # alternating hidden characters
    "".join(chr(0xE0000 + ord(c)) for c in "<hi>") * 16000,    # tag characters spelling text
    "\u202e\u200b<\u2066&\U000e0001\"\u00ad" * 8000,           # every kind mixed with escapes
    '"' * 64000,                                               # escaping alone
])
def test_hostile_text_costs_a_small_multiple_of_its_size(text):
    out = reveal(text)
    assert not HIDDEN.search(out)
    # A titled marker costs at most ~120 bytes; anything else at most 14 bytes a character.
    assert len(out.encode()) <= 14 * len(text) + FULL * 120, len(out.encode())
    assert len(TITLED.findall(out)) <= FULL


def test_search_snippets_of_hostile_text_are_bounded_and_marked():
    content = ("pallet\x85" * 9000)[:64000]
    hit = snippet(content, "PALLET")
    assert hit.startswith("<mark>pallet</mark>") and hit.endswith("…") and "\x85" not in hit
    assert len(hit.encode()) <= 14 * 161 + FULL * 120
    excerpt = marked(("a\u200b" * 110)[:220] + "needle", "needle")
    assert len(TITLED.findall(excerpt)) == FULL and excerpt.endswith("<mark>needle</mark>")
    assert "\u200b" not in excerpt and excerpt.count("⟨ZWSP⟩") == 110  # titled or short, each shown


@pytest.mark.parametrize("source", ["[" * 64000, "*a" * 32000, "a\n" * 32000, "[x](https://e.example) " * 2800])
def test_markdown_with_more_syntax_than_a_message_may_have_is_shown_plain(source):
    assert syntax_chars(source) > limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE
    assert markdown(source) == reveal(source)
    html, why = Page().message(source, as_markdown=True)
    assert html == reveal(source) and why == TOO_MUCH_SYNTAX


def test_markdown_at_the_syntax_limit_still_renders():
    source = "**b** " * (limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE // 4)
    assert syntax_chars(source) == limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE
    html, why = Page().message(source, as_markdown=True)
    assert why is None and html.count("<strong>b</strong>") == limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE // 4


@pytest.mark.parametrize("source", ["> " * 30 + "secret", "- " * 30 + "secret", ">" * 5000 + "secret",
                                    "".join("  " * n + "- secret\n" for n in range(30))])
def test_markdown_nested_deeper_than_the_parser_shows_is_plain_and_nothing_is_dropped(source):
    html, why = Page().message(source, as_markdown=True)
    assert why == TOO_DEEP and html == reveal(source) and "secret" in html
    assert markdown(source) == reveal(source)
    shallow, why = Page().message("> " * 5 + "secret", as_markdown=True)
    assert why is None and shallow.count("<blockquote>") == 5 and "secret" in shallow


def test_a_page_renders_markdown_until_its_time_for_it_is_spent_then_shows_plain_text(monkeypatch):
    monkeypatch.setattr(limits, "CONSOLE_MARKDOWN_SECONDS_PER_PAGE", 1e-9)  # spent by any message
    page, heavy = Page(), "*a* " * 2000
    html, why = page.message(heavy, as_markdown=True)
    assert why is None and html.count("<em>a</em>") == 2000
    for later in (heavy, "plain words"):
        html, why = page.message(later, as_markdown=True)
        assert why == PAGE_SHARE_SPENT and html == reveal(later)
    plain, why = page.message(heavy, as_markdown=False)
    assert why is None and plain == reveal(heavy)
    # Time spent on plain text does not count against Markdown.
    fresh = Page()
    fresh.message("x" * 64000, as_markdown=False)
    assert fresh.message("_a_", as_markdown=True) == ("<p><em>a</em></p>\n", None)


def test_a_page_is_spent_once_its_bytes_are():
    page, message = Page(), "x" * 60000
    taken = 0
    while not page.spent:
        page.message(message, as_markdown=False)
        taken += 1
    assert taken == -(-limits.CONSOLE_PAGE_TEXT_BYTES // 60000)


def test_hidden_runs_in_markdown_are_one_marker_and_share_the_message_markers():
    out = markdown("**x" + "\x85" * 64000 + "**\n\n" + "_y_\u200b" * 100)
    assert "<strong>x" + marker("NEL \u00d764,000", "U+0085 CONTROL CHARACTER \u00d764,000") + "</strong>" in out
    assert len(TITLED.findall(out)) == FULL and out.count("⟨ZWSP⟩") == 100  # one NEL, then 63 of 100 titled
    assert "\x85" not in out and "\u200b" not in out
