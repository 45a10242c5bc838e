"""What the peers share: bounded reading of a reply (every connector caps what it reads), and
one JSON object per line on stdout (what the tests read back). Standard library and requests only."""
from __future__ import annotations

import json
import sys
import time
from typing import Any

import requests


class TooLarge(Exception):
    """A reply over the peer's byte limit."""


def read_limited(response: requests.Response, limit: int) -> bytes:
    """The body of a streamed `response`, refused once it passes `limit` bytes (the declared
    Content-Length first, then what actually arrives); the response is closed either way."""
    try:
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise TooLarge(f"reply exceeds {limit} bytes")
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_content(chunk_size=65_536):
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"reply exceeds {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        response.close()


def emit(record: dict[str, Any], stream: Any = None) -> None:
    """One JSON line, flushed at once (a test may be waiting for it), with the wall-clock time."""
    out = stream or sys.stdout
    out.write(json.dumps({"t": time.time(), **record}, separators=(",", ":"), sort_keys=True) + "\n")
    out.flush()
