"""Strict validation that names each bad field by its path (`routes[2].tools.sources[0]: ...`).

Checkers add problems to a list instead of stopping at the first, so a person fixing a file or a
request sees everything wrong at once. Nothing is coerced: 1 is not true, "5" is not 5.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

RESOURCE_KEY = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
RESERVED_ROUTES = frozenset({"auto"})
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
SAFE_INTEGER_MAX = 2**53 - 1  # the largest integer every JSON client holds exactly

# The value rules upstream Core and the official client SDK share, so that what one accepts the
# other accepts too: UUIDs of versions 1 to 5 (either case), client identifiers of 1 to 128
# characters, and what JavaScript's trim() removes (a text made only of it is blank).
UUID_V1_5 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.I)
CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
JS_BLANK = (" \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
            "\u2028\u2029\u202f\u205f\u3000\ufeff")


class Invalid(Exception):
    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in problems))
        self.problems = problems

    def as_list(self) -> list[dict]:
        return [{"path": p, "message": m} for p, m in self.problems]


def utf16_len(text: str) -> int:
    """Length as JavaScript counts it (UTF-16 code units), which is what clients measure."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def is_blank(text: str) -> bool:
    return not text.strip(JS_BLANK)


def client_text(checker: Checker, value: Any, path: str, max_units: int, *,
                blank_ok: bool = False) -> str | None:
    """Text a client sent, kept exactly as sent: a string of at most `max_units` UTF-16 code
    units (as clients count), with no control character other than tab, LF and CR, and not
    blank unless `blank_ok`. None (with a problem) otherwise."""
    if not isinstance(value, str):
        checker.add(path, "must be a string")
    elif utf16_len(value) > max_units:
        checker.add(path, f"must be at most {max_units} UTF-16 code units")
    elif CONTROL_CHARS.search(value):
        checker.add(path, "must not contain control characters other than tab, LF and CR")
    elif not blank_ok and is_blank(value):
        checker.add(path, "must not be blank")
    else:
        return value
    return None


_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def _check_storable(text: str) -> str:
    # PostgreSQL text cannot hold NUL, and a lone UTF-16 surrogate is no character at all.
    if _UNSTORABLE.search(text):
        raise ValueError("strings must not contain NUL or unpaired surrogate escapes")
    return text


# A parsed string can hold NUL or a lone surrogate only if the text holds one raw, or a \u escape
# that makes one: text with neither needs no string checks.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89abcdefABCDEF])")


def _may_hold_unstorable(text: str) -> bool:
    if _SUSPECT_ESCAPE.search(text) or "\x00" in text:
        return True
    if text.isascii():
        return False
    try:  # UTF-8 cannot encode a surrogate; much faster than searching for one
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def repeats(keys: Iterable[str]) -> Iterator[str]:
    """Each key that came before, in the order its repeats come."""
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            yield key
        seen.add(key)


def strict_json_loads(raw: str | bytes) -> Any:
    """json.loads that refuses duplicate keys, NaN/Infinity, and strings PostgreSQL cannot store,
    instead of silently picking, converting or failing later."""
    # Bytes are decoded as json.loads would decode them.
    text = raw.decode(json.detect_encoding(raw), "surrogatepass") if isinstance(raw, bytes) else raw
    check_strings = _may_hold_unstorable(text)

    def pairs(items):
        obj = dict(items)
        if len(obj) != len(items):
            duplicate = next(repeats(key for key, _ in items))
            raise ValueError(f"duplicate key {duplicate!r}")
        if check_strings:
            for key, value in items:
                _check_storable(key)
                if isinstance(value, str):
                    _check_storable(value)
        return obj

    def constant(name):
        raise ValueError(f"{name} is not valid JSON")

    def finite(literal):
        # 1e400 overflows to infinity: Infinity in disguise.
        number = float(literal)
        if not math.isfinite(number):
            raise ValueError(f"{literal} is out of range")
        return number

    value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant, parse_float=finite)
    # Nesting cannot be deeper than the count of brackets that open it.
    if check_strings or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        _check_list_strings_and_depth(value)
    return value


# Deeper values would exhaust the recursion of whatever walks them next (hashing, measuring,
# schema validation): refused here as a 400 rather than failing there as a 500.
MAX_JSON_DEPTH = 128


