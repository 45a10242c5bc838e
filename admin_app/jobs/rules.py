"""The Client API's value rules (CLIENT_API_AND_EXECUTOR.md §A.3, §C.6), named once: the request
limits /run enforces and the route settings `config apply` accepts share them."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from ..validation import CONTROL_CHARS, utf16_len

# Core's run-request fields for a client token; anything else is refused.
RUN_FIELDS = ("request_id", "route", "input", "metadata", "callback_url")
ROUTE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")
AUTO_ROUTE = "auto"
REQUEST_ID_MAX = 128  # UTF-16 code units, as Core counts (JavaScript's .length)
INPUT_MAX = 100_000
CALLBACK_URL_MAX = 2048
BODY_MAX_BYTES = 1_048_576  # Core's BAILING_JSON_BODY_MAX_BYTES default

# Launch-time limits (§A.3 step 21, §C.6).
THREAD_INFLIGHT_QUOTA = 6
RETRY_MAX = 5
MAX_CALLS_DEFAULT, MAX_CALLS_RANGE = 5, (1, 50)

# A route's session policies the hub offers (§A.3 "Session"): a fresh session per job, or the
# caller's own session id from `metadata[session_key_field]`.
SESSION_POLICIES = ("new", "passthrough")
SESSION_KEY_FIELD_DEFAULT = "session_id"
SESSION_ID_MAX = 191  # Core keeps at most this much of a passed-through id
SESSION_KEY_FIELD_MAX = 128


def callback_url_ok(value: Any) -> bool:
    """An http(s) URL with a host, of at most 2048 UTF-16 units (Core parses it with WHATWG
    `new URL`; here a URL must also be free of spaces and control characters)."""
    if not isinstance(value, str) or not value or utf16_len(value) > CALLBACK_URL_MAX:
        return False
    if CONTROL_CHARS.search(value) or any(c.isspace() for c in value):
        return False
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError:
        return False
    del port
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def js_truthy(value: Any) -> bool:
    """JavaScript's truthiness of a JSON value: every object and array is true, even empty."""
    if isinstance(value, dict | list):
        return True
    return bool(value)
