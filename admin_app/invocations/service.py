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

import functools
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from jsonschema import Draft202012Validator
from sqlalchemy import select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import canonical_json, sha256_json, utc_now
from ..catalog.compiler import TOOL_NAME
from ..catalog.projection import Caller, Visible, forced_approval, project
from ..db import Database
from ..errors import ApiError, invalid_request, unauthorized
from ..identity import client_gate
from ..identity.models import AgentSession, ToolProvider
from ..identity.sessions import authenticate_access
from ..identity.workspace import resolve_route
from ..js_json import byte_length
from ..notifications import outbox
from ..runtime.models import Run
from ..tasks import metering
from ..validation import UUID_V1_5, Checker
from . import approvals, dispatch, rate_gate
from .models import Approval, DeferredCall, Invocation, JournalEntry
from .path_params import dot_segment_rejection
from .policy import TypeMismatch, approval_policy
from .results import receipt_view, result_view, unresolved_view

log = logging.getLogger(__name__)

STALE_GRACE = timedelta(seconds=60)
REQUIRED = ("invocation_id", "route", "capability_revision", "tool", "arguments")
# The turn's run: `agent_run_id` as the official client names it, `run_id` as the hub always did.
RUN_FIELDS = ("agent_run_id", "run_id")
# Invocation ids (chosen by the caller) and capability revisions: 64 lowercase hex digits.
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def too_large(scope: str, max_bytes: int, **size) -> ApiError:
    return ApiError("arguments_too_large",
                    f"The {'arguments' if scope == 'arguments' else 'request body'} exceed {max_bytes} bytes.",
                    origin="core", dispatch="not_dispatched", limit_scope=scope, max_bytes=max_bytes, **size)


def envelope_too_large(max_bytes: int, observed: int) -> ApiError:
    return too_large("request_body", max_bytes, observed_bytes=observed)


def not_found() -> ApiError:
    """An invocation path that cannot name an invocation: the router's plain 404."""
    return ApiError("not_found")


def invocation_path_id(value: str) -> str:
    if not HEX64.fullmatch(value):
        raise not_found()
    return value


def _pattern(checker: Checker, body: dict, name: str, pattern: re.Pattern, what: str) -> None:
    value = body.get(name)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        checker.add(name, f"must be {what}")


def validate_request(body: dict) -> uuid.UUID | None:
    """Checks the envelope and its argument budget; the turn's run id, when one is named."""
    checker = Checker()
    checker.obj(body, "", required=REQUIRED, optional=RUN_FIELDS)
    if "invocation_id" in body:
        _pattern(checker, body, "invocation_id", HEX64, "64 lowercase hex digits")
    if "route" in body and not isinstance(body["route"], str):  # its form is the gate's to judge
        checker.add("route", "must be a string")
    if "capability_revision" in body:
        _pattern(checker, body, "capability_revision", HEX64, "64 lowercase hex digits")
    if "tool" in body:
        _pattern(checker, body, "tool", TOOL_NAME, "a tool name (" + TOOL_NAME.pattern + ")")
    runs = {n: body[n] for n in RUN_FIELDS if body.get(n) is not None}  # null: no run, as before
    for name in runs:
        _pattern(checker, runs, name, UUID_V1_5, "a UUID")
    if not checker.problems and len(runs) == 2 and runs["agent_run_id"].lower() != runs["run_id"].lower():
        checker.add("run_id", "must equal agent_run_id when both are given")
    if "arguments" in body and not isinstance(body["arguments"], dict):
        checker.add("arguments", "must be an object")
    if checker.problems:
        raise invalid_request(checker)
    size = byte_length(body["arguments"])
    if size > limits.INVOCATION_ARGUMENTS_MAX_BYTES:
        raise too_large("arguments", limits.INVOCATION_ARGUMENTS_MAX_BYTES, actual_bytes=size)
    run = next(iter(runs.values()), None)
    return uuid.UUID(run) if run is not None else None


