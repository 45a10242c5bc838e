"""Prometheus metrics (prometheus_client) and the protected GET /metrics that exposes them.

Every metric is described in docs/monitoring.md. Three kinds:

- Counters and histograms kept by each process (requests, appended events, dispatch outcomes).
  Under gunicorn with PROMETHEUS_MULTIPROC_DIR set they live in files there and a scrape sums
  every worker's (see gunicorn_conf.py); without it, each scrape sees only the worker that
  answered it.
- Gauges read from the database at scrape time (pending approvals, invocations to reconcile),
  so every worker answers the same truth; a database that does not answer gives
  `bailing_database_up 0`, never a failed scrape.
- This process's SQLAlchemy pool (checked out, size, overflow).
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, abort, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from sqlalchemy import event
from sqlalchemy.orm import Session

from ..errors import unauthorized

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)
disable_created_metrics()  # no `*_created` series beside each counter: nothing here reads them

METRICS_PATH = "/metrics"
# Route label of a request that matched no URL rule: one value, whatever the path was.
UNMATCHED = "(unmatched)"
# Methods outside this set (any token is a valid HTTP method) share one label value.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Up to a minute: a governed tool call lasts as long as the business system takes.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The database gauges must not hold a scrape (Prometheus gives up after 10 s by default).
DB_TIMEOUT_SECONDS = 2

HTTP_REQUESTS = Counter(
    "bailing_http_requests", "HTTP requests answered, by method, route (URL rule) and status.",
    ("method", "route", "status"))
HTTP_LATENCY = Histogram(
    "bailing_http_request_duration_seconds",
    "Time to answer an HTTP request, by method, route (URL rule) and status.",
    ("method", "route", "status"), buckets=LATENCY_BUCKETS)
EVENTS_APPENDED = Counter(
    "bailing_audit_events_appended", "Conversation Audit events stored by acknowledged batches.")
DISPATCH_OUTCOMES = Counter(
    "bailing_tool_invocation_outcomes",
    "Governed tool calls reaching an outcome (committed status changes), by outcome.", ("outcome",))
READ_SESSIONS = Counter(
    "bailing_read_sessions",
    "Read sessions of console pages and admin API reads that may lag, by the server that answered "
    "(replica, primary) and why a configured replica was passed over (none, unavailable, lagging).",
    ("server", "problem"))
# Per process; under multiprocess mode one series per live worker (label pid).
POOL_SIZE = Gauge("bailing_db_pool_size", "Connections this process's pool keeps open.",
                  multiprocess_mode="liveall")
POOL_CHECKED_OUT = Gauge("bailing_db_pool_checked_out", "Pool connections in use by this process.",
                         multiprocess_mode="liveall")
POOL_OVERFLOW = Gauge("bailing_db_pool_overflow",
                      "Connections open beyond the pool size (negative: not yet opened).",
                      multiprocess_mode="liveall")
POOL_MAX_OVERFLOW = Gauge("bailing_db_pool_max_overflow",
                          "Connections this process may open beyond the pool size "
                          "(BAILING_DB_MAX_OVERFLOW).", multiprocess_mode="liveall")


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


# ------------------------------------------------------------------ recording

def method_label(method: str) -> str:
    return method if method in METHODS else "other"


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    labels = (method_label(method), route, str(status))
    HTTP_REQUESTS.labels(*labels).inc()
    HTTP_LATENCY.labels(*labels).observe(seconds)


_AFTER_COMMIT = "bailing.metrics_after_commit"


def at_commit(db: Session, counter: Counter, amount: float = 1) -> None:
    """Increase `counter` once `db`'s transaction has committed (never for a rolled-back one)."""
    db.info.setdefault(_AFTER_COMMIT, []).append((counter, amount))


def events_appended(db: Session, count: int) -> None:
    """A batch of `count` new events, counted when its transaction commits."""
    at_commit(db, EVENTS_APPENDED, count)


@event.listens_for(Session, "after_commit")
def _count_committed(session: Session) -> None:
    for counter, amount in session.info.pop(_AFTER_COMMIT, ()):
        counter.inc(amount)


@event.listens_for(Session, "after_rollback")
@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back(session: Session, *_previous: object) -> None:
    session.info.pop(_AFTER_COMMIT, None)


def tool_call_outcome(db: Session, outcome: str) -> None:
    """A governed call reached `outcome`, counted when `db`'s transaction commits. The
    invocations package reports each one (admin_app/invocations/models.py)."""
    at_commit(db, DISPATCH_OUTCOMES.labels(outcome))


