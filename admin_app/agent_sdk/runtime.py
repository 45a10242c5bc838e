"""Parsing the Runtime's answers (workspaces, bootstrap, turn, search, tool detail, completion)
with the official SDK's rules, and checking the requests an agent builds before they leave."""
from __future__ import annotations

from . import contract as c
from .check import Reader, join, json_bytes
from .errors import ContractError, RequestRefused
from .models import (Bootstrap, CapabilitySummary, Completion, Discovery, SearchResult, TaskBinding, Tool,
                     ToolDetail, TurnContext, UsageGuidance, Workspace)


# ---------------------------------------------------------------- requests

def client_id(value, field: str) -> str:
    if not isinstance(value, str) or not c.CLIENT_ID.fullmatch(value):
        raise RequestRefused(field, "must be 1-128 of A-Z a-z 0-9 _ . : - starting with a letter or digit")
    return value


def client_text(value, field: str, max_len: int, non_blank: bool = True) -> str:
    if not isinstance(value, str):
        raise RequestRefused(field, "must be a string")
    if non_blank and not value.strip():
        raise RequestRefused(field, "must not be blank")
    if len(value.encode("utf-16-le")) // 2 > max_len:
        raise RequestRefused(field, f"must be at most {max_len} characters")
    if c.CONTROL.search(value):
        raise RequestRefused(field, "must not contain control characters")
    return value


def route_key(value, field: str = "route") -> str:
    if not isinstance(value, str) or not c.ROUTE_KEY.fullmatch(value) or value == "auto":
        raise RequestRefused(field, "must be a route key")
    return value


# ---------------------------------------------------------------- workspaces and bootstrap

def parse_workspaces(data: dict, endpoint: str) -> list[Workspace]:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["workspaces"])
    items = r.array(data, "workspaces", max_items=c.WORKSPACES_MAX)
    seen, out = set(), []
    for i, item in enumerate(items):
        base = join("workspaces", i)
        r.object_at(item, base)
        key = "route" if "route" in item or "route_key" not in item else "route_key"
        route = r.string(item, key, base, pattern=c.ROUTE_KEY)
        if route in seen:
            r.fail(join(base, key), "must be unique")
        seen.add(route)
        out.append(Workspace(route, r.string(item, "name", base, optional=True),
                             r.string(item, "description", base, optional=True)))
    return out


def parse_bootstrap(data: dict, endpoint: str, route: str) -> Bootstrap:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["bootstrap"])
    ws = r.object(data, "workspace")
    workspace = Workspace(r.string(ws, "route", "workspace", equals=route),
                          r.string(ws, "name", "workspace", optional=True),
                          r.string(ws, "description", "workspace", optional=True))
    profile = r.object(data, "profile")
    bundle = {k: r.object(profile, k, "profile") for k in ("governance", "knowledge", "memory")}
    if json_bytes(bundle) > c.PROFILE_BUNDLE_MAX_BYTES:
        r.fail("profile", "governance, knowledge and memory exceed 64 KiB")
    for key in ("renderers", "memory_refs", "knowledge_refs"):
        r.array(profile, key, "profile", optional=True)
    caps = r.object(data, "capabilities")
    active = r.array(caps, "active_tools", "capabilities", optional=True, max_items=c.ACTIVE_TOOLS_MAX)
    for i, tool in enumerate(active or []):
        parse_tool(r, tool, join("capabilities.active_tools", i))
    counts = {k: r.integer(caps, k, "capabilities", lo=0, optional=True)
              for k in ("authorized_total", "active_limit", "readonly", "writes", "approval_required")}
    return Bootstrap(
        workspace=workspace,
        profile_revision=r.string(profile, "revision", "profile", pattern=c.HEX64),
        instructions=r.string(profile, "instructions", "profile", max_len=c.INSTRUCTIONS_MAX),
        knowledge=bundle["knowledge"], memory=bundle["memory"], governance=bundle["governance"],
        capabilities=CapabilitySummary(revision=r.string(caps, "revision", "capabilities", pattern=c.HEX64), **counts),
    )


