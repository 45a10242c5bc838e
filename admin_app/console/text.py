"""Untrusted text as the console shows it.

`reveal` escapes text and replaces every character that is invisible or changes how the text
around it is displayed (controls, bidi embeddings and overrides, zero-width characters, tag
characters) with a visible marker, so a message cannot disguise itself: an override shown as
⟨RLO⟩ cannot reverse what follows it. `markdown` renders a message as CommonMark (no raw HTML,
links only to http, https and mailto), reveals the same characters in its text and passes the
result through an allow-list sanitizer.

Neither lets a text grow a page past a bound: a run of one hidden character is one marker with
its count (NEL times 64,000), a text shows CONSOLE_MARKERS_PER_TEXT markers with a title and the
rest as their short name only, and `Page` gives a transcript page a byte budget and a time for
Markdown, past which messages wait for the next page or are shown plain.
"""
from __future__ import annotations

import re
import string
import time
from collections.abc import Sequence
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup, escape

from .. import limits
from ..untrusted_text import RUN, describe, marker


class Markers:
    """Turns each run of one hidden character into a marker: the first `full` of a text with the
    code point's name in a title, the rest as the short name alone, a few bytes each, so a text
    alternating visible and hidden characters costs a small multiple of its own size."""

    def __init__(self, full: int = limits.CONSOLE_MARKERS_PER_TEXT) -> None:
        self.full = full

    def __call__(self, match: re.Match[str]) -> str:
        run = match.group()
        shown = escape(marker(run))  # ⟨RLO⟩, or ⟨NEL⟩ with a count
        if self.full <= 0:
            return str(shown)
        self.full -= 1
        title = describe(run[0])[1] + (f" \u00d7{len(run):,}" if len(run) > 1 else "")  # a multiplication sign
        return f'<span class="invisible-char" title="{escape(title)}">{shown}</span>'


def reveal(value: object, markers: Markers | None = None) -> Markup:
    """The Jinja filter: `value` escaped, each run of a hidden character replaced by a visible
    marker. The parts of one text share their `markers`."""
    if value is None:
        return Markup("")
    # Escaping leaves the hidden characters alone, and markers are added after it.
    return Markup(RUN.sub(markers if markers is not None else Markers(),  # noqa: S704 - escaped first, markers are ours
                          str(escape(str(value)))))


# ---------------------------------------------------------------- Markdown

SCHEMES = ("http://", "https://", "mailto:")
TAGS = {"p", "br", "hr", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li", "a",
        "h1", "h2", "h3", "h4", "h5", "h6", "span"}
ATTRIBUTES = {"a": {"href"}, "ol": {"start"}, "span": {"title"}}  # class: allowed_classes


