"""Paging in the console: every list is a keyset read, continued by one opaque `cursor` in the URL.

A read returns `(rows, next_key)`, where the key is a tuple of plain values (datetimes, UUIDs,
integers) naming the last row shown. Only the console turns keys into text: URL-safe base64 of a
compact JSON list `[list name, format version, *values]`. The list name is checked on the way
back, so a cursor copied from one list is refused by another instead of paging it from a wrong
place. A cursor is not secret (it names a row the reader has already seen), so it is not signed.

A cursor that does not decode is answered with a 400 page before anything is read or recorded.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import abort, request, url_for

from .security import is_htmx

FORMAT = 1
# Far longer than any key this console writes, short enough to refuse junk before decoding it.
CURSOR_MAX = 256
BASE64URL = re.compile(r"^[A-Za-z0-9_-]+$")
BIGINT = (-(2**63), 2**63 - 1)
BAD_CURSOR = ("This “load more” link is damaged or belongs to another list. "
              "Open the list again from its first page.")

Key = tuple[Any, ...]


class InvalidCursor(ValueError):
    """The cursor is not one this list wrote."""


def _plain(value: object) -> str | int:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"a page key holds datetimes, UUIDs and integers, not {type(value).__name__}")


def _typed(value: object, kind: type) -> object:
    """A value read back from a cursor as `kind`, or InvalidCursor."""
    if kind is datetime and isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidCursor("not a time") from None
        if moment.tzinfo is None:  # every key this console writes is a timestamptz
            raise InvalidCursor("a time without its offset")
        return moment
    if kind is uuid.UUID and isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            raise InvalidCursor("not a UUID") from None
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        if not BIGINT[0] <= value <= BIGINT[1]:
            raise InvalidCursor("out of range")
        return value
    raise InvalidCursor(f"not a {kind.__name__}")


@dataclass(frozen=True)
class Keyset:
    """The sort key of one console list: the list's name and the types of its key's values."""

    name: str
    types: tuple[type, ...]

    def encode(self, key: Sequence[object]) -> str:
        if len(key) != len(self.types):
            raise TypeError(f"{self.name} keys have {len(self.types)} values, not {len(key)}")
        data = json.dumps([self.name, FORMAT, *(_plain(v) for v in key)], separators=(",", ":"))
        return base64.urlsafe_b64encode(data.encode("utf-8")).rstrip(b"=").decode("ascii")

    def decode(self, cursor: str) -> Key:
        if len(cursor) > CURSOR_MAX or not BASE64URL.match(cursor):
            raise InvalidCursor("not a cursor")
        try:
            data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidCursor("not a cursor") from None
        if not isinstance(data, list) or data[:2] != [self.name, FORMAT]:
            raise InvalidCursor("a cursor of another list")
        values = data[2:]
        if len(values) != len(self.types):
            raise InvalidCursor("a key of another shape")
        return tuple(_typed(value, kind) for value, kind in zip(values, self.types))

    def from_request(self) -> Key | None:
        """The key the request continues after: None for a first page; a 400 page for a cursor
        this list did not write (the view stops there, before any read)."""
        cursor = request.args.get("cursor", "")
        if not cursor:
            return None
        try:
            return self.decode(cursor)
        except InvalidCursor:
            abort(400, description=BAD_CURSOR)


def more_url(endpoint: str, keyset: Keyset, next_key: Key | None, filters: dict[str, str]) -> str | None:
    """The "load more" link: the same list with the same filters, after `next_key`; None at the end."""
    if next_key is None:
        return None
    values: dict[str, Any] = {k: v for k, v in filters.items() if v}
    return url_for(endpoint, **values, cursor=keyset.encode(next_key))


def rows_only() -> bool:
    """A "load more" request from htmx gets the rows partial alone; the same URL opened as a link
    (no JavaScript, a new tab, a history restore) gets the whole page from that cursor on."""
    return is_htmx() and bool(request.args.get("cursor"))
