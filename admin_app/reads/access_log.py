"""The access log read (audit:read): who opened which transcript, snapshot, export or trace, when,
and which sequences. The log is written by identity.access_log, in the transaction of each read.

Shown grouped: a person's consecutive reads of one target with one action through one door, each
within GAP of the one before, are one group (one scroll through a long transcript is one group,
not a hundred rows). "Consecutive" is within that person's own reads that pass the filters, so
another admin reading at the same time does not split a group. The grouping is gaps-and-islands
in SQL, found from the newest row of each group (its head) down:

- a head is a row whose next newer read by the same person does not continue it;
- a group ends above the first older row of that person that does not continue the row above it.

Each step is an index walk ((username, at) and (at) indexes) that stops at the first answer, so a
page of groups costs the rows of its groups, however long the log. Groups are keyset paged on their
head (at, id); individual rows on (at, id). Targets are named by LEFT JOINs in the same query."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

# Reads further apart than this start a new group.
GAP = "30 minutes"

# Where the next page starts: the (at, id) of the last head (or row) shown.
LogKey = tuple[datetime, int]


@dataclass(frozen=True)
class Filters:
    """What the reader narrowed the log to; each None is "any". `targets` are the ids a target
    filter named (an id itself, or the archives of a client conversation id)."""

    person: str | None = None
    action: str | None = None
    targets: tuple[str, ...] | None = None
    since: datetime | None = None   # inclusive
    until: datetime | None = None   # exclusive

    def sql(self, alias: str) -> tuple[str, dict[str, Any]]:
        """The WHERE fragment for table alias `alias` (constant text) and its bound values."""
        where: list[str] = ["TRUE"]
        params: dict[str, Any] = {}
        if self.person is not None:
            where.append(f"{alias}.username = :f_person")
            params["f_person"] = self.person
        if self.action is not None:
            where.append(f"{alias}.action = :f_action")
            params["f_action"] = self.action
        if self.targets is not None and len(self.targets) == 1:
            # Equality, not ANY: the (target, ...) indexes then return rows in time order, so the
            # walks below stop at their first answer instead of sorting the target's every read.
            where.append(f"{alias}.target = :f_target")
            params["f_target"] = self.targets[0]
        elif self.targets is not None:
            where.append(f"{alias}.target = ANY(:f_targets)")
            params["f_targets"] = list(self.targets)
        if self.since is not None:
            where.append(f"{alias}.at >= :f_since")
            params["f_since"] = self.since
        if self.until is not None:
            where.append(f"{alias}.at < :f_until")
            params["f_until"] = self.until
        return " AND ".join(where), params


def _no_jit(db: Session) -> None:
    """The planner prices each correlated walk as if it read a person's whole history, so the
    plan's estimate passes jit_above_cost and compiling it costs seconds for a read of
    milliseconds. JIT is off for the rest of this transaction only."""
    db.execute(text("SET LOCAL jit = off"))


def _continues(newer: str, older: str) -> str:
    """SQL: row `newer` continues row `older` (same door, action and target, within GAP)."""
    return (f"({newer}.target = {older}.target AND {newer}.action = {older}.action "
            f"AND {newer}.channel = {older}.channel AND {newer}.at - {older}.at <= interval '{GAP}')")


def _tail(filters: Filters) -> tuple[str, dict[str, Any]]:
    """SQL for a LATERAL over head `h`: the (at, id) of the first older row of h's person that does
    not continue the row above it (the group is every row above that, down from h); none at the
    log's end."""
    where, params = filters.sql("o")
    return f"""
        SELECT b.at, b.id FROM (
            SELECT o.at, o.id, o.target, o.action, o.channel,
                   lag(o.target) OVER w AS n_target, lag(o.action) OVER w AS n_action,
                   lag(o.channel) OVER w AS n_channel, lag(o.at) OVER w AS n_at
            FROM bz_access_log o
            WHERE o.username = h.username AND {where} AND (o.at, o.id) <= (h.at, h.id)
            WINDOW w AS (ORDER BY o.at DESC, o.id DESC)
            ORDER BY o.at DESC, o.id DESC) b
        WHERE (b.at, b.id) < (h.at, h.id)
          AND NOT (b.n_target = b.target AND b.n_action = b.action AND b.n_channel = b.channel
                   AND b.n_at - b.at <= interval '{GAP}')
        LIMIT 1""", params  # noqa: S608 - constant fragments, bound values


