"""Invoke, resume and inspect governed tool calls.

The order of a dispatch is the safety argument: (1) in one transaction, everything is revalidated
and the journal row is written as `dispatching`, and that transaction commits; (2) only then does
the HTTP request leave; (3) a second transaction records what came back. A crash between (1) and
(3) leaves a `dispatching` row that is never sent again: it reads as `reconciliation_required`
once its dispatcher is known gone (see `Dispatcher`) or the row is stale. An approval is consumed
in the transaction that writes the journal row, under the invocation's row lock, so concurrent
resumes dispatch an approved call once.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..canonical import canonical_json, sha256_json, utc_now
from ..catalog.projection import Visible, forced_approval, project
from ..db import Database
from ..errors import ApiError, invalid_request, unauthorized
from ..identity.models import AgentSession, ToolProvider
from ..identity.sessions import authenticate_access
from ..identity.workspace import resolve_route
from ..runtime.models import Run
from ..validation import Checker
from . import dispatch, js_json
from .models import Approval, Invocation, JournalEntry
from .policy import TypeMismatch, approval_policy

SCHEMA = "bailing.agent-tool-invocation.v1"
ARGUMENTS_MAX_BYTES = 1_048_576
ENVELOPE_MAX_BYTES = 2_097_152
SUMMARY_MAX_CHARS = 240
STALE_GRACE = timedelta(seconds=60)
REQUIRED = ("invocation_id", "route", "capability_revision", "tool", "arguments")


def too_large(scope: str, max_bytes: int, **size) -> ApiError:
    return ApiError(413, "arguments_too_large",
                    f"The {'arguments' if scope == 'arguments' else 'request body'} exceed {max_bytes} bytes.",
                    origin="core", dispatch="not_dispatched", limit_scope=scope, max_bytes=max_bytes, **size)


def envelope_too_large(max_bytes: int, observed: int) -> ApiError:
    return too_large("request_body", max_bytes, observed_bytes=observed)


def validate_request(body: dict) -> None:
    checker = Checker()
    checker.obj(body, "", required=REQUIRED, optional=("run_id",))
    if "invocation_id" in body:
        checker.string(body["invocation_id"], "invocation_id", min_len=1, max_len=191, single_line=True)
    if "route" in body:
        checker.resource_key(body["route"], "route", route=True)
    if "capability_revision" in body:
        checker.string(body["capability_revision"], "capability_revision", min_len=64, max_len=64)
    if "tool" in body:
        checker.string(body["tool"], "tool", min_len=1, max_len=128, single_line=True)
    if body.get("run_id") is not None:
        try:
            uuid.UUID(body["run_id"]) if isinstance(body["run_id"], str) else uuid.UUID(int=-1)
        except ValueError:
            checker.add("run_id", "must be a UUID")
    if "arguments" in body and not isinstance(body["arguments"], dict):
        checker.add("arguments", "must be an object")
    if checker.problems:
        raise invalid_request(checker)
    size = js_json.byte_length(body["arguments"])
    if size > ARGUMENTS_MAX_BYTES:
        raise too_large("arguments", ARGUMENTS_MAX_BYTES, actual_bytes=size)


# ------------------------------------------------------------------ views

def view(inv: Invocation, approval: Approval | None) -> dict:
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "invocation_id": inv.invocation_id,
        "tool": inv.tool,
        "route": inv.route_key,
        "status": inv.status,
        # The hub never invites an automatic retry: an uncertain or refused call needs a person
        # or a new decision, and a pending one is resumed, not repeated.
        "auto_retry_allowed": False,
    }
    if inv.reason:
        out["reason"] = inv.reason
    if inv.business_status is not None:
        out["result"] = {"http_status": inv.business_status, "body": inv.result_body}
    if approval is not None:
        out["approval"] = {"id": str(approval.id), "state": approval.status, "args_hash": approval.args_hash}
    return out


def summary(tool: Visible, snapshot: str, arguments: dict) -> str:
    """A bounded one-line summary for queues and notifications, never the whole snapshot; for a
    sensitive tool, key names only."""
    keys = ", ".join(sorted(arguments))
    if tool.tool.sensitive:
        return f"{tool.tool.name}({keys}) - {len(snapshot.encode())} bytes, values withheld"
    preview = snapshot if len(snapshot) <= SUMMARY_MAX_CHARS else snapshot[:SUMMARY_MAX_CHARS - 1] + "…"
    return f"{tool.tool.name} {preview}"


# ------------------------------------------------------------------ shared steps

def _session(db: Session, bearer: str | None) -> AgentSession:
    session = authenticate_access(db, bearer)
    if session is None:
        raise unauthorized()
    return session


def _approval(db: Session, inv: Invocation, lock: bool = False) -> Approval | None:
    query = select(Approval).where(Approval.job_id == inv.id)
    return db.scalar(query.with_for_update() if lock else query)


def _provider(db: Session, name: str) -> ToolProvider:
    return db.scalar(select(ToolProvider).where(ToolProvider.name == name))


class Dispatcher:
    """Whether a dispatch is still alive, as PostgreSQL sees it: a session-level advisory lock
    keyed by the invocation, taken on a connection of its own before the journal row commits and
    held until the outcome is recorded. A process that dies mid-dispatch loses its connection and
    with it the lock, so a `dispatching` row whose lock is free is known interrupted at once
    instead of only after the tool's timeout and a grace period."""

    LOCK = "hashtextextended(:key, 7)"

    def __init__(self, database: Database):
        self.database = database
        self.conn = None
        self.key: str | None = None

    def hold(self, job_id: uuid.UUID) -> None:
        self.conn = self.database.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self.key = str(job_id)
        self.conn.execute(text(f"SELECT pg_advisory_lock({self.LOCK})"), {"key": self.key})

    @classmethod
    def gone(cls, db: Session, job_id: uuid.UUID) -> bool:
        """True when no live process holds the lock (taken for the rest of `db`'s transaction)."""
        return bool(db.scalar(text(f"SELECT pg_try_advisory_xact_lock({cls.LOCK})"), {"key": str(job_id)}))

    def __enter__(self) -> "Dispatcher":
        return self

    def __exit__(self, *exc) -> None:
        if self.conn is None:
            return
        try:
            self.conn.execute(text(f"SELECT pg_advisory_unlock({self.LOCK})"), {"key": self.key})
        except Exception:  # noqa: BLE001 - a broken connection took the lock with it; never pool it
            self.conn.invalidate()
        finally:
            self.conn.close()


