"""The optional partitioning of the conversation events by archive
(sql/optional/partition_events.sql): how long the conversion takes per million events, and what
the hub's event queries cost before and after it, with the partitions each one reads.

Events are made with generate_series SQL straight into a fresh migrated database (turns of five
events: start, user message, run link, assistant message, end; messages of about 250 bytes), so
millions take a minute rather than an hour of HTTP appends. Each query is the statement the hub
sends (reads/archives.py, reads/traces.py, reads/search.py), timed by EXPLAIN (ANALYZE, BUFFERS).

    python bench/partition_events.py --events 500000 --per-archive 1000 --partitions 16
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from common import EXAMPLES, SQL_DIR, Operator, finish, fresh_database

from admin_app import migrations

RARE = "zebra crossing"
TRIGRAM = "bz_agent_conversation_events_content_trgm"

ARCHIVES = """
INSERT INTO bz_agent_conversation_archives (id, client_archive_id, client_conversation_id, creator_session_id,
       client_app_id, route_key, input_hash, state, member_count, last_sequence, message_count, turn_count)
SELECT md5('archive' || a)::uuid, md5('client' || a)::uuid, 'conv-' || a, %(session)s,
       'crm-demo', 'customers', repeat('0', 64), 'ready', 1, %(per)s::int, %(per)s::int * 2 / 5, %(per)s::int / 5
  FROM generate_series(%(first)s::int, %(last)s::int) a"""
EVENTS = """
INSERT INTO bz_agent_conversation_events (archive_id, sequence, event_id, client_turn_id, kind, content,
       status, run_id, member_session_id, thread_id, body_sha256)
SELECT md5('archive' || a)::uuid, n, 'ev-' || n, 'turn-' || (n - 1) / 5, k.kind,
       CASE WHEN k.kind LIKE '%%message' THEN
            'Message ' || n || ': the customer asked about order ' || (100000 + n) || ' and the credit limit of '
            || 'account C-' || (1000 + a %% 9000) || '; the assistant checked the open invoices, the delivery '
            || 'dates and the last payments before answering. ' || md5(a || '-' || n) END,
       CASE WHEN k.kind = 'turn_end' THEN 'completed' END,
       CASE WHEN k.kind = 'run_link' THEN md5('run' || a || '-' || n)::uuid END,
       CASE WHEN k.kind = 'run_link' THEN %(session)s::uuid END,
       CASE WHEN k.kind = 'run_link' THEN n END,
       encode(sha256(convert_to(a || '-' || n, 'UTF8')), 'hex')
  FROM generate_series(%(first)s::int, %(last)s::int) a, generate_series(1, %(per)s::int) n,
       LATERAL (SELECT (ARRAY['turn_end', 'turn_start', 'user_message', 'run_link',
                              'assistant_message'])[n %% 5 + 1] AS kind) k"""

# The hub's statements, as the modules named send them.
QUERIES = {
    # reads/archives.event_page: a deep transcript page.
    "transcript_page": """
        SELECT sequence, event_id, client_turn_id, kind, content, status, run_id, member_session_id,
               thread_id, created_at
        FROM bz_agent_conversation_events
        WHERE archive_id = %(archive)s AND sequence > %(after)s AND sequence <= %(upto)s
        ORDER BY sequence LIMIT 201""",
    # reads/traces.archive_turn: where a run's turn starts in its archive.
    "run_id_lookup": """
        SELECT l.archive_id, l.client_turn_id, l.sequence AS link,
               (SELECT max(s.sequence) FROM bz_agent_conversation_events s
                 WHERE s.archive_id = l.archive_id AND s.client_turn_id = l.client_turn_id
                   AND s.kind = 'turn_start' AND s.sequence <= l.sequence) AS turn_start
          FROM bz_agent_conversation_events l WHERE l.run_id = %(run)s""",
    # reads/archives.search_in_archive: a term inside one archive.
    "search_in_archive": """
        SELECT sequence, kind, content FROM bz_agent_conversation_events
        WHERE archive_id = %(archive)s AND sequence <= %(upto)s AND content ILIKE %(like)s ESCAPE '\\'
          AND sequence > 0 ORDER BY sequence LIMIT 51""",
    # reads/search.search_messages (no other filter): a rare term across every archive.
    "search_all_archives": """
        SELECT e.archive_id, e.sequence FROM bz_agent_conversation_events e
          JOIN bz_agent_conversation_archives a ON a.id = e.archive_id
         WHERE e.content IS NOT NULL AND e.content ILIKE %(rare)s ESCAPE '\\'
         ORDER BY e.archive_id, e.sequence LIMIT 51""",
}
# After the conversion only: the side table the run_id lookup could go through.
SIDE_TABLE = {"run_id_via_side_table": """
    SELECT archive_id, sequence FROM bz_agent_conversation_run_links WHERE run_id = %(run)s"""}


def seed(url: str, archives: int, per: int, folder: Path) -> float:
    operator = Operator(url, folder / "var")
    try:
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator("sessions", "issue", "--client", "crm-demo", "--routes", "customers")["session_id"]
    finally:
        operator.close()
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        # The trigram index is built once after the load (as a restore does), not row by row.
        trigram = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (TRIGRAM,)).fetchone()
        conn.execute(f"DROP INDEX {TRIGRAM}")
        for first in range(1, archives + 1, 100):
            params = {"session": session, "per": per, "first": first, "last": min(first + 99, archives)}
            conn.execute(ARCHIVES, params)
            conn.execute(EVENTS, params)
        conn.execute("UPDATE bz_agent_conversation_events SET content = content || %(rare)s "
                     "WHERE (archive_id, sequence) IN ((md5('archive1')::uuid, 2), "
                     "(md5('archive' || %(mid)s)::uuid, 7), (md5('archive' || %(last)s)::uuid, 12))",
                     {"rare": f" a {RARE}", "mid": archives // 2, "last": archives})
        conn.execute(trigram[0])
        conn.execute("VACUUM (ANALYZE) bz_agent_conversation_events")
    return time.monotonic() - started


def params(per: int, archives: int) -> dict:
    middle = archives // 2
    return {"archive": _uuid(f"archive{middle}"), "after": per - 200, "upto": per,
            "run": _uuid(f"run{middle}-{per - 7}"), "like": "%order 1000%", "rare": f"%{RARE}%"}


def _uuid(text: str) -> str:
    """The UUID SQL's md5(text)::uuid makes (an identifier, not a secret)."""
    return str(uuid.UUID(hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()))


