"""Sending a request exactly as the official SDK would, and reading its answer or its refusal."""
from __future__ import annotations

import json
from typing import Any

import requests

from .check import Reader
from .errors import AgentSdkError, HubError

NO_BODY = object()  # send no body at all (not even `{}`)
TIMEOUT = 60


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def send(http: requests.Session, method: str, url: str, endpoint: str, *, body: Any = NO_BODY,
         bearer: str | None = None, params: dict | None = None, timeout: float = TIMEOUT) -> requests.Response:
    headers = {"Accept": "application/json"}
    data = None
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    if body is not NO_BODY:
        headers["Content-Type"] = "application/json"
        data = encode(body)
    try:
        return http.request(method, url, headers=headers, data=data, params=params, timeout=timeout)
    except requests.RequestException as err:
        raise AgentSdkError(f"{endpoint}: the hub could not be reached ({type(err).__name__})") from None


def answer(response: requests.Response, endpoint: str, expect: tuple[int, ...] = (200,)) -> dict:
    """The JSON object of an expected status; anything else is the hub's refusal."""
    if response.status_code not in expect:
        if 200 <= response.status_code < 300:  # a success, but not the one the contract names
            Reader(endpoint).fail("status", f"HTTP {response.status_code}, the contract answers "
                                            + " or ".join(map(str, expect)))
        raise refusal(response, endpoint)
    try:
        body = response.json()
    except ValueError:
        Reader(endpoint).fail("", "is not JSON")
    return Reader(endpoint).body(body)


def refusal(response: requests.Response, endpoint: str) -> HubError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return HubError(endpoint, response.status_code, None, None, None)
    code = body.get("error") if isinstance(body.get("error"), str) else None
    message = body.get("message") if isinstance(body.get("message"), str) else None
    return HubError(endpoint, response.status_code, code, message, body)
