"""The pure rules of task control: value formats, the create and control bodies, the derived
identifiers and digests, the state machine and the dispatchability check (TASK_CONTROL.md §2-§4).
Nothing here reads the database or the clock; callers pass `now`. Refusals are ApiErrors with
their TASK_* code."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import limits
from ..canonical import iso, sha256_json
from ..errors import ApiError
from ..validation import RESERVED_ROUTES, SAFE_INTEGER_MAX

STATES = ("active", "paused", "blocked", "cancelled")
ACTIONS = ("pause", "resume", "cancel")
MEMBER_FIELDS = ("session_id", "client_app_id", "workspace", "client_conversation_id", "allowed_tools")
POLICY_FIELDS = ("max_write_calls", "max_concurrent", "expires_at")
MAX_MEMBERS = limits.TASK_MAX_MEMBERS
MAX_TOOLS = limits.TASK_MAX_TOOLS
MAX_WRITE_CALLS = limits.TASK_MAX_WRITE_CALLS
MAX_CONCURRENT = limits.TASK_MAX_CONCURRENT

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.I)
HEX64 = re.compile(r"[a-f0-9]{64}")
WORKSPACE = re.compile(r"[a-z0-9][a-z0-9_-]{1,63}")
CONVERSATION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
INSTANT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,3}))?Z")
# What JavaScript's String.prototype.trim removes: a task text must already be trimmed.
JS_WHITESPACE = frozenset("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                          "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")


def invalid(message: str) -> ApiError:
    return ApiError("TASK_INVALID_INPUT", message)


# ----------------------------------------------------------------------------- formats

def uuid_text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not UUID.fullmatch(value):
        raise invalid(f"{name} must be a UUID (versions 1 to 5).")
    return value.lower()


def hex64(value: Any, name: str) -> str:
    if not isinstance(value, str) or not HEX64.fullmatch(value):
        raise invalid(f"{name} must be 64 lowercase hex digits.")
    return value


def workspace(value: Any, name: str = "workspace") -> str:
    if not isinstance(value, str) or not WORKSPACE.fullmatch(value) or value in RESERVED_ROUTES:
        raise invalid(f"{name} must be a route key (2 to 64 of a-z 0-9 _ -, not 'auto').")
    return value


def conversation_id(value: Any, name: str = "client_conversation_id") -> str:
    if not isinstance(value, str) or not CONVERSATION.fullmatch(value):
        raise invalid(f"{name} must be 1 to 128 of A-Z a-z 0-9 _ . : - starting with a letter or digit.")
    return value


def utf16_length(value: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in value)


def task_text(value: Any, name: str, most: int) -> str:
    """A text of 1..`most` UTF-16 code units, already trimmed, with no control character and no
    unpaired surrogate."""
    if not isinstance(value, str) or not 1 <= utf16_length(value) <= most:
        raise invalid(f"{name} must be a string of 1 to {most} characters.")
    if value[0] in JS_WHITESPACE or value[-1] in JS_WHITESPACE:
        raise invalid(f"{name} must not begin or end with white space.")
    if any(ord(c) < 0x20 or ord(c) == 0x7F or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise invalid(f"{name} must not contain control characters or unpaired surrogates.")
    return value


def integer(value: Any, name: str, lo: int, hi: int = SAFE_INTEGER_MAX) -> int:
    """A JSON number with an integral value in [lo, hi] (2.0 and 1e3 count, as in JavaScript);
    never a boolean or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(f"{name} must be an integer.")
    if isinstance(value, float) and not (value.is_integer() and abs(value) <= SAFE_INTEGER_MAX):
        raise invalid(f"{name} must be an integer.")
    number = int(value)
    if not lo <= number <= min(hi, SAFE_INTEGER_MAX):
        raise invalid(f"{name} must be between {lo} and {min(hi, SAFE_INTEGER_MAX)}.")
    return number


def instant(value: Any, name: str = "expires_at") -> datetime:
    """A UTC instant written `YYYY-MM-DDTHH:MM:SS[.mmm]Z`, a real calendar time, year >= 1000."""
    match = INSTANT.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise invalid(f"{name} must be a UTC time such as 2026-01-15T08:00:00.000Z.")
    year, month, day, hour, minute, second, fraction = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                          int((fraction or "0").ljust(3, "0")) * 1000, tzinfo=UTC)
    except ValueError:
        raise invalid(f"{name} is not a real calendar time.") from None
    if moment.year < 1000:
        raise invalid(f"{name} must be in year 1000 or later.")
    return moment


