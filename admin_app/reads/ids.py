"""ID prefixes, as the console's lookups take them: a UUID sorts as its hex text does, so the
UUIDs whose text starts with a prefix (c656db38) are one range, which the column's ordinary btree
answers (no text index, whatever the collation)."""
from __future__ import annotations

import re
import uuid

# A hex prefix shorter than this matches too much to mean an ID.
ID_PREFIX_MIN = 4
HEX_ID = re.compile(r"^[0-9a-f-]+$")


def id_range(value: str) -> tuple[uuid.UUID, uuid.UUID | None] | None:
    """The UUIDs whose text starts with `value` as [low, high) (high None: up to the last UUID), or
    None when `value` is no ID prefix: at least ID_PREFIX_MIN hex digits, dashes where a UUID's
    text has them or none at all."""
    value = value.lower()
    if not HEX_ID.match(value):
        return None
    digits = value.replace("-", "")
    if not ID_PREFIX_MIN <= len(digits) <= 32:
        return None
    dashed = "".join(("-" if n in (8, 12, 16, 20) else "") + c for n, c in enumerate(digits))
    if "-" in value and value not in (dashed, dashed + "-" * (len(digits) in (8, 12, 16, 20))):
        return None
    rest = 4 * (32 - len(digits))
    low = int(digits, 16) << rest
    high = (int(digits, 16) + 1) << rest
    return uuid.UUID(int=low), (uuid.UUID(int=high) if high < 2**128 else None)
