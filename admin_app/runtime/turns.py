"""Turns (bailing.agent-turn-context.v1) and their completion (bailing.agent-run-completion.v1).

A turn is keyed by (session, route, client_conversation_id, client_turn_id). Its normalised
request is hashed; the first request freezes a run with the context the hub answered, and an
identical retry gets that same run back while any change under the same key is a 409. Turns of
one thread are serialised on the thread row, so two clients sending the same turn at once get
one run. Prior memory is read before the current visible user message is appended.
"""
from __future__ import annotations

import math
import re
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, sha256_json, utc_now
from ..catalog.projection import project
from ..catalog.search import rank
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession, Route
from ..identity.workspace import resolve_route
from ..js_json import byte_length
from ..tasks import agent as task_agent
from ..validation import Checker, client_text, join
from . import client_input, knowledge, memory, profile, task_binding
from .models import Message, Run, Thread

TURN_SCHEMA = "bailing.agent-turn-context.v1"
COMPLETION_SCHEMA = "bailing.agent-run-completion.v1"
# Page fields that, with the user input, steer the active tools and the knowledge of a turn.
PAGE_HINT_KEYS = ("title", "page_name", "page_key", "url")
RENDERER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
TURN_FIELDS = ("client_conversation_id", "client_turn_id", "user_message_id", "user_input")
TURN_OPTIONAL = ("page_context", "renderers", "knowledge_delivery", "task_binding")
COMPLETION_STATUSES = ("completed", "failed", "cancelled")
USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens", "tool_calls",
                "cost_usd")


# ------------------------------------------------------------------ turn

def _renderers(checker: Checker, value) -> None:
    if not isinstance(value, list):
        checker.add("renderers", "must be a list")
        return
    if len(value) > limits.TURN_MAX_RENDERERS:
        checker.add("renderers", f"must have at most {limits.TURN_MAX_RENDERERS} items")
        return
    seen: set[str] = set()
    for i, name in enumerate(value):
        if not isinstance(name, str) or not RENDERER.fullmatch(name):
            checker.add(join("renderers", i), "must be 1 to 64 characters of A-Z a-z 0-9 _ . : - "
                                              "starting with a letter or digit")
        elif name in seen:
            checker.add(join("renderers", i), f"'{name}' is listed twice")
        else:
            seen.add(name)


def normalise_turn(body: dict) -> dict:
    """The turn request as the hub freezes it (identifiers trimmed, binding normalised), or the
    refusal: 400 invalid_request, 413 page_context_too_large, then the task-control codes."""
    checker = Checker()
    checker.obj(body, "", required=TURN_FIELDS, optional=TURN_OPTIONAL)
    turn: dict[str, Any] = {}
    for key in TURN_FIELDS[:3]:
        if key in body:
            turn[key] = client_input.identifier(checker, body[key], key)
    if "user_input" in body:
        turn["user_input"] = client_text(checker, body["user_input"], "user_input", limits.USER_INPUT_MAX)
    if "page_context" in body:
        if isinstance(body["page_context"], dict):
            turn["page_context"] = body["page_context"]
        else:
            checker.add("page_context", "must be an object")
    if "renderers" in body:
        _renderers(checker, body["renderers"])
        turn["renderers"] = body["renderers"]
    if "knowledge_delivery" in body:
        if body["knowledge_delivery"] != "on_demand":
            checker.add("knowledge_delivery", "must be 'on_demand' when given")
        turn["knowledge_delivery"] = body["knowledge_delivery"]
    if checker.problems:
        raise invalid_request(checker)
    if "page_context" in turn and byte_length(turn["page_context"]) > limits.PAGE_CONTEXT_MAX_BYTES:
        raise ApiError("page_context_too_large",
                       f"page_context exceeds {limits.PAGE_CONTEXT_MAX_BYTES} bytes of JSON.",
                       max_bytes=limits.PAGE_CONTEXT_MAX_BYTES)
    if "task_binding" in body:
        turn["task_binding"] = task_binding.parse(body["task_binding"])
    return turn


def search_query(turn: dict) -> str:
    """The page hints, then the user input: what a turn's tools and knowledge are ranked by."""
    page = turn.get("page_context", {})
    hints = " ".join(t for t in (profile.safe_text(page.get(key), limits.PAGE_HINT_MAX) for key in PAGE_HINT_KEYS)
                     if t)
    query = f"{hints}\n{turn['user_input']}" if hints else turn["user_input"]
    return query[:limits.CAPABILITY_QUERY_MAX]


