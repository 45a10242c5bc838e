"""System info and task control, read as the official SDK reads them: `schema_version` required,
an older hub's plain 404 (or 405/501 without a code, or TASK_UNSUPPORTED) meaning "unsupported"."""
from __future__ import annotations

from . import contract as c
from .check import Reader, join
from .models import SystemInfo, TaskControlCapabilities, TaskView


def parse_system_info(data: dict, endpoint: str, *, route: str, session_id: str, client_app_id: str) -> SystemInfo:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["system_info"], keys=("schema_version",))
    binding = r.object(data, "binding")
    r.string(binding, "client_app_id", "binding", equals=client_app_id)
    r.string(binding, "session_id", "binding", equals=session_id)
    r.string(binding, "workspace", "binding", equals=route)
    status = r.string(data, "metadata_status", choices=("configured", "missing"))
    revision = r.string(data, "revision", pattern=c.HEX64, nullable=True)
    system = r.object(data, "system", nullable=True)
    if (status == "missing") != (revision is None) or (status == "missing") != (system is None):
        r.fail("metadata_status", "revision and system are null exactly when metadata is missing")
    if system is not None:
        r.string(system, "name", "system", max_len=c.SYSTEM_NAME_MAX)
        r.string(system, "summary", "system", max_len=c.SYSTEM_SUMMARY_MAX)
        for key, limit in (("domains", c.SYSTEM_DOMAIN_MAX), ("boundaries", c.SYSTEM_BOUNDARY_MAX)):
            for i, item in enumerate(r.array(system, key, "system", max_items=c.SYSTEM_LIST_MAX)):
                r.string_at(item, join(f"system.{key}", i), max_len=limit)
    r.string(data, "tool_status", equals="not_loaded")
    availability = r.string(data, "availability", choices=("unknown", "unavailable"))
    reason = r.string(data, "unavailable_reason", optional=True, choices=c.UNAVAILABLE_REASONS)
    if (availability == "unavailable") != (reason is not None):
        r.fail("unavailable_reason", "is present exactly when availability is unavailable")
    return SystemInfo(route, status, revision, system, availability, reason)


def parse_task_capabilities(data: dict, endpoint: str) -> TaskControlCapabilities:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["task_capabilities"], keys=("schema_version",))
    supported = r.boolean(data, "supported")
    r.string(data, "task_schema", equals=c.SCHEMA["task"])
    r.string(data, "metering", equals="write_invocation")
    r.boolean(data, "same_hub_only", equals=True)
    if r.array(data, "controls") != c.TASK_CONTROLS:
        r.fail("controls", "must be pause, resume, cancel")
    inspect = r.boolean(data, "inspect_invocation", equals=True if supported else None)
    return TaskControlCapabilities(supported, r.string(data, "mode", choices=("optional", "required")), inspect)


def parse_task(data: dict, endpoint: str, *, task_id: str, session_id: str, client_app_id: str, workspace: str,
               client_conversation_id: str) -> TaskView:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["task"], keys=("schema_version",))
    got = r.string(data, "task_id", pattern=c.UUID)
    if got.lower() != task_id.lower():
        r.fail("task_id", f"must echo {task_id!r}")
    r.string(data, "metering", equals="write_invocation")
    r.boolean(data, "snapshot_is_dispatch_permission", equals=False)
    policy = r.object(data, "policy")
    r.integer(policy, "max_write_calls", "policy", lo=0, nullable=True)
    r.integer(policy, "max_concurrent", "policy", lo=1)
    r.timestamp(policy, "expires_at", "policy", nullable=True)
    counters = r.object(data, "counters")
    for key in ("write_reserved", "write_consumed", "active_permits"):
        r.integer(counters, key, "counters", lo=0)
    member = r.object(data, "member")
    r.string(member, "session_id", "member", equals=session_id)
    r.string(member, "client_app_id", "member", equals=client_app_id)
    r.string(member, "workspace", "member", equals=workspace)
    r.string(member, "client_conversation_id", "member", equals=client_conversation_id)
    tools = r.array(member, "allowed_tools", "member", min_items=1)
    for i, name in enumerate(tools):
        r.string_at(name, join("member.allowed_tools", i), pattern=c.TOOL_NAME)
    return TaskView(got, r.string(data, "state", choices=c.TASK_STATES), r.integer(data, "revision", lo=1),
                    r.integer(data, "ledger_sequence", lo=0), r.string(data, "scope_hash", pattern=c.HEX64),
                    r.integer(data, "member_count", lo=1, hi=c.ARCHIVE_MEMBERS_MAX), policy, counters, tuple(tools))
