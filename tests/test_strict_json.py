"""The strict JSON parser every request body and configuration file goes through.

Strings are checked one by one only when the text holds an escape that could make them
unstorable, and depth only when the text has enough brackets; these cases pin down that the
refusals are the same either way."""
from __future__ import annotations

import json

import pytest

from admin_app.validation import MAX_JSON_DEPTH, strict_json_loads

# Pure Python: no database.
pytestmark = pytest.mark.any_server

REFUSED = {
    "NUL in a value": r'{"a": "x\u0000y"}',
    "NUL in a key": r'{"x\u0000": 1}',
    "NUL in a list": r'{"a": ["ok", "\u0000"]}',
    "NUL as a whole document": r'"\u0000"',
    "lone high surrogate": r'{"a": "x\ud800"}',
    "lone low surrogate, upper-case hex": r'{"a": "\uDC00x"}',
    "lone surrogate in a key": r'{"\udbff": 1}',
    "lone surrogate in a nested list": r'[[["\ude00"]]]',
    "low surrogate before high": r'{"a": "\ude00\ud83d"}',
    "duplicate key": '{"a": 1, "b": 2, "a": 3}',
    "duplicate key when other strings need checking": r'{"a": "\ud83d\ude00", "a": 1}',
    "NaN": '{"a": NaN}',
    "-Infinity": '[-Infinity]',
    "a number that overflows to infinity": '{"a": 1e400}',
    "too deep": "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    "too deep in objects": '{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1),
    "raw surrogate in bytes (as json.loads would decode them)": b'{"a": "\xed\xa0\x80"}',
    "raw lone surrogate in text (as from a command-line argument)": '{"a": "Gr\u00fc\ud800e"}',
    "raw lone surrogate in an ASCII-looking key": '{"k\udfff": 1}',
    "raw NUL in text": '{"a": "x\x00y"}',
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused(case):
    with pytest.raises(ValueError):  # noqa: PT011 - any refusal; each case words its own
        strict_json_loads(REFUSED[case])


ACCEPTED = {
    "plain": '{"a": "text", "b": [1, 2.5, true, null], "c": {"d": "e"}}',
    "a surrogate pair (one real character)": r'{"a": "x\ud83d\ude00y"}',
    "an escaped backslash before u0000 (text, not NUL)": r'{"a": "\\u0000"}',
    "other escapes": r'{"a": "tab\tnewline\n\u00e9\u20ac"}',
    "non-ASCII text without escapes": '{"a": "Gr\u00fc\u00dfe \U0001F600", "\u00e9": ["\u20ac"]}',
    "as deep as allowed": "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH,
    "many shallow objects": json.dumps({"events": [{"n": i, "s": "x"} for i in range(500)]}),
    "brackets inside strings": json.dumps({"a": "[" * 500, "b": "{" * 500}),
    "UTF-8 bytes": '{"a": "\u00e9"}'.encode(),
    "UTF-16 bytes": '{"a": "\u00e9"}'.encode("utf-16"),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_accepted_as_json_loads_reads_it(case):
    raw = ACCEPTED[case]
    assert strict_json_loads(raw) == json.loads(raw)


def test_a_duplicate_key_is_named():
    with pytest.raises(ValueError, match="duplicate key 'a'"):
        strict_json_loads('{"b": 0, "a": 1, "a": 2}')
