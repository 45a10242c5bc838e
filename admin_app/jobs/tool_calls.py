"""The job-scoped tool proxy (CLIENT_API_AND_EXECUTOR.md §C.3-§C.5): `GET /jobs/<id>/tools/defs`
and `POST /jobs/<id>/tools/invoke`, authenticated by the job's `tool_token` alone.

A call runs the agent path's governance (invocations.service), with the job as its caller: the
same invocation rows, approvals queue, rate gates, journal and signed dispatch; what differs is
Core's job semantics around it:

- a side-effecting call (not readonly, not idempotent) made before in this job with the same
  arguments and answered by the business system is not sent again: its stored answer is returned
  (`tool_call_deduped`); one still in flight is refused, never sent twice;
- an approval-required call consumes an approved, unused approval of the job with the same
  arguments (on the approval's own invocation, as an agent's resume does), else points to the
  pending one, else to the approved arguments when they differ, else asks for a new approval and
  tells the brain to end the task (the job is rerun when it is granted: tool_approvals.py);
- a side-effecting call whose outcome is unknown freezes the job's tools until reconciled;
- the business system is told the job's id and client app; `max_calls` counts the job's
  `tool_call` events (each call admitted to dispatch), across reruns.

Order of a call, under a per-job lock (so `max_calls`, deduplication and consumption see every
earlier call of the job): the job and its token, the journal, the body, `max_calls`, then
governance, all in one transaction that commits before anything is sent (service.Dispatcher)."""
from __future__ import annotations

import json
import logging
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from .. import js_json, limits
from ..canonical import sha256_json, utc_now
from ..catalog.compiler import Tool
from ..catalog.projection import Projection, Visible
from ..catalog.store import compiled_providers
from ..db import Database
from ..identity.models import Route
from ..invocations import rate_gate
from ..invocations import service as governance
from ..invocations.approvals import decidable_clause, expired
from ..invocations.models import Approval, Invocation, JournalEntry
from . import events
from .models import Job, JobEvent
from .tools import approvals_of, bounded_arguments, looked_up, max_calls, projection_of, route_of, token_matches

log = logging.getLogger(__name__)

LOOKUP_MAX = 20  # names one `/tools/defs` answers for
TEXT_MAX_BYTES = 8192  # of a business answer, as the brain receives it
DEFAULT_TIMEOUT_MS = 10_000
ACTOR = "executor"
SEND_TOOL = "send_message"
JOB_LOCK = "hashtextextended(:key, 84)"

# Core's texts (PROXY, TOOLS), and the hub's own in the same voice.
JOB_NOT_FOUND = "job 不存在"
TOKEN_EXPIRED = "tool_token 已失效（任务非执行中）"  # noqa: RUF001, S105 - Core's text, no secret
TOKEN_INVALID = "tool_token 无效"  # noqa: S105 - a message, no secret
TOOL_REQUIRED = "tool 必填"
NO_SEND_CHANNEL = "本路由未开放主动发送渠道"
NO_TOOLS = "该任务未配置工具"
MAX_CALLS = "本任务工具调用次数已达上限（{n}）"  # noqa: RUF001
NOT_ALLOWED = "工具 {tool} 不在本路由白名单内，调用被拒。"  # noqa: RUF001
NOT_OBJECT = "工具 {tool} 参数不是合法 JSON 对象，调用已拒绝。请按工具参数 schema 重新传参。"  # noqa: RUF001
TOO_LARGE = "工具 {tool} 的参数超过 {max_bytes} 字节，调用已拒绝。"  # noqa: RUF001
INVALID = "工具 {tool} 的参数不符合其参数 schema（{where}），调用已拒绝。请按工具参数 schema 重新传参。"  # noqa: RUF001
TYPE_MISMATCH = "工具 {tool} 的审批条件参数类型不符合声明，调用已拒绝。请按工具参数 schema 重新传参。"  # noqa: RUF001
REFUSED = "工具 {tool} 的调用在发出前被拒绝（{reason}），未发送任何请求。"  # noqa: RUF001
NO_SECRET = "工具 {tool} 的工具源签名密钥当前不可用，调用未发出。请稍后再试或告知用户走人工流程。"  # noqa: RUF001, S105
IN_FLIGHT = "工具 {tool} 的相同调用正在执行中，请勿重复提交；请等待其结果后再决定下一步。"  # noqa: RUF001
PENDING = "该操作已有待审批单（编号 {id}），请勿重复提交。请结束任务并告知用户：操作待人工审批。"  # noqa: RUF001
DRIFTED = ("该工具已有人工批准的调用（审批单 {id}），但你本次的参数与批准的不一致。"  # noqa: RUF001
           "请立即按批准的参数原样重新调用：{tool} 参数 {args}（一字不改，不要再确认）。")  # noqa: RUF001