# ------------------------------------------------------------------ views

def view(db: Session, inv: Invocation, approval: Approval | None) -> dict:
    return result_view(inv, approval, db.get(JournalEntry, inv.id))


def summary(tool: Visible, snapshot: str, arguments: dict) -> str:
    """A bounded one-line summary for queues and notifications, never the whole snapshot: each
    argument as `key: value`, a long text by its first line and its size, a nested value by its
    size; for a sensitive tool, key names only."""
    keys = ", ".join(sorted(arguments))
    if tool.tool.sensitive:
        return f"{tool.tool.name}({keys}) - {len(snapshot.encode())} bytes, values withheld"
    text = f"{tool.tool.name}: " + " · ".join(f"{key}: {_brief(arguments[key])}" for key in sorted(arguments))
    most = limits.INVOCATION_SUMMARY_MAX
    return text if len(text) <= most else text[:most - 1] + "…"


def _brief(value: object) -> str:
    if isinstance(value, str):
        lines = value.splitlines() or [""]
        first = lines[0] if len(lines[0]) <= 60 else lines[0][:59] + "…"
        if len(lines) == 1:
            return first
        return f"{first} … ({len(lines):,} lines, {len(value):,} characters)"
    if isinstance(value, dict):
        return f"{{{len(value)} fields}}"
    if isinstance(value, list):
        return f"[{len(value)} items]"
    return canonical_json(value)


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
    return db.scalars(select(ToolProvider).where(ToolProvider.name == name)).one()


class Dispatcher:
    """The one pooled connection of an invoke or resume, and whether its dispatch is alive.

    Every transaction of the request (reserve, record, answer) runs on the connection checked out
    here: a request never waits on the pool while holding a connection of it, so any number of
    simultaneous calls share the pool instead of deadlocking on it, each holding one.

    Liveness, as PostgreSQL sees it: a session-level advisory lock keyed by the invocation, taken
    on that connection in the transaction that writes the journal row (so nobody sees the row
    without its holder) and held, across commits and the business call, until the outcome is
    recorded. A process that dies mid-dispatch loses its connection and with it the lock, so a
    `dispatching` row whose lock is free is known interrupted at once instead of only after the
    tool's timeout and a grace period."""

    LOCK = "hashtextextended(:key, 7)"

    def __init__(self, database: Database):
        self.database = database
        self.conn: Connection | None = None
        self.key: str | None = None

    def session(self) -> AbstractContextManager[Session]:
        """A transaction on the request's connection."""
        return self.database.session(self.conn)

    def hold(self, db: Session, job_id: uuid.UUID) -> None:
        """Take the lock in `db`'s transaction; it outlives that transaction, until `__exit__`."""
        self.key = str(job_id)
        db.execute(text(f"SELECT pg_advisory_lock({self.LOCK})"), {"key": self.key})

    @classmethod
    def gone(cls, db: Session, job_id: uuid.UUID) -> bool:
        """True when no live process holds the lock (taken for the rest of `db`'s transaction).
        A standby cannot see the primary's locks: read there, a dispatch is never known gone."""
        return bool(db.scalar(text(f"SELECT CASE WHEN pg_is_in_recovery() THEN false "
                                   f"ELSE pg_try_advisory_xact_lock({cls.LOCK}) END"), {"key": str(job_id)}))

    def __enter__(self) -> Dispatcher:
        self.conn = self.database.engine.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Give the connection back, its lock released (and with it the claim that the dispatch is
        alive); a broken connection is dropped, never pooled."""
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if self.key is not None:  # never pooled with the lock: the next user would hold it
                conn.execute(text(f"SELECT pg_advisory_unlock({self.LOCK})"), {"key": self.key})
                conn.commit()
        except Exception:  # noqa: BLE001 - a broken connection took the lock with it; never pool it
            conn.invalidate()
        finally:
            conn.close()


@dataclass(frozen=True)
class JobOwner:
    """A call made inside a Client API job (admin_app.jobs, CLIENT_API_AND_EXECUTOR.md §C.5): the
    business system is told the job's id and client app, not the invocation's; the idempotency
    key is taken over the job id (BUSINESS_SIDE §A.6) and sent for a side-effecting tool only, as
    Core sends it on this path."""

    job_id: str
    client_app_id: str


@dataclass(frozen=True)
class Answer:
    """How the outcome of a dispatch is told: `recorded` reads the invocation in the transaction
    that recorded it; `unknown` answers from the pre-dispatch answer and the idempotency key when
    nothing can be read. By default, the agent API's invocation view."""

    recorded: Callable[[Session, Invocation], Any]
    unknown: Callable[[Any, str], Any]


