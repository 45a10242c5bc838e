"""Untrusted text as the console shows it.

`reveal` escapes text and replaces every character that is invisible or changes how the text
around it is displayed (controls, bidi embeddings and overrides, zero-width characters, tag
characters) with a visible marker, so a message cannot disguise itself: an override shown as
⟨RLO⟩ cannot reverse what follows it. `markdown` renders a message as CommonMark (no raw HTML,
links only to http, https and mailto), reveals the same characters in its text and passes the
result through an allow-list sanitizer.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup, escape

# Short names for the characters people meet; the others are shown by code point.
SHORT = {
    0x00AD: "SHY", 0x034F: "CGJ", 0x061C: "ALM", 0x180E: "MVS",
    0x200B: "ZWSP", 0x200C: "ZWNJ", 0x200D: "ZWJ", 0x200E: "LRM", 0x200F: "RLM",
    0x2028: "LSEP", 0x2029: "PSEP",
    0x202A: "LRE", 0x202B: "RLE", 0x202C: "PDF", 0x202D: "LRO", 0x202E: "RLO",
    0x2060: "WJ", 0x2061: "FA", 0x2062: "IT", 0x2063: "IS", 0x2064: "IP",
    0x2066: "LRI", 0x2067: "RLI", 0x2068: "FSI", 0x2069: "PDI",
    0xFEFF: "BOM", 0x00: "NUL", 0x1B: "ESC", 0x7F: "DEL",
}
# \n and \t are the only controls a message may show as themselves.
HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def describe(char: str) -> tuple[str, str]:
    """(marker text, title) of one hidden character, e.g. ("RLO", "U+202E RIGHT-TO-LEFT OVERRIDE")."""
    point = ord(char)
    name = unicodedata.name(char, "CONTROL CHARACTER" if point < 0xA0 else "FORMAT CHARACTER")
    if 0xE0020 <= point <= 0xE007E:  # tag characters spell ASCII nobody sees
        short = "TAG " + chr(point - 0xE0000)
    else:
        short = SHORT.get(point, f"U+{point:04X}")
    return short, f"U+{point:04X} {name}"


def _marker(match: re.Match[str]) -> str:
    short, title = describe(match.group())
    return f'<span class="invisible-char" title="{escape(title)}">⟨{escape(short)}⟩</span>'


def reveal(value: object) -> Markup:
    """The Jinja filter: `value` escaped, each hidden character replaced by a visible marker."""
    if value is None:
        return Markup("")
    # Escaping leaves the hidden characters alone, and markers are added after it.
    return Markup(HIDDEN.sub(_marker, str(escape(str(value)))))  # noqa: S704 - escaped first, markers are ours


# ---------------------------------------------------------------- Markdown

SCHEMES = ("http://", "https://", "mailto:")
TAGS = {"p", "br", "hr", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li", "a",
        "h1", "h2", "h3", "h4", "h5", "h6", "span"}
ATTRIBUTES = {"a": {"href"}, "ol": {"start"}, "span": {"title"}}  # class: allowed_classes


def _revealed_text(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return str(reveal(tokens[idx].content))


def _revealed_code_inline(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    return f"<code>{reveal(tokens[idx].content)}</code>"


def _revealed_block(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    # Fenced and indented code alike; an info string never becomes an attribute.
    return f"<pre><code>{reveal(tokens[idx].content)}</code></pre>\n"


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


def markdown(value: object) -> Markup:
    """The Jinja filter: a message rendered as CommonMark and sanitised (an allow-list of tags and
    attributes, links only to http/https/mailto, each with rel="noopener noreferrer nofollow")."""
    if value is None:
        return Markup("")
    html = PARSER.render(str(value))
    return Markup(nh3.clean(html,  # noqa: S704 - the sanitizer's output tags=TAGS, attributes=ATTRIBUTES, url_schemes={"http", "https", "mailto"},
                            link_rel="noopener noreferrer nofollow",
                            allowed_classes={"span": {"invisible-char"}}, strip_comments=True))


# ---------------------------------------------------------------- search snippets

EMPTY, ELLIPSIS, MARK = Markup(""), Markup("…"), Markup("<mark>{}</mark>")


def marked(content: str, term: str) -> Markup:
    """`content` escaped and revealed, every occurrence of `term` (any case) in <mark>."""
    out, at = EMPTY, 0
    for found in re.finditer(re.escape(term), content, re.IGNORECASE):
        out += reveal(content[at:found.start()]) + MARK.format(reveal(found.group()))
        at = found.end()
    return out + reveal(content[at:])


def snippet(content: str, query: str, around: int = 80) -> Markup:
    """The part of `content` around the first match of `query`, escaped and revealed, the match in
    <mark>. (The database matched with ILIKE; where Python's case folding disagrees, the snippet
    is the start of the message, unmarked.)"""
    found = re.search(re.escape(query), content, re.IGNORECASE)
    if found is None:
        start, end = 0, min(2 * around, len(content))
        middle = reveal(content[:end])
    else:
        start, end = max(found.start() - around, 0), min(found.end() + around, len(content))
        middle = (reveal(content[start:found.start()]) + MARK.format(reveal(found.group()))
                  + reveal(content[found.end():end]))
    return (ELLIPSIS if start else EMPTY) + middle + (ELLIPSIS if end < len(content) else EMPTY)
