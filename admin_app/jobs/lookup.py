"""`GET /jobs/<job_id>` (CLIENT_API_AND_EXECUTOR.md §A.4): a client reads its own jobs only. An id
that is not a job's, including one that is no UUID at all (Dify's credential probe sends the
all-zero UUID) and another client's job, is the same 404: nothing tells them apart."""
from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import Job
from .view import job_record


def parse_job_id(raw: str) -> uuid.UUID | None:
    """The job id `raw` names, in the canonical lowercase form jobs are given; None otherwise."""
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        return None
    return parsed if str(parsed) == raw else None


def own_job(db: Session, app_id: str, raw_id: str) -> dict[str, Any] | None:
    """The job record (view.job_record) of `raw_id` when `app_id` submitted it, else None."""
    job_id = parse_job_id(raw_id)
    if job_id is None:
        return None
    job = db.scalar(select(Job).where(Job.id == job_id, Job.client_app_id == app_id))
    return None if job is None else job_record(job)
