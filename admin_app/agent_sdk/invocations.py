"""Governed tool calls: the invoke request within our spec's budgets, and the invocation result,
inspection capabilities and receipt checked as the official SDK checks them."""
from __future__ import annotations

import secrets

from ..js_json import byte_length
from . import contract as c
from .check import Reader, join
from .errors import RequestRefused
from .http import encode
from .models import InspectionCapabilities, Invocation, RateLimit, Receipt
from .runtime import route_key


def new_invocation_id() -> str:
    return secrets.token_hex(32)


def invoke_body(*, invocation_id: str, route: str, capability_revision: str, agent_run_id: str, tool: str,
                arguments: dict) -> dict:
    """Exactly the six fields, refused here when the hub would refuse them."""
    if not isinstance(invocation_id, str) or not c.HEX64.fullmatch(invocation_id):
        raise RequestRefused("invocation_id", "must be 64 lowercase hex digits")
    route_key(route)
    if not isinstance(capability_revision, str) or not c.HEX64.fullmatch(capability_revision):
        raise RequestRefused("capability_revision", "must be 64 lowercase hex digits")
    if not isinstance(agent_run_id, str) or not c.UUID.fullmatch(agent_run_id):
        raise RequestRefused("agent_run_id", "must be the turn's run_id (a UUID)")
    if not isinstance(tool, str) or not c.TOOL_NAME.fullmatch(tool):
        raise RequestRefused("tool", "must be a tool name")
    if not isinstance(arguments, dict):
        raise RequestRefused("arguments", "must be an object")
    if byte_length(arguments) > c.ARGUMENTS_MAX_BYTES:
        raise RequestRefused("arguments", f"exceed {c.ARGUMENTS_MAX_BYTES} bytes of JSON")
    body = {"invocation_id": invocation_id, "route": route, "capability_revision": capability_revision,
            "agent_run_id": agent_run_id, "tool": tool, "arguments": arguments}
    if len(encode(body)) > c.ENVELOPE_MAX_BYTES:
        raise RequestRefused("body", f"exceeds {c.ENVELOPE_MAX_BYTES} bytes")
    return body


def parse_invocation(r: Reader, value, base: str, invocation_id: str, route: str | None = None,
                     tool: str | None = None) -> Invocation:
    d = r.object_at(value, base)
    r.schema(d, c.SCHEMA["invocation"], optional=bool(base), base=base)  # a receipt's copy may omit its marker
    state = r.string(d, "state", base, choices=c.STATES)
    auto_retry = r.boolean(d, "auto_retry_allowed", base)
    rate_fields = [k for k in ("retry_after_ms", "rate_limit") if k in d]
    if rate_fields and not (state == "rejected_before_dispatch" and auto_retry):
        r.fail(join(base, rate_fields[0]), "is allowed only on a rate-limited rejected_before_dispatch")
    limit = r.object(d, "rate_limit", base, optional=True)
    lbase = join(base, "rate_limit")
    return Invocation(
        invocation_id=r.string(d, "invocation_id", base, equals=invocation_id),
        route=r.string(d, "route", base, **({"equals": route} if route else {"pattern": c.ROUTE_KEY})),
        tool=r.string(d, "tool", base, **({"equals": tool} if tool else {"pattern": c.TOOL_NAME})),
        state=state,
        ok=r.boolean(d, "ok", base),
        auto_retry_allowed=auto_retry,
        text=r.string(d, "text", base, max_len=c.INVOCATION_TEXT_MAX),
        business_status=r.integer(d, "business_status", base, lo=c.BUSINESS_STATUS_RANGE[0],
                                  hi=c.BUSINESS_STATUS_RANGE[1], optional=True),
        approval_id=r.integer(d, "approval_id", base, lo=1, optional=True),
        retry_after_ms=r.integer(d, "retry_after_ms", base, lo=c.RETRY_AFTER_RANGE[0],
                                 hi=c.RETRY_AFTER_RANGE[1], optional=True),
        rate_limit=None if limit is None else RateLimit(
            level=r.string(limit, "level", lbase, choices=c.RATE_LEVELS),
            count=r.integer(limit, "count", lbase, lo=0),
            window_sec=r.integer(limit, "window_sec", lbase, choices=c.RATE_WINDOWS),
            scope=r.string(limit, "scope", lbase, equals="tool_provider_shared"),
            source=r.string(limit, "source", lbase, choices=c.RATE_SOURCES)),
    )


def parse_inspection(data: dict, endpoint: str) -> InspectionCapabilities:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["inspection"], keys=("schema_version",))
    return InspectionCapabilities(r.string(data, "receipt_schema", equals=c.SCHEMA["receipt"]),
                                  r.boolean(data, "read_only", equals=True))


def parse_receipt(data: dict, endpoint: str, invocation_id: str) -> Receipt:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["receipt"], keys=("schema_version",))
    r.boolean(data, "read_only", equals=True)
    r.boolean(data, "business_operation_performed", equals=False)
    route = r.string(data, "route", pattern=c.ROUTE_KEY)
    tool = r.string(data, "tool", pattern=c.TOOL_NAME)
    source = r.string(data, "result_source", choices=c.RESULT_SOURCES)
    raw = r.object(data, "result", nullable=True)
    if (source == "none") != (raw is None):
        r.fail("result_source", "is 'none' exactly when result is null")
    approval = r.object(data, "approval")
    status = r.string(approval, "status", "approval", choices=("none",) + c.APPROVAL_STATUSES)
    approval_id = r.integer(approval, "approval_id", "approval", lo=1, optional=status == "none")
    if status == "none" and approval_id is not None:
        r.fail("approval.approval_id", "must be absent without an approval")
    return Receipt(
        invocation_id=r.string(data, "invocation_id", equals=invocation_id),
        agent_run_id=r.string(data, "agent_run_id", pattern=c.UUID),
        route=route, tool=tool,
        observed_at=r.timestamp(data, "observed_at"),
        result=None if raw is None else parse_invocation(r, raw, "result", invocation_id, route, tool),
        result_source=source,
        dispatch_state=r.string(data, "dispatch_state", choices=c.DISPATCH_STATES),
        approval_status=status, approval_id=approval_id,
        journal_state=r.string(data, "journal_state", choices=c.JOURNAL_STATES),
    )
