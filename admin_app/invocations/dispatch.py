"""One signed HTTP call to a business system, and what came back.

Any failure once the request may have left (connection reset, the tool's timeout, a body that
cannot be read whole) is `uncertain`: the hub cannot know whether the business system acted, so
it never says it did not. The tool's timeout bounds the whole call, not each read."""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .. import limits
from ..deadline import Deadline
from . import signing



@dataclass(frozen=True)
class PreparedCall:
    method: str
    url: str
    path_with_query: str
    body: bytes


@dataclass(frozen=True)
class Outcome:
    http_status: int | None
    body: Any = None
    failure: str | None = None  # set when the outcome is uncertain

    @property
    def uncertain(self) -> bool:
        return self.failure is not None


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def prepare(tool, base_url: str, arguments: dict) -> PreparedCall:
    """Split the flat arguments back into path, query and JSON body, as the compiler merged them,
    placed as Core places them (BUSINESS_SIDE §A.5): a null argument is left out, a GET has no
    body, any other method a JSON body of at least `{}`."""
    path = tool.path
    query: list[tuple[str, str]] = []
    fields: dict[str, Any] = {}
    locations = set(tool.locations.values())
    body_mode = "whole" if "whole_body" in locations else "fields" if "body" in locations else None
    payload: Any = None
    for name, value in arguments.items():
        if value is None:
            continue
        where = tool.locations.get(name)
        if where == "path":
            path = path.replace("{" + name + "}", quote(_query_value(value), safe=""))
        elif where == "query":
            for item in value if isinstance(value, list) else [value]:
                query.append((name, _query_value(item)))
        elif where == "body":
            fields[name] = value
        elif where == "whole_body":
            payload = value
    if body_mode == "fields" or payload is None:
        payload = fields
    body = b""
    if tool.method.upper() != "GET":
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    suffix = path + ("?" + urlencode(query) if query else "")
    # Signed as the spec declares the operation: the base URL's own path is not part of it.
    return PreparedCall(tool.method, base_url.rstrip("/") + suffix, suffix, body)


def send(call: PreparedCall, *, secret: str, job_id: str, scope: str, on_behalf_of: str,
         idempotency_key: str, timeout_ms: int, client: str = "") -> Outcome:
    headers = signing.headers(secret, timestamp=str(int(time.time())), method=call.method,
                              path_with_query=call.path_with_query, body=call.body,
                              on_behalf_of=on_behalf_of, job_id=job_id, scope=scope,
                              idempotency_key=idempotency_key, client=client)
    if call.body:
        headers["Content-Type"] = "application/json"
    headers["Accept"] = "application/json"
    timeout = timeout_ms / 1000
    with Deadline(timeout) as deadline, requests.Session() as session:
        session.mount("http://", _WatchedAdapter())
        session.mount("https://", _WatchedAdapter())
        _watching.deadline = deadline
        try:
            with session.request(call.method, call.url, data=call.body or None, headers=headers,
                                 timeout=(min(timeout, 10), timeout), stream=True,
                                 allow_redirects=False) as response:
                raw = bytearray()
                for piece in response.iter_content(64 * 1024):
                    raw.extend(piece)
                    if len(raw) > limits.BUSINESS_RESPONSE_MAX_BYTES:
                        return Outcome(response.status_code, failure="response body larger than the hub reads")
                if deadline.expired:  # a body cut off by the deadline may look whole
                    return Outcome(response.status_code, failure=TIMED_OUT)
                return Outcome(response.status_code, _decode(bytes(raw), response.headers.get("Content-Type", "")))
        except requests.RequestException as err:
            return Outcome(None, failure=TIMED_OUT if deadline.expired else type(err).__name__)
        finally:
            _watching.deadline = None


# The tool's timeout is one deadline for the whole call, however slowly the business system
# answers: requests' own timeouts bound each read alone, so every socket a call opens is also
# watched by the call's Deadline, which shuts it down when the time is up.
TIMED_OUT = "no complete answer within the tool's timeout"
_watching = threading.local()


class _Watched:
    """A connection whose socket the current call's deadline watches."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        deadline = getattr(_watching, "deadline", None)
        if deadline is not None:
            deadline.watch(sock)
        return sock


class _WatchedHTTP(_Watched, HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTP


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPS


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}


def _decode(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type.lower():
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # too deep to parse is kept as text, like invalid JSON
            return text
    return text
