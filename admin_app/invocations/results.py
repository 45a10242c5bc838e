"""What an agent is told about an invocation: the result object and the read-only receipt.

The result (`bailing.agent-tool-invocation.v1`) carries the official client's fields (`state`,
`ok`, `auto_retry_allowed`, a bounded `text`, `business_status`, a numeric `approval_id`) beside
the hub's own (`status`, `reason`, `result`, `approval`), which say the same things in the shape
earlier clients read.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .. import limits
from ..canonical import iso, utc_now
from .models import Approval, Invocation, JournalEntry

SCHEMA = "bailing.agent-tool-invocation.v1"
RECEIPT_SCHEMA = "bailing.agent-invocation-receipt.v1"
INSPECTION_SCHEMA = "bailing.agent-invocation-inspection-capabilities.v1"

# Control characters but tab, LF and CR, and lone surrogates: replaced, never passed on.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def bounded_text(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)[:limits.RESULT_TEXT_MAX]


# A rate-limit refusal (BUSINESS_SIDE §D.4): not final; the same invocation is resumed after the
# wait. The text is fixed: the numbers are in `retry_after_ms` and `rate_limit`.
RATE_LIMITED_TEXT = ("Not dispatched: a shared rate limit of this tool or its provider is reached. Wait "
                     "retry_after_ms milliseconds, then resume this same invocation_id; do not make a new call.")
RATE_LIMIT_FIELDS = ("level", "count", "window_sec", "scope", "source")
# The client gate (§D.1): the official client knows only the tool and provider levels, so the
# agent is told `retry_after_ms` alone (a first call only), never a `rate_limit` object.
CLIENT_LIMITED_TEXT = ("Not dispatched: this client's shared rate limit is reached. Wait a minute (retry_after_ms "
                       "milliseconds when given), then resume this same invocation_id; do not make a new call.")


def _rate_limited(inv: Invocation) -> bool:
    return inv.status == "rejected_before_dispatch" and inv.reason == "rate_limited" and inv.rate_limit is not None


def _business_text(inv: Invocation) -> str:
    body = inv.result_body
    if body is None or body == "":
        return f"The business system answered HTTP {inv.business_status} with no body."
    if isinstance(body, str):
        return body
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def _unresolved(journal: JournalEntry | None) -> str:
    return _unresolved_text(journal.idempotency_key if journal is not None else "unknown")


def _unresolved_text(key: str) -> str:
    return ("The outcome is unknown: the request may have reached the business system. Do not "
            f"repeat it; reconcile it by its idempotency key {key}.")


def unresolved_view(result: dict, idempotency_key: str) -> dict:
    """`result` as it reads once its dispatch is known to have no outcome to come: what a resume
    would record (`no_outcome_recorded`), said without writing it."""
    return {**result, "state": "reconciliation_required", "status": "reconciliation_required",
            "reason": "no_outcome_recorded", "ok": False, "auto_retry_allowed": False,
            "text": bounded_text(_unresolved_text(idempotency_key))}


def _text(inv: Invocation, approval: Approval | None, journal: JournalEntry | None) -> str:
    state = inv.status
    if state in ("executed", "business_rejected"):
        return _business_text(inv)
    if state == "awaiting_approval":
        return (f"Waiting for approval {approval.number}; resume this invocation once it is decided."
                if approval is not None else "Waiting for approval; resume this invocation later.")
    if state == "denied":
        return "The approval was denied; nothing was sent to the business system."
    if _rate_limited(inv):
        assert inv.rate_limit is not None
        return CLIENT_LIMITED_TEXT if inv.rate_limit.get("level") == "client" else RATE_LIMITED_TEXT
    if state == "rejected_before_dispatch":
        return f"Refused before dispatch ({inv.reason or 'unspecified'}); nothing was sent."
    if state == "reconciliation_required":
        return _unresolved(journal)
    return "The call is in progress; resume this invocation to learn its outcome."


def result_view(inv: Invocation, approval: Approval | None, journal: JournalEntry | None) -> dict:
    out: dict[str, Any] = {
        "schema_version": SCHEMA,
        "schema": SCHEMA,
        "invocation_id": inv.invocation_id,
        "route": inv.route_key,
        "tool": inv.tool,
        "state": inv.status,
        "ok": inv.status == "executed",
        # Only a call still running elsewhere, or one held back by a rate limit, may be asked
        # again as it is; an uncertain, refused or pending one needs a person or a decision.
        "auto_retry_allowed": inv.status == "in_progress" or _rate_limited(inv),
        "text": bounded_text(_text(inv, approval, journal)),
    }
    if _rate_limited(inv):
        assert inv.rate_limit is not None
        if "retry_after_ms" in inv.rate_limit:
            out["retry_after_ms"] = inv.rate_limit["retry_after_ms"]
        if inv.rate_limit.get("level") != "client":
            out["rate_limit"] = {k: inv.rate_limit[k] for k in RATE_LIMIT_FIELDS}
    if inv.business_status is not None:
        out["business_status"] = inv.business_status
    if approval is not None:
        out["approval_id"] = approval.number
    out["status"] = inv.status
    if inv.reason:
        out["reason"] = inv.reason
    if inv.business_status is not None:
        out["result"] = {"http_status": inv.business_status, "body": inv.result_body}
    if approval is not None:
        out["approval"] = {"id": str(approval.id), "state": approval.status, "args_hash": approval.args_hash}
    return out


def _dispatch_state(journal: JournalEntry | None) -> str:
    if journal is None:
        return "not_dispatched"
    return "attempted" if journal.state == "completed" else "unknown"


def receipt_view(inv: Invocation, approval: Approval | None, journal: JournalEntry | None,
                 dispatcher_alive: bool) -> dict:
    """Where an invocation stands, as stored. An unfinished journal whose dispatcher is gone reads
    as `reconciliation_required` (taken from the journal), without changing anything."""
    result = result_view(inv, approval, journal)
    source = "job"
    if journal is not None and journal.state == "dispatching" and not dispatcher_alive:
        result, source = unresolved_view(result, journal.idempotency_key), "journal"
    return {
        "schema_version": RECEIPT_SCHEMA,
        "read_only": True,
        "business_operation_performed": False,
        "invocation_id": inv.invocation_id,
        "agent_run_id": str(inv.run_id) if inv.run_id else None,
        "route": inv.route_key,
        "tool": inv.tool,
        "observed_at": iso(utc_now()),
        "result": result,
        "result_source": source,
        "dispatch_state": _dispatch_state(journal),
        "approval": {"status": "none"} if approval is None else
                    {"status": approval.status, "approval_id": approval.number},
        "journal_state": "absent" if journal is None else journal.state,
    }


def inspection_capabilities() -> dict:
    return {"schema_version": INSPECTION_SCHEMA, "receipt_schema": RECEIPT_SCHEMA, "read_only": True}