def read_session(server: str, problem: str | None) -> None:
    READ_SESSIONS.labels(server, problem or "none").inc()


def update_pool(app: Flask) -> None:
    """This process's pool figures, for the app's database (nothing if it has no engine yet)."""
    hub = app.extensions["bailing"]
    POOL_MAX_OVERFLOW.set(hub.settings.db_max_overflow)
    engine = hub.db.existing_engine()  # never creates one (or a server)
    if engine is None:
        return
    pool = engine.pool
    POOL_SIZE.set(pool.size())
    POOL_CHECKED_OUT.set(pool.checkedout())
    POOL_OVERFLOW.set(pool.overflow())


# ------------------------------------------------------------------ the database gauges

# Pending approvals are those still to be decided: an expired one waits for nobody
# (invocations.approvals.expired), so it leaves the count and the oldest age.
_GAUGES_SQL = """
    SELECT (SELECT count(*) FROM bz_tool_approvals WHERE status = 'pending'
             AND (expires_at IS NULL OR expires_at > now())) AS pending,
           (SELECT extract(epoch FROM now() - min(created_at)) FROM bz_tool_approvals
             WHERE status = 'pending' AND (expires_at IS NULL OR expires_at > now())) AS oldest,
           (SELECT count(*) FROM bz_tool_invocations
             WHERE status = 'reconciliation_required') AS reconcile,
           (SELECT count(*) FROM bz_tool_journal WHERE state = 'dispatching') AS dispatching"""


# The hub pause (runtime.pause owns the row; an area this module may not import).
_PAUSED_SQL = "SELECT paused FROM bz_hub_pause WHERE id = 1"


def _paused(conn: psycopg.Connection[Any]) -> bool:
    """Whether the hub is paused; not before `db upgrade` made the table (autocommit: a failed
    statement spoils nothing after it)."""
    import psycopg

    try:
        found = conn.execute(_PAUSED_SQL).fetchone()
    except psycopg.errors.UndefinedTable:
        return False
    return bool(found and found[0])


# The evidence verifier's latest finished pass (integrity.verifier owns the table): one read of
# its index bz_evidence_checks_recent.
_EVIDENCE_CHECK_SQL = ("SELECT ok, leaves_checked, extract(epoch FROM finished_at) FROM bz_evidence_checks "
                       "WHERE finished_at IS NOT NULL ORDER BY started_at DESC, id DESC LIMIT 1")


def _evidence_check(conn: psycopg.Connection[Any]) -> tuple[bool, int, float] | None:
    """(ok, leaves checked, finished at) of the latest verifier pass; None before any, or before
    `db upgrade` made the table."""
    import psycopg

    try:
        found = conn.execute(_EVIDENCE_CHECK_SQL).fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    return None if found is None else (bool(found[0]), int(found[1]), float(found[2]))


def _evidence_gauges(check: tuple[bool, int, float] | None) -> Iterator[Metric]:
    yield GaugeMetricFamily("bailing_evidence_mismatch",
                            "1 when the evidence verifier's latest pass found a leaf that does not verify "
                            "(the console's banner names it), else 0.",
                            value=1 if check is not None and not check[0] else 0)
    if check is not None:
        yield GaugeMetricFamily("bailing_evidence_leaves_checked",
                                "Leaves the evidence verifier's latest pass checked.", value=check[1])
        yield GaugeMetricFamily("bailing_evidence_last_check_timestamp_seconds",
                                "When the evidence verifier's latest pass finished (Unix time).", value=check[2])