ASKED = ("工具 {tool} 属于需人工审批的操作，已提交审批单（编号 {id}）。请结束本次任务并告知用户："  # noqa: RUF001
         "该操作已提交人工审批，批准后系统会自动继续执行。")  # noqa: RUF001
APPROVAL_UNUSABLE = "审批单 {id} 的参数快照校验失败，调用未发出。请告知用户走人工流程。"  # noqa: RUF001
CHANGED = "工具 {tool} 自审批后已变更，批准的调用不会按新定义执行。请告知用户重新提交审批。"  # noqa: RUF001
RATE_LIMITED = "工具 {tool} 触发限流，稍后再试（约 {ms} 毫秒后）。"  # noqa: RUF001
RECONCILE = ("工具 {tool} 的一次有副作用的调用结果未知（幂等键 {key}），可能已在业务系统执行。"  # noqa: RUF001
             "为避免重复执行，本任务的工具调用已冻结，需人工核对。请结束任务并告知用户。")  # noqa: RUF001
# Unknown, never "failed": the request may have reached the business system.
UNKNOWN_READ = "工具 {tool} 的调用结果未知：请求可能已送达业务系统，但没有得到完整的应答（{failure}）。"  # noqa: RUF001
JOURNAL_DOWN = "执行日志当前不可用，工具请求未发出：{reason}"  # noqa: RUF001
INTERNAL = "工具调用被中枢拒绝：{reason}"  # noqa: RUF001
EMPTY = "（HTTP {status} 空响应）"  # noqa: RUF001


@dataclass(frozen=True)
class Reply:
    """An HTTP status and its JSON body."""

    status: int
    body: dict[str, Any]