# ---------------------------------------------------------------- tools

def parse_tool(r: Reader, value, base: str) -> Tool:
    """The eight required fields of a tool projection; one bad tool refuses the whole answer."""
    t = r.object_at(value, base)
    schema = r.object(t, "input_schema", base)
    if schema.get("type") != "object":
        r.fail(join(base, "input_schema.type"), "must be 'object'")
    if json_bytes(schema) > c.INPUT_SCHEMA_MAX_BYTES:
        r.fail(join(base, "input_schema"), "exceeds 64 KiB")
    return Tool(
        name=r.string(t, "name", base, pattern=c.TOOL_NAME),
        description=r.string(t, "description", base, non_blank=True, max_len=c.DESCRIPTION_MAX),
        input_schema=schema,
        scope=r.string(t, "scope", base, max_len=c.SCOPE_MAX),
        risk=r.string(t, "risk", base, choices=c.RISKS),
        approval_required=r.boolean(t, "approval_required", base),
        readonly=r.boolean(t, "readonly", base),
        idempotent=r.boolean(t, "idempotent", base),
        usage_guidance_available=bool(r.boolean(t, "usage_guidance_available", base, optional=True)),
        description_truncated=bool(r.boolean(t, "description_truncated", base, optional=True)),
    )


def parse_tools(r: Reader, data: dict, key: str, max_items: int) -> tuple[Tool, ...]:
    items = r.array(data, key, max_items=max_items)
    tools = tuple(parse_tool(r, item, join(key, i)) for i, item in enumerate(items))
    if len({t.name for t in tools}) != len(tools):
        r.fail(key, "tool names must be unique")
    return tools


def parse_discovery(value, returned: int, limit: int) -> Discovery | None:
    """The search metadata, or None when it is absent or does not agree with itself."""
    r = Reader("discovery")
    try:
        d = r.object_at(value, "discovery")
        r.string(d, "mode", equals="ranked_candidates")
        r.string(d, "scope", equals="current_authorization")
        r.string(d, "truncation_scope", equals="authorized_catalog")
        r.string(d, "pagination", equals="unsupported")
        found = Discovery(
            returned_count=r.integer(d, "returned_count", lo=0),
            authorized_total=r.integer(d, "authorized_total", lo=0),
            matched_total=r.integer(d, "matched_total", lo=0, nullable=True),
            matched_total_exact=r.boolean(d, "matched_total_exact"),
            limit=r.integer(d, "limit", lo=1, hi=c.ACTIVE_TOOLS_MAX),
            truncated=r.boolean(d, "truncated"),
            has_more=r.boolean(d, "has_more"),
        )
    except ContractError:
        return None
    beyond = found.authorized_total > found.returned_count
    if (found.returned_count != returned or found.limit != limit or found.truncated != beyond
            or found.has_more != beyond or found.returned_count != min(found.limit, found.authorized_total)
            or (found.matched_total is None and found.matched_total_exact)):
        return None
    return found


# ---------------------------------------------------------------- turn