def _agent_view(db: Session, inv: Invocation) -> dict:
    return view(db, inv, _approval(db, inv))


AGENT = Answer(_agent_view, unresolved_view)


def _reserve(db: Session, inv: Invocation, visible: Visible, provider: ToolProvider,
             arguments: dict, dispatcher: Dispatcher, managed: metering.Managed | None,
             job: JobOwner | None = None) -> dict | None:
    """Write the journal row for a dispatch about to happen (under a task, with its permit,
    granted first); None when the provider secret is missing (the call is then refused before
    anything is sent, and a task gives its reservation back). `job`: the job that makes the call."""
    secret = os.environ.get(provider.secret_env)
    if not secret:
        inv.status, inv.reason = "rejected_before_dispatch", "provider_secret_unavailable"
        if managed is not None:
            metering.release(db, inv.id, inv.reason)
        return None
    if managed is not None:
        metering.grant(db, managed, inv.id, utc_now())
    call = dispatch.prepare(visible.tool, provider.base_url, arguments)
    job_id = str(inv.id) if job is None else job.job_id
    # Core's key (BUSINESS_SIDE §A.6): stable across resumes, since the job id is.
    key = sha256_json({"args_hash": inv.args_hash, "job_id": job_id, "on_behalf_of": inv.on_behalf_of or "",
                       "tool": inv.tool})
    # The path template, not the filled path: the hub keeps key names, never argument values.
    db.add(JournalEntry(job_id=inv.id, state="dispatching", idempotency_key=key, method=call.method,
                        path=visible.tool.path, body_sha256=sha256_bytes(call.body)))
    # Before this transaction commits: nobody may see the row without its lock holder.
    dispatcher.hold(db, inv.id)
    inv.status, inv.updated_at = "in_progress", utc_now()
    if job is None:
        caller = db.get(AgentSession, inv.session_id)  # already loaded by the bearer check
        client, send_key = caller.client_app_id if caller else "", True
    else:
        client, send_key = job.client_app_id, not visible.tool.readonly and not visible.tool.idempotent
    return {"call": call, "secret": secret, "key": key, "scope": visible.tool.scope,
            "timeout_ms": visible.tool.timeout_ms, "job_id": job_id,
            "on_behalf_of": inv.on_behalf_of or "", "client": client, "send_key": send_key}