def measure(url: str, queries: dict[str, str], values: dict, repetitions: int) -> dict:
    """Median execution time, buffers and partitions read of each query (EXPLAIN ANALYZE)."""
    figures = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, query in queries.items():
            runs = [conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, values).fetchone()[0][0]
                    for _ in range(repetitions)]
            plan = runs[-1]["Plan"]
            figures[name] = {
                "median_ms": round(statistics.median(r["Execution Time"] for r in runs), 3),
                "planning_ms": round(statistics.median(r["Planning Time"] for r in runs), 3),
                "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0),
                "relations_read": sorted(_read(plan)),
                "rows": plan.get("Actual Rows"),
            }
            figures[name]["text_plan"] = "\n".join(
                r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) " + query,
                                           values))
    return figures


def _read(node: dict) -> set[str]:
    """The events tables (or partitions) a plan node and its children actually read."""
    found = set()
    relation = node.get("Relation Name", "")
    if relation.startswith("bz_agent_conversation_") and relation != "bz_agent_conversation_archives" \
            and node.get("Actual Loops", 0) > 0:
        found.add(relation)
    for child in node.get("Plans", []):
        found |= _read(child)
    return found


def size(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("""
            SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
             WHERE c.relkind = 'r' AND (c.relname = 'bz_agent_conversation_events'
                   OR c.relname LIKE 'bz\\_agent\\_conversation\\_events\\_p%'
                   OR c.relname = 'bz_agent_conversation_run_links')""").fetchone()[0]


def report(label: str, figures: dict) -> None:
    print(f"\n== {label}")
    for name, f in figures.items():
        read = f["relations_read"]
        print(f"{name:24} {f['median_ms']:9.3f} ms  planning {f['planning_ms']:7.3f} ms  buffers {f['buffers']:6}  "
              f"rows {f['rows']}  reads {len(read)}: {', '.join(read)[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--per-archive", type=int, default=1000, help="events per archive (a multiple of 5)")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--plans", action="store_true", help="print every plan in full")
    args = parser.parse_args()
    archives = max(1, args.events // args.per_archive)
    with tempfile.TemporaryDirectory(prefix="bailing-bench-") as scratch, fresh_database() as url:
        seeded = seed(url, archives, args.per_archive, Path(scratch))
        events = archives * args.per_archive
        print(f"{events} events in {archives} archives, seeded in {seeded:.1f} s")
        values = params(args.per_archive, archives)
        plain_size = size(url)
        before = measure(url, QUERIES, values, args.repetitions)
        report("plain table", before)
        converted = migrations.partition_events(url, SQL_DIR, args.partitions)
        per_million = converted["seconds"] / events * 1_000_000
        print(f"\nconversion into {args.partitions} partitions: {converted['seconds']:.1f} s "
              f"({per_million:.1f} s per million events), {converted['run_links']} run links")
        started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM bz_agent_conversation_events")
        vacuum = time.monotonic() - started
        print(f"VACUUM afterwards (visibility map, hint bits): {vacuum:.1f} s")
        after = measure(url, {**QUERIES, **SIDE_TABLE}, values, args.repetitions)
        report(f"{args.partitions} partitions by HASH (archive_id)", after)
        if args.plans:
            for label, figures in (("plain", before), ("partitioned", after)):
                for name, f in figures.items():
                    print(f"\n-- {label}: {name}\n{f['text_plan']}")
        finish("partition_events", {
            "events": events, "archives": archives, "partitions": args.partitions,
            "conversion_s": converted["seconds"], "conversion_s_per_million": round(per_million, 1),
            "vacuum_after_s": round(vacuum, 1), "bytes_before": plain_size, "bytes_after": size(url),
            "before": {k: {x: y for x, y in v.items() if x != "text_plan"} for k, v in before.items()},
            "after": {k: {x: y for x, y in v.items() if x != "text_plan"} for k, v in after.items()},
        })


if __name__ == "__main__":
    main()