def _reserve(db: Session, inv: Invocation, visible: Visible, provider: ToolProvider,
             arguments: dict, dispatcher: Dispatcher) -> dict | None:
    """Write the journal row for a dispatch about to happen; None when the provider secret is
    missing (the call is then refused before anything is sent)."""
    secret = os.environ.get(provider.secret_env)
    if not secret:
        inv.status, inv.reason = "rejected_before_dispatch", "provider_secret_unavailable"
        return None
    call = dispatch.prepare(visible.tool, provider.base_url, arguments)
    key = sha256_json({"invocation": str(inv.id), "tool": inv.tool, "args_hash": inv.args_hash,
                       "on_behalf_of": inv.on_behalf_of})
    # The path template, not the filled path: the hub keeps key names, never argument values.
    db.add(JournalEntry(job_id=inv.id, state="dispatching", idempotency_key=key, method=call.method,
                        path=visible.tool.path, body_sha256=sha256_bytes(call.body)))
    # Before this transaction commits: nobody may see the row without its lock holder.
    dispatcher.hold(inv.id)
    inv.status, inv.updated_at = "in_progress", utc_now()
    return {"call": call, "secret": secret, "key": key, "scope": visible.tool.scope,
            "timeout_ms": visible.tool.timeout_ms, "job_id": str(inv.id),
            "on_behalf_of": inv.on_behalf_of or ""}


