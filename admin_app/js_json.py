"""JavaScript's JSON.stringify and String(), byte for byte: for measuring argument budgets as
clients do, and for building a business call exactly as BailingHub Core builds it.

Python's json.dumps differs from JavaScript in number formatting (1.0 vs 1, 1e-07 vs 1e-7,
1e+16 vs 10000000000000000, integers beyond 2**53) and must not escape non-ASCII text. Strings
are escaped exactly as JSON.stringify does: \\" \\\\ \\b \\f \\n \\r \\t, other controls as \\u00xx.
"""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

_ESCAPE = json.encoder.py_encode_basestring  # same escapes as JSON.stringify for valid text


def number(value: int | float) -> str:
    """ECMAScript Number::toString of the double a JavaScript client would hold."""
    try:
        x = float(value)
    except OverflowError:  # an integer beyond a double: JavaScript holds Infinity, written null
        return "null"
    if x != x or x in (float("inf"), float("-inf")):
        return "null"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    digits_tuple = Decimal(repr(abs(x))).normalize().as_tuple()
    exponent = digits_tuple.exponent
    assert isinstance(exponent, int)  # only NaN and the infinities have a letter here, and they returned above
    s = "".join(str(d) for d in digits_tuple.digits)
    k = len(s)
    n = k + exponent
    if k <= n <= 21:
        out = s + "0" * (n - k)
    elif 0 < n <= 21:
        out = s[:n] + "." + s[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + s
    else:
        e = n - 1
        exp = ("+" if e > 0 else "-") + str(abs(e))
        out = (s if k == 1 else s[0] + "." + s[1:]) + "e" + exp
    return sign + out


def stringify(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _ESCAPE(value)
    if isinstance(value, (int, float)):
        return number(value)
    if isinstance(value, list):
        return "[" + ",".join(stringify(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_ESCAPE(k) + ":" + stringify(value[k]) for k in key_order(value)) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


_MAX_ARRAY_INDEX = 2**32 - 2


def _is_array_index(key: str) -> bool:
    return key.isascii() and key.isdigit() and (key == "0" or key[0] != "0") and int(key) <= _MAX_ARRAY_INDEX


def key_order(value: dict[str, Any]) -> list[str]:
    """The order JavaScript holds a parsed object's keys in: integer-like keys ("0", "12") first,
    ascending, then the others as received."""
    indexes = sorted((k for k in value if _is_array_index(k)), key=int)
    return indexes + [k for k in value if not _is_array_index(k)]


def string(value: Any) -> str:
    """ECMAScript String(value) of a JSON value: numbers in shortest form, arrays comma-joined
    (a null item as an empty field), objects `[object Object]`."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        try:
            x = float(value)
        except OverflowError:
            return "Infinity" if value > 0 else "-Infinity"
        if x != x:
            return "NaN"
        if x in (float("inf"), float("-inf")):
            return "Infinity" if x > 0 else "-Infinity"
        return number(x)
    if isinstance(value, list):
        return ",".join("" if item is None else string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def byte_length(value: Any) -> int:
    return len(stringify(value).encode("utf-8"))