def wire_time(moment: datetime | None) -> str | None:
    """Task timestamps on the wire and in digests: UTC, to the millisecond."""
    return iso(moment)


def truncated(moment: datetime) -> datetime:
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


# ----------------------------------------------------------------------------- digests

def digest(value: Any) -> str:
    """H of TASK_CONTROL.md §3.2: SHA-256 of canonical JSON (for the ASCII keys used here,
    identical to upstream's code-unit order)."""
    return sha256_json(value)


def task_id(actor: str, request_id: str) -> str:
    """The UUID a create request names: derived from who asks and their request id (§3.3)."""
    text = json.dumps(["bailing.agent-task-create.v1", actor, request_id], ensure_ascii=False,
                      separators=(",", ":"))
    d = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{d[0:8]}-{d[8:12]}-4{d[13:16]}-a{d[17:20]}-{d[20:32]}"


def request_key(actor: str, request_id: str) -> str:
    return digest([actor, request_id])


def member_key_text(member: dict[str, Any]) -> str:
    return json.dumps([member["session_id"], member["workspace"], member["client_conversation_id"]],
                      ensure_ascii=False, separators=(",", ":"))


def member_key(member: dict[str, Any]) -> str:
    return digest([member["session_id"], member["workspace"], member["client_conversation_id"]])


def identity_digest(session_id: str, client_app_id: str, principal: Any, on_behalf_of: Any,
                    created_at: datetime) -> str:
    """What a member's session was when the task froze it (§3.4): any later change blocks."""
    if isinstance(principal, dict) and isinstance(principal.get("roles"), list):
        principal = {**principal, "roles": sorted(principal["roles"], key=_code_units)}
    return digest({"sessionId": session_id, "clientAppId": client_app_id, "principal": principal,
                   "onBehalfOf": on_behalf_of, "createdAt": wire_time(truncated(created_at))})


def _code_units(value: Any) -> Any:
    return value.encode("utf-16-be") if isinstance(value, str) else str(value).encode("utf-16-be")


def _internal(member: dict[str, Any]) -> dict[str, Any]:
    return {"allowedTools": member["allowed_tools"], "clientAppId": member["client_app_id"],
            "clientConversationId": member["client_conversation_id"], "route": member["workspace"],
            "sessionId": member["session_id"]}


def scope_hash(members: list[dict[str, Any]], identities: dict[str, str]) -> str:
    """H of the members in member-key order, each with its identity digest (`identities` by
    member key text)."""
    return digest([{**_internal(m), "identityHash": identities[member_key_text(m)]} for m in members])


def create_hash(task: str, actor: str, members: list[dict[str, Any]], policy: dict[str, Any]) -> str:
    return digest({"taskId": task, "actor": actor, "members": [_internal(m) for m in members],
                   "policy": {"maxWriteCalls": policy["max_write_calls"],
                              "maxConcurrent": policy["max_concurrent"], "expiresAt": policy["expires_at"]}})


def control_hash(task: str, actor: str, action: str, expected_revision: int) -> str:
    return digest({"taskId": task, "actor": actor, "action": action, "expectedRevision": expected_revision})


# ----------------------------------------------------------------------------- bodies

