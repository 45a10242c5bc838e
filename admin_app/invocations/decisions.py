"""Decisions posted by the business system: `POST /approvals/<number>/decision`
(BUSINESS_SIDE.md §F.2), in Core's order of checks, with Core's statuses and bodies.

The door is opened by one of three credentials: a valid millisecond `ts.body` signature made with
the secret of a business channel that fires for the approval (notifications/request.py); the
Client Token of the client app whose agent asked for the call; or a personal admin token whose
role may decide approvals (the hub's counterpart of Core's server token). Which one opened it is
stored with the decision, beside `decided_via = 'business_system'`.

The first decision wins: one conditional UPDATE on a pending, unexpired row with the hash the
business system names (the approvers' own path, approvals.decide, takes the same row lock
first). The same (decision, decision_id) again answers 200 `idempotent` and changes nothing; one
decision_id never decides two approvals (a UNIQUE column, sql/075). An agent's call is never
rerun by a decision: the agent's resume dispatches the frozen snapshot once (service.py). A Client
API job's call is named by its job (Core's `job_id` and `request_id`), its door opened by its
job's client app, and an approval of a finished job queues it again (approvals.on_decided)."""
from __future__ import annotations

import hmac
import json
import os
import re
from dataclasses import dataclass
from typing import Any, NoReturn

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .. import js_json, limits
from ..canonical import utc_now
from ..identity import tokens
from ..identity.admins import authenticate_admin_token
from ..identity.models import AgentSession, ClientApp
from ..identity.roles import permissions_of
from ..notifications import message, request
from ..validation import strict_json_loads
from .approvals import JOBS, after_decision, decidable_clause, end_denied, expired
from .models import Approval, Invocation

BODY_MAX_BYTES = limits.APPROVAL_DECISION_BODY_MAX_BYTES
WINDOW_MS = limits.APPROVAL_DECISION_WINDOW_MS  # |now - ts| above it is refused; exactly it is accepted (§A.8)
DECISION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
APPROVER_MAX = limits.APPROVAL_DECISION_APPROVER_MAX
COMMENT_MAX = limits.APPROVAL_DECISION_COMMENT_MAX

NOT_FOUND = "审批单不存在"
JOB_NOT_FOUND = "审批单关联任务不存在"
BAD_JSON = "请求体不是合法 JSON："  # noqa: RUF001 - Core's text
UNAUTHORIZED = "审批决策验签失败或 token 无权裁决该任务"
ALREADY_DECIDED = "审批单已裁决，不能再次以不同决定或 decision_id 裁决"  # noqa: RUF001 - Core's text
EXPIRED = "审批单已过期，不能再裁决"  # noqa: RUF001 - Core's text
DECISION_ID_USED = "decision_id 已用于其他审批单"
CHANGED = "审批单状态已变化，请刷新后重试"  # noqa: RUF001 - Core's text


class Refused(Exception):
    """An answer other than success: Core's status and body, nothing written."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("error"))
        self.status, self.body = status, body


@dataclass(frozen=True)
class Credentials:
    """What the request brought to open the door."""

    bearer: str | None  # `Authorization: Bearer`, or `?token=`
    timestamp: str | None  # X-Bailing-Timestamp (milliseconds)
    signature: str | None  # X-Bailing-Signature
    now_ms: int


def decide(db: Session, number: int, raw: bytes | None, credentials: Credentials) -> dict[str, Any]:
    """Apply one decision; `raw` is the body, None when it was over BODY_MAX_BYTES. Raises
    Refused (the caller rolls back) for every refusal."""
    approval = db.scalar(select(Approval).where(Approval.number == number))
    if approval is None:
        raise Refused(404, {"error": NOT_FOUND})
    inv = db.get(Invocation, approval.job_id)
    if inv is None:
        raise Refused(404, {"error": JOB_NOT_FOUND})
    body = _parse(raw)
    credential = _authenticate(db, approval, inv, raw or b"", credentials)
    decision = _envelope(body, approval, _call_identity(db, inv), number)
    if approval.status != "pending":
        if approval.status == decision["decision"] and approval.decision_id == decision["decision_id"]:
            return _answer(approval, idempotent=True)
        raise Refused(409, {"error": ALREADY_DECIDED, "status": approval.status,
                            "decision_id": approval.decision_id})
    now = utc_now()
    if expired(approval, now):  # the hub's own rule (sql/068): past its time, nobody decides it
        raise Refused(409, {"error": EXPIRED, "status": "expired", "decision_id": None})
    _decision_id_free(db, approval, decision["decision_id"])
    # The invocation's row first, as approvals.decide and a resume take it.
    db.execute(select(Invocation.id).where(Invocation.id == inv.id).with_for_update())
    try:
        with db.begin_nested():
            decided = db.execute(
                update(Approval)
                .where(Approval.id == approval.id, decidable_clause(now), Approval.args_hash == approval.args_hash)
                .values(status=decision["decision"], decided_by=decision["approver"], decided_at=now,
                        decision_reason=decision["comment"], decision_id=decision["decision_id"],
                        decided_via="business_system", decided_credential=credential)
                .returning(Approval.id)).first()
    except IntegrityError:  # the same decision_id, taken by another approval meanwhile
        _decision_id_free(db, approval, decision["decision_id"])
        raise Refused(409, {"error": CHANGED}) from None
    if decided is None:
        raise Refused(409, {"error": CHANGED})
    if decision["decision"] == "denied":
        end_denied(db, approval.id)
    rerun = after_decision(db, approval.id, decision["decision"])
    db.expire_all()
    return _answer(db.get_one(Approval, approval.id), idempotent=False, rerun=rerun)


def _answer(approval: Approval, *, idempotent: bool, rerun: bool = False) -> dict[str, Any]:
    # `rerun` is false for every agent invocation: it never runs by itself, its agent resumes it;
    # true when the approval queued a finished job again.
    return {"ok": True, "id": approval.number, "status": approval.status, "decision_id": approval.decision_id,
            "idempotent": idempotent, "rerun": rerun}


def _parse(raw: bytes | None) -> Any:
    if raw is None:
        raise Refused(400, {"error": BAD_JSON + f"请求体超过 {BODY_MAX_BYTES} 字节"})
    if not raw.strip():
        return {}
    try:
        return strict_json_loads(raw)
    except json.JSONDecodeError as err:
        raise Refused(400, {"error": BAD_JSON + f"{err.msg} (line {err.lineno} column {err.colno})"}) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Refused(400, {"error": BAD_JSON + "无法解析"}) from None


# ---------------------------------------------------------------- the three credentials

def _authenticate(db: Session, approval: Approval, inv: Invocation, raw: bytes, given: Credentials) -> str:
    """Which credential opened the door (as stored), or a 401."""
    bearer = given.bearer
    if bearer and tokens.well_formed(bearer, tokens.ADMIN):
        admin = authenticate_admin_token(db, bearer)
        if admin is not None and "approvals:decide" in permissions_of(admin.role):
            return f"admin_token:{admin.username}"
    if bearer and tokens.well_formed(bearer, tokens.CLIENT):
        owner = _owner(db, inv)
        digest = tokens.hash_token(bearer)
        if owner is not None and owner.enabled and owner.client_token_hash \
                and tokens.same_hash(owner.client_token_hash, digest):
            return f"client_token:{owner.app_id}"
    if _signed(db, approval, raw, given):
        return "signature"
    raise Refused(401, {"error": UNAUTHORIZED})


def _owner(db: Session, inv: Invocation) -> ClientApp | None:
    """The client app whose agent session (or job) asked for the call."""
    if inv.owner_job_id is not None:
        app_id = db.scalar(select(JOBS.c.client_app_id).where(JOBS.c.id == inv.owner_job_id))
    else:
        app_id = db.scalar(select(AgentSession.client_app_id).where(AgentSession.id == inv.session_id))
    return db.scalar(select(ClientApp).where(ClientApp.app_id == app_id)) if app_id else None


def _call_identity(db: Session, inv: Invocation) -> tuple[str, str]:
    """(job_id, request_id) as the approval request named the call: an agent's synthetic job and
    invocation id, or a job's own id and request id."""
    if inv.owner_job_id is None:
        return str(inv.id), inv.invocation_id
    request_id = db.scalar(select(JOBS.c.request_id).where(JOBS.c.id == inv.owner_job_id))
    return str(inv.owner_job_id), request_id or ""


