"""The authorization probe (BUSINESS_SIDE.md §C): one signed request for a subject that cannot
exist, which a business system that authorizes its callers refuses.

It is a health check for operators, run when a provider is saved, after a successful refresh and
on demand; nothing in the invocation path reads its result. A `suspect` answer (the business
system accepted the synthetic subject) means the system probably verifies the hub's signature
but never asks whether the subject may do what is asked.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from .. import limits
from ..canonical import iso, utc_now
from ..catalog.compiler import CompiledProvider
from ..invocations import signing
from ..invocations.dispatch import Fetched, fetch

SUBJECT = "__bailing_authz_probe__:nobody"
JOB_ID = "probe"
CLIENT = "__probe__"
DEDICATED_SCOPE = "__probe__.authz"
DEDICATED_BODY = json.dumps({"subject": SUBJECT, "reason": "bailing-authz-probe", "expect": "deny"},
                            separators=(",", ":")).encode("utf-8")
DECISION_KEYS = ("authorized", "allow", "allowed", "ok")
PATH_MAX = 512
NAME_MAX = 64


@dataclass(frozen=True)
class Target:
    mode: str  # "dedicated" | "tool"
    method: str  # "GET" | "POST"
    path: str
    name: str
    scope: str
    requires_subject: bool


def _is_path(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("/") and len(value) <= PATH_MAX


def _method(value: Any) -> str:
    """GET or POST: anything but GET (any case) means POST."""
    return "GET" if str(value if value is not None else "POST").upper() == "GET" else "POST"


def dedicated_target(openapi: dict[str, Any]) -> Target | None:
    """The endpoint the spec declares: the root's `x-bailing-authz-probe` object (a valid path),
    else the first operation marked `x-bailing-authz-probe: true`."""
    root = openapi.get("x-bailing-authz-probe")
    if isinstance(root, dict) and _is_path(root.get("path")):
        name = str(root.get("operationId") or "authz_probe")[:NAME_MAX]
        return Target("dedicated", _method(root.get("method")), root["path"], name, DEDICATED_SCOPE, True)
    paths = openapi.get("paths")
    for path, item in (paths.items() if isinstance(paths, dict) else ()):
        if not _is_path(path) or not isinstance(item, dict):
            continue
        for method, op in item.items():
            if isinstance(op, dict) and op.get("x-bailing-authz-probe") is True:
                derived = re.sub(r"[^a-zA-Z0-9]+", "_", f"{method}_{path}").strip("_")
                name = str(op.get("operationId") or derived or "authz_probe")[:NAME_MAX]
                return Target("dedicated", _method(method), path, name, DEDICATED_SCOPE, True)
    return None


def tool_target(compiled: CompiledProvider) -> Target | None:
    """The first compiled GET tool without a required parameter, one that requires a subject
    preferred: no arguments are guessed, and no write is ever touched."""
    candidates = [t for t in compiled.tools.values()
                  if t.method == "GET" and not t.input_schema.get("required")]
    chosen = next((t for t in candidates if t.subject_required), candidates[0] if candidates else None)
    if chosen is None:
        return None
    return Target("tool", "GET", chosen.path, chosen.name, chosen.scope, chosen.subject_required)


def request_of(target: Target, secret: str, timestamp: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the probe (A.7): signed as a tool call for the probe subject and
    job `probe`; Content-Type only on the dedicated endpoint (there for GET too)."""
    body = DEDICATED_BODY if target.mode == "dedicated" and target.method == "POST" else b""
    message = signing.canonical_request(timestamp, target.method, target.path, body, SUBJECT, JOB_ID)
    headers = {"Content-Type": "application/json"} if target.mode == "dedicated" else {}
    headers.update({
        "X-Bailing-Timestamp": timestamp,
        "X-Bailing-Signature": signing.signature(secret, message),
        "X-Bailing-Job-Id": JOB_ID,
        "X-Bailing-Client": CLIENT,
        "X-Bailing-On-Behalf-Of": SUBJECT,
        "X-Bailing-Tool-Scope": target.scope,
    })
    return body, headers


def _decision(body: bytes) -> bool | None:
    """The first of DECISION_KEYS that holds a boolean, in a JSON object body."""
    try:
        value = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return next((value[k] for k in DECISION_KEYS if isinstance(value.get(k), bool)), None)


def classify(target: Target, answer: Fetched) -> dict[str, Any]:
    """§C.3, row by row; the result without its time."""
    base: dict[str, Any] = {"mode": target.mode, "tool": target.name, "requires_subject": target.requires_subject}
    http = answer.status
    if http is None:
        return {"status": "inconclusive", **base, "reason": f"the probe request failed: {answer.failure}"}
    base["http"] = http
    if http in (401, 403):
        return {"status": "pass", **base, "reason": f"HTTP {http}: the synthetic subject was refused"}
    if not 200 <= http < 300:
        return {"status": "inconclusive", **base, "reason": f"HTTP {http} is neither a refusal (401/403) nor 2xx"}
    if target.mode == "dedicated":
        decision = None if answer.failure else _decision(answer.body)
        if decision is False:
            return {"status": "pass", **base, "reason": "the probe endpoint answered authorized=false"}
        if decision is True:
            return {"status": "suspect", **base,
                    "reason": "the probe endpoint authorized the synthetic subject __bailing_authz_probe__:nobody"}
        return {"status": "inconclusive", **base,
                "reason": "2xx without a boolean authorized, allow, allowed or ok in a JSON object"}
    if target.requires_subject:
        return {"status": "suspect", **base,
                "reason": "a tool that requires a subject answered 2xx for the synthetic subject: the business "
                          "system may verify the signature without authorizing the subject"}
    return {"status": "inconclusive", **base,
            "reason": "2xx from a tool that does not require a subject: a public read cannot be told "
                      "from a missing authorization"}


def timeout_seconds(timeout_ms: int) -> float:
    """min(provider timeout, 8 s); at least 1 s (Core stores provider timeouts from 1 s up)."""
    return max(1000, min(timeout_ms or limits.AUTHZ_PROBE_MAX_MS, limits.AUTHZ_PROBE_MAX_MS)) / 1000


def run(*, base_url: str, secret: str | None, timeout_ms: int, openapi: dict[str, Any] | None,
        compiled: CompiledProvider | None) -> dict[str, Any]:
    """Probe once (network, outside any transaction); the result to store, with its time."""
    result = _run(base_url, secret, timeout_ms, openapi, compiled)
    result["at"] = iso(utc_now())
    return result


def _run(base_url: str, secret: str | None, timeout_ms: int, openapi: dict[str, Any] | None,
         compiled: CompiledProvider | None) -> dict[str, Any]:
    if not base_url or not secret:
        return {"status": "skipped", "reason": "the provider has no base URL or no signing secret (its "
                                               "secret_env is not set)"}
    if not openapi or compiled is None:
        return {"status": "skipped", "reason": "the provider has no spec"}
    target = dedicated_target(openapi) or tool_target(compiled)
    if target is None:
        return {"status": "skipped", "reason": "no x-bailing-authz-probe endpoint and no GET tool without "
                                               "required parameters (no argument is guessed, no write is sent)"}
    body, headers = request_of(target, secret, str(int(time.time())))
    answer = fetch(target.method, base_url.rstrip("/") + target.path, headers=headers, body=body,
                   seconds=timeout_seconds(timeout_ms), max_bytes=limits.BUSINESS_RESPONSE_MAX_BYTES)
    return classify(target, answer)

