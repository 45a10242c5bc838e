"""Rerunning a finished job under the same job ID (CLIENT_API_AND_EXECUTOR.md §A.5, last row): the
console's and the admin API's rerun, and an approval granted on a finished job (§C.7) share it.

The job goes back to `queued` with `attempts` 0 and its error, delay, lease and claim cleared; its
`result`, `usage`, `session_id` and `input` are kept while it waits, as Core keeps them (a poller
may see the old result beside `queued`). Waiting executors are woken at once."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import utc_now
from ..errors import ApiError
from . import claims, events
from .models import TERMINAL, Job

IN_FLIGHT_MESSAGE = ("The job is {status}: only a finished job (done, error or rejected) can be rerun. "
                     "Wait for it to finish.")


def locked(db: Session, job_id: uuid.UUID) -> Job | None:
    """The job, its row locked until the transaction ends (so that two reruns, or a rerun and a
    claim, cannot both act on the status they read)."""
    return db.scalar(select(Job).where(Job.id == job_id).with_for_update())


def requeue(db: Session, job: Job, actor: str, **detail: Any) -> bool:
    """Put a finished, locked `job` back in the queue; False (and nothing done) when it is not
    finished. Records `rerun` with the status it left and `detail` (e.g. the approval that asked
    for it), and wakes the executors waiting for its target when the transaction commits."""
    if job.status not in TERMINAL:
        return False
    previous = job.status
    job.status = "queued"
    job.attempts = 0
    job.error = None
    job.run_after = None
    job.executor_id = None
    job.executor_token = None
    job.claim_token = None
    job.claimed_at = None
    job.dispatched_at = None
    job.lease_until = None
    job.finished_at = None
    job.updated_at = utc_now()
    events.record(db, job.id, "rerun", actor, {"from": previous, **detail})
    claims.announce(db, job.target)
    return True


def rerun(db: Session, job_ref: str, actor: str, **detail: Any) -> Job:
    """An administrator's rerun (console or admin API): 404 `not_found` for no such job, 400
    `invalid_request` while it is queued, running or dispatched."""
    try:
        job_id = uuid.UUID(job_ref)
    except ValueError:
        raise ApiError("not_found") from None
    job = locked(db, job_id)
    if job is None:
        raise ApiError("not_found")
    if not requeue(db, job, actor, **detail):
        raise ApiError("invalid_request", IN_FLIGHT_MESSAGE.format(status=job.status))
    return job