def sha256_bytes(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _send_and_record(database: Database, inv_id: uuid.UUID, plan: dict) -> None:
    outcome = dispatch.send(plan["call"], secret=plan["secret"], job_id=plan["job_id"],
                            scope=plan["scope"], on_behalf_of=plan["on_behalf_of"],
                            idempotency_key=plan["key"], timeout_ms=plan["timeout_ms"])
    with database.session() as db:
        inv = db.get(Invocation, inv_id, with_for_update=True)
        journal = db.get(JournalEntry, inv_id, with_for_update=True)
        journal.finished_at = utc_now()
        journal.http_status = outcome.http_status
        if outcome.uncertain:
            journal.state, journal.failure = "uncertain", outcome.failure
            inv.status, inv.reason = "reconciliation_required", "transport_failure"
        else:
            journal.state = "completed"
            inv.status = "executed" if 200 <= outcome.http_status < 300 else "business_rejected"
            inv.business_status, inv.result_body = outcome.http_status, outcome.body
        inv.updated_at = utc_now()


def _dispatch_planned(database: Database, inv_id: uuid.UUID, plan: dict | None, result: dict) -> dict:
    """After the reserving transaction committed: send the planned call (if any), record what came
    back, and answer with the invocation as it now stands."""
    if plan is None:
        return result
    _send_and_record(database, inv_id, plan)
    with database.session() as db:
        inv = db.get(Invocation, inv_id)
        return view(inv, _approval(db, inv))


# ------------------------------------------------------------------ invoke

def _screen(visible: Visible, route, arguments: dict) -> tuple[str | None, dict | None]:
    """(why the call is refused before dispatch, or None; the approval policy, or None)."""
    errors = sorted(Draft202012Validator(visible.tool.input_schema).iter_errors(arguments),
                    key=lambda e: list(e.absolute_path))
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path) or "arguments"
        # The failing check only: a validator's message quotes the value, which must not be kept.
        return f"invalid_arguments: {where}: {errors[0].validator}"[:500], None
    forced = visible.tool.name in forced_approval((route.tools or {}).get("agent_direct") or {})
    try:
        return None, approval_policy(visible.tool, forced, arguments)
    except TypeMismatch as err:
        return f"approval_type_mismatch: {err}"[:500], None


def invoke(database: Database, bearer: str | None, body: dict) -> dict:
    with Dispatcher(database) as dispatcher:
        return _invoke(database, dispatcher, bearer, body)


def _invoke(database: Database, dispatcher: Dispatcher, bearer: str | None, body: dict) -> dict:
    with database.session() as db:
        session = _session(db, bearer)
        validate_request(body)
        db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 6))"),
                   {"k": f"{session.id}:{body['invocation_id']}"})
        route = resolve_route(db, session, body["route"], "tools")
        arguments = body["arguments"]
        snapshot = canonical_json(arguments)
        args_hash = sha256_json(arguments)
        run_id = body.get("run_id")
        request_hash = sha256_json({"route": route.route_key, "tool": body["tool"],
                                    "run_id": run_id, "args_hash": args_hash})
        existing = db.scalar(select(Invocation).where(
            Invocation.session_id == session.id, Invocation.invocation_id == body["invocation_id"]))
        if existing is not None:
            if existing.request_hash != request_hash:
                raise ApiError(409, "invocation_conflict",
                               "This invocation_id was used for a different call.")
            return view(existing, _approval(db, existing))
        projection = project(db, route, session)
        visible = projection.tools.get(body["tool"])
        if visible is None:
            raise ApiError(404, "tool_not_found", "No such tool in this workspace.")
        if body["capability_revision"] != projection.revision:
            raise ApiError(409, "capability_changed", "The capability revision is stale; rediscover tools.",
                           capability_revision=projection.revision)
        if run_id is not None:
            run = db.get(Run, uuid.UUID(run_id))
            if run is None or run.session_id != session.id or run.route_key != route.route_key:
                raise ApiError(404, "run_not_found", "No such run for this session and route.")
        inv = Invocation(
            id=uuid.uuid4(), session_id=session.id, invocation_id=body["invocation_id"],
            route_key=route.route_key, run_id=uuid.UUID(run_id) if run_id else None,
            tool=visible.tool.name, provider=visible.tool.provider, scope=visible.tool.scope,
            request_hash=request_hash, args_hash=args_hash, argument_keys=sorted(arguments),
            execution_fingerprint=visible.tool.execution_fingerprint,
            capability_revision=projection.revision, on_behalf_of=session.on_behalf_of,
            status="in_progress")
        db.add(inv)
        db.flush()
        rejection, policy = _screen(visible, route, arguments)
        plan = approval = None
        if rejection is not None:
            inv.status, inv.reason = "rejected_before_dispatch", rejection
        elif policy is not None:
            inv.status = "awaiting_approval"
            approval = Approval(
                id=uuid.uuid4(), job_id=inv.id, tool=inv.tool, route_key=inv.route_key,
                risk=visible.tool.risk, policy=policy, prompt=visible.tool.approval_prompt,
                snapshot=snapshot, args_hash=args_hash, snapshot_bytes=len(snapshot.encode("utf-8")),
                argument_keys=sorted(arguments), summary=summary(visible, snapshot, arguments),
                principal=session.principal, on_behalf_of=session.on_behalf_of, status="pending")
            db.add(approval)
        else:
            plan = _reserve(db, inv, visible, _provider(db, visible.tool.provider), arguments, dispatcher)
        db.flush()
        result, inv_id = view(inv, approval), inv.id
    return _dispatch_planned(database, inv_id, plan, result)


