"""Signed business calls, exactly as BailingHub Core signs them, so that a business system
verifying with Core's connect SDKs (Python, Node, PHP, Java, Go, .NET) accepts the hub. The
signature covers timestamp (seconds), method, the operation's path with query (as the spec
declares it: never the base URL's own path), the body's SHA-256, the on-behalf-of subject and
the job id, joined by dots, so none of them can be changed in transit. A valid signature proves
the hub sent the call; it is never business authorization."""
from __future__ import annotations

import hashlib
import hmac

from .. import limits


def canonical_request(timestamp: str, method: str, path_with_query: str, body: bytes,
                      on_behalf_of: str, job_id: str) -> bytes:
    """`ts.METHOD.pathWithQuery.sha256hex(body).onBehalfOf.jobId`: an empty subject or job is an
    empty field, its dot still there."""
    return ".".join([timestamp, method.upper(), path_with_query, hashlib.sha256(body).hexdigest(),
                     on_behalf_of, job_id]).encode("utf-8")


def signature(secret: str, message: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def headers(secret: str, *, timestamp: str, method: str, path_with_query: str, body: bytes,
            on_behalf_of: str, job_id: str, scope: str, idempotency_key: str,
            client: str = "") -> dict[str, str]:
    """Core's header set: the subject only when there is one (signed as empty otherwise), the
    calling client app always (empty when there is none), the idempotency key when there is one
    (a job's call to a tool that is not side-effecting has none, as Core sends it)."""
    message = canonical_request(timestamp, method, path_with_query, body, on_behalf_of, job_id)
    sent = {
        "X-Bailing-Signature": signature(secret, message),
        "X-Bailing-Timestamp": timestamp,
        "X-Bailing-Tool-Scope": scope,
        "X-Bailing-Job-Id": job_id,
        "X-Bailing-Client": client,
    }
    if idempotency_key:
        sent["X-Bailing-Idempotency-Key"] = idempotency_key
    if on_behalf_of:
        sent["X-Bailing-On-Behalf-Of"] = on_behalf_of
    return sent


def verify(secret: str, received: dict[str, str], *, method: str, path_with_query: str, body: bytes,
           now: float) -> bool:
    """The business side's check (used by the demo business system), as the connect SDKs make it
    (§A.8): a difference of exactly the window is already too old, an empty signature fails."""
    timestamp = received.get("X-Bailing-Timestamp", "")
    sent = received.get("X-Bailing-Signature", "")
    if not sent or not timestamp.isascii() or not timestamp.isdigit() \
            or abs(now - int(timestamp)) >= limits.SIGNATURE_MAX_CLOCK_SKEW_SECONDS:
        return False
    message = canonical_request(timestamp, method, path_with_query, body,
                                received.get("X-Bailing-On-Behalf-Of", ""),
                                received.get("X-Bailing-Job-Id", ""))
    return hmac.compare_digest(signature(secret, message).encode(), sent.encode("utf-8", "replace"))