class DatabaseCollector:
    """Gauges read from PostgreSQL at scrape time, on a connection of their own (not the pool,
    which may be exhausted by the very load one wants to see) with short timeouts."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        import psycopg

        up = GaugeMetricFamily("bailing_database_up",
                               "1 when the database answered this scrape's queries, else 0.")
        started = time.monotonic()
        row = None
        paused = False
        evidence_check = None
        try:
            hub = self.app.extensions["bailing"]
            with psycopg.connect(hub.db.conninfo(), connect_timeout=DB_TIMEOUT_SECONDS,
                                 autocommit=True, application_name="bailing-metrics") as conn:
                conn.execute(f"SET statement_timeout = {DB_TIMEOUT_SECONDS * 1000}")
                row = conn.execute(_GAUGES_SQL).fetchone()
                paused = _paused(conn)
                evidence_check = _evidence_check(conn)
        except Exception as exc:  # noqa: BLE001 - a scrape reports the outage, it does not fail
            # The class only: a connection error's text can name the server and the user.
            log.warning("metrics: database gauges unavailable (%s)", type(exc).__name__)
        up.add_metric([], 1 if row is not None else 0)
        yield up
        yield GaugeMetricFamily("bailing_database_scrape_duration_seconds",
                                "Time this scrape spent reading the database gauges.",
                                value=time.monotonic() - started)
        if row is None:
            return
        pending, oldest, reconcile, dispatching = row
        yield GaugeMetricFamily("bailinghub_runtime_paused",
                                "1 while the hub is paused (POST /admin/pause), else 0; Core's name.",
                                value=1 if paused else 0)
        yield GaugeMetricFamily("bailing_tool_approvals_pending",
                                "Approvals waiting for a decision.", value=pending)
        yield GaugeMetricFamily("bailing_tool_approvals_pending_oldest_age_seconds",
                                "Age of the oldest approval waiting for a decision (0: none).",
                                value=float(oldest or 0))
        yield GaugeMetricFamily("bailing_tool_invocations_reconciliation_required",
                                "Invocations whose outcome is unknown and needs a person.",
                                value=reconcile)
        yield GaugeMetricFamily("bailing_tool_dispatches_in_flight",
                                "Journal rows in `dispatching`: calls sent and not yet answered "
                                "(one stuck past its tool timeout: a worker died mid-call).",
                                value=dispatching)
        yield from _evidence_gauges(evidence_check)
        yield from _provider_gauges(hub.db.conninfo())


# One series per provider (its last probe's status as a label, 1): a bounded label set. Read
# apart from the gauges above: a database without sql/078 has no such column, and says nothing.
_PROVIDER_PROBES_SQL = """
    SELECT name, COALESCE(authz_probe->>'status', 'not_run') AS status,
           COALESCE(spec_pull_status = 'failed', false) AS pull_failed, spec_url IS NOT NULL AS pulled
    FROM bz_tool_providers ORDER BY name"""


def _provider_gauges(conninfo: str) -> Iterator[Metric]:
    import psycopg

    try:
        with psycopg.connect(conninfo, connect_timeout=DB_TIMEOUT_SECONDS, autocommit=True,
                             application_name="bailing-metrics") as conn:
            conn.execute(f"SET statement_timeout = {DB_TIMEOUT_SECONDS * 1000}")
            rows = conn.execute(_PROVIDER_PROBES_SQL).fetchall()
    except Exception as exc:  # noqa: BLE001 - a scrape reports what it can, it does not fail
        log.info("metrics: provider probe gauges unavailable (%s)", type(exc).__name__)
        return
    probe = GaugeMetricFamily("bailing_provider_authz_probe",
                              "Each tool provider's last authorization probe, by status (pass, suspect, "
                              "inconclusive, skipped, not_run): 1 for the status it has.",
                              labels=("provider", "status"))
    failing = GaugeMetricFamily("bailing_provider_spec_pull_failed",
                                "1 when a URL provider's last spec pull failed (its stored spec is kept).",
                                labels=("provider",))
    for name, status, pull_failed, pulled in rows:
        probe.add_metric([name, status], 1)
        if pulled:
            failing.add_metric([name], 1 if pull_failed else 0)
    yield probe
    yield failing


class _ThisProcess:
    """The default registry's metrics (this process's counters, pool, process_* and python_*)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def render(app: Flask) -> bytes:
    update_pool(app)
    registry = CollectorRegistry(auto_describe=False)
    if multiprocess_dir():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # every worker's files, dead ones' counters too
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector(app))
    return generate_latest(registry)


# ------------------------------------------------------------------ GET /metrics

bp = Blueprint("metrics", __name__)
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP")


def _allowed() -> bool:
    token = current_app.extensions["bailing"].settings.metrics_token
    if token:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent.encode("utf-8", "replace"), f"Bearer {token}".encode()):
            raise unauthorized()
        return True
    # No token: loopback clients only, and only when nothing forwarded the request: a reverse
    # proxy on the same host makes every client of the Internet a loopback peer.
    if any(name in request.headers for name in FORWARDING_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(request.remote_addr or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 from a dual-stack socket
    return address.is_loopback


@bp.get(METRICS_PATH)
def metrics() -> Response:
    if not _allowed():
        abort(404)  # as if there were nothing here
    response = Response(render(current_app), mimetype=None, content_type=CONTENT_TYPE_LATEST)
    response.headers["Cache-Control"] = "no-store"
    return response
