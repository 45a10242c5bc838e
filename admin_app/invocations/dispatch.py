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
from urllib.parse import quote, quote_plus

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .. import js_json, limits
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


def _path_segment(value: Any) -> str:
    """encodeURIComponent(String(value)): only `A-Z a-z 0-9 - _ . ! ~ * ' ( )` left bare."""
    return quote(js_json.string(value), safe="!~*'()")


def _form(text: str) -> str:
    """One name or value as URLSearchParams serialises it (application/x-www-form-urlencoded):
    space as `+`, only `A-Z a-z 0-9 * - . _` left bare (so `~` is `%7E`)."""
    return quote_plus(text, safe="*").replace("~", "%7E")


def prepare(tool, base_url: str, arguments: dict) -> PreparedCall:
    """Split the flat arguments back into path, query and JSON body, as the compiler merged them,
    placed and formatted byte for byte as Core places them (BUSINESS_SIDE §A.5): a null argument
    is left out, path and query values are JavaScript's String(value), a GET has no body, any
    other method JSON.stringify's body of at least `{}`."""
    path = tool.path
    query: list[tuple[str, str]] = []
    fields: dict[str, Any] = {}
    locations = set(tool.locations.values())
    body_mode = "whole" if "whole_body" in locations else "fields" if "body" in locations else None
    payload: Any = None
    # In the order JavaScript holds the parsed arguments (integer-like names first).
    for name in js_json.key_order(arguments):
        value = arguments[name]
        if value is None:
            continue
        where = tool.locations.get(name)
        if where == "path":
            path = path.replace("{" + name + "}", _path_segment(value))
        elif where == "query":
            # String(value), as Core sends it: an array comma-joined, an object `[object Object]`.
            query.append((name, js_json.string(value)))
        elif where == "body":
            fields[name] = value
        elif where == "whole_body":
            payload = value
    if body_mode == "fields" or payload is None:
        payload = fields
    body = b""
    if tool.method.upper() != "GET":
        body = js_json.stringify(payload).encode("utf-8")  # JSON.stringify's bytes
    suffix = path + ("?" + "&".join(f"{_form(k)}={_form(v)}" for k, v in query) if query else "")
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
            prepared = session.prepare_request(requests.Request(call.method, call.url, data=call.body or None,
                                                                headers=headers))
            # Exactly the target that was signed: requests re-quotes a URL (`%7E` would leave as
            # `~`), and a business system verifying over the raw request target would refuse it.
            prepared.url = call.url
            # stream=True: the body is read piece by piece below, never more than the cap.
            settings = session.merge_environment_settings(prepared.url, {}, True, None, None)
            with session.send(prepared, timeout=(min(timeout, 10), timeout), allow_redirects=False,
                              **settings) as response:
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


@dataclass(frozen=True)
class Fetched:
    """A whole answer (status and body), or why there is none: `failure` set, `status` too when
    the answer started (a body over the cap, cut off by the deadline)."""

    status: int | None
    body: bytes = b""
    failure: str | None = None


def fetch(method: str, url: str, *, headers: dict[str, str], body: bytes = b"", seconds: float,
          max_bytes: int) -> Fetched:
    """One request under one deadline for the whole exchange, redirects not followed (a 3xx is
    an answer like any other), at most `max_bytes` read: a Content-Length above it fails before
    the body is read, a longer body fails as it streams in. For the hub's own checks of a
    business system (spec pulls, probes), which judge the answer themselves."""
    with Deadline(seconds) as deadline, requests.Session() as session:
        session.mount("http://", _WatchedAdapter())
        session.mount("https://", _WatchedAdapter())
        _watching.deadline = deadline
        try:
            with session.request(method, url, data=body or None, headers=headers, stream=True,
                                 timeout=(seconds, seconds), allow_redirects=False) as response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    return Fetched(response.status_code, failure=f"the answer is larger than {max_bytes} bytes")
                raw = bytearray()
                for piece in response.iter_content(64 * 1024):
                    raw.extend(piece)
                    if len(raw) > max_bytes:
                        return Fetched(response.status_code, failure=f"the answer is larger than {max_bytes} bytes")
                if deadline.expired:
                    return Fetched(response.status_code, failure=f"no complete answer within {seconds:g} s")
                return Fetched(response.status_code, bytes(raw))
        except requests.RequestException as err:
            # requests' own read timeout equals the deadline and may fire a moment before it.
            if deadline.expired or isinstance(err, requests.Timeout):
                return Fetched(None, failure=f"no complete answer within {seconds:g} s")
            return Fetched(None, failure=_transport_failure(err))
        finally:
            _watching.deadline = None


def _transport_failure(err: requests.RequestException) -> str:
    """What went wrong, without the exception's text (which can carry the whole URL)."""
    if isinstance(err, requests.ConnectionError):
        return "the connection failed (" + type(err).__name__ + ")"
    return type(err).__name__


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
