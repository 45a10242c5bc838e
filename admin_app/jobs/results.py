"""POST /executor/result (CLIENT_API_AND_EXECUTOR.md §B.7): an executor reports how a job went.

Every well-formed report on a known job is answered 200, as Core does; a report that changes
nothing says why (`note`) and leaves a `result_ignored` event: the job is not dispatched (already
finished, requeued, never claimed: this is what makes a repeated report harmless), or its
claim token differs from the one sent (a stale claim).

Stricter than Core: a report must come from the executor token that claimed the job. Core lets
any executor token finish any dispatched job that is reported without a claim token; here such a
report is ignored the same way (200 with a note, nothing changed) and leaves a `result_refused`
event, so an operator sees it. A correct executor reports with the token it claimed with and
never meets this.

A failure (`ok: false` or a truthy `error`) with retries left puts the job back in the queue at
once (Core's rule: no backoff); otherwise the job finishes `done` or `error`, its lease ends, and
its completion callback is queued in the same transaction."""
from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import utc_now
from . import callbacks, events
from .answers import not_found, refuse
from .claims import announce
from .lookup import parse_job_id
from .models import ExecutorToken, Job

# The error text is kept whole up to this many characters (Core's column holds 1 024; the hub
# keeps more). A longer one is cut here and says so: never silently.
ERROR_MAX = 8192
SESSION_ID_MAX = 191  # as the Client API bounds a passed-through session id
FAILED_WITHOUT_TEXT = "The executor reported a failure (ok: false) without an error text."


def _truthy(value: Any) -> bool:
    """JavaScript's truthiness, which Core applies to `error`: objects and arrays are truthy even
    when empty."""
    if isinstance(value, dict | list):
        return True
    return bool(value)


def error_text(value: Any) -> str:
    """`String(error)` as stored: a string as it is, anything else as JSON; bounded."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > ERROR_MAX:
        cut = len(text) - ERROR_MAX
        text = text[:ERROR_MAX] + f"… [{cut} more characters not kept]"
    return text


def _ignored(db: Session, job: Job, event: str, actor: str | None, note: str, reason: str) -> dict[str, Any]:
    events.record(db, job.id, event, actor, {"reason": reason, "status": job.status})
    return {"ok": True, "status": job.status, "note": note}


def _clear_claim(job: Job) -> None:
    job.claim_token = None
    job.lease_until = None
    job.claimed_at = None


def _requeue(db: Session, job: Job, actor: str | None) -> dict[str, Any]:
    job.status = "queued"
    job.attempts += 1
    _clear_claim(job)
    job.executor_id = job.executor_token = None
    job.dispatched_at = None
    job.run_after = None
    if not job.is_continue:
        job.session_id = str(uuid.uuid4())
    job.updated_at = utc_now()
    events.record(db, job.id, "retry_scheduled", actor, {"attempt": job.attempts, "max_retries": job.max_retries})
    announce(db, job.target)
    return {"ok": True, "retried": True}


def report(db: Session, token: ExecutorToken, body: dict[str, Any]) -> dict[str, Any]:
    """§B.7: the reply to an executor's report, with its effect written in `db`."""
    raw_id = body.get("job_id")
    if raw_id is None or raw_id == "":
        raise refuse(400, "job_id is required.")
    if not isinstance(raw_id, str):
        raise refuse(400, "job_id must be a string.")
    session_id = body.get("session_id")
    if session_id is not None and (not isinstance(session_id, str) or not 1 <= len(session_id) <= SESSION_ID_MAX):
        raise refuse(400, f"session_id must be a string of 1-{SESSION_ID_MAX} characters.")
    job_id = parse_job_id(raw_id)
    job = None if job_id is None else db.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise not_found()
    executor_id = body.get("executor_id")
    actor = executor_id if isinstance(executor_id, str) and executor_id else job.executor_id
    if job.status != "dispatched":
        return _ignored(db, job, "result_ignored", actor, f"The job is {job.status}, not dispatched: report ignored.",
                        "not_dispatched")
    sent_claim = body.get("claim_token")
    if sent_claim is not None and sent_claim != "" and str(sent_claim) != str(job.claim_token):
        return _ignored(db, job, "result_ignored", actor,
                        "The claim token is not the job's current one: report ignored.", "stale_claim_token")
    if job.executor_token != token.name:
        return _ignored(db, job, "result_refused", actor,
                        "This job was claimed with another executor token: report ignored.", "other_token")
    error = body.get("error")
    failed = body.get("ok") is False or _truthy(error)
    if failed and job.attempts < job.max_retries:
        return _requeue(db, job, actor)
    output = body.get("output")
    usage = body.get("usage")
    job.status = "error" if failed else "done"
    job.result = {} if output is None else output
    job.usage = usage if isinstance(usage, dict) else None
    job.error = (error_text(error) if _truthy(error) else FAILED_WITHOUT_TEXT) if failed else None
    if session_id is not None:
        job.session_id = session_id
    _clear_claim(job)
    job.finished_at = job.updated_at = utc_now()
    events.record(db, job.id, "finished", actor, {"status": job.status, "attempts": job.attempts})
    callbacks.enqueue(db, job)
    return {"ok": True}
