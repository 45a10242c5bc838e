"""A week of the demo's traffic between two signed heads, at the demo's volume, and the consistency
proof between them: tree sizes, proof length and the time to make and check it.

Each simulated day runs tests/test_evidence_demo_week.py's day (the demo's credit-review story
through the real APIs: a turn with a read call, a raise approved and one denied, the transcript
archived, read in the console and through the admin API, a configuration change applied) and,
as `bailing-admin demo` seeds it, a "long shift" archive of `--events-per-day` events (20,000, the
demo's) appended in batches of 50. Simulated time as in the test: the leaves' and events'
created_at (which no leaf commits to) are moved back to their day. The hub is served in-process
on loopback (werkzeug, threaded) over a fresh, migrated database, with the demo business system.

    python bench/demo_week.py [--days 7] [--events-per-day 20000]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path

import psycopg
from common import finish, fresh_database

from admin_app import create_app
from tests.browser import Hub
from tests.conftest import Business, LiveServer, cli_runner, governed_config
from tests.helpers import admin_token, apply_config, assert_ok, bearer
from tests.test_evidence_demo_week import API, back_to_day, console_reader, one_day


def long_shift(hub: Hub, day: int, events: int) -> None:
    archive = hub.archive(f"long-shift-day-{day}")
    rows = []
    for n in range(events // 4):
        turn = f"shift-{n + 1}"
        rows += [{"kind": "turn_start"},
                 {"kind": "user_message", "content": f"Check customer call #{n + 1}: any open invoices?"},
                 {"kind": "assistant_message", "content": f"Call #{n + 1}: no open invoices; in good standing."},
                 {"kind": "turn_end", "status": "completed"}]
        for offset, event in enumerate(rows[-4:]):
            event.update(event_id=f"e{4 * n + offset + 1}", sequence=4 * n + offset + 1, client_turn_id=turn)
    hub.append(archive, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--events-per-day", type=int, default=20000)
    args = parser.parse_args()
    figures: dict = {"days": args.days, "events_per_day": args.events_per_day}
    for name in ("werkzeug", "bailing.request"):  # a line per request otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    business = Business()
    with tempfile.TemporaryDirectory(prefix="bailing-week-") as scratch, fresh_database() as db_url:
        folder = Path(scratch)
        app = create_app({"database_url": db_url, "data_dir": folder / "var"})
        server = LiveServer(app)
        cli = cli_runner(app)

        def sql(query: str, params=None):
            with psycopg.connect(db_url, autocommit=True) as conn:
                cur = conn.execute(query, params)
                return cur.fetchall() if cur.description else []

        try:
            os.environ.setdefault("DEMO_CRM_SECRET", "demo-crm-signing-secret")
            os.environ.setdefault("DEMO_ERP_SECRET", "demo-erp-signing-secret")
            apply_config(cli, folder, governed_config(business.url))
            code, session, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                                     "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                                     "--on-behalf-of", "tenant-7:user-42")
            assert code == 0, err
            hub = Hub(server, cli, sql, session)
            admin = bearer(admin_token(cli, "week-admin", "admin"))
            approver = bearer(admin_token(cli, "week-approver", "approver"))
            reader = console_reader(server, cli)
            before = assert_ok(server.post(f"{API}/heads", headers=admin))
            started = time.perf_counter()
            for day in range(args.days):
                start = sql("SELECT coalesce(max(idx) + 1, 0) FROM bz_evidence_leaves")[0][0]
                one_day(day, hub, server, business, lambda doc: apply_config(cli, folder, doc),
                        admin, approver, reader)
                long_shift(hub, day, args.events_per_day)
                back_to_day(sql, start, args.days - 1 - day)
                size = sql("SELECT count(*) FROM bz_evidence_leaves")[0][0]
                print(f"day {day + 1}: log of {size:,} leaves", flush=True)
            figures["traffic_seconds"] = round(time.perf_counter() - started, 1)
            after = assert_ok(server.post(f"{API}/heads", headers=admin))
            started = time.perf_counter()
            proof = assert_ok(server.get(f"{API}/proof/consistency", headers=admin,
                                         params={"first": before["tree_size"], "second": after["tree_size"]}))
            figures["proof_ms"] = round((time.perf_counter() - started) * 1000, 1)
            key = next(k for k in assert_ok(server.get(f"{API}/keys", headers=admin)) if not k["retired_at"])
            bundle = folder / "week.json"
            bundle.write_text(json.dumps(proof))
            started = time.perf_counter()
            code, out, _ = cli("evidence", "verify-proof", str(bundle), "--public-key", key["public_key"])
            figures["verify_proof_ms"] = round((time.perf_counter() - started) * 1000, 1)
            started = time.perf_counter()
            check_code, check, _ = cli("evidence", "check")
            figures["evidence_check_seconds"] = round(time.perf_counter() - started, 1)
            kinds = dict(sql("SELECT kind, count(*) FROM bz_evidence_leaves WHERE idx >= %s GROUP BY kind",
                             (before["tree_size"],)))
            figures.update(first_tree_size=before["tree_size"], second_tree_size=after["tree_size"],
                           week_leaves=after["tree_size"] - before["tree_size"], week_leaves_by_kind=kinds,
                           proof_hashes=len(proof["proof"]), proof_bundle_bytes=len(bundle.read_bytes()),
                           verify_proof_ok=code == 0 and out.get("ok") is True,
                           evidence_check_ok=check_code == 0 and check.get("ok") is True)
        finally:
            server.stop()
            business.live.stop()
            app.extensions["bailing"].db.dispose()
    print(f"heads: tree size {figures['first_tree_size']:,} before, {figures['second_tree_size']:,} after "
          f"{args.days} days ({figures['week_leaves']:,} leaves: {figures['week_leaves_by_kind']}), "
          f"traffic {figures['traffic_seconds']} s")
    print(f"consistency proof: {figures['proof_hashes']} hashes, bundle {figures['proof_bundle_bytes']} bytes, "
          f"served in {figures['proof_ms']} ms; verify-proof offline {figures['verify_proof_ms']} ms "
          f"(ok={figures['verify_proof_ok']}); evidence check {figures['evidence_check_seconds']} s "
          f"(ok={figures['evidence_check_ok']})")
    finish("demo_week", figures)


if __name__ == "__main__":
    main()