def _names(alias: str, archives: bool) -> tuple[str, str]:
    """Columns and LEFT JOINs naming `alias`'s target: the archive's client conversation id, the
    run's conversation and route, the approval's number and tool, the job's tool and run. Archives
    exist only once their migration is applied (`archives`)."""
    as_uuid = (f"CASE WHEN {alias}.target ~ '^[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$' "
               f"THEN CAST({alias}.target AS uuid) END")
    columns = ("t_run.client_conversation_id AS run_conversation, t_run.route_key AS run_route, "
               "t_ap.number AS approval_number, t_ap.tool AS approval_tool, "
               "t_job.tool AS job_tool, t_job.run_id AS job_run, t_job_ap.id AS job_approval")
    joins = f"""
        LEFT JOIN bz_runs t_run ON {alias}.action = 'run_trace_view' AND t_run.id = {as_uuid}
        LEFT JOIN bz_tool_approvals t_ap ON {alias}.action IN ('snapshot_view', 'snapshot_download')
                                         AND t_ap.id = {as_uuid}
        LEFT JOIN bz_tool_invocations t_job ON {alias}.action = 'job_trace_view' AND t_job.id = {as_uuid}
        LEFT JOIN bz_tool_approvals t_job_ap ON t_job_ap.job_id = t_job.id"""
    if archives:
        columns += ", t_ar.client_conversation_id AS conversation"
        joins += f"""
        LEFT JOIN bz_agent_conversation_archives t_ar
               ON {alias}.action IN ('transcript_view', 'transcript_export') AND t_ar.id = {as_uuid}"""
    else:
        columns += ", CAST(NULL AS text) AS conversation"
    return columns, joins


# Merged sequence ranges a grouped row names; the rest are counted ("and N more ranges").
RANGES_SHOWN = 5


def _ranges(filters: Filters) -> str:
    """SQL for a LATERAL over head `h` and tail `t`: the sequences the group read, as ranges merged
    where they overlap or touch (1-200 and 201-400 are 1-400), counted, the first RANGES_SHOWN of
    them as two arrays (firsts, lasts). Gaps and islands: a range starts an island when it begins
    after every range before it ends."""
    where, _ = filters.sql("m")
    return f"""
        SELECT count(*) AS range_count,
               (array_agg(lo ORDER BY lo))[1:{RANGES_SHOWN}] AS range_firsts,
               (array_agg(hi ORDER BY lo))[1:{RANGES_SHOWN}] AS range_lasts
        FROM (SELECT min(lo) AS lo, max(hi) AS hi
              FROM (SELECT lo, hi, sum(starts) OVER (ORDER BY lo, hi) AS island
                    FROM (SELECT lo, hi,
                                 CASE WHEN lo <= max(hi) OVER (ORDER BY lo, hi ROWS BETWEEN UNBOUNDED PRECEDING
                                                               AND 1 PRECEDING) + 1 THEN 0 ELSE 1 END AS starts
                          FROM (SELECT DISTINCT m.first_sequence AS lo, m.last_sequence AS hi
                                FROM bz_access_log m
                                WHERE m.username = h.username AND {where} AND (m.at, m.id) <= (h.at, h.id)
                                  AND (m.at, m.id) > (coalesce(t.at, '-infinity'), coalesce(t.id, 0))
                                  AND m.first_sequence IS NOT NULL AND m.last_sequence IS NOT NULL) d) x) y
              GROUP BY island) z"""  # noqa: S608 - constant fragments, bound values


def groups(db: Session, filters: Filters, after: LogKey | None, limit: int,
           archives: bool) -> tuple[list[Row[Any]], LogKey | None]:
    """`limit` groups whose head is older than `after`, newest first; and the key to continue from."""
    _no_jit(db)
    where, params = filters.sql("l")
    newer_where, _ = filters.sql("n")
    tail, _ = _tail(filters)
    columns, joins = _names("h", archives)
    params.update({"limit": limit + 1, "after_at": after[0] if after else None,
                   "after_id": after[1] if after else None})
    rows = list(db.execute(text(f"""
        WITH heads AS (
            SELECT l.id, l.at, l.username, l.action, l.target, l.channel, l.admin_token_id
            FROM bz_access_log l
            WHERE {where}
              AND (CAST(:after_id AS bigint) IS NULL OR (l.at, l.id) < (:after_at, :after_id))
              AND NOT EXISTS (
                  SELECT 1 FROM (SELECT n.target, n.action, n.channel, n.at FROM bz_access_log n
                                 WHERE n.username = l.username AND {newer_where} AND (n.at, n.id) > (l.at, l.id)
                                 ORDER BY n.at, n.id LIMIT 1) n
                  WHERE {_continues("n", "l")})
            ORDER BY l.at DESC, l.id DESC
            LIMIT :limit)
        SELECT h.*, g.reads, g.first_at, g.first_sequence, g.last_sequence,
               s.range_count, s.range_firsts, s.range_lasts, {columns}
        FROM heads h
        LEFT JOIN LATERAL ({tail}) t ON TRUE
        CROSS JOIN LATERAL (
            SELECT count(*) AS reads, min(m.at) AS first_at,
                   min(m.first_sequence) AS first_sequence, max(m.last_sequence) AS last_sequence
            FROM bz_access_log m
            WHERE m.username = h.username AND {filters.sql("m")[0]} AND (m.at, m.id) <= (h.at, h.id)
              AND (m.at, m.id) > (coalesce(t.at, '-infinity'), coalesce(t.id, 0))) g
        CROSS JOIN LATERAL ({_ranges(filters)}) s
        {joins}
        ORDER BY h.at DESC, h.id DESC"""), params))  # noqa: S608 - constant fragments, bound values
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], (rows[limit - 1].at, rows[limit - 1].id)