def parse_turn(data: dict, endpoint: str, binding: TaskBinding | None, delivery: str | None) -> TurnContext:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["turn"])
    context = r.object(data, "context")
    tools = parse_tools(r, data, "active_tools", c.ACTIVE_TOOLS_MAX)
    echoed = r.object(data, "task_binding", optional=True)
    if binding is None and echoed is not None:
        r.fail("task_binding", "TASK_BINDING_CONFLICT: echoed a binding that was not sent")
    if binding is not None:
        if echoed is None:
            r.fail("task_binding", "TASK_BINDING_CONFLICT: the sent binding is not echoed")
        if echoed != binding.wire():
            r.fail("task_binding", "TASK_BINDING_CONFLICT: the echo differs from the sent binding")
    negotiated = r.string(context, "knowledge_delivery", "context", optional=True, choices=c.KNOWLEDGE_DELIVERY)
    if delivery is not None and negotiated != delivery:
        r.fail("context.knowledge_delivery", f"must echo {delivery!r}")
    if delivery is None and negotiated not in (None, "inline"):
        r.fail("context.knowledge_delivery", "was not negotiated")
    discovery = None
    if "discovery" in data:
        discovery = parse_discovery(data["discovery"], len(tools), c.ACTIVE_TOOLS_MAX)
    return TurnContext(
        run_id=r.string(data, "run_id", pattern=c.UUID),
        profile_revision=r.string(data, "profile_revision", pattern=c.HEX64, optional=True),
        capability_revision=r.string(data, "capability_revision", pattern=c.HEX64),
        instructions=r.string(context, "instructions", "context", optional=True) or "",
        page_context=r.object(context, "page_context", "context", optional=True) or {},
        renderers=r.array(context, "renderers", "context", optional=True) or [],
        memory=r.object(context, "memory", "context", optional=True) or {},
        memory_refs=r.array(context, "memory_refs", "context", optional=True) or [],
        knowledge=r.array(context, "knowledge", "context", optional=True) or [],
        knowledge_refs=r.array(context, "knowledge_refs", "context", optional=True) or [],
        knowledge_delivery=negotiated,
        governance=r.object(context, "governance", "context", optional=True) or {},
        active_tools=tools,
        task_binding=binding,
        discovery=discovery,
    )


# ---------------------------------------------------------------- search and detail

def parse_search(data: dict, endpoint: str, route: str, limit: int) -> SearchResult:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["search"])
    tools = parse_tools(r, data, "tools", limit)
    return SearchResult(
        route=r.string(data, "route", equals=route),
        capability_revision=r.string(data, "capability_revision", pattern=c.HEX64),
        query=r.string(data, "query", optional=True),
        tools=tools,
        discovery=parse_discovery(data["discovery"], len(tools), limit) if "discovery" in data else None,
    )


def parse_tool_detail(data: dict, endpoint: str, route: str, name: str, revision: str) -> ToolDetail:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["tool_detail"])
    tool = parse_tool(r, data.get("tool"), "tool")
    if tool.name != name:
        r.fail("tool.name", f"must echo {name!r}")
    g = r.object(data, "usage_guidance")
    guidance = UsageGuidance(
        text=r.string(g, "text", "usage_guidance", max_len=c.GUIDANCE_MAX_CHARS),
        truncated=r.boolean(g, "truncated", "usage_guidance"),
        source_chars=r.integer(g, "source_chars", "usage_guidance", lo=0),
        max_chars=r.integer(g, "max_chars", "usage_guidance", lo=1, hi=c.GUIDANCE_MAX_CHARS),
        source_bytes=r.integer(g, "source_bytes", "usage_guidance", lo=0),
        max_bytes=r.integer(g, "max_bytes", "usage_guidance", lo=1, hi=c.GUIDANCE_MAX_BYTES),
    )
    if len(guidance.text) > guidance.max_chars or len(guidance.text.encode("utf-8")) > guidance.max_bytes:
        r.fail("usage_guidance.text", "exceeds its own bounds")
    if not guidance.truncated and (guidance.source_chars > guidance.max_chars
                                   or guidance.source_bytes > guidance.max_bytes):
        r.fail("usage_guidance.truncated", "must be true when the source exceeds the bounds")
    return ToolDetail(route=r.string(data, "route", equals=route),
                      capability_revision=r.string(data, "capability_revision", equals=revision),
                      tool=tool, usage_guidance=guidance)


# ---------------------------------------------------------------- completion

def parse_completion(data: dict, endpoint: str, run_id: str, status: str) -> Completion:
    r = Reader(endpoint)
    r.schema(data, c.SCHEMA["completion"], optional=True)
    sent = run_id.lower()
    got = r.string(data, "run_id", pattern=c.UUID)
    if got.lower() != sent:
        r.fail("run_id", f"must echo {run_id!r}")
    return Completion(got, r.string(data, "status", equals=status),
                      r.boolean(data, "idempotent_replay", optional=True))
