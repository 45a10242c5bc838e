"""Request limits: at most `limit` hits per key in any `window` seconds (a sliding window).

SharedWindowLimit counts in the database (bz_rate_limits, sql/071_shared_rate_limits.sql), so
every worker of every host on that database admits `limit` in total, and a restart forgets
nothing. A hit is one upsert in its own short transaction (see the migration for why it is exact
under concurrency); a refused hit writes nothing.

`admit_all` is the tool gates' limiter (sql/074_tool_rate_limits.sql): several buckets checked
together and charged only when all have room, in the caller's transaction, each bucket's row
locked in key order; a refusal says when the oldest admission that keeps it full leaves.

WindowLimit counts in process memory. It stands in only while the table is missing (a database
not yet upgraded): the limit then holds per process, as it did before the table existed, instead
of failing every request it guards.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import psycopg
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from ..canonical import canonical_json
from ..db import Database

log = logging.getLogger(__name__)

SWEEP_ABOVE_KEYS = 1024  # idle keys are dropped once this many are held
SWEEP_ROWS = 50  # expired rows deleted by one hit, so no single request pays for a backlog

# The row's hits still inside the window, plus this one, unless `limit` of them remain. The
# upsert locks the key's row, and a hit that waited on another's lock is evaluated against the
# row that one committed: concurrent hits are counted one after the other, never lost.
_HIT = text("""
    INSERT INTO bz_rate_limits AS r (key, hits, expires_at)
    VALUES (:key, ARRAY[now()], now() + make_interval(secs => CAST(:window AS double precision)))
    ON CONFLICT (key) DO UPDATE
    SET hits = ARRAY(SELECT h FROM unnest(r.hits) AS h
                     WHERE h > now() - make_interval(secs => CAST(:window AS double precision)) ORDER BY h) || now(),
        expires_at = now() + make_interval(secs => CAST(:window AS double precision))
    WHERE (SELECT count(*) FROM unnest(r.hits) AS h
           WHERE h > now() - make_interval(secs => CAST(:window AS double precision))) < :limit
    RETURNING true
""")

# Rows of any key whose window has passed; rows another hit holds are left for a later sweep.
_SWEEP = text("""
    DELETE FROM bz_rate_limits WHERE key IN (
        SELECT key FROM bz_rate_limits WHERE expires_at < now()
        ORDER BY expires_at LIMIT :rows FOR UPDATE SKIP LOCKED)
""")


class WindowLimit:
    """The limit in this process's memory (a deployment of N processes admits N times it)."""

    def __init__(self, limit: int, window_seconds: float):
        self.limit, self.window = limit, window_seconds
        self._hits: dict[Hashable, deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: Hashable) -> bool:
        """Count one attempt under `key`; False when the window already holds `limit` of them."""
        now = time.monotonic()
        horizon = now - self.window
        with self._lock:
            if len(self._hits) > SWEEP_ABOVE_KEYS:
                self._hits = {k: h for k, h in self._hits.items() if h[-1] > horizon}
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= horizon:
                hits.popleft()
            if len(hits) >= self.limit:
                return False
            hits.append(now)
            return True


def count_hit(db: Session, key: str, limit: int, window_seconds: float) -> bool:
    """One hit under `key` in `db`'s transaction; False (and nothing written) when the window
    already holds `limit` hits."""
    db.execute(_SWEEP, {"rows": SWEEP_ROWS})
    counted = db.execute(_HIT, {"key": key, "limit": limit, "window": float(window_seconds)}).first()
    return counted is not None


def _table_missing(err: ProgrammingError) -> bool:
    return isinstance(err.orig, psycopg.errors.UndefinedTable)


class SharedWindowLimit:
    """A limit named `name` (the prefix of its keys), shared through the database."""

    def __init__(self, name: str, limit: int, window_seconds: float):
        self.name, self.limit, self.window = name, limit, window_seconds
        self._fallback = WindowLimit(limit, window_seconds)
        self._warned = False

    def key(self, parts: tuple[str | None, ...]) -> str:
        """The row's key: the name, and a digest of the parts (no address is stored in clear)."""
        digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
        return f"{self.name}:{digest[:40]}"

    def allow(self, database: Database, *parts: str | None) -> bool:
        """Count one attempt under `parts` (e.g. client and address); False when refused."""
        key = self.key(parts)
        try:
            with database.session() as db:
                return count_hit(db, key, self.limit, self.window)
        except ProgrammingError as err:
            if not _table_missing(err):
                raise
        self._say_missing()
        return self._fallback.allow(key)

    def _say_missing(self) -> None:
        # Once per process: every hit finds the table missing until `db upgrade` has run.
        if not self._warned:
            self._warned = True
            log.warning("bz_rate_limits is missing (run bailing-admin db upgrade): the %s limit "
                        "is counted by each process on its own", self.name)