def sha256_bytes(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _record(db: Session, inv_id: uuid.UUID, outcome: dispatch.Outcome, answer: Answer = AGENT) -> Any:
    """Write what came back, and the answer built from it (committed with it, or not at all)."""
    inv = db.get_one(Invocation, inv_id, with_for_update=True)
    # The task's settlement commits with the outcome: unknown keeps permit and reservation.
    metering.settle(db, inv_id, dispatched=None if outcome.uncertain else True)
    journal = db.get_one(JournalEntry, inv_id, with_for_update=True)
    journal.finished_at = utc_now()
    journal.http_status = outcome.http_status
    if outcome.uncertain:
        journal.state, journal.failure = "uncertain", outcome.failure
        inv.status, inv.reason = "reconciliation_required", "transport_failure"
    else:
        assert outcome.http_status is not None  # a certain outcome is the business system's answer
        journal.state = "completed"
        inv.status = "executed" if 200 <= outcome.http_status < 300 else "business_rejected"
        inv.business_status, inv.result_body = outcome.http_status, outcome.body
    inv.updated_at = utc_now()
    db.flush()
    db.refresh(inv, ["result_body"])  # as stored (jsonb orders keys), so that every replay reads alike
    return answer.recorded(db, inv)


def _dispatch_planned(dispatcher: Dispatcher, inv_id: uuid.UUID, plan: dict | None, result: Any,
                      answer: Answer = AGENT) -> Any:
    """After the reserving transaction committed: send the planned call (if any), record what came
    back, and answer with the invocation as it now stands.

    From the moment the journal said `dispatching` the request may have left, so no failure here
    (the database, the recording's commit, anything unforeseen) may answer that nothing was sent:
    it answers the outcome as unknown, and leaves the records saying the same."""
    if plan is None:
        return result
    try:
        outcome = dispatch.send(plan["call"], secret=plan["secret"], job_id=plan["job_id"],
                                scope=plan["scope"], on_behalf_of=plan["on_behalf_of"],
                                idempotency_key=plan["key"] if plan["send_key"] else "",
                                timeout_ms=plan["timeout_ms"], client=plan["client"])
        with dispatcher.session() as db:
            return _record(db, inv_id, outcome, answer)
    except Exception:  # answered as unknown, below; logged here
        log.exception("the outcome of dispatched invocation %s could not be recorded", inv_id)
        dispatcher.release()  # one pooled connection at a time, even now
        return _outcome_unknown(dispatcher.database, inv_id, plan, result, answer)


def _outcome_unknown(database: Database, inv_id: uuid.UUID, plan: dict, result: Any,
                     answer: Answer = AGENT) -> Any:
    """The answer after a dispatch whose outcome could not be recorded. On a fresh connection: a
    journal still `dispatching` is marked unknown (permit and reservation kept), one that was
    recorded after all is answered as recorded. With no database at all, the unknown outcome is
    answered from what was known before the call; the row left `dispatching` reads as unknown to
    every later receipt and resume, since its dispatcher's lock was released (`Dispatcher.gone`)."""
    try:
        with database.session() as db:
            # A database that answers but cannot give the rows: waited for a moment, not for ever.
            db.execute(text("SET LOCAL lock_timeout = '5s'"))
            inv = db.get_one(Invocation, inv_id, with_for_update=True)
            journal = db.get_one(JournalEntry, inv_id, with_for_update=True)
            if journal.state == "dispatching":
                _mark_unknown(db, inv, journal)
            db.flush()
            return answer.recorded(db, inv)
    except Exception:  # nothing more can be learnt or written: unknown it stays
        log.exception("invocation %s left dispatching: its outcome is unknown", inv_id)
        return answer.unknown(result, plan["key"])


def _mark_unknown(db: Session, inv: Invocation, journal: JournalEntry) -> None:
    """A `dispatching` journal whose answer will never be recorded: the outcome is unknown."""
    journal.state, journal.failure, journal.finished_at = "uncertain", "no_outcome_recorded", utc_now()
    inv.status, inv.reason, inv.updated_at = "reconciliation_required", "no_outcome_recorded", utc_now()
    metering.settle(db, inv.id, dispatched=None)  # its permit and reservation stay


# ------------------------------------------------------------------ invoke

def _screen(visible: Visible, route, arguments: dict) -> tuple[str | None, dict | None]:
    """(why the call is refused before dispatch, or None; the approval policy, or None)."""
    errors = sorted(Draft202012Validator(visible.tool.input_schema).iter_errors(arguments),
                    key=lambda e: list(e.absolute_path))
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path) or "arguments"
        # The failing check only: a validator's message quotes the value, which must not be kept.
        return f"invalid_arguments: {where}: {errors[0].validator}"[:500], None
    if (dots := dot_segment_rejection(visible.tool.locations, arguments)) is not None:
        return dots, None
    forced = visible.tool.name in forced_approval((route.tools or {}).get("agent_direct") or {})
    try:
        return None, approval_policy(visible.tool, forced, arguments)
    except TypeMismatch as err:
        return f"approval_type_mismatch: {err}"[:500], None