def _thread(db: Session, session: AgentSession, route_key: str, conversation: str) -> Thread:
    """The thread row, created if needed, locked until commit: turns of one thread queue here."""
    db.execute(insert(Thread).values(session_id=session.id, route_key=route_key,
                                     client_conversation_id=conversation)
               .on_conflict_do_nothing(index_elements=["session_id", "route_key", "client_conversation_id"]))
    return db.scalars(select(Thread).where(
        Thread.session_id == session.id, Thread.route_key == route_key,
        Thread.client_conversation_id == conversation).with_for_update()).one()


def _turn_conflict(message: str) -> ApiError:
    return ApiError("turn_conflict", message)


def _knowledge(db: Session, route: Route, settings: dict, query: str, on_demand: bool):
    if not settings["enabled"]:
        return [], []
    rows = knowledge.search(db, route.route_key, query, settings["top_k"], settings["max_docs"])
    return knowledge.turn_knowledge(rows, on_demand)


def prepare_turn(db: Session, session: AgentSession, route: Route, body: dict) -> dict:
    turn = normalise_turn(body)
    request_hash = sha256_json({"route": route.route_key, "request": turn})
    # Task admission comes before anything of the turn exists (TASK_CONTROL.md §8.3).
    task_id = task_agent.admit_turn(db, session, route.route_key, turn["client_conversation_id"],
                                    turn.get("task_binding"), utc_now())
    thread = _thread(db, session, route.route_key, turn["client_conversation_id"])
    existing = db.scalar(select(Run).where(Run.thread_id == thread.id,
                                           Run.client_turn_id == turn["client_turn_id"]))
    if existing is not None:
        if existing.request_hash != request_hash:
            raise _turn_conflict("This turn was already prepared with a different request.")
        if task_id is not None:
            task_agent.replayed_run(db, task_id, existing)
        return existing.context
    used = db.scalar(select(Message.id).where(Message.thread_id == thread.id, Message.role == "user",
                                              Message.message_id == turn["user_message_id"]))
    if used is not None:
        raise _turn_conflict("user_message_id was already used by another turn of this conversation.")

    projection = project(db, route, session)
    prof = profile.build_profile(db, route)
    recent = memory.recent(db, thread.id, profile.memory_settings(route))  # read before appending
    on_demand = turn.get("knowledge_delivery") == "on_demand"
    query = search_query(turn)
    items, refs = _knowledge(db, route, profile.knowledge_settings(db, route), query, on_demand)
    run_id = uuid.uuid4()
    context = {
        "schema_version": TURN_SCHEMA,
        "run_id": str(run_id),
        **({"task_binding": turn["task_binding"]} if "task_binding" in turn else {}),
        "route": route.route_key,
        "client_conversation_id": turn["client_conversation_id"],
        "client_turn_id": turn["client_turn_id"],
        "user_message_id": turn["user_message_id"],
        "profile_revision": prof["revision"],
        "capability_revision": projection.revision,
        "context": {
            "instructions": prof["instructions"],
            "page_context": turn.get("page_context", {}),
            "renderers": turn.get("renderers", []),
            "memory": recent,
            "memory_refs": memory.refs(thread.id, recent),
            "knowledge": items,
            "knowledge_refs": refs,
            # Echoed only when negotiated: a client that did not ask gets inline bodies as ever.
            **({"knowledge_delivery": "on_demand"} if on_demand else {}),
            "governance": prof["governance"],
        },
        "active_tools": [v.projection() for v in rank(projection, query)[:profile.active_tool_limit(route)]],
    }
    run = Run(id=run_id, thread_id=thread.id, session_id=session.id,
              client_app_id=session.client_app_id, route_key=route.route_key,
              client_conversation_id=turn["client_conversation_id"],
              client_turn_id=turn["client_turn_id"], user_message_id=turn["user_message_id"],
              request_hash=request_hash, context=context, profile_revision=prof["revision"],
              capability_revision=projection.revision, task_binding=turn.get("task_binding"))
    db.add(run)
    db.flush()
    if task_id is not None:
        task_agent.bind_run(db, task_id, run)  # with the run, in its transaction
    db.add(Message(thread_id=thread.id, run_id=run_id, role="user",
                   message_id=turn["user_message_id"], content=turn["user_input"]))
    db.flush()
    return context