def _signed(db: Session, approval: Approval, raw: bytes, given: Credentials) -> bool:
    """A millisecond `ts.body` signature within the window, by a business channel's secret."""
    ts, sent = given.timestamp or "", given.signature or ""
    if not (ts.isascii() and ts.isdigit()) or len(ts) > 16 or not sent.startswith("sha256="):
        return False
    if abs(given.now_ms - int(ts)) > WINDOW_MS:
        return False
    secrets = [os.environ.get(name) for name in request.secret_envs(db, approval.route_key, approval.tool)]
    # Every secret is tried (no early exit), so timing tells nothing of which one matched.
    return sum(hmac.compare_digest(message.signature(secret, ts, raw), sent) for secret in secrets if secret) > 0


# ---------------------------------------------------------------- the envelope (Core's APPRC)

def _envelope(body: Any, approval: Approval, call: tuple[str, str], number: int) -> dict[str, Any]:
    if not isinstance(body, dict):
        _bad("请求体必须是 JSON 对象")

    def text(name: str) -> str:
        value = body.get(name)
        return value.strip() if isinstance(value, str) else ""

    if text("kind") != request.DECISION_KIND:
        _bad(f"kind 必须是 {request.DECISION_KIND}")
    if text("schema_version") != request.DECISION_SCHEMA:
        _bad(f"schema_version 必须是 {request.DECISION_SCHEMA}")
    if _number(body.get("approval_id")) != number:
        _bad("approval_id 与回调地址中的审批单不一致")
    for name, stored in (("job_id", call[0]), ("request_id", call[1]), ("args_hash", approval.args_hash)):
        if text(name) != stored:
            _bad(f"{name} 与审批单不一致")
    decision = text("decision").lower()
    if decision not in ("approved", "denied"):
        _bad("decision 必须是 approved 或 denied")
    decision_id = text("decision_id")
    if not DECISION_ID.fullmatch(decision_id):
        _bad("decision_id 必须匹配 ^[A-Za-z0-9_.:-]{1,128}$")
    raw_approver = body.get("approver") if body.get("approver") is not None else body.get("operator")
    approver = "" if raw_approver is None else js_json.string(raw_approver).strip()
    if not approver:
        _bad("approver 不能为空")
    comment = body.get("comment")
    comment_text = None if comment is None else js_json.string(comment).strip()[:COMMENT_MAX] or None
    return {"decision": decision, "decision_id": decision_id, "approver": approver[:APPROVER_MAX],
            "comment": comment_text}


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return None


def _bad(problem: str) -> NoReturn:
    raise Refused(400, {"error": problem})


def _decision_id_free(db: Session, approval: Approval, decision_id: str) -> None:
    other = db.scalar(select(Approval.number).where(Approval.decision_id == decision_id,
                                                    Approval.id != approval.id))
    if other is not None:
        raise Refused(409, {"error": DECISION_ID_USED, "decision_id": decision_id, "approval_id": other})