def guarded(action):
    """Storage failures as `invocation_storage_unavailable`, anything unforeseen as
    `agent_tool_internal_error`; never the exception's text. Both are true only before the
    journal says `dispatching`: after it, `_dispatch_planned` answers instead and never raises."""
    @functools.wraps(action)
    def run(*args, **kwargs):
        try:
            return action(*args, **kwargs)
        except ApiError:
            raise
        except (DBAPIError, PoolTimeout):  # no connection in time, or none at all: nothing was sent
            log.exception("tool invocation storage failed")
            raise ApiError("invocation_storage_unavailable") from None
        except Exception:  # answered with a fixed code; logged above
            log.exception("tool invocation failed")
            raise ApiError("agent_tool_internal_error") from None
    return run


@guarded
def authenticate(database: Database, bearer: str | None) -> None:
    """Refuse a stranger before a body is read; with the database down, the same 503 as a call."""
    with database.session() as db:
        _session(db, bearer)


@guarded
def invoke(database: Database, bearer: str | None, body: dict) -> dict:
    with Dispatcher(database) as dispatcher:
        return _invoke(dispatcher, bearer, body)


def _run_of(db: Session, session: AgentSession, route_key: str, run_id: uuid.UUID | None) -> Run | None:
    """The named run must be a turn of this session in this route."""
    if run_id is None:
        return None
    run = db.get(Run, run_id)
    if run is None or run.session_id != session.id or run.route_key != route_key:
        raise ApiError("agent_run_conflict")
    return run


def _still_authorized(db: Session, route, session: AgentSession, inv: Invocation,
                      fingerprint: bool = True) -> Visible:
    """The invocation's tool as this session sees it now; 409 `capability_changed` when it left
    the catalog or (unless told otherwise) its frozen execution fingerprint changed."""
    visible = project(db, route, session).tools.get(inv.tool)
    if visible is None or (fingerprint and visible.tool.execution_fingerprint != inv.execution_fingerprint):
        raise ApiError("capability_changed",
                       "The tool changed since this invocation was made; it will not run as it is.")
    return visible


