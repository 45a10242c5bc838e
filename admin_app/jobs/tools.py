"""Governed tools inside a job (CLIENT_API_AND_EXECUTOR.md §C). Being written: see the task."""
from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from .models import Job


def work_item_tools(db: Session, job: Job) -> dict[str, Any] | None:
    """The work item's `tools` block for a job just claimed (§C.2), or None when the route
    offers no tool to it."""
    return None
