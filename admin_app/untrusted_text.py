"""The characters that hide, or change how the text around them is shown (controls, bidi
embeddings and overrides, zero-width characters, tag characters), and the marker each is shown
as: an override shown as ⟨RLO⟩ cannot reverse what follows it. One rule for every place the hub
shows untrusted text: the console's pages (as HTML) and notifications (as plain text)."""
from __future__ import annotations

import re
import unicodedata

# Short names for the characters people meet; the others are shown by code point.
SHORT = {
    0x00AD: "SHY", 0x034F: "CGJ", 0x061C: "ALM", 0x180E: "MVS",
    0x200B: "ZWSP", 0x200C: "ZWNJ", 0x200D: "ZWJ", 0x200E: "LRM", 0x200F: "RLM",
    0x2028: "LSEP", 0x2029: "PSEP",
    0x202A: "LRE", 0x202B: "RLE", 0x202C: "PDF", 0x202D: "LRO", 0x202E: "RLO",
    0x2060: "WJ", 0x2061: "FA", 0x2062: "IT", 0x2063: "IS", 0x2064: "IP",
    0x2066: "LRI", 0x2067: "RLI", 0x2068: "FSI", 0x2069: "PDI",
    0xFEFF: "BOM", 0x00: "NUL", 0x1B: "ESC", 0x7F: "DEL", 0x85: "NEL",
}
# \n and \t are the only controls a message may show as themselves.
HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
RUN = re.compile(f"({HIDDEN.pattern})\\1*")  # one hidden character, repeated


def describe(char: str) -> tuple[str, str]:
    """(marker text, title) of one hidden character, e.g. ("RLO", "U+202E RIGHT-TO-LEFT OVERRIDE")."""
    point = ord(char)
    name = unicodedata.name(char, "CONTROL CHARACTER" if point < 0xA0 else "FORMAT CHARACTER")
    if 0xE0020 <= point <= 0xE007E:  # tag characters spell ASCII nobody sees
        short = "TAG " + chr(point - 0xE0000)
    else:
        short = SHORT.get(point, f"U+{point:04X}")
    return short, f"U+{point:04X} {name}"


def marker(run: str) -> str:
    """The plain-text marker of a run of one hidden character: ⟨RLO⟩, ⟨ZWSP ×3⟩."""  # noqa: RUF002 - the sign shown
    short, _ = describe(run[0])
    return f"⟨{short}{f' ×{len(run):,}' if len(run) > 1 else ''}⟩"  # noqa: RUF001 - a count, as the console shows it


def revealed(text: str) -> str:
    """`text` as plain text, each run of a hidden character replaced by its marker."""
    return RUN.sub(lambda found: marker(found.group()), text)
