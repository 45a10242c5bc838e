"""Governed tools inside a job (CLIENT_API_AND_EXECUTOR.md §C.1, §C.2): which tools a job sees, the
job-scoped `tool_token`, and the `tools` block of a claimed work item.

A job sees its route's tools as Core's job path does (catalog.projection, `for_job`): the route's
`tools.sources` allowlist, writes only with `permission: full`, a tool that needs a subject only
when the job acts for one. The token is HMAC-SHA256 over `<job_id>.<claim_token>` keyed with the
hub's secret key: it is never stored, and it dies with the dispatch (a finished, requeued or
re-claimed job has no such claim token any more)."""
from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Any

from flask import current_app
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..catalog.projection import Projection, Visible, project
from ..identity.models import Route
from ..invocations.models import Approval, Invocation
from .models import Job
from .rules import MAX_CALLS_DEFAULT, MAX_CALLS_RANGE

INLINE_MAX = 12  # more business tools than this: a catalog, and definitions on demand (§C.2)
NOTE_ARGS_MAX = 4096  # characters of one approved call's arguments in `approved_note`, as Core keeps them
SUMMARY_MAX = 80


def tool_token(job_id: uuid.UUID | str, claim_token: uuid.UUID | str, secret_key: str | bytes | None = None) -> str:
    """64 lowercase hex: HMAC-SHA256 keyed with the hub's secret key over `<job_id>.<claim_token>`."""
    key = current_app.secret_key if secret_key is None else secret_key
    if key is None:
        raise RuntimeError("the hub has no secret key to derive tool tokens with")
    material = key.encode("utf-8") if isinstance(key, str) else key
    return hmac.new(material, f"{job_id}.{claim_token}".encode(), hashlib.sha256).hexdigest()


def token_matches(job: Job, presented: str | None, secret_key: str | bytes | None = None) -> bool:
    """The token was derived from this dispatch of the job (compared in constant time)."""
    if job.status != "dispatched" or job.claim_token is None or not presented:
        return False
    expected = tool_token(job.id, job.claim_token, secret_key)
    return hmac.compare_digest(expected.encode(), presented.encode("utf-8", "replace"))


def route_of(db: Session, job: Job) -> Route | None:
    """The job's route while it is enabled (a disabled route offers a job no tools)."""
    route = db.scalar(select(Route).where(Route.route_key == job.route_key))
    return route if route is not None and route.enabled else None


def projection_of(db: Session, job: Job, route: Route | None = None) -> Projection | None:
    """The tools `job` sees, or None without an enabled route."""
    route = route or route_of(db, job)
    return project(db, route, job, for_job=True) if route is not None else None


def max_calls(route: Route) -> int:
    """`job_settings.max_calls`, else `tools.max_calls`; 5 when absent or not a number; 1 to 50."""
    settings = route.job_settings or {}
    value = settings.get("max_calls", (route.tools or {}).get("max_calls"))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value:
        return MAX_CALLS_DEFAULT
    return max(MAX_CALLS_RANGE[0], min(MAX_CALLS_RANGE[1], int(value)))


def approvals_of(job_id: uuid.UUID, tool: str | None = None) -> Select[tuple[Approval]]:
    """The approvals of the job's calls (of one tool, if named)."""
    query = (select(Approval).join(Invocation, Invocation.id == Approval.job_id)
             .where(Invocation.owner_job_id == job_id))
    return query.where(Approval.tool == tool) if tool is not None else query


def approved_unused(db: Session, job_id: uuid.UUID) -> list[Approval]:
    """Approved, not yet consumed, not expired: the calls the job may now make once each."""
    now = utc_now()
    query = approvals_of(job_id).where(
        Approval.status == "approved", Approval.consumed_at.is_(None),
        (Approval.expires_at.is_(None)) | (Approval.expires_at > now)).order_by(Approval.number)
    return list(db.scalars(query))


def bounded_arguments(snapshot: str) -> str:
    return snapshot if len(snapshot) <= NOTE_ARGS_MAX else snapshot[:NOTE_ARGS_MAX] + "…"


def approved_note(db: Session, job_id: uuid.UUID) -> str | None:
    """Core's note for a rerun (§C.7): each approved call with its exact arguments and approval
    id, to be made exactly so (any change asks for approval again)."""
    rows = approved_unused(db, job_id)
    if not rows:
        return None
    header = ("【已批准操作】以下工具调用已获人工批准，请直接按原样执行"  # noqa: RUF001 - Core's text
              "（工具名与参数均不得更改，任何改动会再次触发审批）：")  # noqa: RUF001
    lines = [header]
    lines += [f"- {a.tool} 参数 {bounded_arguments(a.snapshot)}（审批单 {a.number}）" for a in rows]  # noqa: RUF001
    return "\n".join(lines)


def confirm_required(visible: Visible) -> bool:
    """Some call of the tool may need approval: always, or when an `approval.when` rule matches."""
    return visible.may_need_approval


def definition(visible: Visible) -> dict[str, Any]:
    """An inline definition (§C.2)."""
    t = visible.tool
    return {"name": t.name, "description": t.description.text, "parameters": t.public_schema, "scope": t.scope,
            "risk": t.risk, "confirm_required": confirm_required(visible), "confirm_when": list(t.approval_rules),
            "readonly": t.readonly, "idempotent": t.idempotent}


def looked_up(visible: Visible) -> dict[str, Any]:
    """A definition as `/tools/defs` gives it (§C.3): the description with Core's hint appended."""
    t = visible.tool
    hint = f"scope:{t.scope}" + ("，只读" if t.readonly else "") + ("，部分参数需审批" if t.approval_rules else "")  # noqa: RUF001
    return {"name": t.name, "description": f"{t.description.text}（{hint}）", "parameters": t.public_schema}  # noqa: RUF001


def summary(text: str) -> str:
    """A catalog line: the description's first sentence, at most SUMMARY_MAX characters."""
    first = (text.strip().splitlines() or [""])[0]
    for stop in ("。", ". "):
        if stop in first:
            first = first.split(stop, 1)[0] + stop.strip()
    return first[:SUMMARY_MAX]


def catalog_entry(visible: Visible) -> dict[str, Any]:
    t = visible.tool
    return {"name": t.name, "summary": summary(t.description.text), "scope": t.scope, "risk": t.risk,
            "confirm_required": confirm_required(visible), "confirm_when": list(t.approval_rules)}


def work_item_tools(db: Session, job: Job, secret_key: str | bytes | None = None) -> dict[str, Any] | None:
    """The work item's `tools` block for a job just claimed (§C.2), or None when the route
    offers no tool to it (the hub has no send channels, so no `send_message` entry either)."""
    if job.claim_token is None:
        return None
    route = route_of(db, job)
    projection = projection_of(db, job, route) if route is not None else None
    if route is None or projection is None or not projection.tools:
        return None
    visible = list(projection.tools.values())
    block: dict[str, Any] = {
        "invoke_url": f"/jobs/{job.id}/tools/invoke",
        "tool_token": tool_token(job.id, job.claim_token, secret_key),
        "max_calls": max_calls(route),
    }
    if len(visible) > INLINE_MAX:
        block.update(mode="catalog", defs_url=f"/jobs/{job.id}/tools/defs",
                     catalog=[catalog_entry(v) for v in visible])
    else:
        block.update(mode="inline", defs=[definition(v) for v in visible])
    note = approved_note(db, job.id)
    if note is not None:
        block["approved_note"] = note
    return block