def find_run(db: Session, session: AgentSession, run_id: uuid.UUID, *, lock: bool = False) -> Run | None:
    """A run of this session; someone else's run is not found."""
    query = select(Run).where(Run.id == run_id, Run.session_id == session.id)
    return db.scalar(query.with_for_update() if lock else query)


def user_input_of(db: Session, run: Run) -> str:
    return db.scalar(select(Message.content).where(Message.run_id == run.id, Message.role == "user")) or ""


# ------------------------------------------------------------------ completion

def _usage_number(value) -> int | float | None:
    """A finite number >= 0, as a JavaScript client holds it (30.0 is 30), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    if not math.isfinite(number) or number < 0:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


def normalise_completion(body: dict) -> dict:
    checker = Checker()
    checker.obj(body, "", required=("assistant_message_id", "status", "content"),
                optional=("model", "runtime", "usage"))
    done: dict[str, Any] = {}
    if "assistant_message_id" in body:
        done["assistant_message_id"] = client_input.identifier(checker, body["assistant_message_id"],
                                                               "assistant_message_id")
    if "status" in body:
        if body["status"] not in COMPLETION_STATUSES:
            checker.add("status", "must be one of " + ", ".join(COMPLETION_STATUSES))
        done["status"] = body["status"]
    if "content" in body:
        done["content"] = client_text(checker, body["content"], "content", limits.COMPLETION_CONTENT_MAX)
    for key in ("model", "runtime"):
        if key in body:
            done[key] = client_text(checker, body[key], key, limits.RUN_NAME_MAX, blank_ok=True)
    if "usage" in body:
        usage = checker.obj(body["usage"], "usage", optional=USAGE_FIELDS)
        if usage is not None:
            done["usage"] = {}
            for key, value in usage.items():
                number = _usage_number(value)
                if number is None and key in USAGE_FIELDS:
                    checker.add(join("usage", key), "must be a finite number of at least 0")
                done["usage"][key] = number
    if checker.problems:
        raise invalid_request(checker)
    return done


def run_completion_conflict(message: str) -> ApiError:
    return ApiError("run_completion_conflict", message)


def complete_run(db: Session, session: AgentSession, run_id: str, body: dict) -> dict:
    """Completes a run of this session: 400 for a run id that is no UUID or a bad body, 409
    `run_completion_conflict` for a run this session does not have (the same answer whether it is
    unknown or someone else's), then the route gate on the run's route."""
    rid = client_input.run_id(run_id)
    if rid is None:
        raise invalid_request(Checker.single("run_id", "must be a UUID (versions 1 to 5)"))
    done = normalise_completion(body)
    run = find_run(db, session, rid, lock=True)
    if run is None:
        raise run_completion_conflict("No run of this session can take this completion.")
    resolve_route(db, session, run.route_key, "runtime")  # its route must still admit the session
    return _complete(db, run, done)


def _complete(db: Session, run: Run, done: dict) -> dict:
    # The normalised body is the fingerprint: an identical replay, keys in any order, matches.
    fingerprint = sha256_json(done)
    if run.completion_hash is not None:
        if run.completion_hash != fingerprint:
            raise run_completion_conflict("This run was already completed differently.")
        return _completion_view(run, replay=True)
    # Runs of one thread complete one at a time, so a message id is checked and taken atomically.
    db.execute(select(Thread.id).where(Thread.id == run.thread_id).with_for_update())
    clash = db.scalar(select(Message.id).where(Message.thread_id == run.thread_id,
                                               Message.role == "assistant",
                                               Message.message_id == done["assistant_message_id"]))
    if clash is not None:
        raise ApiError("assistant_message_conflict")
    run.status = done["status"]
    run.completion = done
    run.completion_hash = fingerprint
    run.completed_at = utc_now()
    db.add(Message(thread_id=run.thread_id, run_id=run.id, role="assistant",
                   message_id=done["assistant_message_id"], content=done["content"]))
    db.flush()
    return _completion_view(run, replay=False)


def _completion_view(run: Run, *, replay: bool) -> dict:
    assert run.completion is not None  # kept with the run when it completed
    # `schema` is what earlier readers of this hub look for; it holds the same string.
    return {"schema_version": COMPLETION_SCHEMA, "schema": COMPLETION_SCHEMA, "run_id": str(run.id),
            "assistant_message_id": run.completion["assistant_message_id"], "status": run.status,
            "idempotent_replay": replay, "completed_at": iso(run.completed_at)}