def _invoke(dispatcher: Dispatcher, bearer: str | None, body: dict) -> dict:
    with dispatcher.session() as db:
        session = _session(db, bearer)
        run_uuid = validate_request(body)
        db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 6))"),
                   {"k": f"{session.id}:{body['invocation_id']}"})
        route = resolve_route(db, session, body["route"], "tools")
        arguments = body["arguments"]
        args_hash = sha256_json(arguments)
        run_id = str(run_uuid) if run_uuid else None
        request_hash = sha256_json({"route": route.route_key, "tool": body["tool"],
                                    "run_id": run_id, "args_hash": args_hash})
        run = _run_of(db, session, route.route_key, run_uuid)
        now = utc_now()
        existing = db.scalar(select(Invocation).where(
            Invocation.session_id == session.id, Invocation.invocation_id == body["invocation_id"]))
        if existing is not None:
            if existing.request_hash != request_hash \
                    or existing.capability_revision != body["capability_revision"]:
                raise ApiError("invocation_conflict")
            # A replay answers only while its task's group and the tool are still authorized.
            _task_of(db, session, existing, now)
            _still_authorized(db, route, session, existing)
            return view(db, existing, _approval(db, existing))
        # Under a task (the run's, never the request's): run active and group verified first.
        managed = metering.for_run(db, session, run, now, new=True)
        projection = project(db, route, session)
        visible = projection.tools.get(body["tool"])
        if visible is None:
            raise ApiError("tool_not_found")
        if body["capability_revision"] != projection.revision:
            raise ApiError("capability_changed",
                           capability_revision=projection.revision)
        inv = Invocation(
            id=uuid.uuid4(), session_id=session.id, invocation_id=body["invocation_id"],
            route_key=route.route_key, run_id=run_uuid,
            tool=visible.tool.name, provider=visible.tool.provider, scope=visible.tool.scope,
            request_hash=request_hash, args_hash=args_hash, argument_keys=sorted(arguments),
            execution_fingerprint=visible.tool.execution_fingerprint,
            capability_revision=projection.revision, on_behalf_of=session.on_behalf_of,
            status="in_progress")
        db.add(inv)
        db.flush()
        rejection, policy = _screen(visible, route, arguments)
        plan = approval = None
        if _client_limited(db, session, inv, first=True):  # §D.1: the client gate comes first
            db.add(DeferredCall(job_id=inv.id, snapshot=canonical_json(arguments), args_hash=inv.args_hash))
        elif rejection is not None:
            inv.status, inv.reason = "rejected_before_dispatch", rejection
        else:
            plan, approval = _admit(db, session, route, inv, visible, arguments, policy, dispatcher, managed, now)
        db.flush()
        result, inv_id = view(db, inv, approval), inv.id
    return _dispatch_planned(dispatcher, inv_id, plan, result)


def _admit(db: Session, session: Caller, route, inv: Invocation, visible: Visible, arguments: dict,
           policy: dict | None, dispatcher: Dispatcher, managed: metering.Managed | None,
           now, deferred: DeferredCall | None = None,
           job: JobOwner | None = None) -> tuple[dict | None, Approval | None]:
    """A screened call past the rate-limit gates (BUSINESS_SIDE §D), before anything else: a
    limited call keeps its sealed arguments for its resume, and has no approval, reservation,
    permit or journal row. Admitted, it waits for approval or is planned for dispatch. `deferred`:
    the sealed arguments of a limited call being resumed. `job`: the job that makes the call
    (`session` is then that job); a job's limited call is not kept: its brain calls again."""
    provider = _provider(db, visible.tool.provider)
    snapshot = canonical_json(arguments)
    limited = rate_gate.check(db, visible.tool, provider)
    if limited is not None:
        inv.status, inv.reason, inv.rate_limit = "rejected_before_dispatch", rate_gate.REASON, limited
        inv.updated_at = utc_now()
        if deferred is None and job is None:
            db.add(DeferredCall(job_id=inv.id, snapshot=snapshot, args_hash=inv.args_hash))
        return None, None
    inv.rate_limit = None
    if deferred is not None:  # moving on: an approval holds the arguments from now, or they are sent
        db.delete(deferred)
    if policy is not None:
        inv.status, inv.reason = "awaiting_approval", None
        if managed is not None:  # reserved while it waits; no permit until it is resumed
            metering.reserve(db, managed, inv, readonly=visible.tool.readonly, approval_required=True, now=now)
        approval = Approval(
            id=uuid.uuid4(), job_id=inv.id, tool=inv.tool, route_key=inv.route_key,
            risk=visible.tool.risk, policy=policy, prompt=visible.tool.approval_prompt,
            snapshot=snapshot, args_hash=inv.args_hash, snapshot_bytes=len(snapshot.encode("utf-8")),
            argument_keys=sorted(arguments), summary=summary(visible, snapshot, arguments),
            principal=session.principal, on_behalf_of=session.on_behalf_of, status="pending",
            expires_at=approvals.expiry(route.approvals or {}, inv.tool))
        db.add(approval)
        outbox.enqueue(db, approval)  # notifications, in this same transaction
        if managed is not None:
            db.flush()
            metering.link_approval(db, inv.id, approval.id)
        return None, approval
    inv.reason = None
    if managed is not None:
        metering.reserve(db, managed, inv, readonly=visible.tool.readonly, approval_required=False, now=now)
    return _reserve(db, inv, visible, provider, arguments, dispatcher, managed, job), None


