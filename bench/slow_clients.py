"""Slow clients against gunicorn: can a few clients that send their request body slowly stall the
hub for everyone else?

Each slow client opens a connection, sends the headers of `POST /agent-auth/v1/token` with a
`Content-Length` of 1,000 bytes, and then one byte every `--drip` seconds, for the whole window
(connecting again whenever the server drops it). While they do, a prober asks `GET /health/live`
every 0.2 s (a fresh connection each time, 2 s client timeout) and records how long each answer
took. Each set-up is measured with no slow clients, 2, one fewer than a worker's threads, and more
than it has threads in all.

Set-ups: sync workers (gunicorn's default) with the usual 30 s `--timeout` and with 5 s, and
gthread workers with `--threads`. A sync worker reads a request (headers and body) itself, so
each slow client holds a whole worker until gunicorn's timeout kills it; a gthread worker holds
one thread per slow client.

    python bench/slow_clients.py [--workers 2] [--threads 8] [--seconds 12] [--drip 0.5]
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

import requests  # noqa: E402

from tests.gunicorn_hub import GunicornHub  # noqa: E402

SLOW_BODY_BYTES = 1000  # under every endpoint limit, so it is read, not refused by its length
PROBE_EVERY = 0.2
PROBE_TIMEOUT = 2.0


def slow_body_client(port: int, stop: threading.Event, drip: float) -> None:
    """One client sending its body a byte at a time until `stop`; when the server gives up on it
    (a worker killed by its timeout), it connects again at once, as a determined client would."""
    head = (f"POST /agent-auth/v1/token HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {SLOW_BODY_BYTES}\r\n\r\n{{").encode("ascii")
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(head)
                sent = 1
                while not stop.wait(drip) and sent < SLOW_BODY_BYTES - 1:
                    conn.sendall(b" ")
                    sent += 1
        except OSError:
            stop.wait(0.05)


@dataclass
class Window:
    probes: int
    answered: int
    failed: int  # no answer within the client's timeout, or the connection refused
    median_ms: float | None
    max_ms: float | None
    longest_stall_s: float  # longest time without any answer

    @property
    def ok(self) -> bool:
        return self.failed == 0


def probe(url: str, seconds: float) -> Window:
    """Ask /health/live every PROBE_EVERY seconds for `seconds`."""
    times, failed, probes = [], 0, 0
    last_answer = started = time.monotonic()
    longest = 0.0
    while time.monotonic() - started < seconds:
        probes += 1
        begin = time.monotonic()
        try:
            answered = requests.get(url + "/health/live", timeout=PROBE_TIMEOUT).status_code == 200
        except requests.RequestException:
            answered = False
        now = time.monotonic()
        if answered:
            times.append((now - begin) * 1000)
            last_answer = now
        else:
            failed += 1
        longest = max(longest, now - last_answer)
        time.sleep(max(0.0, PROBE_EVERY - (time.monotonic() - begin)))
    return Window(probes, len(times), failed, round(statistics.median(times), 1) if times else None,
                  round(max(times), 1) if times else None, round(longest, 1))


def measure(url: str, port: int, slow: int, seconds: float, drip: float) -> Window:
    """The prober's window while `slow` slow-body clients are connected."""
    stop = threading.Event()
    clients = [threading.Thread(target=slow_body_client, args=(port, stop, drip), daemon=True)
               for _ in range(slow)]
    for client in clients:
        client.start()
    time.sleep(0.5)  # let them connect and be taken by workers
    try:
        return probe(url, seconds)
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=10)


def gunicorn_args(worker_class: str, threads: int) -> str:
    """Options passed through GUNICORN_CMD_ARGS to the test harness's gunicorn."""
    return f"--worker-class {worker_class} --threads {threads}" if worker_class == "gthread" else ""


def run_setup(db_url: str, workers: int, worker_class: str, threads: int, timeout: int,
              slow_counts: list[int], seconds: float, drip: float) -> list[dict]:
    rows = []
    env = {"GUNICORN_CMD_ARGS": gunicorn_args(worker_class, threads)}
    with GunicornHub(db_url, workers=workers, env=env, timeout=timeout) as hub:
        for slow in slow_counts:
            window = measure(hub.url, hub.port, slow, seconds, drip)
            hub.wait_for_workers()  # a killed worker is replaced before the next window
            rows.append({"worker_class": worker_class, "workers": workers,
                         "threads": threads if worker_class == "gthread" else 1, "timeout_s": timeout,
                         "slow_clients": slow, **asdict(window)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=12.0, help="probing window per case")
    parser.add_argument("--drip", type=float, default=0.5, help="seconds between the slow bodies' bytes")
    args = parser.parse_args()

    from common import fresh_database, server_label  # the benchmarks' shared setup

    setups = [("sync", 1, 30), ("sync", 1, 5), ("gthread", args.threads, 30)]
    rows: list[dict] = []
    with fresh_database() as db_url:
        for worker_class, threads, timeout in setups:
            # fewer slow clients than one worker's threads, and more than all threads together
            counts = [0, 2] + ([threads - 1] if threads > 3 else []) + [args.workers * threads + 2]
            rows += run_setup(db_url, args.workers, worker_class, threads, timeout, counts,
                              args.seconds, args.drip)
    print(f"slow-body clients against gunicorn ({server_label()} PostgreSQL), "
          f"{args.seconds:g} s windows, probe timeout {PROBE_TIMEOUT:g} s")
    print(f"{'set-up':<28}{'slow':>5}{'probes':>8}{'failed':>8}{'median ms':>11}{'max ms':>9}{'stall s':>9}")
    for r in rows:
        setup = f"{r['worker_class']} {r['workers']}x{r['threads']} timeout {r['timeout_s']}s"
        print(f"{setup:<28}{r['slow_clients']:>5}{r['probes']:>8}{r['failed']:>8}"
              f"{r['median_ms'] if r['median_ms'] is not None else '-':>11}"
              f"{r['max_ms'] if r['max_ms'] is not None else '-':>9}{r['longest_stall_s']:>9}")
    print(json.dumps({"benchmark": "slow_clients", "rows": rows}))


if __name__ == "__main__":
    main()