def _revealed_text(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return str(reveal(tokens[idx].content, env.get("markers")))


def _revealed_code_inline(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return f"<code>{reveal(tokens[idx].content, env.get('markers'))}</code>"


def _revealed_block(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    # Fenced and indented code alike; an info string never becomes an attribute.
    return f"<pre><code>{reveal(tokens[idx].content, env.get('markers'))}</code></pre>\n"


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.disable("image")  # no remote images: they would fetch from wherever a message says
    md.validateLink = lambda url: url.strip().lower().startswith(SCHEMES)  # type: ignore[method-assign]
    md.add_render_rule("text", _revealed_text)
    md.add_render_rule("code_inline", _revealed_code_inline)
    md.add_render_rule("code_block", _revealed_block)
    md.add_render_rule("fence", _revealed_block)
    return md


PARSER = _parser()
# The parser drops what is nested past its limit, so a message that reaches it is shown plain.
DEEPEST = PARSER.options["maxNesting"] - 1
NO_SYNTAX = str.maketrans("", "", string.punctuation + "\n")
TOO_MUCH_SYNTAX = (f"it has more than {limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE:,} Markdown syntax characters "
                   "(punctuation and line breaks)")
TOO_DEEP = "it is nested too deeply for the Markdown view"
PAGE_SHARE_SPENT = "this page has used its time for rendering Markdown"


def syntax_chars(value: str) -> int:
    """What parsing `value` as Markdown costs: its ASCII punctuation and line breaks."""
    return len(value) - len(value.translate(NO_SYNTAX))


def _markdown(value: str) -> Markup | None:
    """`value` as sanitised CommonMark, or None when it nests past what the parser shows."""
    env = {"markers": Markers()}
    tokens = PARSER.parse(value, env)
    if any(token.level >= DEEPEST for token in tokens):
        return None
    html = PARSER.renderer.render(tokens, PARSER.options, env)
    clean = nh3.clean(html, tags=TAGS, attributes=ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                      link_rel="noopener noreferrer nofollow",
                      allowed_classes={"span": {"invisible-char"}}, strip_comments=True)
    return Markup(clean)  # noqa: S704 - the sanitizer's output


def markdown(value: object) -> Markup:
    """One message rendered as CommonMark and sanitised (an allow-list of tags and attributes,
    links only to http/https/mailto, each with rel="noopener noreferrer nofollow"); shown plain
    when it has too much syntax to parse quickly or nests too deeply (`Page.message`)."""
    if value is None:
        return Markup("")
    return Page().message(str(value), as_markdown=True)[0]


class Page:
    """What one transcript page may still spend on message text: bytes of HTML (the page takes
    messages while any are left, so it ends within one message's HTML of the budget) and
    seconds of Markdown rendering (one message's worth past it at most)."""

    def __init__(self) -> None:
        self.bytes = limits.CONSOLE_PAGE_TEXT_BYTES
        self.markdown_seconds = limits.CONSOLE_MARKDOWN_SECONDS_PER_PAGE

    @property
    def spent(self) -> bool:
        return self.bytes <= 0

    def message(self, content: str, as_markdown: bool) -> tuple[Markup, str | None]:
        """A message's HTML and, when Markdown was asked for and plain text is shown, why."""
        html, why = None, None
        if as_markdown:
            if syntax_chars(content) > limits.CONSOLE_MARKDOWN_SYNTAX_PER_MESSAGE:
                why = TOO_MUCH_SYNTAX
            elif self.markdown_seconds <= 0:
                why = PAGE_SHARE_SPENT
            else:
                started = time.perf_counter()
                html = _markdown(content)
                self.markdown_seconds -= time.perf_counter() - started
                why = TOO_DEEP if html is None else None
        if html is None:
            html = reveal(content)
        self.bytes -= len(html.encode())
        return html, why


# ---------------------------------------------------------------- search snippets

EMPTY, ELLIPSIS, MARK = Markup(""), Markup("…"), Markup("<mark>{}</mark>")


def marked(content: str, term: str) -> Markup:
    """`content` escaped and revealed, every occurrence of `term` (any case) in <mark>."""
    out, at, markers = EMPTY, 0, Markers()
    for found in re.finditer(re.escape(term), content, re.IGNORECASE):
        out += reveal(content[at:found.start()], markers) + MARK.format(reveal(found.group(), markers))
        at = found.end()
    return out + reveal(content[at:], markers)


def snippet(content: str, query: str, around: int = 80) -> Markup:
    """The part of `content` around the first match of `query`, escaped and revealed, the match in
    <mark>. (The database matched with ILIKE; where Python's case folding disagrees, the snippet
    is the start of the message, unmarked.)"""
    found, markers = re.search(re.escape(query), content, re.IGNORECASE), Markers()
    if found is None:
        start, end = 0, min(2 * around, len(content))
        middle = reveal(content[:end], markers)
    else:
        start, end = max(found.start() - around, 0), min(found.end() + around, len(content))
        middle = (reveal(content[start:found.start()], markers) + MARK.format(reveal(found.group(), markers))
                  + reveal(content[found.end():end], markers))
    return (ELLIPSIS if start else EMPTY) + middle + (ELLIPSIS if end < len(content) else EMPTY)
