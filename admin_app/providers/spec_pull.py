"""One pull of a provider's spec URL under its access policy (BUSINESS_SIDE.md §B.2, §B.3).

`signed_required`: a GET signed as Core signs it (A.3 over the URL's own pathname + search, empty
body, subject and job; only the timestamp and signature headers), then two negative requests at
once, one unsigned and one with the same timestamp and an all-zero signature. The spec is taken
only when both negatives are refused with 401, 403 or 404 (`protected`): a spec anyone can read
would tell anyone every operation of the business system. `public_allowed`: one unsigned GET,
taken on any 2xx. Redirects are never followed (a 3xx fails), each request has one 10 s deadline
for its whole exchange, and no answer is read past 5 MiB. No network happens in a transaction.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .. import limits
from ..canonical import iso, utc_now
from ..invocations import signing
from ..invocations.dispatch import Fetched, fetch
from .spec_document import SpecInvalid, parse

POLICIES = ("signed_required", "public_allowed")
REFUSED = (401, 403, 404)  # what a protected spec answers a request without a valid signature
ZERO_SIGNATURE = "sha256=" + "0" * 64


@dataclass(frozen=True)
class Pulled:
    """A pull's result: the document, or why there is none; and what was seen of the spec's
    access (None when no request was sent)."""

    document: dict[str, Any] | None
    error: str | None
    access_probe: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.document is not None


def signed_path(spec_url: str) -> str:
    """What a spec pull signs: the URL's own full pathname + search (`/` for an empty path)."""
    parts = urlsplit(spec_url)
    return (parts.path or "/") + ("?" + parts.query if parts.query else "")


def pull_headers(secret: str, spec_url: str, timestamp: str) -> dict[str, str]:
    """The two headers of a signed pull, nothing else (no job, client, subject or scope)."""
    message = signing.canonical_request(timestamp, "GET", signed_path(spec_url), b"", "", "")
    return {"X-Bailing-Timestamp": timestamp, "X-Bailing-Signature": signing.signature(secret, message)}


def _get(url: str, headers: dict[str, str]) -> Fetched:
    return fetch("GET", url, headers=headers, seconds=limits.SPEC_PULL_SECONDS,
                 max_bytes=limits.SPEC_PULL_MAX_BYTES)


def _answer(fetched: Fetched) -> str:
    if fetched.status is None:
        return f"the request failed: {fetched.failure}"
    if 300 <= fetched.status < 400:
        return f"HTTP {fetched.status}: the spec URL redirects, and redirects are not followed"
    return f"HTTP {fetched.status}" + (f" ({fetched.failure})" if fetched.failure else "")


def _document(fetched: Fetched) -> tuple[dict[str, Any] | None, str | None]:
    if fetched.failure is not None or fetched.status is None or not 200 <= fetched.status < 300:
        return None, _answer(fetched)
    try:
        return parse(fetched.body), None
    except SpecInvalid as err:
        return None, str(err)


def pull(spec_url: str, policy: str, secret_env: str) -> Pulled:
    if policy == "public_allowed":
        return _public(spec_url)
    secret = os.environ.get(secret_env)
    if not secret:
        return Pulled(None, f"the signing secret is missing: {secret_env} is not set", None)
    return _signed(spec_url, secret)


def _public(spec_url: str) -> Pulled:
    fetched = _get(spec_url, {})
    ok = fetched.status is not None and 200 <= fetched.status < 300
    probe: dict[str, Any] = {"status": "public" if ok else "inconclusive"}
    if fetched.status is not None:
        probe["unsigned_http"] = fetched.status
    if not ok:
        probe["reason"] = "the unsigned request was not answered with 2xx"
    probe["at"] = iso(utc_now())
    document, error = _document(fetched)
    return Pulled(document, error, probe)


def _signed(spec_url: str, secret: str) -> Pulled:
    timestamp = str(int(time.time()))
    fetched = _get(spec_url, pull_headers(secret, spec_url, timestamp))
    document, error = _document(fetched)
    probe: dict[str, Any] = {"status": "inconclusive"}
    if fetched.status is not None:
        probe["signed_http"] = fetched.status
    if error is not None:
        probe["reason"] = "the signed request did not bring the spec, so its protection was not probed"
        probe["at"] = iso(utc_now())
        return Pulled(None, error, probe)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="bailing-spec-probe") as pool:
        unsigned_call = pool.submit(_get, spec_url, {})
        invalid_call = pool.submit(_get, spec_url, {"X-Bailing-Timestamp": timestamp,
                                                    "X-Bailing-Signature": ZERO_SIGNATURE})
        unsigned, invalid = unsigned_call.result(), invalid_call.result()
    for key, answer in (("unsigned_http", unsigned), ("invalid_http", invalid)):
        if answer.status is not None:
            probe[key] = answer.status
    statuses = (unsigned.status, invalid.status)
    if all(s in REFUSED for s in statuses):
        probe["status"] = "protected"
    elif any(s is not None and 200 <= s < 300 for s in statuses):
        probe["status"] = "public"
        probe["reason"] = "a request without a valid signature was answered with 2xx"
    else:
        probe["reason"] = "a request without a valid signature was not refused with 401, 403 or 404"
    probe["at"] = iso(utc_now())
    if probe["status"] != "protected":
        return Pulled(None, f"the spec URL is not protected ({probe['status']}): {probe['reason']}; the "
                            "policy signed_required takes a spec only when requests without a valid signature "
                            "are refused (choose public_allowed if the spec is meant to be public)", probe)
    return Pulled(document, None, probe)