def group_head(db: Session, head_id: int) -> Row[Any] | None:
    return db.execute(text("SELECT id, at, username, action, target, channel FROM bz_access_log WHERE id = :id"),
                      {"id": head_id}).first()


def group_rows(db: Session, filters: Filters, head: Row[Any], after: LogKey | None, limit: int,
               archives: bool) -> tuple[list[Row[Any]], LogKey | None]:
    """The individual reads of the group whose head is `head` (under the same filters), newest
    first, `limit` after `after`."""
    _no_jit(db)
    tail, params = _tail(filters)
    where, _ = filters.sql("r")
    columns, joins = _names("r", archives)
    params.update({"head_at": head.at, "head_id": head.id, "head_user": head.username, "limit": limit + 1,
                   "after_at": after[0] if after else head.at, "after_id": after[1] if after else head.id + 1})
    rows = list(db.execute(text(f"""
        WITH h AS (SELECT CAST(:head_at AS timestamptz) AS at, CAST(:head_id AS bigint) AS id,
                          CAST(:head_user AS text) AS username)
        SELECT r.id, r.at, r.username, r.action, r.target, r.channel, r.admin_token_id,
               r.first_sequence, r.last_sequence, {columns}
        FROM h LEFT JOIN LATERAL ({tail}) t ON TRUE
        JOIN bz_access_log r ON r.username = h.username AND (r.at, r.id) <= (h.at, h.id)
                            AND (r.at, r.id) > (coalesce(t.at, '-infinity'), coalesce(t.id, 0))
        {joins}
        WHERE {where} AND (r.at, r.id) < (:after_at, :after_id)
        ORDER BY r.at DESC, r.id DESC
        LIMIT :limit"""), params))  # noqa: S608 - constant fragments, bound values
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], (rows[limit - 1].at, rows[limit - 1].id)


def rows(db: Session, filters: Filters, after: LogKey | None, limit: int,
         archives: bool) -> tuple[list[Row[Any]], LogKey | None]:
    """`limit` individual reads under `filters` older than `after`, newest first (the export)."""
    _no_jit(db)
    where, params = filters.sql("r")
    columns, joins = _names("r", archives)
    params.update({"limit": limit + 1, "after_at": after[0] if after else None,
                   "after_id": after[1] if after else None})
    found = list(db.execute(text(f"""
        SELECT r.id, r.at, r.username, r.action, r.target, r.channel, r.admin_token_id,
               r.first_sequence, r.last_sequence, {columns}
        FROM bz_access_log r {joins}
        WHERE {where} AND (CAST(:after_id AS bigint) IS NULL OR (r.at, r.id) < (:after_at, :after_id))
        ORDER BY r.at DESC, r.id DESC LIMIT :limit"""), params))  # noqa: S608 - constant fragments, bound values
    if len(found) <= limit:
        return found, None
    return found[:limit], (found[limit - 1].at, found[limit - 1].id)


def targets_named(db: Session, name: str, archives: bool, limit: int) -> tuple[str, ...]:
    """The targets a reader's "target" filter means: an id as given (any case), or the archives
    whose client conversation id it is."""
    try:
        return (str(uuid.UUID(name)),)
    except ValueError:
        pass
    if not archives:
        return ()
    found = db.execute(text("SELECT CAST(id AS text) FROM bz_agent_conversation_archives "
                            "WHERE client_conversation_id = :name ORDER BY id LIMIT :limit"),
                       {"name": name, "limit": limit}).scalars()
    return tuple(found)