def _client_limited(db: Session, session: AgentSession, inv: Invocation, first: bool) -> bool:
    """The client gate (BUSINESS_SIDE §D.1), before any tool gate: refused, the call is held back
    as the tool gates hold it (resumed, it runs every gate again). Only a first call is told
    `retry_after_ms` (60000, kept with it); a resume refused is told neither field."""
    refused = client_gate.check(db, session.client_app_id)
    if refused is None:
        return False
    inv.status, inv.reason, inv.rate_limit = "rejected_before_dispatch", rate_gate.REASON, refused.record(first)
    inv.updated_at = utc_now()
    return True


def _rate_limited(inv: Invocation) -> bool:
    """Refused by a rate-limit gate: not final, its resume runs the gates again."""
    return inv.status == "rejected_before_dispatch" and inv.reason == rate_gate.REASON


def _task_of(db: Session, session: AgentSession, inv: Invocation, now) -> metering.Managed | None:
    """The task of an existing invocation. A call the gates refused before its reservation has no
    task record yet: its task is its run's, the run's end notwithstanding (as for a resume)."""
    if _rate_limited(inv) and _approval(db, inv) is None:
        run = db.get(Run, inv.run_id) if inv.run_id is not None else None
        return metering.for_run(db, session, run, now, new=False)
    return metering.for_invocation(db, session, inv, now)


# ------------------------------------------------------------------ resume and receipt

def _own_invocation(db: Session, session: AgentSession, invocation_id: str, lock: bool) -> Invocation:
    invocation_path_id(invocation_id)
    query = select(Invocation).where(Invocation.session_id == session.id,
                                     Invocation.invocation_id == invocation_id)
    inv = db.scalar(query.with_for_update() if lock else query)
    if inv is None:
        raise ApiError("invocation_not_found")
    return inv


def _revalidate(db: Session, session: AgentSession, inv: Invocation, fingerprint: bool = True) -> Visible:
    route = resolve_route(db, session, inv.route_key, "tools")
    return _still_authorized(db, route, session, inv, fingerprint)


def _interrupted(db: Session, journal: JournalEntry | None, timeout_ms: int) -> bool:
    """A `dispatching` row with no outcome to come: its dispatcher is gone, or it is stale."""
    if journal is None or journal.state != "dispatching":
        return False
    return journal.started_at + timedelta(milliseconds=timeout_ms) + STALE_GRACE < utc_now() \
        or Dispatcher.gone(db, journal.job_id)


@guarded
def resume(database: Database, bearer: str | None, invocation_id: str) -> dict:
    with Dispatcher(database) as dispatcher:
        return _resume(dispatcher, bearer, invocation_id)


