"""GET /admin/api/dispatch-status and /admin/api/targets (CLIENT_API_AND_EXECUTOR.md §F, §B.1): the
queue as the executors see it, in Core's shapes. `thread_id` carries the hub's thread key (Core's
threads are numbered; the hub's are the keys /run derives)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from .. import limits
from ..canonical import iso, utc_now

_SUMMARY = text("""
    SELECT count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'dispatched') AS dispatched,
           count(*) FILTER (WHERE status = 'queued' AND run_after > now()) AS delayed_queued,
           count(*) FILTER (WHERE status IN ('running', 'dispatched') AND lease_until < now()) AS expired_leases
    FROM bz_jobs WHERE status IN ('queued', 'running', 'dispatched')
""")

_BY_TARGET = text("""
    SELECT target, count(*) FILTER (WHERE status = 'queued') AS queued,
           count(*) FILTER (WHERE status = 'running') AS running,
           count(*) FILTER (WHERE status = 'dispatched') AS dispatched
    FROM bz_jobs WHERE status IN ('queued', 'running', 'dispatched')
    GROUP BY target ORDER BY target
""")

_LEASES = text("""
    SELECT id, request_id, status, target, executor_id, thread_key, client_app_id, claimed_at, lease_until,
           dispatched_at, created_at, updated_at
    FROM bz_jobs WHERE status IN ('running', 'dispatched')
    ORDER BY lease_until NULLS FIRST, id LIMIT :limit
""")

# A thread is blocked when it has queued work behind a job still in flight (per-thread FIFO).
_BLOCKED = text("""
    WITH inflight AS (
        SELECT thread_key, count(*) AS n,
               (array_agg(id::text ORDER BY created_at, id))[1:CAST(:inflight AS integer)] AS jobs
        FROM bz_jobs WHERE status IN ('running', 'dispatched') GROUP BY thread_key
    ), waiting AS (
        SELECT thread_key, count(*) AS n, min(created_at) AS oldest
        FROM bz_jobs WHERE status = 'queued' GROUP BY thread_key
    )
    SELECT w.thread_key, w.n AS queued, w.oldest, i.n AS inflight, i.jobs
    FROM waiting w JOIN inflight i USING (thread_key)
    ORDER BY w.oldest, w.thread_key LIMIT :limit
""")

_COUNT_BLOCKED = text("""
    SELECT count(DISTINCT q.thread_key) FROM bz_jobs q
    WHERE q.status = 'queued' AND EXISTS (
        SELECT 1 FROM bz_jobs f WHERE f.thread_key = q.thread_key AND f.status IN ('running', 'dispatched'))
""")


def _ttl(lease_until: datetime | None, now: datetime) -> int | None:
    return None if lease_until is None else int((lease_until - now).total_seconds())


def _lease(row: Any, now: datetime) -> dict[str, Any]:
    entry = {"job_id": str(row.id), "request_id": row.request_id, "status": row.status, "target": row.target,
             "executor_id": row.executor_id, "thread_id": row.thread_key, "client_app_id": row.client_app_id,
             "claimed_at": iso(row.claimed_at), "lease_until": iso(row.lease_until),
             "dispatched_at": iso(row.dispatched_at), "created_at": iso(row.created_at),
             "updated_at": iso(row.updated_at), "lease_ttl_sec": _ttl(row.lease_until, now)}
    return {key: value for key, value in entry.items() if value is not None}


def dispatch_status(db: Session) -> dict[str, Any]:
    now = utc_now()
    summary = db.execute(_SUMMARY).one()
    blocked = db.execute(_BLOCKED, {"limit": limits.DISPATCH_BLOCKED_THREADS_MAX,
                                     "inflight": limits.DISPATCH_INFLIGHT_JOBS_MAX}).all()
    return {
        "now": iso(now),
        "summary": {"queued": summary.queued, "running": summary.running, "dispatched": summary.dispatched,
                    "delayed_queued": summary.delayed_queued, "expired_leases": summary.expired_leases,
                    "blocked_threads": int(db.scalar(_COUNT_BLOCKED) or 0)},
        "by_target": [{"target": r.target, "queued": r.queued, "running": r.running, "dispatched": r.dispatched}
                      for r in db.execute(_BY_TARGET)],
        "leases": [_lease(r, now) for r in db.execute(_LEASES, {"limit": limits.DISPATCH_LEASES_MAX})],
        "blocked_threads": [{"thread_id": r.thread_key, "queued": r.queued, "oldest_queued_at": iso(r.oldest),
                             "inflight": r.inflight, "inflight_jobs": list(r.jobs)[:limits.DISPATCH_INFLIGHT_JOBS_MAX]}
                            for r in blocked],
    }


def targets(db: Session) -> list[dict[str, Any]]:
    """The executor targets, as Core lists them (every one of kind `executor`: the hub runs no
    in-hub target); set by the configuration file's `executor_targets`."""
    rows = db.execute(text("SELECT name, description, enabled, created_at, updated_at FROM bz_executor_targets "
                           "ORDER BY name"))
    return [{"name": r.name, "kind": "executor", "stateless": False, "needs_project": False, "timeout_ms": 0,
             "enabled": r.enabled, "description": r.description, "created_at": iso(r.created_at),
             "updated_at": iso(r.updated_at)} for r in rows]
