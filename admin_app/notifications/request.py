"""The approval request a business system receives (BUSINESS_SIDE.md §F.1): Core's
`tool_approval_request`, for channels of kind `business_webhook` (alias `approval_webhook`).

Unlike the operators' webhook (message.py), this one is the business system's own contract: it
carries the call's identity (job, request, tool, method, path), the arguments (an object when
their JSON text fits in ARGS_TEXT_MAX characters, else that text cut there, as Core does) and
their hash, and how to decide it (`decision_path`, `decision_contract`). It is built when a
delivery is claimed, from the approval, its invocation and the compiled catalog; the snapshot is
read only up to the bound. Its signature is the ms `ts.body` scheme (§A.7), with the channel's
secret: the same secret verifies the decision the business system posts back.

A Client API job's call (sql/081) is named as Core names it: the job's id and request id, the
job's client app as `source`."""
from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso
from ..catalog.store import compiled_providers

KIND = "tool_approval_request"
INTENT_KIND = "tool_approval_intent"
INTENT_SCHEMA = "bailing.approval-intent.v1"
DECISION_KIND = "tool_approval_decision"
DECISION_SCHEMA = "bailing.approval-decision.v1"
DECISION_FIELDS = ("kind", "schema_version", "approval_id", "job_id", "request_id", "args_hash",
                   "decision", "decision_id", "approver")
ARGS_TEXT_MAX = limits.APPROVAL_REQUEST_ARGS_TEXT_MAX
SOURCE = "agent"  # an agent's governed call; a job's says its client app, as Core's `job.source`

# Core's one-word policy, from the reasons the hub records (invocations/policy.py), in Core's
# order of precedence: a high risk first, then a declared or forced approval, then a rule.
_POLICY = (("risk_high", "risk_high"), ("acc_approval_required", "confirm_required"),
           ("route_force_approval", "confirm_required"), ("approval_when", "confirm_when"))

_ROW = text("""
    SELECT a.number, a.tool, a.route_key, a.risk, a.policy, a.args_hash, a.summary, a.on_behalf_of,
           a.expires_at, left(a.snapshot, :cut) AS args_text, i.id AS invocation_job, i.invocation_id,
           i.provider, i.scope, i.run_id, i.session_id, COALESCE(s.client_app_id, j.client_app_id) AS client_app_id,
           j.id AS owner_job, j.request_id AS job_request, r.name AS route_name
    FROM bz_tool_approvals AS a
    JOIN bz_tool_invocations AS i ON i.id = a.job_id
    LEFT JOIN bz_agent_sessions AS s ON s.id = i.session_id
    LEFT JOIN bz_jobs AS j ON j.id = i.job_id
    LEFT JOIN bz_routes AS r ON r.route_key = a.route_key
    WHERE a.id = :id
""")


def decision_path(number: int) -> str:
    return f"/approvals/{number}/decision"


def payload(db: Session, approval_id: uuid.UUID) -> dict[str, Any]:
    """The `tool_approval_request` of one approval."""
    row = db.execute(_ROW, {"id": approval_id, "cut": ARGS_TEXT_MAX + 1}).one()
    tool = compiled_providers(db, [row.provider]).get(row.provider)
    declared = tool.tools.get(row.tool) if tool is not None else None
    reasons = list((row.policy or {}).get("reasons") or [])
    policy = next((word for reason, word in _POLICY if reason in reasons), "confirm_required")
    args: Any = json.loads(row.args_text) if len(row.args_text) <= ARGS_TEXT_MAX else row.args_text[:ARGS_TEXT_MAX]
    if row.owner_job is None:
        job_id, request_id, source = str(row.invocation_job), row.invocation_id, SOURCE
        metadata = {"client_app_id": row.client_app_id, "agent_session_id": str(row.session_id),
                    "invocation_id": row.invocation_id, "run_id": str(row.run_id) if row.run_id else None}
    else:
        job_id, request_id, source = str(row.owner_job), row.job_request, row.client_app_id
        metadata = {"client_app_id": row.client_app_id, "job_id": job_id, "invocation_id": row.invocation_id}
    subject = {"subject": row.on_behalf_of} if row.on_behalf_of else {}
    call = {"provider": row.provider, "tool": row.tool, "scope": row.scope, "risk": row.risk,
            "policy": policy, "reason": ", ".join(reasons) or policy,
            "method": declared.method if declared else None, "path": declared.path if declared else None,
            "args": args, "args_hash": row.args_hash}
    matched = (row.policy or {}).get("matched_rules") or []
    intent = {"approval_id": row.number, "kind": INTENT_KIND, "schema_version": INTENT_SCHEMA,
              "job_id": job_id, "request_id": request_id, "route_key": row.route_key,
              "route_name": row.route_name, "source": source, **subject, **call, "summary": row.summary,
              **({"confirm_when": matched} if matched else {}), "metadata": metadata}
    match = {"approval_id": row.number, "job_id": job_id, "request_id": request_id, "args_hash": row.args_hash}
    return {
        "kind": KIND, "approval_id": row.number, "job_id": job_id, "request_id": request_id,
        "route": row.route_name, **subject, **call, "summary": row.summary, "intent": intent,
        "decision_path": decision_path(row.number),
        "decision_contract": {
            "kind": DECISION_KIND, "schema_version": DECISION_SCHEMA, "required_fields": list(DECISION_FIELDS),
            "decision_values": ["approved", "denied"], "idempotency": "decision_id", "match": match,
            "example": {"kind": DECISION_KIND, "schema_version": DECISION_SCHEMA, **match,
                        "decision": "approved", "decision_id": f"biz-{row.number}-1", "approver": "approver-id",
                        "comment": "optional, up to 1000 characters"},
        },
        "metadata": metadata,
        # The hub's own: past this instant a decision is refused (null: never).
        "expires_at": iso(row.expires_at),
    }


def body(item: dict[str, Any]) -> bytes:
    """The exact bytes sent and signed."""
    return json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


_SECRETS = text("""
    SELECT c.secret_env FROM bz_approval_channels AS c
    WHERE c.enabled AND c.kind IN ('business_webhook', 'approval_webhook')
      AND (cardinality(c.routes) = 0 OR CAST(:route AS text) = ANY (c.routes))
      AND (cardinality(c.tools) = 0 OR CAST(:tool AS text) = ANY (c.tools))
    ORDER BY c.name
""")


def secret_envs(db: Session, route: str, tool: str) -> list[str]:
    """The variables naming the secrets a decision on an approval of `route` and `tool` may be
    signed with: those of the enabled business channels that fire for it (outbox.py's rule)."""
    return list(db.scalars(_SECRETS, {"route": route, "tool": tool}))