# ------------------------------------------------------------------ resume and receipt

def _own_invocation(db: Session, session: AgentSession, invocation_id: str, lock: bool) -> Invocation:
    if "\x00" in invocation_id:  # never stored (PostgreSQL text holds no NUL), so never found
        raise ApiError(404, "invocation_not_found", "No such invocation for this session.")
    query = select(Invocation).where(Invocation.session_id == session.id,
                                     Invocation.invocation_id == invocation_id)
    inv = db.scalar(query.with_for_update() if lock else query)
    if inv is None:
        raise ApiError(404, "invocation_not_found", "No such invocation for this session.")
    return inv


def _revalidate(db: Session, session: AgentSession, inv: Invocation) -> Visible:
    route = resolve_route(db, session, inv.route_key, "tools")
    visible = project(db, route, session).tools.get(inv.tool)
    if visible is None or visible.tool.execution_fingerprint != inv.execution_fingerprint:
        raise ApiError(409, "capability_changed",
                       "The tool changed since this invocation was made; it will not run as it is.")
    return visible


def _interrupted(db: Session, inv: Invocation, timeout_ms: int) -> bool:
    """A `dispatching` row with no outcome to come: its dispatcher is gone, or it is stale."""
    journal = db.get(JournalEntry, inv.id)
    if journal is None or journal.state != "dispatching":
        return False
    return journal.started_at + timedelta(milliseconds=timeout_ms) + STALE_GRACE < utc_now() \
        or Dispatcher.gone(db, inv.id)


def resume(database: Database, bearer: str | None, invocation_id: str) -> dict:
    with Dispatcher(database) as dispatcher:
        return _resume(database, dispatcher, bearer, invocation_id)


def _resume(database: Database, dispatcher: Dispatcher, bearer: str | None, invocation_id: str) -> dict:
    with database.session() as db:
        session = _session(db, bearer)
        inv = _own_invocation(db, session, invocation_id, lock=True)
        visible = _revalidate(db, session, inv)
        approval = _approval(db, inv, lock=True)
        plan = None
        if inv.status == "awaiting_approval" and approval is not None:
            if approval.status == "denied":
                inv.status, inv.reason = "denied", "approval_denied"
            elif approval.status == "approved" and approval.consumed_at is None:
                if sha256_bytes(approval.snapshot.encode("utf-8")) != approval.args_hash \
                        or approval.args_hash != inv.args_hash:
                    raise ApiError(409, "approval_snapshot_changed",
                                   "The approved snapshot no longer matches; nothing was sent.")
                approval.consumed_at = utc_now()
                plan = _reserve(db, inv, visible, _provider(db, inv.provider),
                                json.loads(approval.snapshot), dispatcher)
        elif inv.status == "in_progress" and _interrupted(db, inv, visible.tool.timeout_ms):
            journal = db.get(JournalEntry, inv.id, with_for_update=True)
            journal.state, journal.failure, journal.finished_at = "uncertain", "no_outcome_recorded", utc_now()
            inv.status, inv.reason = "reconciliation_required", "no_outcome_recorded"
        db.flush()
        result, inv_id = view(inv, approval), inv.id
    return _dispatch_planned(database, inv_id, plan, result)


def receipt(database: Database, bearer: str | None, invocation_id: str) -> dict:
    """Where an invocation stands, read-only: nothing is dispatched, consumed or changed."""
    with database.session() as db:
        session = _session(db, bearer)
        inv = _own_invocation(db, session, invocation_id, lock=False)
        resolve_route(db, session, inv.route_key, "tools")
        out = view(inv, _approval(db, inv))
        journal = db.get(JournalEntry, inv.id)
        out["journal"] = None if journal is None else {"state": journal.state, "http_status": journal.http_status}
        return out
