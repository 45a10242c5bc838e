"""Conversation Audit event append: the real HTTP stack against a plain-psycopg baseline.

HTTP: batches of 50 events into one archive up to its 20,000-event limit, POSTed one after the
other to gunicorn on loopback with the writer's bearer. Baseline: the same rows inserted into a
second archive of the same database with plain psycopg, one transaction per batch (the events'
multi-row INSERT and the archive header's counters), over one connection: none of the hub's
HTTP, bearer check, validation, locking or replay checks. Digests are computed before timing.
Batches of the two writers alternate, so both see the table at the same size.

Target: the HTTP rate is at least half the baseline's (ratio baseline/HTTP under 2).

    python bench/append.py [--events 20000] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import time

import psycopg

import requests

from common import (EXAMPLES, bearer, bench_hub, create_archive, events, expect, finish, ratio,
                    target)

from admin_app.canonical import sha256_json

BATCH = 50
WINDOW = 1000  # events in the "first" and "last" windows of the rate curve


class Baseline:
    """The same rows written with plain psycopg, one transaction per batch, on one connection."""

    def __init__(self, db_url: str, archive_id: str):
        self.archive_id = archive_id
        self.conn = psycopg.connect(db_url)
        self.conn.execute("SET TIME ZONE 'UTC'")
        self.conn.commit()

    def rows(self, first: int) -> list[dict]:
        return [{"archive": self.archive_id, "sequence": e["sequence"], "event_id": e["event_id"],
                 "turn": e["client_turn_id"], "kind": e["kind"], "content": e.get("content"),
                 "status": e.get("status"), "run": None, "member": None, "thread": None,
                 "digest": sha256_json(e)} for e in events(first, BATCH)]

    def append(self, rows: list[dict]) -> float:
        """Seconds for one batch: its rows and the archive header's counters, one transaction."""
        messages = sum(r["kind"] in ("user_message", "assistant_message") for r in rows)
        turns = sum(r["kind"] == "turn_start" for r in rows)
        text_bytes = sum(len((r["content"] or "").encode("utf-8")) for r in rows)
        last = rows[-1]
        running = None if last["kind"] == "turn_end" else last["turn"]
        started = time.perf_counter()
        with self.conn.transaction():
            cur = self.conn.cursor()
            cur.executemany("""
                INSERT INTO bz_agent_conversation_events
                    (archive_id, sequence, event_id, client_turn_id, kind, content, status, run_id,
                     member_session_id, thread_id, body_sha256)
                VALUES (%(archive)s, %(sequence)s, %(event_id)s, %(turn)s, %(kind)s, %(content)s,
                        %(status)s, %(run)s, %(member)s, %(thread)s, %(digest)s)""", rows)
            cur.execute("""
                UPDATE bz_agent_conversation_archives
                   SET last_sequence = %s, message_count = message_count + %s,
                       turn_count = turn_count + %s, text_bytes = text_bytes + %s,
                       running_turn_id = %s, updated_at = now()
                 WHERE id = %s""", (last["sequence"], messages, turns, text_bytes, running,
                                     self.archive_id))
        return time.perf_counter() - started

    def close(self) -> None:
        self.conn.close()


def rates(times: list[float], total: int) -> dict:
    window = min(WINDOW, total)  # a short run has one window: the whole run
    per_window = window // BATCH
    return {"events_per_s": round(total / sum(times), 1),
            "first_1000_events_per_s": round(window / sum(times[:per_window]), 1),
            "last_1000_events_per_s": round(window / sum(times[-per_window:]), 1),
            "batch_median_ms": round(sorted(times)[len(times) // 2] * 1000, 2),
            "seconds": round(sum(times), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    total = args.events - args.events % BATCH

    with bench_hub(args.workers) as (db_url, operator, hub, folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        base_archive = create_archive(hub.url, session, "customers")
        http_archive = create_archive(hub.url, session, "customers")

        # Batches alternate between the two writers, so both see the table at the same size.
        base = Baseline(db_url, base_archive)
        url = f"{hub.url}/agent-api/v1/conversation-audits/{http_archive}/events"
        headers = {**bearer(session["access_token"]), "Content-Type": "application/json"}
        base_times, http_times = [], []
        with requests.Session() as http:
            for first in range(1, total + 1, BATCH):
                rows = base.rows(first)
                body = json.dumps({"events": events(first, BATCH)}).encode("utf-8")
                base_times.append(base.append(rows))
                started = time.perf_counter()
                response = http.post(url, data=body, headers=headers, timeout=60)
                http_times.append(time.perf_counter() - started)
                expect(response)
        base.close()

        with psycopg.connect(db_url) as conn:
            counts = dict(conn.execute("""SELECT archive_id::text, count(*) FROM bz_agent_conversation_events
                                          GROUP BY archive_id""").fetchall())
        if counts.get(http_archive) != total or counts.get(base_archive) != total:
            raise RuntimeError(f"expected {total} events in each archive, found {counts}")

    http, base = rates(http_times, total), rates(base_times, total)
    slowdown = ratio(base["events_per_s"], http["events_per_s"])
    print(f"append of {total} events in batches of {BATCH} (gunicorn, {args.workers} workers)")
    for label, figures in (("HTTP    ", http), ("baseline", base)):
        print(f"  {label}: {figures['events_per_s']:>8} events/s overall, first 1000: "
              f"{figures['first_1000_events_per_s']}, last 1000: {figures['last_1000_events_per_s']}, "
              f"batch median {figures['batch_median_ms']} ms, {figures['seconds']} s")
    print(f"  baseline/HTTP rate ratio: {slowdown}  ({target('ratio < 2', slowdown < 2)})")
    finish("append", {"events": total, "batch": BATCH, "workers": args.workers, "http": http,
                      "baseline": base, "baseline_over_http": slowdown, "target_met": slowdown < 2})


if __name__ == "__main__":
    main()