def _exact(value: Any, name: str, fields: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != set(fields):
        raise invalid(f"{name} must be an object with exactly: {', '.join(fields)}.")
    return value


def tools(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TOOLS:
        raise invalid(f"{name} must list 1 to {MAX_TOOLS} exact tool names.")
    for item in value:
        if not isinstance(item, str) or not TOOL.fullmatch(item):
            raise invalid(f"{name} must hold exact tool names (no wildcard): {str(item)[:70]!r} is not one.")
    if len(set(value)) != len(value):
        raise invalid(f"{name} names a tool twice.")
    return sorted(value)


def member(value: Any, index: int) -> dict[str, Any]:
    where = f"members[{index}]"
    raw = _exact(value, where, MEMBER_FIELDS)
    return {"session_id": uuid_text(raw["session_id"], f"{where}.session_id"),
            "client_app_id": task_text(raw["client_app_id"], f"{where}.client_app_id",
                                               limits.TASK_TEXT_MAX["client_app_id"]),
            "workspace": workspace(raw["workspace"], f"{where}.workspace"),
            "client_conversation_id": conversation_id(raw["client_conversation_id"],
                                                      f"{where}.client_conversation_id"),
            "allowed_tools": tools(raw["allowed_tools"], f"{where}.allowed_tools")}


def members(value: Any) -> list[dict[str, Any]]:
    """The members, normalised (fresh copies) and in member-key order; a key twice is refused."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_MEMBERS:
        raise invalid(f"members must list 1 to {MAX_MEMBERS} members.")
    normalised = [member(item, i) for i, item in enumerate(value)]
    keys = [member_key_text(m) for m in normalised]
    if len(set(keys)) != len(keys):
        raise invalid("members lists the same session, workspace and conversation twice.")
    return sorted(normalised, key=lambda m: _code_units(member_key_text(m)))


def policy(value: Any) -> dict[str, Any]:
    raw = _exact(value, "policy", POLICY_FIELDS)
    budget = raw["max_write_calls"]
    deadline = raw["expires_at"]
    return {"max_write_calls": None if budget is None else integer(budget, "policy.max_write_calls", 0,
                                                                    MAX_WRITE_CALLS),
            "max_concurrent": integer(raw["max_concurrent"], "policy.max_concurrent", 1, MAX_CONCURRENT),
            "expires_at": None if deadline is None else wire_time(instant(deadline, "policy.expires_at"))}


@dataclass(frozen=True)
class CreateRequest:
    request_id: str
    members: list[dict[str, Any]]
    policy: dict[str, Any]


def create_request(body: Any) -> CreateRequest:
    raw = _exact(body, "The body", ("request_id", "members", "policy"))
    return CreateRequest(task_text(raw["request_id"], "request_id", limits.TASK_TEXT_MAX["request_id"]),
                         members(raw["members"]), policy(raw["policy"]))


@dataclass(frozen=True)
class ControlRequest:
    request_id: str
    expected_revision: int
    action: str


def control_request(body: Any) -> ControlRequest:
    raw = _exact(body, "The body", ("request_id", "expected_revision", "action"))
    if raw["action"] not in ACTIONS:
        raise invalid("action must be pause, resume or cancel.")
    return ControlRequest(task_text(raw["request_id"], "request_id", limits.TASK_TEXT_MAX["request_id"]),
                          integer(raw["expected_revision"], "expected_revision", 1), raw["action"])


# ----------------------------------------------------------------------------- state

def expired(expires_at: str | None, now: datetime) -> bool:
    """The deadline's own instant already counts as expired."""
    return expires_at is not None and instant(expires_at) <= now


def effective_state(state: str, expires_at: str | None, now: datetime) -> str:
    if state == "cancelled":
        return state
    return "expired" if expired(expires_at, now) else state


def dispatch_refusal(state: str, expires_at: str | None, now: datetime) -> str | None:
    """Why no new work may start under a task in this state (§4.5), or None."""
    if state == "cancelled":
        return "TASK_CANCELLED"
    if state == "blocked":
        return "TASK_SCOPE_BLOCKED"
    if state == "paused":
        return "TASK_PAUSED"
    if expired(expires_at, now):
        return "TASK_EXPIRED"
    return None


def transition(state: str, action: str) -> str:
    """The state a control leads to (§4.3), or its refusal. Expiry (for resume) is the caller's."""
    if state == "cancelled":
        raise ApiError("TASK_CANCELLED")
    if action == "cancel":
        return "cancelled"
    if action == "pause":
        return "paused"
    if action != "resume":
        raise invalid("action must be pause, resume or cancel.")
    if state != "paused":
        raise ApiError("TASK_CONTROL_CONFLICT", f"Only a paused task can be resumed; this one is {state}.")
    return "active"


def write_capacity(max_write_calls: int | None, reserved: int, consumed: int) -> bool:
    return max_write_calls is None or reserved + consumed < max_write_calls


def instant_or_none(value: str | None) -> datetime | None:
    return None if value is None else instant(value)