def _check_list_strings_and_depth(value: Any) -> None:
    """Strings directly inside arrays (object members were checked while parsing), and the
    nesting depth; iterative, so the walk itself cannot run out of stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_storable(item)
        elif isinstance(item, (list, dict)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
            children = item if isinstance(item, list) else item.values()
            stack.extend((child, depth + 1) for child in children)


def json_value_problems(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Where a value parsed from another format (TOML) is not plain, storable JSON: dates and
    times, NaN and infinities, NUL and lone surrogates (in keys too: jsonb refuses them)."""
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            where = join(path, str(key))
            if _UNSTORABLE.search(str(key)):
                problems.append((where, "the key must not contain NUL or unpaired surrogates"))
            else:
                problems.extend(json_value_problems(item, where))
        return problems
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in json_value_problems(item, join(path, i))]
    if isinstance(value, float) and not math.isfinite(value):
        return [(path, "must be a finite number")]
    if isinstance(value, str) and _UNSTORABLE.search(value):
        return [(path, "must not contain NUL or unpaired surrogates")]
    if value is None or isinstance(value, (str, int, float, bool)):
        return []
    return [(path, f"a {type(value).__name__} value is not accepted; use a string")]


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class Checker:
    """Collects problems; each check returns the value when valid, else None."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    @classmethod
    def single(cls, path: str, message: str) -> Checker:
        checker = cls()
        checker.add(path, message)
        return checker

    def add(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def raise_if_any(self) -> None:
        if self.problems:
            raise Invalid(self.problems)

    def obj(self, value: Any, path: str, *, required: Iterable[str] = (), optional: Iterable[str] = (),
            open_ended: bool = False) -> dict | None:
        if not isinstance(value, dict):
            self.add(path, "must be an object")
            return None
        required = tuple(required)
        allowed = set(required) | set(optional)
        for key in required:
            if key not in value:
                self.add(join(path, key), "is required")
        if not open_ended:
            for key in value:
                if key not in allowed:
                    self.add(join(path, key), "is not a known field")
        return value

    def string(self, value: Any, path: str, *, min_len: int = 0, max_len: int | None = None,
               pattern: re.Pattern | None = None, pattern_text: str | None = None,
               single_line: bool = False) -> str | None:
        if not isinstance(value, str):
            self.add(path, "must be a string")
            return None
        if len(value) < min_len:
            self.add(path, "must not be empty" if min_len == 1 else f"must be at least {min_len} characters")
            return None
        if max_len is not None and len(value) > max_len:
            self.add(path, f"must be at most {max_len} characters")
            return None
        # fullmatch: a `$` in re.match also accepts a trailing newline.
        if pattern is not None and not pattern.fullmatch(value):
            self.add(path, f"must match {pattern_text or pattern.pattern}")
            return None
        if single_line and (CONTROL_CHARS.search(value) or "\n" in value or "\r" in value):
            self.add(path, "must not contain line breaks or control characters")
            return None
        return value

    def resource_key(self, value: Any, path: str, *, route: bool = False) -> str | None:
        key = self.string(value, path, pattern=RESOURCE_KEY)
        if key is not None and route and key in RESERVED_ROUTES:
            self.add(path, f"'{key}' is reserved and cannot name a route")
            return None
        return key

    def boolean(self, value: Any, path: str) -> bool | None:
        if not isinstance(value, bool):
            self.add(path, "must be true or false")
            return None
        return value

    def integer(self, value: Any, path: str, *, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        if type(value) is not int:
            self.add(path, "must be a whole number")
            return None
        if minimum is not None and value < minimum:
            self.add(path, f"must be at least {minimum}")
            return None
        if maximum is not None and value > maximum:
            self.add(path, f"must be at most {maximum}")
            return None
        return value

    def string_list(self, value: Any, path: str, *, max_items: int = 1000, unique: bool = True,
                    item_pattern: re.Pattern | None = None, item_max_len: int = 191) -> list[str] | None:
        if not isinstance(value, list):
            self.add(path, "must be a list")
            return None
        if len(value) > max_items:
            self.add(path, f"must have at most {max_items} items")
            return None
        ok = True
        seen: set[str] = set()
        for i, item in enumerate(value):
            item_path = join(path, i)
            if self.string(item, item_path, min_len=1, max_len=item_max_len, pattern=item_pattern) is None:
                ok = False
            elif unique and item in seen:
                self.add(item_path, f"'{item}' is listed twice")
                ok = False
            else:
                seen.add(item)
        return value if ok else None
