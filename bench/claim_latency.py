"""Claim latency with waiting executors: how long after `POST /run` answers 202 the job reaches an
executor that is already in its long-poll (CLIENT_API_AND_EXECUTOR.md §B.4, §E.2).

Two OpenClaw-like executors (tests/peers/openclaw_executor.py, each its own process, a scripted
brain that makes no tool call) long-poll `POST /executor/claim` with `wait_ms` 30,000 against the
hub under gunicorn (gthread workers: a waiting claim holds a thread, not a process). For each of
`--jobs` jobs, one at a time: wait until both executors are in their long-poll, submit the job
with a Client Token (`http.client`), note when the 202 arrived, and read from the executors' lines
when the claim reply carrying that job arrived (both clocks are this machine's wall clock). Then
the executor reports and is back in its long-poll before the next job. Every job must be claimed
exactly once and reported; the run fails otherwise.

Figures: latency from the 202 to the claim reply (median, p95, max; negative when the claim reply
beat the 202 back), from sending /run to the claim reply, the /run round trip, and the share of
jobs each executor took. Target: median (202 to claim reply) under 50 ms.

    python bench/claim_latency.py [--jobs 200] [--workers 2] [--threads 8]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import (DEMO_SECRETS, DemoBusiness, LeanClient, Operator, bearer, finish, fresh_database,
                    percentile, target)
from tests.gunicorn_hub import GunicornHub
from tests.jobs_world import TARGET, jobs_config
from tests.peers.launch import Peer, Peers

WAIT_MS = 30_000
TARGET_MEDIAN_MS = 50.0


def in_long_poll(executor: Peer, since: float) -> bool:
    """Its last claim-loop line is `claiming`, written at least `since` seconds ago."""
    lines = [line for line in executor.events() if line.get("event") in ("claiming", "claim", "claimed", "report",
                                                                         "finished", "stopped")]
    return bool(lines) and lines[-1]["event"] == "claiming" and time.time() - lines[-1]["t"] >= since


def wait_until(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def stats(values: list[float]) -> dict:
    return {"median_ms": round(statistics.median(values), 2), "p95_ms": round(percentile(values, 95), 2),
            "min_ms": round(min(values), 2), "max_ms": round(max(values), 2), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8, help="gthread threads per worker")
    parser.add_argument("--settle-ms", type=float, default=20.0,
                        help="how long both executors must have been in their long-poll before a submit")
    args = parser.parse_args()

    business = DemoBusiness()
    with tempfile.TemporaryDirectory(prefix="bailing-bench-") as scratch, fresh_database() as db_url:
        folder = Path(scratch)
        operator = Operator(db_url, folder / "var")
        peers = Peers(folder)
        try:
            doc = jobs_config(business.url)
            doc["client_apps"][0]["rate_limit_per_min"] = 0
            operator.apply(doc, folder)
            client_token = operator("clients", "token", "ops-app")["client_token"]
            executor_token = operator("executors", "token", "issue", "bench-runner", "--targets", TARGET)["token"]
            with GunicornHub(db_url, workers=args.workers, threads=args.threads, data_dir=folder / "var",
                             env=DEMO_SECRETS) as hub:
                executors = [peers("openclaw_executor", name=f"executor-{n}", env={
                    "BAILING_HUB_URL": hub.url, "BAILING_EXECUTOR_TOKEN": executor_token, "BAILING_TARGET": TARGET,
                    "BAILING_EXECUTOR_ID": f"bench-{n}", "BAILING_WAIT_MS": str(WAIT_MS),
                    "BAILING_HEARTBEAT_MS": "30000", "BAILING_PEER_PLAN": json.dumps({"text": "claimed"})})
                    for n in (1, 2)]
                client = LeanClient(hub.url)
                headers = {**bearer(client_token), "Content-Type": "application/json"}
                from_202, from_send, run_rtt = [], [], []
                taken = {e.name: 0 for e in executors}
                for i in range(args.jobs):
                    for executor in executors:
                        wait_until(lambda e=executor: in_long_poll(e, args.settle_ms / 1000),
                                   f"{executor.name} in its long-poll")
                    body = json.dumps({"request_id": f"bench-{i}-{time.time_ns()}", "route": "desk",
                                       "input": f"bench job {i}"}).encode()
                    sent = time.time()
                    status, reply = client.request("POST", "/run", body, headers)
                    answered = time.time()
                    if status != 202:
                        raise RuntimeError(f"POST /run -> {status}: {reply[:500]!r}")
                    job_id = json.loads(reply)["job_id"]

                    def claimed(job_id=job_id):
                        return [(e, line) for e in executors for line in e.events()
                                if line.get("event") == "claimed" and line.get("job_id") == job_id]

                    wait_until(claimed, f"the claim of job {i}")
                    executor, line = claimed()[0]
                    wait_until(lambda e=executor, j=job_id: any(x.get("event") == "finished" and x.get("job_id") == j
                                                                  for x in e.events()), f"the report of job {i}")
                    taken[executor.name] += 1
                    from_202.append((line["replied_at"] - answered) * 1000)
                    from_send.append((line["replied_at"] - sent) * 1000)
                    run_rtt.append((answered - sent) * 1000)
                client.close()
                peers.stop_all(grace=1)  # in a 30 s long-poll: not worth waiting for
                all_claims = [x["job_id"] for e in executors for x in e.events() if x.get("event") == "claimed"]
                reports = [x for e in executors for x in e.events() if x.get("event") == "finished"]
        finally:
            peers.stop_all(grace=1)
            operator.close()
            business.stop()

    once = len(all_claims) == len(set(all_claims)) == args.jobs
    reported = len(reports) == args.jobs and all(r["reported"] for r in reports)
    figures = {"jobs": args.jobs, "workers": args.workers, "threads": args.threads, "wait_ms": WAIT_MS,
               "claim_after_202": stats(from_202), "claim_after_send": stats(from_send),
               "run_round_trip": stats(run_rtt),
               "by_executor": taken, "claimed_exactly_once": once, "all_reported": reported}
    print(f"{args.jobs} jobs, two executors waiting, gunicorn {args.workers} workers x {args.threads} threads")
    labels = {"claim_after_202": "claim reply after the 202", "claim_after_send": "claim reply after sending /run",
              "run_round_trip": "/run round trip"}
    for key, label in labels.items():
        f = figures[key]
        print(f"  {label:32} median {f['median_ms']:7.2f} ms  p95 {f['p95_ms']:7.2f} ms  "
              f"min {f['min_ms']:7.2f}  max {f['max_ms']:7.2f}")
    print(f"  jobs per executor: {taken}; each claimed exactly once: {once}; all reported: {reported}")
    print(target(f"median claim latency < {TARGET_MEDIAN_MS:.0f} ms",
                 figures["claim_after_202"]["median_ms"] < TARGET_MEDIAN_MS))
    finish("claim_latency", figures)
    return 0 if once and reported else 1


if __name__ == "__main__":
    sys.exit(main())
