"""Reading an answer field by field: each check names the endpoint and the field it refuses."""
from __future__ import annotations

import json
from datetime import datetime
from re import Pattern
from typing import Any, Literal, NoReturn, overload

from .errors import ContractError

_MISSING = object()


def join(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


class Reader:
    """Checks one answer of one endpoint; the first violation raises ContractError."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ContractError(self.endpoint, path, reason)

    def _take(self, d: dict, key: str, base: str, optional: bool, nullable: bool):
        value = d.get(key, _MISSING)
        if value is _MISSING:
            if optional:
                return _MISSING
            self.fail(join(base, key), "is required")
        if value is None:
            if nullable:
                return None
            self.fail(join(base, key), "must not be null")
        return value

    def body(self, value: Any) -> dict:
        if not isinstance(value, dict):
            self.fail("", "must be a JSON object")
        return value

    def schema(self, d: dict, expected: str, keys: tuple[str, ...] = ("schema_version", "schema"),
               optional: bool = False, base: str = "") -> None:
        """The schema marker under one of `keys` (the first present is read), exactly `expected`."""
        for key in keys:
            if key in d:
                if d[key] != expected:
                    self.fail(join(base, key), f"must be {expected!r}")
                return
        if not optional:
            self.fail(join(base, keys[0]), f"is required ({expected!r})")

    def string(self, d: dict, key: str, base: str = "", *, max_len: int | None = None,
               pattern: Pattern | None = None, non_blank: bool = False, choices=None,
               equals: str | None = None, optional: bool = False, nullable: bool = False):
        value = self._take(d, key, base, optional, nullable)
        if value is _MISSING or value is None:
            return None
        return self.string_at(value, join(base, key), max_len=max_len, pattern=pattern, non_blank=non_blank,
                              choices=choices, equals=equals)

    def string_at(self, value: Any, path: str, *, max_len: int | None = None, pattern: Pattern | None = None,
                  non_blank: bool = False, choices=None, equals: str | None = None) -> str:
        if not isinstance(value, str):
            self.fail(path, "must be a string")
        if non_blank and not value.strip():
            self.fail(path, "must not be blank")
        if max_len is not None and len(value) > max_len:
            self.fail(path, f"must be at most {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):
            self.fail(path, "does not match the contract's pattern")
        if choices is not None and value not in choices:
            self.fail(path, f"must be one of {', '.join(choices)}")
        if equals is not None and value != equals:
            self.fail(path, f"must echo {equals!r}")
        return value

    def integer(self, d: dict, key: str, base: str = "", *, lo: int | None = None, hi: int | None = None,
                choices=None, optional: bool = False, nullable: bool = False):
        value = self._take(d, key, base, optional, nullable)
        if value is _MISSING or value is None:
            return None
        path = join(base, key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, "must be an integer")
        if lo is not None and value < lo:
            self.fail(path, f"must be at least {lo}")
        if hi is not None and value > hi:
            self.fail(path, f"must be at most {hi}")
        if choices is not None and value not in choices:
            self.fail(path, f"must be one of {', '.join(map(str, choices))}")
        return value

    def boolean(self, d: dict, key: str, base: str = "", *, equals: bool | None = None,
                optional: bool = False):
        value = self._take(d, key, base, optional, False)
        if value is _MISSING:
            return None
        path = join(base, key)
        if not isinstance(value, bool):
            self.fail(path, "must be a boolean")
        if equals is not None and value is not equals:
            self.fail(path, f"must be {str(equals).lower()}")
        return value

    def object(self, d: dict, key: str, base: str = "", *, optional: bool = False, nullable: bool = False):
        value = self._take(d, key, base, optional, nullable)
        if value is _MISSING or value is None:
            return None
        return self.object_at(value, join(base, key))

    def object_at(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            self.fail(path, "must be an object")
        return value

    def array(self, d: dict, key: str, base: str = "", *, max_items: int | None = None,
              min_items: int = 0, optional: bool = False):
        value = self._take(d, key, base, optional, False)
        if value is _MISSING:
            return None
        path = join(base, key)
        if not isinstance(value, list):
            self.fail(path, "must be an array")
        if len(value) < min_items:
            self.fail(path, f"must have at least {min_items} entries")
        if max_items is not None and len(value) > max_items:
            self.fail(path, f"must have at most {max_items} entries")
        return value

    @overload
    def timestamp(self, d: dict, key: str, base: str = "", *, optional: Literal[False] = False,
                  nullable: Literal[False] = False) -> datetime: ...
    @overload
    def timestamp(self, d: dict, key: str, base: str = "", *, optional: bool = False,
                  nullable: bool = False) -> datetime | None: ...

    def timestamp(self, d: dict, key: str, base: str = "", *, optional: bool = False,
                  nullable: bool = False) -> datetime | None:
        text = self.string(d, key, base, optional=optional, nullable=nullable)
        if text is None:
            return None
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(join(base, key), "must be an ISO-8601 timestamp")
        if parsed.tzinfo is None:
            self.fail(join(base, key), "must carry a time zone")
        return parsed
