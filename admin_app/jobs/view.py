"""The job record as the Client API shows it (GET /jobs/<id>, §A.4) and as a completion callback
posts it (§D.1): Core's field names, null fields left out, timestamps as Core writes them.

Stricter than Core where no consumer reads the field: the live `claim_token` is never shown to a
client (§A "what a compatible hub must do" 7), and neither is the executor's token name."""
from __future__ import annotations

from typing import Any

from .. import limits
from ..canonical import iso
from .models import Job


def job_record(job: Job) -> dict[str, Any]:
    record: dict[str, Any] = {
        "job_id": str(job.id),
        "request_id": job.request_id,
        "status": job.status,
        "target": job.target,
        "route": job.route_key,
        "profile": "default",
        "project": "",
        "source": job.client_app_id,
        "client_app_id": job.client_app_id,
        "session_id": job.session_id,
        "input_preview": job.input[:limits.JOB_PREVIEW_CHARS],
        "metadata": job.metadata_,
        "callback_url": job.callback_url,
        "attempts": job.attempts,
        "run_after": iso(job.run_after),
        "executor_id": job.executor_id,
        "claimed_at": iso(job.claimed_at),
        "dispatched_at": iso(job.dispatched_at),
        "lease_until": iso(job.lease_until),
        "result": job.result,
        "usage": job.usage,
        "error": job.error,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
    }
    return {key: value for key, value in record.items() if value is not None}