def _resume(dispatcher: Dispatcher, bearer: str | None, invocation_id: str) -> dict:
    with dispatcher.session() as db:
        session = _session(db, bearer)
        inv = _own_invocation(db, session, invocation_id, lock=True)
        # The task of the original call, its whole group verified (the run may have ended).
        managed = _task_of(db, session, inv, utc_now())
        visible = _revalidate(db, session, inv)
        approval = _approval(db, inv, lock=True)
        plan = None
        if (inv.status == "awaiting_approval" or _rate_limited(inv)) and approval is not None:
            if approval.status == "denied":
                inv.status, inv.reason = "denied", "approval_denied"
            elif approvals.expired(approval, utc_now()):
                # Past its time-to-live, decided or not: the call is over, nothing was sent.
                inv.status, inv.reason = "rejected_before_dispatch", "approval_expired"
            elif approval.status == "approved" and approval.consumed_at is None:
                if sha256_bytes(approval.snapshot.encode("utf-8")) != approval.args_hash \
                        or approval.args_hash != inv.args_hash:
                    # Only the frozen, hash-checked snapshot may run; without it nothing does.
                    inv.status, inv.reason = "rejected_before_dispatch", "approval_snapshot_unusable"
                elif _client_limited(db, session, inv, first=False):
                    pass  # as a tool gate's refusal: the approval stays approved and unused
                elif (limited := rate_gate.check(db, visible.tool, _provider(db, inv.provider))) is not None:
                    # Limited: the approval stays approved and unused, the reservation held.
                    inv.status, inv.reason, inv.rate_limit = "rejected_before_dispatch", rate_gate.REASON, limited
                    inv.updated_at = utc_now()
                else:
                    # The permit (in _reserve) before the approval is used: a paused or full
                    # task refuses, and this whole transaction, consumption included, rolls back.
                    approval.consumed_at, inv.rate_limit = utc_now(), None
                    plan = _reserve(db, inv, visible, _provider(db, inv.provider),
                                    json.loads(approval.snapshot), dispatcher, managed)
            if managed is not None and inv.status != "awaiting_approval" and plan is None \
                    and not _rate_limited(inv):
                metering.release(db, inv.id, inv.reason or inv.status)  # over, and nothing was sent
        elif _rate_limited(inv):
            plan, approval = _resume_deferred(db, session, inv, visible, dispatcher, managed)
        elif inv.status == "in_progress":
            journal = db.get(JournalEntry, inv.id, with_for_update=True)
            if journal is None:  # an attempt without its journal row: never sent again
                inv.status, inv.reason = "reconciliation_required", "no_dispatch_record"
            elif _interrupted(db, journal, visible.tool.timeout_ms):
                _mark_unknown(db, inv, journal)
        db.flush()
        result, inv_id = view(db, inv, approval), inv.id
    return _dispatch_planned(dispatcher, inv_id, plan, result)


def _resume_deferred(db: Session, session: AgentSession, inv: Invocation, visible: Visible,
                     dispatcher: Dispatcher, managed: metering.Managed | None) -> tuple[dict | None, Approval | None]:
    """A call the gates refused before its approval: its sealed, hash-checked arguments screened
    and gated again, as a new call's are."""
    deferred = db.get(DeferredCall, inv.id, with_for_update=True)
    if deferred is None or sha256_bytes(deferred.snapshot.encode("utf-8")) != deferred.args_hash \
            or deferred.args_hash != inv.args_hash:
        inv.status, inv.reason, inv.rate_limit = "rejected_before_dispatch", "deferred_arguments_unusable", None
        return None, None
    if _client_limited(db, session, inv, first=False):
        return None, None  # still held back, its sealed arguments kept
    arguments = json.loads(deferred.snapshot)
    route = resolve_route(db, session, inv.route_key, "tools")
    rejection, policy = _screen(visible, route, arguments)
    if rejection is not None:
        inv.status, inv.reason, inv.rate_limit = "rejected_before_dispatch", rejection, None
        db.delete(deferred)
        return None, None
    return _admit(db, session, route, inv, visible, arguments, policy, dispatcher, managed, utc_now(), deferred)


@guarded
def receipt(database: Database, bearer: str | None, invocation_id: str) -> dict:
    """Where an invocation stands, read-only: nothing is dispatched, consumed or changed. The
    tool must still be authorized; its execution fingerprint need not match (this runs nothing)."""
    with database.session() as db:
        session = _session(db, bearer)
        inv = _own_invocation(db, session, invocation_id, lock=False)
        _task_of(db, session, inv, utc_now())  # verifies a task's group; changes nothing else
        visible = _revalidate(db, session, inv, fingerprint=False)
        journal = db.get(JournalEntry, inv.id)
        unresolved = _interrupted(db, journal, visible.tool.timeout_ms)
        return receipt_view(inv, _approval(db, inv), journal, dispatcher_alive=not unresolved)
