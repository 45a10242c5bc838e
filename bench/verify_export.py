"""Verifying a transcript export of 20,000 events offline (issue 33: under 1 s).

An archive of 20,000 events is filled through the agent API in batches of 50, alternating with a
second archive's batches so that the log interleaves their leaves as concurrent writers do (the
export's proof then has a subtree per gap). It is exported through the console
(GET /console/conversations/{id}/export.json, signed in as an auditor), the public key is read
from GET /admin/api/evidence/keys, and `audit verify` is timed: the verifier in-process
(evidence.transcript_verify.verify, with and without parsing the file), and `bailing-admin audit
verify` as its own process with no database, end to end.

    python bench/verify_export.py [--events 20000] [--repetitions 5] [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from common import (EXAMPLES, PROJECT_ROOT, bearer, bench_hub, console_login, create_archive, events, expect,
                    finish, target)

from admin_app.evidence import transcript_verify
from admin_app.evidence.heads import unb64

BATCH = 50


def fill(base_url: str, token: str, archive: str, noise: str, total: int) -> float:
    """`total` events into `archive`, a batch into `noise` after each; seconds taken."""
    headers = {**bearer(token), "Content-Type": "application/json"}
    started = time.perf_counter()
    with requests.Session() as http:
        for first in range(1, total + 1, BATCH):
            body = json.dumps({"events": events(first, min(BATCH, total - first + 1))}).encode()
            for target_id in (archive, noise):
                expect(http.post(f"{base_url}/agent-api/v1/conversation-audits/{target_id}/events", data=body,
                                 headers=headers, timeout=60))
    return time.perf_counter() - started


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with bench_hub(args.workers) as (_db_url, operator, hub, _folder):
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        archive = create_archive(hub.url, session, "customers")
        noise = create_archive(hub.url, session, "customers")
        filled = fill(hub.url, session["access_token"], archive, noise, args.events)
        token = operator.admin("auditor-one", "auditor")
        console = console_login(hub.url, "auditor-one")
        started = time.perf_counter()
        response = expect(console.get(f"{hub.url}/console/conversations/{archive}/export.json", timeout=300))
        export_seconds = time.perf_counter() - started
        raw = response.content
        keys = expect(requests.get(f"{hub.url}/admin/api/evidence/keys", headers=bearer(token), timeout=30)).json()
        key = next(k["public_key"] for k in keys if k["retired_at"] is None)

    scratch = tempfile.TemporaryDirectory(prefix="bailing-verify-")
    path = Path(scratch.name) / "export.json"
    path.write_bytes(raw)
    public = [unb64(key, "key", 32)]
    parsed = json.loads(raw)
    verdict = transcript_verify.verify(parsed, public)
    if not verdict.ok:
        raise RuntimeError(f"the export does not verify: {verdict.report()}")
    evidence = parsed["evidence"]
    # Wall time, and CPU time (what the verifier costs on a machine of its own: on a shared one the
    # wall time includes waiting for a core).
    whole, only, only_cpu = [], [], []
    for _ in range(args.repetitions):
        started = time.perf_counter()
        transcript_verify.verify(json.loads(path.read_bytes()), public)
        whole.append(time.perf_counter() - started)
        started, cpu = time.perf_counter(), time.process_time()
        transcript_verify.verify(parsed, public)
        only.append(time.perf_counter() - started)
        only_cpu.append(time.process_time() - cpu)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    cli = []
    for _ in range(max(3, args.repetitions // 2)):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "admin_app.cli", "audit", "verify", str(path),
                               "--public-key", key], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
        cli.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"audit verify failed: {done.stdout} {done.stderr}")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import admin_app.cli"], env=env, cwd=PROJECT_ROOT,
                   check=True, timeout=120)
    startup = time.perf_counter() - started

    figures = {
        "events": args.events, "export_bytes": len(raw), "leaves": len(evidence["leaves"]),
        "proof_subtrees": len(evidence["proof"]), "tree_size": evidence["head"]["tree_size"],
        "fill_s": round(filled, 1), "export_ms": ms(export_seconds),
        "verify_ms": ms(statistics.median(only)), "verify_cpu_ms": ms(statistics.median(only_cpu)),
        "load_average": round(os.getloadavg()[0], 1), "parse_and_verify_ms": ms(statistics.median(whole)),
        "cli_process_ms": ms(statistics.median(cli)), "cli_import_ms": ms(startup),
        "repetitions": args.repetitions, "workers": args.workers,
    }
    met = statistics.median(whole) < 1
    figures["target_met"] = met
    print(f"transcript export of {args.events} events: {len(raw):,} bytes, {figures['leaves']} leaves stated, "
          f"{figures['proof_subtrees']} proof subtrees, tree of {figures['tree_size']} leaves")
    print(f"  filled in {figures['fill_s']} s (two archives, alternating batches of {BATCH})")
    print(f"  export through the console: {figures['export_ms']} ms")
    print(f"  verify in-process: {figures['verify_ms']} ms (CPU {figures['verify_cpu_ms']} ms, load average "
          f"{figures['load_average']}); with parsing the file: {figures['parse_and_verify_ms']} ms "
          f"({target('parse and verify < 1 s', met)})")
    print(f"  bailing-admin audit verify, its own process: {figures['cli_process_ms']} ms "
          f"(of which Python and the hub's imports: {figures['cli_import_ms']} ms)")
    scratch.cleanup()
    finish("verify_export", figures)


if __name__ == "__main__":
    main()