class _Refused(Exception):
    """A refusal with Core's envelope; raised so that the transaction rolls back (nothing written)."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.reply = Reply(status, {"error": error})


def side_effecting(tool: Tool) -> bool:
    return not tool.readonly and not tool.idempotent


def refusal(message: str, status: int = 0) -> dict[str, Any]:
    return {"ok": False, "text": message, "status": status}


# ------------------------------------------------------------------ the job and its token

def _job(db: Session, job_id: uuid.UUID, presented: str | None, secret_key: str | bytes) -> Job:
    job = db.get(Job, job_id)
    if job is None:
        raise _Refused(404, JOB_NOT_FOUND)
    if job.status != "dispatched" or job.claim_token is None:
        raise _Refused(401, TOKEN_EXPIRED)
    if not token_matches(job, presented, secret_key):
        raise _Refused(401, TOKEN_INVALID)
    return job


def _hold(db: Session, job: Job) -> None:
    """The job's calls one at a time, and the job kept in this dispatch until the transaction
    ends (a result or a reclaim waits for it: it is short, and nothing is sent inside it)."""
    db.execute(text(f"SELECT pg_advisory_xact_lock({JOB_LOCK})"), {"key": str(job.id)})
    claim = job.claim_token
    db.refresh(job, with_for_update={"read": True})
    if job.status != "dispatched" or job.claim_token != claim:
        raise _Refused(401, TOKEN_EXPIRED)


# ------------------------------------------------------------------ /tools/defs

def defs(database: Database, job_id: uuid.UUID, presented: str | None, names: list[str],
         secret_key: str | bytes) -> Reply:
    """§C.3: at most LOOKUP_MAX names, unknown ones ignored; a lookup is no call (`max_calls`)."""
    try:
        with database.session() as db:
            job = _job(db, job_id, presented, secret_key)
            projection = projection_of(db, job)
            if projection is None or not projection.tools:
                raise _Refused(400, NO_TOOLS)
            wanted = list(dict.fromkeys(names))[:LOOKUP_MAX]
            found = [looked_up(projection.tools[name]) for name in wanted if name in projection.tools]
            if not found:
                raise _Refused(400, NO_TOOLS)
            events.record(db, job.id, "tool_lookup", ACTOR,
                          {"asked": len(wanted), "found": [d["name"] for d in found]})
            return Reply(200, {"defs": found})
    except _Refused as refused:
        return refused.reply


# ------------------------------------------------------------------ /tools/invoke

@dataclass
class _Call:
    """What governance decided: the answer now, or a dispatch planned on invocation `inv_id`."""

    answer: dict[str, Any]
    plan: dict[str, Any] | None = None
    inv_id: uuid.UUID | None = None
    told: governance.Answer | None = None


class _JournalDown(Exception):
    pass


def invoke(database: Database, job_id: uuid.UUID, presented: str | None, read_body: Callable[[], Any],
           secret_key: str | bytes) -> Reply:
    """§C.4, in Core's order of checks. Storage failing before the job is known raises (a 500);
    while the journal is read, 503; later, a refusal before dispatch (200, status 0)."""
    with governance.Dispatcher(database) as dispatcher:
        stage = "job"
        try:
            with dispatcher.session() as db:
                job = _job(db, job_id, presented, secret_key)
                _hold(db, job)
                stage = "journal"
                frozen = _frozen(db, job)
                if frozen is not None:
                    return Reply(200, frozen)
                stage = "govern"
                call = _invoke(db, dispatcher, job, read_body())
        except _Refused as refused:
            return refused.reply
        except Exception as err:
            if stage == "job":
                raise
            log.exception("a tool call of job %s failed before dispatch", job_id)
            reason = type(err).__name__
            if stage == "journal":
                return Reply(503, {"ok": False, "error": "execution_journal_unavailable",
                                   "text": JOURNAL_DOWN.format(reason=reason), "auto_retry_allowed": False})
            return Reply(200, refusal(INTERNAL.format(reason=reason)))
        if call.plan is None or call.inv_id is None or call.told is None:
            return Reply(200, call.answer)
        # Committed: the journal says `dispatching`; from here on the outcome is always answered.
        return Reply(200, governance._dispatch_planned(dispatcher, call.inv_id, call.plan, call.answer, call.told))


def _invoke(db: Session, dispatcher: governance.Dispatcher, job: Job, body: Any) -> _Call:
    body = body if isinstance(body, dict) else {}
    raw = body.get("tool")
    name = "" if raw is None else raw if isinstance(raw, str) else js_json.string(raw)
    if not name:
        raise _Refused(400, TOOL_REQUIRED)
    if name == SEND_TOOL:  # the hub has no send channels (§C.4): never a channel to allow
        raise _Refused(400, NO_SEND_CHANNEL)
    route = route_of(db, job)
    projection = projection_of(db, job, route) if route is not None else None
    if route is None or projection is None or not projection.tools:
        raise _Refused(400, NO_TOOLS)
    most = max_calls(route)
    made = db.scalar(select(func.count()).select_from(JobEvent)
                     .where(JobEvent.job_id == job.id, JobEvent.event == "tool_call")) or 0
    if made >= most:
        raise _Refused(429, MAX_CALLS.format(n=most))
    arguments = {} if body.get("arguments") is None else body["arguments"]
    return _govern(db, dispatcher, job, route, projection, name, arguments)


def _govern(db: Session, dispatcher: governance.Dispatcher, job: Job, route: Route, projection: Projection,
            name: str, arguments: Any) -> _Call:
    """§C.5 from step 2 (the journal's freeze, step 1, was read before the body)."""
    visible = projection.tools.get(name)
    if visible is None:
        return _Call(refusal(NOT_ALLOWED.format(tool=name)))
    if not isinstance(arguments, dict):
        return _Call(refusal(NOT_OBJECT.format(tool=name)))
    size = js_json.byte_length(arguments)
    if size > limits.INVOCATION_ARGUMENTS_MAX_BYTES:
        return _Call(refusal(TOO_LARGE.format(tool=name, max_bytes=limits.INVOCATION_ARGUMENTS_MAX_BYTES)))
    tool = visible.tool
    args_hash = sha256_json(arguments)
    if side_effecting(tool):
        done = _same_call(db, job, tool.name, args_hash, "completed")
        if done is not None:
            answer = _business_answer(done)
            events.record(db, job.id, "tool_call_deduped", ACTOR, {"tool": tool.name, "status": answer["status"]})
            return _Call(answer)
        if _same_call(db, job, tool.name, args_hash, "dispatching") is not None:
            return _Call(refusal(IN_FLIGHT.format(tool=name)))
    rejection, policy = governance._screen(visible, route, arguments)
    if rejection is not None:
        inv = _new_invocation(db, job, route, projection, visible, arguments, args_hash)
        inv.status, inv.reason = "rejected_before_dispatch", rejection
        return _Call(refusal(_screen_text(name, rejection)))
    owner = governance.JobOwner(str(job.id), job.client_app_id)
    if policy is not None:
        asked = _ask(db, dispatcher, job, route, projection, visible, arguments, args_hash, owner)
        if asked is not None:
            return asked
    inv = _new_invocation(db, job, route, projection, visible, arguments, args_hash)
    plan, approval = governance._admit(db, job, route, inv, visible, arguments, policy, dispatcher, None,
                                       utc_now(), job=owner)
    if approval is not None:
        db.flush()  # its number
        events.record(db, job.id, "tool_approval_pending", ACTOR,
                      {"tool": tool.name, "approval_id": approval.number, "risk": approval.risk})
        return _Call(refusal(ASKED.format(tool=name, id=approval.number)))
    return _planned(db, job, inv, visible, plan)


def _ask(db: Session, dispatcher: governance.Dispatcher, job: Job, route: Route, projection: Projection,
         visible: Visible, arguments: dict[str, Any], args_hash: str, owner: governance.JobOwner) -> _Call | None:
    """An approval-required call: consume, point to the pending or approved call, or None (a new
    approval is to be asked for)."""
    now = utc_now()
    tool = visible.tool
    unused = [a for a in db.scalars(approvals_of(job.id, tool.name)
                                    .where(Approval.status == "approved", Approval.consumed_at.is_(None))
                                    .order_by(Approval.number))
              if not expired(a, now)]
    same = next((a for a in unused if a.args_hash == args_hash), None)
    if same is not None:
        return _consume(db, dispatcher, job, visible, same, owner)
    pending = db.scalar(approvals_of(job.id, tool.name)
                        .where(Approval.args_hash == args_hash, decidable_clause(now))
                        .order_by(Approval.number).limit(1))
    if pending is not None:
        return _Call(refusal(PENDING.format(id=pending.number)))
    if unused:
        other = unused[0]
        return _Call(refusal(DRIFTED.format(id=other.number, tool=tool.name, args=bounded_arguments(other.snapshot))))
    return None


def _consume(db: Session, dispatcher: governance.Dispatcher, job: Job, visible: Visible, approval: Approval,
             owner: governance.JobOwner) -> _Call:
    """Dispatch an approved call once: its frozen, hash-checked snapshot, on its own invocation,
    through the rate gates (limited: the approval stays unused)."""
    inv = db.get_one(Invocation, approval.job_id, with_for_update=True)
    db.refresh(approval, with_for_update=True)
    tool = visible.tool
    if approval.status != "approved" or approval.consumed_at is not None or expired(approval, utc_now()):
        return _Call(refusal(PENDING.format(id=approval.number)))
    if governance.sha256_bytes(approval.snapshot.encode("utf-8")) != approval.args_hash \
            or approval.args_hash != inv.args_hash:
        return _Call(refusal(APPROVAL_UNUSABLE.format(id=approval.number)))
    if tool.execution_fingerprint != inv.execution_fingerprint:
        return _Call(refusal(CHANGED.format(tool=tool.name)))
    provider = governance._provider(db, tool.provider)
    limited = rate_gate.check(db, tool, provider)
    if limited is not None:
        return _Call(_rate_limited(tool.name, limited))
    approval.consumed_at, inv.rate_limit = utc_now(), None
    plan = governance._reserve(db, inv, visible, provider, json.loads(approval.snapshot), dispatcher, None, owner)
    if plan is None:
        approval.consumed_at = None  # nothing was sent: the approval is still there to use
    return _planned(db, job, inv, visible, plan, approval)


def _planned(db: Session, job: Job, inv: Invocation, visible: Visible, plan: dict[str, Any] | None,
             approval: Approval | None = None) -> _Call:
    """A call admitted to dispatch (`tool_call`, counted by `max_calls`), or why it was not."""
    tool = visible.tool
    if plan is None:
        if inv.rate_limit is not None:
            return _Call(_rate_limited(tool.name, inv.rate_limit))
        return _Call(refusal(NO_SECRET.format(tool=tool.name)))
    detail: dict[str, Any] = {"tool": tool.name, "scope": tool.scope}
    if approval is not None:
        detail["approval_id"] = approval.number
    events.record(db, job.id, "tool_call", ACTOR, detail)
    return _Call({}, plan, inv.id, _told(job.id, visible))


def _rate_limited(tool: str, limit: dict[str, Any]) -> dict[str, Any]:
    return refusal(RATE_LIMITED.format(tool=tool, ms=limit.get("retry_after_ms", 60_000)), 429)


def _screen_text(tool: str, rejection: str) -> str:
    if rejection.startswith("approval_type_mismatch"):
        return TYPE_MISMATCH.format(tool=tool)
    if rejection.startswith("invalid_arguments: "):
        return INVALID.format(tool=tool, where=rejection.removeprefix("invalid_arguments: "))
    return REFUSED.format(tool=tool, reason=rejection)


def _new_invocation(db: Session, job: Job, route: Route, projection: Projection, visible: Visible,
                    arguments: dict[str, Any], args_hash: str) -> Invocation:
    """The ledger row of a job's call, as an agent's (its id is what signs the journal's lock)."""
    tool = visible.tool
    inv = Invocation(
        id=uuid.uuid4(), session_id=None, owner_job_id=job.id, invocation_id=secrets.token_hex(32),
        route_key=route.route_key, run_id=None, tool=tool.name, provider=tool.provider, scope=tool.scope,
        request_hash=sha256_json({"job_id": str(job.id), "tool": tool.name, "args_hash": args_hash}),
        args_hash=args_hash, argument_keys=sorted(arguments), execution_fingerprint=tool.execution_fingerprint,
        capability_revision=projection.revision, on_behalf_of=job.on_behalf_of, status="in_progress")
    db.add(inv)
    db.flush()
    return inv


def _same_call(db: Session, job: Job, tool: str, args_hash: str, state: str) -> Invocation | None:
    """The latest call of the job with these arguments whose journal is in `state`."""
    return db.scalar(select(Invocation).join(JournalEntry, JournalEntry.job_id == Invocation.id)
                     .where(Invocation.owner_job_id == job.id, Invocation.tool == tool,
                            Invocation.args_hash == args_hash, JournalEntry.state == state)
                     .order_by(JournalEntry.started_at.desc()).limit(1))


# ------------------------------------------------------------------ the journal's freeze

def _declared(db: Session, inv: Invocation) -> Tool | None:
    provider = compiled_providers(db, [inv.provider]).get(inv.provider)
    return provider.tools.get(inv.tool) if provider is not None else None


def _frozen(db: Session, job: Job) -> dict[str, Any] | None:
    """§C.4's freeze: a side-effecting call of the job (a tool no longer declared counts as one)
    whose outcome is unknown, or whose dispatch was interrupted. A call still in flight does not
    freeze the job (an identical one is refused meanwhile, `_govern`)."""
    rows = db.execute(select(Invocation, JournalEntry).join(JournalEntry, JournalEntry.job_id == Invocation.id)
                      .where(Invocation.owner_job_id == job.id, JournalEntry.state != "completed")
                      .order_by(JournalEntry.started_at)).all()
    for inv, journal in rows:
        declared = _declared(db, inv)
        if declared is not None and not side_effecting(declared):
            continue
        timeout = declared.timeout_ms if declared is not None else DEFAULT_TIMEOUT_MS
        if journal.state == "dispatching" and not governance._interrupted(db, journal, timeout):
            continue
        return _reconciliation(inv.tool, inv.scope, journal.idempotency_key,
                               journal.failure or inv.reason or "no_outcome_recorded")
    return None


def _reconciliation(tool: str, scope: str, key: str, reason: str) -> dict[str, Any]:
    message = RECONCILE.format(tool=tool, key=key)
    return {"ok": False, "text": message, "governance_state": "reconciliation_required", "auto_retry_allowed": False,
            "tool_execution": {"state": "uncertain", "tool": tool, "scope": scope, "idempotency_key": key,
                               "reason": reason, "message": message}}


# ------------------------------------------------------------------ answers

def _told(job_id: uuid.UUID, visible: Visible) -> governance.Answer:
    """How the outcome of a job's dispatch is answered, and recorded (`tool_result`) with it."""
    tool = visible.tool

    def recorded(db: Session, inv: Invocation) -> dict[str, Any]:
        answer = _outcome(inv, db.get(JournalEntry, inv.id), tool)
        events.record(db, job_id, "tool_result", ACTOR,
                      {"tool": inv.tool, "status": answer["status"], "ok": answer["ok"],
                       **({"outcome": "unknown"} if "governance_state" in answer else {})})
        return answer

    def unknown(_before: Any, key: str) -> dict[str, Any]:
        if side_effecting(tool):
            return _reconciliation(tool.name, tool.scope, key, "no_outcome_recorded")
        return refusal(UNKNOWN_READ.format(tool=tool.name, failure="no_outcome_recorded"))

    return governance.Answer(recorded, unknown)


def _outcome(inv: Invocation, journal: JournalEntry | None, tool: Tool) -> dict[str, Any]:
    if inv.status in ("executed", "business_rejected"):
        return _business_answer(inv)
    failure = (journal.failure if journal is not None else None) or inv.reason or "unknown"
    if inv.status == "reconciliation_required":
        if side_effecting(tool):
            return _reconciliation(inv.tool, inv.scope, journal.idempotency_key if journal else "unknown", failure)
        return refusal(UNKNOWN_READ.format(tool=inv.tool, failure=failure))
    return refusal(REFUSED.format(tool=inv.tool, reason=inv.reason or inv.status))


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def business_text(status: int, body: Any) -> str:
    """The business answer as the brain reads it: its text (a JSON answer in compact JSON), a
    non-2xx HTML page by its title only, at most TEXT_MAX_BYTES of UTF-8."""
    if body is None or body == "":
        return EMPTY.format(status=status)
    if isinstance(body, str):
        text_ = body
        head = body.lstrip()[:200].lower()
        if not 200 <= status < 300 and head.startswith(("<!doctype html", "<html")):
            title = _TITLE.search(body[:65536])
            name = " ".join(title.group(1).split())[:200] if title else ""
            text_ = f"HTTP {status}" + (f": {name}" if name else "") + "（HTML 页面，正文已省略）"  # noqa: RUF001
    else:
        text_ = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text_.encode("utf-8")[:TEXT_MAX_BYTES].decode("utf-8", "ignore")


def _business_answer(inv: Invocation) -> dict[str, Any]:
    status = inv.business_status or 0
    return {"ok": 200 <= status < 300, "text": business_text(status, inv.result_body), "status": status}
