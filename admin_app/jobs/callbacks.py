"""Completion callbacks (CLIENT_API_AND_EXECUTOR.md §D). Being written: see the task."""
from __future__ import annotations

from sqlalchemy.orm import Session

from .models import Job


def enqueue(db: Session, job: Job) -> None:
    """Called in the transaction that finishes `job` (done or error): queue its signed callback
    when it has a callback URL."""
    return None
