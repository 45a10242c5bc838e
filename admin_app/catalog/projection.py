"""What one session sees of the catalog in one route, and the revision that names it.

Rules, in order: a tool comes from a source provider of the route whose `allow` lists its scope
(or `*`); a write (not readonly) needs the route's `permission: full` and its exact name in
`tools.agent_direct.write_tools`; a tool with `subject.required` is hidden from a session without
`on_behalf_of`. Approval is ACC's (`risk: high`, `approval.required`, `approval.when`), and the
route's `force_approval_tools` can only add to it.

A job of the Client API (admin_app.jobs, CLIENT_API_AND_EXECUTOR.md §C) is a caller too, under
Core's job rules: the route's `tools.sources` whether or not `agent_direct` is enabled, and a write
with `permission: full` alone (`agent_direct.write_tools` names what a *local agent* may call
directly; Core's job path has no such list). `force_approval_tools` still adds approval.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from sqlalchemy.orm import Session

from .. import limits
from ..canonical import canonical_json, sha256_json
from ..identity.models import Route
from .compiler import Tool
from .store import compiled_providers


class Caller(Protocol):
    """Who a projection is for, by what it depends on: an agent session, or a job."""

    @property
    def on_behalf_of(self) -> str | None: ...

    @property
    def principal(self) -> dict[str, Any] | None: ...

    @property
    def client_app_id(self) -> str: ...


@dataclass(frozen=True)
class Visible:
    tool: Tool
    approval_required: bool  # every call needs approval (ACC or forced by the route)

    def projection(self) -> dict:
        """The public view of a tool: the eight fields the official client requires, plus our
        spec's two optional flags; no path, provider URL, secret, raw spec or policy detail."""
        t = self.tool
        view = {
            "name": t.name,
            "description": t.description.text,
            "input_schema": t.public_schema,
            "scope": t.scope,
            "risk": t.risk,
            "approval_required": self.may_need_approval,
            "readonly": t.readonly,
            "idempotent": t.idempotent,
        }
        if t.description.truncated:
            view["description_truncated"] = True
        if t.usage_guidance_available:
            view["usage_guidance_available"] = True
        return view

    def policy(self) -> dict:
        """What governs a call beyond the projection; part of the revision, so that a changed
        rule, subject requirement or timeout invalidates discovery like a changed field."""
        t = self.tool
        return {"approval": {"required": self.approval_required, "when": list(t.approval_rules)},
                "subject_required": t.subject_required, "sensitive": t.sensitive,
                "timeout_ms": t.timeout_ms}

    def usage_guidance(self) -> dict:
        g = self.tool.guidance
        return {"text": g.text, "truncated": g.truncated, "source_chars": g.source_chars,
                "max_chars": limits.TOOL_GUIDANCE_MAX, "source_bytes": g.source_bytes,
                "max_bytes": limits.TOOL_GUIDANCE_MAX_BYTES}

    @property
    def may_need_approval(self) -> bool:
        """What agents are told as `approval_required`: some call may need approval (always, or
        when an `approval.when` rule matches its arguments)."""
        return self.approval_required or bool(self.tool.approval_rules)


@dataclass(frozen=True)
class Projection:
    route_key: str
    tools: dict[str, Visible]
    revision: str

    @cached_property
    def search_index(self):
        """Built on the first search of this projection; projections are reused across requests."""
        from .search import Index

        return Index(list(self.tools.values()))

    def counts(self) -> dict:
        tools = self.tools.values()
        return {
            "authorized_total": len(self.tools),
            "readonly": sum(1 for v in tools if v.tool.readonly),
            "writes": sum(1 for v in tools if not v.tool.readonly),
            "approval_required": sum(1 for v in tools if v.may_need_approval),
        }


def forced_approval(direct: dict) -> set[str]:
    """force_approval_tools; or, for configurations still on the deprecated field,
    write_tools - unattended_write_tools."""
    if "force_approval_tools" in direct:
        return set(direct.get("force_approval_tools") or [])
    if "unattended_write_tools" in direct:
        return set(direct.get("write_tools") or []) - set(direct["unattended_write_tools"] or [])
    return set()


# Recent projections by what they depend on; a hit must also hold the very same compiled
# providers (kept alive in the entry, so their ids cannot be reused by other objects meanwhile).
_recent: OrderedDict[tuple, tuple[tuple, Projection]] = OrderedDict()
_RECENT_MAX = 256
_recent_lock = threading.Lock()


def project(db: Session, route: Route, session: Caller, for_job: bool = False) -> Projection:
    """What `session` (an agent session; with `for_job`, a job) sees in `route`. Computing it
    hashes every visible tool, so the result is reused while the route's tool settings, the
    providers' compiled versions and whether the caller acts for a subject stay the same."""
    tools_cfg = route.tools or {}
    direct = tools_cfg.get("agent_direct") or {}
    sources = (tools_cfg.get("sources") or []) if for_job or direct.get("enabled", False) else []
    providers = compiled_providers(db, [s["provider"] for s in sources])
    held = tuple(providers.values())
    key = (route.route_key, route.permission, canonical_json(tools_cfg), bool(session.on_behalf_of),
           tuple(id(p) for p in held), for_job)
    with _recent_lock:
        hit = _recent.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], held)):
            _recent.move_to_end(key)
            return hit[1]
    found = _compute(route, session, sources, providers, forced_approval(direct),
                     None if for_job else set(direct.get("write_tools") or []))
    with _recent_lock:
        _recent[key] = (held, found)
        while len(_recent) > _RECENT_MAX:
            _recent.popitem(last=False)
    return found


def _compute(route: Route, session: Caller, sources: list, providers: dict, forced: set[str],
             write_tools: set[str] | None) -> Projection:
    """`write_tools` None: a write needs no name in a list (a job's projection)."""
    visible: dict[str, Visible] = {}
    for source in sources:
        provider = providers.get(source["provider"])
        if provider is None:
            continue
        allow = set(source.get("allow") or [])
        for tool in provider.tools.values():
            if "*" not in allow and tool.scope not in allow:
                continue
            if not tool.readonly and (route.permission != "full"
                                      or (write_tools is not None and tool.name not in write_tools)):
                continue
            if tool.subject_required and not session.on_behalf_of:
                continue
            visible[tool.name] = Visible(tool, tool.approval_required or tool.name in forced)
    ordered = dict(sorted(visible.items()))
    revision = sha256_json({
        "schema": "bailing.capability-revision.v1",
        "tools": [{"tool": v.projection(), "usage_guidance": v.usage_guidance(), "policy": v.policy()}
                  for v in ordered.values()],
    })
    return Projection(route.route_key, ordered, revision)