# ---------------------------------------------------------------- several buckets at once

@dataclass(frozen=True)
class Bucket:
    """At most `limit` admissions under `key` in any `window_seconds` (a sliding-window log)."""
    key: str
    limit: int
    window_seconds: int


# Buckets whose last admission has left its window, with their admissions; a few per check,
# rows another check holds are left for a later one.
_SWEEP_BUCKETS = text("""
    DELETE FROM bz_tool_rate_buckets WHERE bucket IN (
        SELECT bucket FROM bz_tool_rate_buckets WHERE expires_at < clock_timestamp()
        ORDER BY expires_at LIMIT :rows FOR UPDATE SKIP LOCKED)
""")
_LOCK = text("SELECT held FROM bz_tool_rate_buckets WHERE bucket = :key FOR UPDATE")
# A new bucket expires one window on, so that no sweep takes it before its first admission.
_CREATE = text("""
    INSERT INTO bz_tool_rate_buckets (bucket, held, expires_at)
    VALUES (:key, 0, clock_timestamp() + make_interval(secs => :window))
    ON CONFLICT (bucket) DO NOTHING
""")
# The admissions that have left the window (at or before now - window), and the count that
# remains.
_SLIDE = text("""
    WITH gone AS (DELETE FROM bz_tool_rate_admissions
                  WHERE bucket = :key AND admitted_at <= CAST(:now AS timestamptz) - make_interval(secs => :window)
                  RETURNING 1)
    UPDATE bz_tool_rate_buckets SET held = held - (SELECT count(*) FROM gone)
    WHERE bucket = :key RETURNING held
""")
# The admission whose leaving frees a place: with `held` in the window and room for `limit`,
# the (held - limit)-th oldest, counted from 0. Its time plus the window, from now, in ms (>= 1).
_RETRY = text("""
    SELECT GREATEST(1, CEIL(EXTRACT(EPOCH FROM (admitted_at + make_interval(secs => :window)
                                                - CAST(:now AS timestamptz))) * 1000))::bigint
    FROM bz_tool_rate_admissions WHERE bucket = :key
    ORDER BY admitted_at OFFSET :skip LIMIT 1
""")
_CHARGE = text("""
    WITH admitted AS (INSERT INTO bz_tool_rate_admissions (bucket, admitted_at) VALUES (:key, :now))
    UPDATE bz_tool_rate_buckets
       SET held = held + 1,
           expires_at = GREATEST(expires_at, CAST(:now AS timestamptz) + make_interval(secs => :window))
     WHERE bucket = :key
""")


def _lock(db: Session, bucket: Bucket) -> None:
    """Hold `bucket`'s row for the rest of the transaction, creating it when it is new."""
    params = {"key": bucket.key, "window": float(bucket.window_seconds)}
    for _ in range(3):  # a bucket swept between its creation and our lock is made again
        if db.execute(_LOCK, params).first() is not None:
            return
        db.execute(_CREATE, params)
    raise RuntimeError(f"rate-limit bucket {bucket.key} could not be locked")


def admit_all(db: Session, buckets: Sequence[Bucket]) -> tuple[Bucket, int] | None:
    """One admission in every bucket, in `db`'s transaction, or in none: None when all had
    room (all charged); else the refusing bucket that frees last and its wait in ms (nothing
    charged). The buckets' rows stay locked until the transaction ends, so concurrent callers,
    on any host, are counted one after the other and the limits are exact. Locked in key order,
    so that two calls over the same buckets never wait on each other in a cycle."""
    db.execute(_SWEEP_BUCKETS, {"rows": SWEEP_ROWS})
    ordered = sorted({b.key: b for b in buckets}.values(), key=lambda b: b.key)
    for bucket in ordered:
        _lock(db, bucket)
    # The clock once the locks are held: later than every admission a previous holder wrote.
    now = db.execute(text("SELECT clock_timestamp()")).scalar_one()
    refusals: list[tuple[int, Bucket]] = []
    for bucket in ordered:
        params = {"key": bucket.key, "window": float(bucket.window_seconds), "now": now}
        held = int(db.execute(_SLIDE, params).scalar_one())
        if held >= bucket.limit:
            wait = db.execute(_RETRY, {**params, "skip": held - bucket.limit}).scalar_one()
            refusals.append((int(wait), bucket))
    if refusals:
        wait, bucket = max(refusals, key=lambda r: r[0])
        return bucket, wait
    for bucket in ordered:
        db.execute(_CHARGE, {"key": bucket.key, "window": float(bucket.window_seconds), "now": now})
    return None
