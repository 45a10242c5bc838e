"""POST /executor/claim and /executor/heartbeat (CLIENT_API_AND_EXECUTOR.md §B.4-§B.6): which
targets an executor may claim, its liveness, the leases it holds, and the claim itself.

A claim is one SQL statement (FOR UPDATE SKIP LOCKED): the oldest due queued job of the targets
whose thread has nothing in flight and no earlier queued job, turned `dispatched` with a fresh
claim token and a lease. An executor that finds nothing waits for `announce` (queue_bell.py), so
it answers as soon as work arrives rather than on Core's 1.2 s poll, and holds no pooled
database connection while it waits.

Stricter than Core, invisible to a correct executor:
- leases are renewed (by claims and heartbeats, as Core) only for the jobs the same executor
  TOKEN claimed: an executor_id is self-declared, and another token's executor must not keep a
  job alive by taking its name;
- a claim whose executor is gone (its connection closed) when the job has been picked is rolled
  back before it commits: the job stays queued instead of being pinned to an executor that will
  never see it (Core's "lost claim reply" hazard, §B.4)."""
from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Session
from sqlalchemy.types import Text

from ..canonical import canonical_json
from ..config import Settings
from ..db import Database
from ..identity.models import Route
from ..runtime.pause import is_paused
from . import events
from .answers import refuse
from .models import ExecutorToken, Job
from .queue_bell import CHANNEL, QueueBell
from .tools import work_item_tools

WAIT_DEFAULT_MS = 25_000
WAIT_MAX_MS = 55_000
EXECUTOR_ID_DEFAULT = "unknown"
EXECUTOR_ID_MAX = 64  # Core's column
CAPABILITIES_MAX_BYTES = 16 * 1024  # written on every heartbeat: kept small
LIVENESS_SECONDS = 30  # executor row and token last-seen writes, at most this often (Core's)
# How often a waiting claim looks again without a notice: only for what nothing announces
# (a pause, a run_after that falls due) while the bell listens; every second while it is deaf.
POLL_LISTENING_SECONDS = 5.0
POLL_DEAF_SECONDS = 1.0


@dataclass(frozen=True)
class Presence:
    """Who is asking, as a claim or heartbeat body says: its id, the targets it wants, what it
    reports it can do (None: not said)."""

    executor_id: str
    targets: list[str]
    capabilities: dict[str, Any] | None


def wait_ms_of(value: Any) -> int:
    """Core's `wait_ms`: default 25 000 when absent, clamped 0-55 000, non-numeric 0."""
    if value is None:
        return WAIT_DEFAULT_MS
    if isinstance(value, bool):
        number = float(value)
    elif isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return 0
    else:
        return 0
    if math.isnan(number):
        return 0
    return int(min(max(number, 0.0), WAIT_MAX_MS))


