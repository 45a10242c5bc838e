"""`POST /run` (CLIENT_API_AND_EXECUTOR.md §A.3): a connector's task becomes a queued job for an
executor target, or is refused. The checks run in Core's order and the first failure answers;
the blueprint has already done steps 0-2 (credentials, pause, body). Nothing is written before
step 11 (the client's rate limit); a refusal after it keeps the rate charge, as Core's does, and
writes nothing else. Budget and thread-quota refusals (step 21) are jobs: `rejected`, answered 202.

Idempotency: `request_id` is unique across the hub. It is looked up after the route and target
checks, as Core does, so a retry is rate limited and sees a disabled route like a first try. Two
concurrent first submissions meet on the unique key (INSERT ... ON CONFLICT DO NOTHING, which waits
for the other transaction): exactly one job is created, and the other request answers as a retry
would (202 with that job for the same client, 409 for another), never 500 as Core's loser does."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from ..identity import client_gate
from ..identity.models import ClientApp, Route
from ..identity.workspace import audience_refusal
from ..runtime import pause
from ..validation import is_blank, utf16_len
from . import budgets, claims, events, principal, rules
from .answers import paused, refuse
from .models import IN_FLIGHT, ExecutorTarget, Job

REQUEST_ID_OR_INPUT = (f"request_id and input are required: request_id a non-blank string of at most "
                       f"{rules.REQUEST_ID_MAX} characters, input a non-blank string of at most "
                       f"{rules.INPUT_MAX} characters (UTF-16 code units)")
NO_TARGET = ("route {route} has no executor target: this hub runs no models in-process, so a route "
             "takes /run work only when its configuration names an executor target (`target`)")


def refuse_when_paused(db: Session) -> None:
    """Step 1: while the hub is paused, /run answers 503 `{"status": "paused"}` before reading
    the body."""
    if pause.is_paused(db):
        raise paused()


@dataclass(frozen=True)
class _Request:
    request_id: str
    route: str
    input: str
    metadata: dict[str, Any]
    callback_url: str | None


def _checked(body: Any) -> _Request:
    """Steps 3-9: the body's own shape, in Core's order."""
    if not isinstance(body, dict):
        raise refuse(400, "The request body must be a JSON object.")
    request_id, input_text = body.get("request_id"), body.get("input")
    if not isinstance(request_id, str) or is_blank(request_id) or utf16_len(request_id) > rules.REQUEST_ID_MAX \
            or not isinstance(input_text, str) or is_blank(input_text) or utf16_len(input_text) > rules.INPUT_MAX:
        raise refuse(400, REQUEST_ID_OR_INPUT)
    if "metadata" in body and not isinstance(body["metadata"], dict):
        raise refuse(400, "metadata must be a JSON object.")
    if "callback_url" in body and not rules.callback_url_ok(body["callback_url"]):
        raise refuse(400, f"callback_url must be an http(s) URL of at most {rules.CALLBACK_URL_MAX} characters.")
    route = body.get("route")
    if not isinstance(route, str) or not rules.ROUTE_PATTERN.fullmatch(route):
        raise refuse(400, f"route is required and must match {rules.ROUTE_PATTERN.pattern}.")
    if rules.js_truthy(body.get("project")) or rules.js_truthy(body.get("profile")):
        raise refuse(403, "A client cannot choose project or profile: the route decides them.")
    unknown = [key for key in body if key not in rules.RUN_FIELDS]
    if unknown:
        raise refuse(400, f"Fields the Client API does not declare: {', '.join(unknown)} "
                          f"(a client sends only {', '.join(rules.RUN_FIELDS)}).")
    return _Request(request_id, route, input_text, body.get("metadata", {}), body.get("callback_url"))


def _allows(client: ClientApp, route_key: str) -> bool:
    allowed = client.allowed_routes or []
    return route_key in allowed or "*" in allowed


def _route_and_target(db: Session, client: ClientApp, req: _Request, actor: dict[str, Any] | None
                      ) -> tuple[Route, str]:
    """Steps 13-18, after the rate limit (refusals keep its charge)."""
    if req.route == rules.AUTO_ROUTE:
        # No hub route opts into automatic selection (Core's audience.auto/keywords), so Core
        # itself would find no candidate.
        decision = {"mode": "auto", "ok": False, "candidates": [], "error": "route_auto_no_match"}
        raise refuse(400, "route=auto matched no route: this hub selects no route automatically; name the route.",
                     commit=True, decision=decision)
    route = db.scalar(select(Route).where(Route.route_key == req.route))
    if route is None:
        raise refuse(400, f"Unknown route: {req.route}.", commit=True)
    if not route.enabled:
        raise refuse(400, f"Route {req.route} is disabled.", commit=True)
    reason = audience_refusal(route.audience or {}, actor)
    if reason is not None:
        raise refuse(403, f"The principal may not use route {req.route}.", commit=True, reason=reason)
    if not route.target:
        raise refuse(400, NO_TARGET.format(route=req.route), commit=True)
    target = db.scalar(select(ExecutorTarget).where(ExecutorTarget.name == route.target))
    if target is None:
        raise refuse(400, f"Unknown target: {route.target} (it must be declared in executor_targets).",
                     commit=True)
    if not target.enabled:
        raise refuse(400, f"Target {route.target} is disabled.", commit=True)
    return route, target.name


def _existing(db: Session, client: ClientApp, request_id: str) -> dict[str, Any] | None:
    """Step 20: the answer for a request_id already taken, or None."""
    row = db.execute(select(Job.id, Job.status, Job.request_id, Job.client_app_id)
                     .where(Job.request_id == request_id)).first()
    if row is None:
        return None
    if row.client_app_id != client.app_id:
        raise refuse(409, "request_id is already used by another client: use an id of your own "
                          "(prefix it with your app id).", commit=True)
    return {"job_id": str(row.id), "status": row.status, "request_id": row.request_id}


def _session(route: Route, req: _Request, app_id: str) -> tuple[str, bool, str]:
    """(session_id, continue, thread_key) by the route's session policy. `new`: a fresh session
    whose thread is the request itself. `passthrough`: the caller's session id
    (`metadata[session_key_field]`, default `session_id`, a text or number, cut to 191 units),
    one thread per client, route and session, so its jobs queue in order and share the quota."""
    settings = route.job_settings or {}
    if settings.get("session_policy") == "passthrough":
        field = settings.get("session_key_field") or rules.SESSION_KEY_FIELD_DEFAULT
        passed = principal.first_text(req.metadata.get(field))
        if passed is not None:
            session_id = principal.utf16_prefix(passed, rules.SESSION_ID_MAX)
            return session_id, True, f"session:{app_id}:{route.route_key}:{session_id}"
    return str(uuid.uuid4()), False, f"req:{req.request_id}"


def _thread_full(db: Session, thread_key: str) -> int | None:
    """The thread's in-flight count when it already holds the quota, else None. The thread is
    locked for the rest of the transaction, so concurrent submissions are counted in turn."""
    db.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 81))"), {"key": thread_key})
    count = db.scalar(select(func.count()).select_from(Job)
                      .where(Job.thread_key == thread_key, Job.status.in_(IN_FLIGHT)))
    return int(count or 0) if (count or 0) >= rules.THREAD_INFLIGHT_QUOTA else None


def submit(db: Session, client: ClientApp, body: Any) -> dict[str, Any]:
    """Steps 3-21 for `client`'s request body: the 202 answer, or a refusal (answers.CoreError)."""
    req = _checked(body)
    if req.route != rules.AUTO_ROUTE and not _allows(client, req.route):
        raise refuse(403, f"Client {client.app_id} may not use route {req.route}.")
    refused = client_gate.check(db, client.app_id)
    if refused is not None:
        raise refuse(429, f"Rate limit exceeded ({refused.count}/min): retry later with the same request_id.")
    actor = principal.normalise(req.metadata, client.app_id)
    route, target = _route_and_target(db, client, req, actor)
    existing = _existing(db, client, req.request_id)
    if existing is not None:
        return existing
    session_id, is_continue, thread_key = _session(route, req, client.app_id)
    settings = route.job_settings or {}
    metadata = {**req.metadata, **({"principal": actor} if actor is not None else {})}
    job_id = uuid.uuid4()
    row: dict[str, Any] = {
        "id": job_id, "request_id": req.request_id, "client_app_id": client.app_id,
        "route_key": route.route_key, "target": target, "input": req.input, "metadata": metadata,
        "principal": actor, "on_behalf_of": principal.subject(req.metadata),
        "callback_url": req.callback_url or settings.get("default_callback_url"),
        "session_id": session_id, "is_continue": is_continue, "thread_key": thread_key,
        "max_retries": int((settings.get("retry") or {}).get("max", 0)),
    }
    rejection = _rejection(db, client, route, thread_key)
    if rejection is not None:
        row.update(status="rejected", error=rejection[0], finished_at=func.now())
    else:
        row["status"] = "queued"
    jobs = cast(Table, Job.__table__)
    inserted = db.execute(insert(jobs).values(row).on_conflict_do_nothing(index_elements=["request_id"])
                          .returning(jobs.c.id))
    if inserted.first() is None:  # a concurrent first submission of the same request_id won
        won = _existing(db, client, req.request_id)
        assert won is not None  # the conflicting row is committed: ON CONFLICT waited for it
        return won
    actor_name = f"client:{client.app_id}"
    events.record(db, job_id, "received", actor_name,
                  {"route": route.route_key, "target": target, "session": session_id, "continue": is_continue})
    if rejection is not None:
        events.record(db, job_id, "rejected", actor_name, rejection[1])
    else:
        events.record(db, job_id, "awaiting_executor", actor_name, {"target": target})
        claims.announce(db, target)  # waiting executors claim it as soon as this commits
    return {"job_id": str(job_id), "status": row["status"], "request_id": req.request_id,
            "route": route.route_key, "target": target, "session_id": session_id, "continue": is_continue}


def _rejection(db: Session, client: ClientApp, route: Route, thread_key: str
               ) -> tuple[str, dict[str, Any]] | None:
    """Step 21: (the job's error, the event's detail) when a budget or the thread's in-flight
    quota refuses the job; None to queue it."""
    over = budgets.exhausted(db, [("route", route.route_key, (route.job_settings or {}).get("budget")),
                                  ("client", client.app_id, client.job_budget)])
    if over is not None:
        what = "cost" if over.kind == "cost" else "token"
        error = (f"Budget exceeded: the {over.scope}'s {what} budget for the last "
                 f"{over.policy['window_hours']} hours is used up.")
        return (error, {"reason": over.reason, "scope": over.scope, "usage": over.used, "policy": over.policy})
    if thread_key.startswith("req:"):
        return None  # a thread of its own: nothing else is in flight on it
    count = _thread_full(db, thread_key)
    if count is not None:
        error = (f"Too many jobs in flight on this session (at least {rules.THREAD_INFLIGHT_QUOTA}): "
                 "wait for them to finish before sending more.")
        return (error, {"reason": "thread_inflight_quota", "quota": rules.THREAD_INFLIGHT_QUOTA, "in_flight": count})
    return None

