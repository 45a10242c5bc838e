"""Conversation Audit event append: the real HTTP stack against a plain-psycopg baseline.

HTTP: batches of 50 events into one archive up to its 20,000-event limit, POSTed one after the
other to gunicorn on loopback with the writer's bearer. Baseline: the same rows inserted into a
second archive of the same database with plain psycopg, one transaction per batch (the events'
INSERTs and the archive header's counters), over one connection: none of the hub's
HTTP, bearer check, validation, locking or replay checks. Digests are computed before timing.
Batches of the two writers alternate, so both see the table at the same size.

After an unmeasured warm-up round of 2,000 events, the comparison runs in several rounds, each
into a new pair of archives; every round's figures are printed, and the target is judged on the
median round, since a shared machine's speed drifts by more than the margin being measured.

Target: the HTTP rate is at least half the baseline's (ratio baseline/HTTP under 2).

    python bench/append.py [--events 20000] [--workers 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import psycopg

from common import (EXAMPLES, LeanClient, bearer, bench_hub, create_archive, events, finish,
                    ratio, target)

from admin_app import limits
from admin_app.canonical import sha256_json

BATCH = limits.AUDIT_BATCH_MAX_EVENTS
WINDOW = 1000  # events in the "first" and "last" windows of the rate curve
WARMUP = 2000  # events of the unmeasured first round


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


def one_round(db_url: str, hub_url: str, session: dict, total: int) -> tuple[dict, dict]:
    """One archive filled through HTTP beside one filled by the baseline: (HTTP, baseline)."""
    base_archive = create_archive(hub_url, session, "customers")
    http_archive = create_archive(hub_url, session, "customers")

    # Batches alternate between the two writers, so both see the table at the same size.
    base = Baseline(db_url, base_archive)
    path = f"/agent-api/v1/conversation-audits/{http_archive}/events"
    headers = {**bearer(session["access_token"]), "Content-Type": "application/json"}
    base_times, http_times = [], []
    http = LeanClient(hub_url)
    for first in range(1, total + 1, BATCH):
        rows = base.rows(first)
        body = json.dumps({"events": events(first, BATCH)}).encode("utf-8")
        base_times.append(base.append(rows))
        started = time.perf_counter()
        status, answer = http.request("POST", path, body, headers)
        http_times.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"POST {path} -> {status}: {answer[:1000]!r}")
    http.close()
    base.close()

    with psycopg.connect(db_url) as conn:
        counts = dict(conn.execute("""SELECT archive_id::text, count(*) FROM bz_agent_conversation_events
                                      WHERE archive_id = ANY(%s::uuid[]) GROUP BY archive_id""",
                                   ([http_archive, base_archive],)).fetchall())
    if counts.get(http_archive) != total or counts.get(base_archive) != total:
        raise RuntimeError(f"expected {total} events in each archive, found {counts}")
    return rates(http_times, total), rates(base_times, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total = args.events - args.events % BATCH

    rounds = []
    with bench_hub(args.workers) as (db_url, operator, hub, _folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        # A short unmeasured round first: every worker connects, prepares its statements and
        # loads what it loads lazily, as a hub in service has long done.
        one_round(db_url, hub.url, session, min(total, WARMUP))
        for _ in range(args.rounds):
            rounds.append(one_round(db_url, hub.url, session, total))

    print(f"append of {total} events in batches of {BATCH} (gunicorn, {args.workers} workers), "
          f"{args.rounds} rounds, each into a new pair of archives")
    ratios = []
    for number, (http, base) in enumerate(rounds, 1):
        ratios.append(ratio(base["events_per_s"], http["events_per_s"]))
        print(f"round {number}: baseline/HTTP rate ratio {ratios[-1]}")
        for label, figures in (("HTTP    ", http), ("baseline", base)):
            print(f"  {label}: {figures['events_per_s']:>8} events/s overall, first 1000: "
                  f"{figures['first_1000_events_per_s']}, last 1000: {figures['last_1000_events_per_s']}, "
                  f"batch median {figures['batch_median_ms']} ms, {figures['seconds']} s")
    middle = statistics.median(ratios)
    print(f"baseline/HTTP rate ratio, median of {len(ratios)} rounds: {middle}  "
          f"({target('ratio < 2', middle < 2)})")
    finish("append", {"events": total, "batch": BATCH, "workers": args.workers,
                      "rounds": [{"http": h, "baseline": b, "baseline_over_http": r}
                                 for (h, b), r in zip(rounds, ratios)],
                      "baseline_over_http": middle, "target_met": middle < 2})


if __name__ == "__main__":
    main()