def _capabilities(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and len(canonical_json(value).encode("utf-8")) <= CAPABILITIES_MAX_BYTES:
        return value
    return None


def presence_of(body: dict[str, Any], strict: bool) -> Presence:
    """The presence a body gives. `strict` (claim): a bad executor_id or capabilities is a 400;
    otherwise (heartbeat, which Core always answers 200) they fall back to Core's defaults."""
    executor_id = body.get("executor_id")
    if executor_id is None:
        executor_id = EXECUTOR_ID_DEFAULT
    elif not isinstance(executor_id, str) or not 1 <= len(executor_id) <= EXECUTOR_ID_MAX:
        if strict:
            raise refuse(400, f"executor_id must be a string of 1-{EXECUTOR_ID_MAX} characters.")
        executor_id = EXECUTOR_ID_DEFAULT
    raw_targets = body.get("targets")
    if strict and not isinstance(raw_targets, list):
        raise refuse(400, "targets must be a list of executor target names.")
    targets = [t for t in raw_targets if isinstance(t, str)] if isinstance(raw_targets, list) else []
    raw_caps = body.get("capabilities")
    capabilities = _capabilities(raw_caps)
    if strict and raw_caps is not None and capabilities is None:
        raise refuse(400, f"capabilities must be an object of at most {CAPABILITIES_MAX_BYTES} bytes.")
    return Presence(executor_id, list(dict.fromkeys(targets)), capabilities)


def allows(token: ExecutorToken, target: str) -> bool:
    return "*" in token.allowed_targets or target in token.allowed_targets


def registered(db: Session, wanted: list[str]) -> list[str]:
    """The wanted targets that are registered and enabled, in the order asked."""
    if not wanted:
        return []
    names = set(db.scalars(text("SELECT name FROM bz_executor_targets WHERE enabled AND name = ANY(:w)")
                           .bindparams(bindparam("w", type_=ARRAY(Text))), {"w": wanted}))
    return [t for t in wanted if t in names]


def claimable(db: Session, token: ExecutorToken, wanted: list[str]) -> list[str]:
    """§B.4 step 1: none registered → 400; registered but none allowed → 403 naming them."""
    known = registered(db, wanted)
    if not known:
        raise refuse(400, "None of the requested targets is a registered executor target.")
    allowed = [t for t in known if allows(token, t)]
    if not allowed:
        raise refuse(403, "This executor token may not claim the requested targets: " + ", ".join(known) + ".",
                     blocked_targets=known)
    return allowed


_LIVENESS = text("""
    INSERT INTO bz_executors AS e (executor_id, token_name, targets, capabilities, last_seen_at)
    VALUES (:executor_id, :token, :targets, :caps, now())
    ON CONFLICT (executor_id) DO UPDATE
    SET token_name = EXCLUDED.token_name, targets = EXCLUDED.targets,
        capabilities = CASE WHEN :keep_caps THEN e.capabilities ELSE EXCLUDED.capabilities END,
        last_seen_at = EXCLUDED.last_seen_at
    WHERE :always OR e.last_seen_at < now() - make_interval(secs => :every)
       OR e.token_name IS DISTINCT FROM EXCLUDED.token_name OR e.targets IS DISTINCT FROM EXCLUDED.targets
       OR (NOT :keep_caps AND e.capabilities IS DISTINCT FROM EXCLUDED.capabilities)
""").bindparams(bindparam("targets", type_=ARRAY(Text)), bindparam("caps", type_=JSONB(none_as_null=True)))

_RENEW = text("""
    UPDATE bz_jobs SET lease_until = now() + make_interval(secs => :lease), updated_at = now()
    WHERE status = 'dispatched' AND executor_id = :executor_id AND executor_token = :token
""")

_TOUCH = text("""
    UPDATE bz_executor_tokens SET last_seen_at = now()
    WHERE name = :token AND (last_seen_at IS NULL OR last_seen_at < now() - make_interval(secs => :every))
""")


def seen(db: Session, token: ExecutorToken, presence: Presence, targets: list[str], lease_seconds: float,
         *, always: bool, keep_capabilities: bool) -> int:
    """§B.4 step 2 and §B.6: the executor row (at most every 30 s unless `always` or something
    changed), the leases of the jobs this executor holds under this token, the token's
    last-seen (at most every 30 s). Returns how many leases were renewed."""
    db.execute(_LIVENESS, {"executor_id": presence.executor_id, "token": token.name, "targets": targets,
                           "caps": presence.capabilities, "keep_caps": keep_capabilities, "always": always,
                           "every": LIVENESS_SECONDS})
    renewed = db.execute(_RENEW, {"lease": lease_seconds, "executor_id": presence.executor_id,
                                  "token": token.name}).rowcount  # type: ignore[attr-defined]
    db.execute(_TOUCH, {"token": token.name, "every": LIVENESS_SECONDS})
    return int(renewed)


def heartbeat(database: Database, settings: Settings, token: ExecutorToken, body: dict[str, Any]) -> dict[str, Any]:
    """§B.6: always `{ok: true}` past the gate; targets filtered to registered and allowed,
    capabilities overwritten (null when absent)."""
    presence = presence_of(body, strict=False)
    with database.session() as db:
        targets = [t for t in registered(db, presence.targets) if allows(token, t)]
        seen(db, token, presence, targets, settings.executor_lease_seconds, always=True, keep_capabilities=False)
    return {"ok": True}


# The claim: one statement. A candidate is queued, of a wanted target, due, and first of its
# thread (nothing of the thread in flight, no earlier due queued job of it); the oldest wins.
# SKIP LOCKED: concurrent claimers pass over a row another is taking instead of waiting for it.
_CLAIM = text("""
    WITH candidate AS (
        SELECT j.id FROM bz_jobs j
        WHERE j.status = 'queued' AND j.target = ANY(:targets)
          AND (j.run_after IS NULL OR j.run_after <= now())
          AND NOT EXISTS (SELECT 1 FROM bz_jobs b WHERE b.thread_key = j.thread_key
                          AND b.status IN ('running', 'dispatched'))
          AND NOT EXISTS (SELECT 1 FROM bz_jobs e WHERE e.thread_key = j.thread_key AND e.status = 'queued'
                          AND (e.run_after IS NULL OR e.run_after <= now())
                          AND (e.created_at, e.id) < (j.created_at, j.id))
        ORDER BY j.created_at, j.id
        LIMIT 1
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE bz_jobs SET status = 'dispatched', executor_id = :executor_id, executor_token = :token,
        claimed_at = now(), dispatched_at = now(), lease_until = now() + make_interval(secs => :lease),
        claim_token = :claim_token, run_after = NULL, updated_at = now()
    FROM candidate WHERE bz_jobs.id = candidate.id AND bz_jobs.status = 'queued'
    RETURNING bz_jobs.*
""").bindparams(bindparam("targets", type_=ARRAY(Text)))


def claim_one(db: Session, token: ExecutorToken, executor_id: str, targets: list[str],
              lease_seconds: float) -> Job | None:
    """Take the next job of `targets` for this executor, or None."""
    return db.scalars(select(Job).from_statement(_CLAIM), {
        "targets": targets, "executor_id": executor_id, "token": token.name, "lease": lease_seconds,
        "claim_token": uuid.uuid4()}).first()


def work_item(db: Session, job: Job) -> dict[str, Any]:
    """§B.5, with Core's field names (camelCase `session`). The hub extracts no media from the
    input and has no project registry: those fields are always empty."""
    route = db.scalar(select(Route).where(Route.route_key == job.route_key))
    metadata = dict(job.metadata_ or {})
    if job.principal is not None and "principal" not in metadata:
        metadata["principal"] = job.principal
    item: dict[str, Any] = {
        "job_id": str(job.id),
        "request_id": job.request_id,
        "target": job.target,
        "profile": "default",
        "project": "",
        "project_path": None,
        "input": job.input or "",
        "metadata": metadata,
        "source": job.client_app_id,
        "target_config": route.target_config if route is not None and route.target_config else {},
        "user_images": [],
        "user_audio": [],
        "user_files": [],
        "session": {"sessionId": job.session_id, "isContinue": job.is_continue},
        "claim_token": str(job.claim_token),
    }
    tools = work_item_tools(db, job)
    if tools is not None:
        item["tools"] = tools
    return item


def announce(db: Session, target: str) -> None:
    """Tell waiting claims (of every process) that `target` has a queued job: sent when the
    caller's transaction commits, never if it rolls back. Call it wherever a job becomes queued."""
    db.execute(text("SELECT pg_notify(:channel, :target)"), {"channel": CHANNEL, "target": target})


class _Gone(Exception):
    """The executor went away while its claim was being made: roll the claim back."""


def _attempt(database: Database, settings: Settings, token: ExecutorToken, presence: Presence,
             targets: list[str], gone: Callable[[], bool]) -> dict[str, Any] | None:
    """One look: the paused answer, a claimed work item, or None (nothing to claim)."""
    try:
        with database.session() as db:
            if is_paused(db):
                return {"job": None, "paused": True}
            job = claim_one(db, token, presence.executor_id, targets, settings.executor_lease_seconds)
            if job is None:
                return None
            item = work_item(db, job)
            detail: dict[str, Any] = {"executor_id": presence.executor_id, "target": job.target,
                                      "token": token.name}
            if "tools" in item:
                detail["tools"] = True
                if isinstance(item["tools"], dict) and isinstance(item["tools"].get("mode"), str):
                    detail["tools_mode"] = item["tools"]["mode"]
            events.record(db, job.id, "dispatched", presence.executor_id, detail)
            if gone():
                raise _Gone
            return {"job": item}
    except _Gone:
        return {"job": None, "gone": True}


def claim(database: Database, settings: Settings, bell: QueueBell, token: ExecutorToken, body: dict[str, Any],
          gone: Callable[[], bool]) -> dict[str, Any]:
    """§B.4: refuse, record liveness, then look for work until `wait_ms` passes, waking on
    announcements. `gone()` says whether the executor has hung up: then the wait ends (with a
    `gone` marker the blueprint drops) and a job picked at that moment is put back."""
    presence = presence_of(body, strict=True)
    wait_ms = wait_ms_of(body.get("wait_ms"))
    deadline = time.monotonic() + wait_ms / 1000
    with database.session() as db:
        targets = claimable(db, token, presence.targets)
        seen(db, token, presence, targets, settings.executor_lease_seconds, always=False,
             keep_capabilities=presence.capabilities is None)
    while True:
        rung = bell.mark(targets)  # before the look: a notice during it is not missed
        answer = _attempt(database, settings, token, presence, targets, gone)
        if answer is not None:
            return answer
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"job": None}
        if gone():
            return {"job": None, "gone": True}
        poll = POLL_LISTENING_SECONDS if bell.listening else POLL_DEAF_SECONDS
        bell.wait(targets, rung, min(remaining, poll))
