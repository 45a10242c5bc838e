"""Shared setup of the benchmarks: a fresh migrated database, the hub served by real gunicorn,
data made through the hub's own CLI and HTTP APIs, and the figures printed at the end.

The database is created next to BAILING_DATABASE_URL's (on the same server), or on the embedded
PostgreSQL in var/bench when that variable is not set; it is dropped when the benchmark ends.
"""
from __future__ import annotations

import http.client
import json
import math
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

import psycopg  # noqa: E402
import requests  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from admin_app import create_app, embedded_pg, migrations  # noqa: E402
from tests.gunicorn_hub import GunicornHub  # noqa: E402

SQL_DIR = PROJECT_ROOT / "sql"
EXAMPLES = PROJECT_ROOT / "examples"
PASSWORD = "bench password, long enough"
DEMO_SECRETS = {"DEMO_CRM_SECRET": "demo-crm-signing-secret", "DEMO_ERP_SECRET": "demo-erp-signing-secret"}


# ---------------------------------------------------------------- database

def _with_database(url: str, name: str) -> str:
    return make_url(url).set(drivername="postgresql", database=name).render_as_string(hide_password=False)


def admin_url() -> str:
    """A URL on the server the benchmark uses, for creating and dropping its database."""
    external = os.environ.get("BAILING_DATABASE_URL")
    if external:
        return _with_database(external, make_url(external).database or "postgres")
    return _with_database(embedded_pg.ensure_running(PROJECT_ROOT / "var" / "bench"), "postgres")


def server_label() -> str:
    return "external" if os.environ.get("BAILING_DATABASE_URL") else "embedded"


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new database with every migration applied; dropped (even if other sessions hold it) at
    the end."""
    admin = admin_url()
    name = f"bz_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = _with_database(admin, name)
    try:
        migrations.upgrade(url, SQL_DIR)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------- the operator CLI, in-process

class Operator:
    """bailing-admin commands run in-process against the benchmark database (JSON out)."""

    def __init__(self, db_url: str, data_dir: Path):
        for key, value in DEMO_SECRETS.items():
            os.environ.setdefault(key, value)
        self.app = create_app({"database_url": db_url, "data_dir": data_dir})
        self.runner = self.app.test_cli_runner()

    def __call__(self, *args: str, input: str | None = None):
        from admin_app.cli import main

        result = self.runner.invoke(main, list(args), input=input)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        if result.exit_code != 0:
            raise RuntimeError(f"bailing-admin {' '.join(args[:2])} failed: {result.stderr[:2000]}")
        return json.loads(result.stdout)

    def apply(self, doc: dict, folder: Path) -> dict:
        path = folder / f"config-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(doc), "utf-8")
        return self("config", "apply", str(path))

    def session(self, client: str, routes: str, *, subject: str | None = "tenant-7:user-42") -> dict:
        args = ["sessions", "issue", "--client", client, "--routes", routes,
                "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}',
                "--access-ttl", str(24 * 3600)]  # outlives any benchmark run
        if subject:
            args += ["--on-behalf-of", subject]
        return self(*args)

    def admin(self, username: str, role: str) -> str:
        """A console user with this role; returns its personal API token."""
        self("admins", "create", username, "--role", role, "--password-stdin", input=PASSWORD + "\n")
        return self("admins", "token", username)["token"]

    def close(self) -> None:
        self.app.extensions["bailing"].db.dispose()


@contextmanager
def bench_hub(workers: int = 2) -> Iterator[tuple[str, Operator, GunicornHub, Path]]:
    """(db_url, operator, gunicorn hub, scratch folder): everything a benchmark needs, torn down
    in reverse order at the end."""
    with tempfile.TemporaryDirectory(prefix="bailing-bench-") as scratch, fresh_database() as db_url:
        folder = Path(scratch)
        operator = Operator(db_url, folder / "var")
        try:
            with GunicornHub(db_url, workers=workers, data_dir=folder / "var", env=DEMO_SECRETS) as hub:
                yield db_url, operator, hub, folder
        finally:
            operator.close()


# ---------------------------------------------------------------- the demo business system

class DemoBusiness:
    """The demo CRM/ERP on a loopback port (the target of the example providers)."""

    def __init__(self):
        from werkzeug.serving import make_server

        from admin_app.demo.business import create_business_app

        secrets = {"crm": DEMO_SECRETS["DEMO_CRM_SECRET"], "erp": DEMO_SECRETS["DEMO_ERP_SECRET"]}
        self.server = make_server("127.0.0.1", 0, create_business_app(secrets, control_token="bench"),
                                  threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- HTTP helpers

def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


class LeanClient:
    """The thinnest HTTP/1.1 client the standard library offers, for timing the server rather
    than the client: `requests` alone costs about 0.5 ms per call on this path. The connection is
    kept while the server keeps it (gunicorn's sync workers close it after every response)."""

    def __init__(self, base_url: str, timeout: float = 60):
        parts = urlsplit(base_url)
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            response = self.conn.getresponse()
            data = response.read()
        except BaseException:
            self.close()
            raise
        if response.will_close:
            self.close()
        return response.status, data

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def expect(response: requests.Response, status: int = 200) -> requests.Response:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> {response.status_code}: "
                           f"{response.text[:1000]}")
    return response


def console_login(base_url: str, username: str) -> requests.Session:
    """A browser-like session signed in through the console's login form (CSRF included)."""
    http = requests.Session()
    page = expect(http.get(base_url + "/console/login", timeout=30))
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    response = http.post(base_url + "/console/login", timeout=30, allow_redirects=False,
                         data={"csrf_token": token, "username": username, "password": PASSWORD, "next": ""})
    expect(response, 303)
    return http


# ---------------------------------------------------------------- conversation audit data

def create_archive(base_url: str, session: dict, route: str) -> str:
    body = {"client_archive_id": str(uuid.uuid4()), "client_conversation_id": f"conv-{uuid.uuid4().hex[:8]}",
            "route": route, "member_session_ids": [session["session_id"]]}
    response = expect(requests.post(base_url + "/agent-api/v1/conversation-audits", json=body,
                                    headers=bearer(session["access_token"]), timeout=30), 200)
    return response.json()["conversation"]["conversation_id"]


def message_text(sequence: int) -> str:
    """About 300 bytes of ordinary prose, different for every event."""
    base = (f"Message {sequence}: the customer asked about order {100000 + sequence} and the credit "
            "limit of account C-100234; the assistant checked the open invoices, the delivery dates "
            "and the last three payments before answering with a short summary of what it found. ")
    return base[:300]


def events(first: int, count: int) -> list[dict]:
    """Events first..first+count-1 of a transcript made of four-event turns (start, user message,
    assistant message, end), so turns run across batch boundaries as they do in practice."""
    out = []
    for sequence in range(first, first + count):
        turn, step = divmod(sequence - 1, 4)
        base = {"event_id": f"ev-{sequence}", "sequence": sequence, "client_turn_id": f"turn-{turn + 1}"}
        if step == 0:
            out.append({**base, "kind": "turn_start"})
        elif step == 1:
            out.append({**base, "kind": "user_message", "content": message_text(sequence)})
        elif step == 2:
            out.append({**base, "kind": "assistant_message", "content": message_text(sequence)})
        else:
            out.append({**base, "kind": "turn_end", "status": "completed"})
    return out


def append_batches(base_url: str, token: str, archive_id: str, total: int, batch: int = 50,
                   on_batch: Callable[[int, float], None] | None = None) -> None:
    """Append `total` events in batches through the agent API; on_batch(last_sequence, seconds)."""
    url = f"{base_url}/agent-api/v1/conversation-audits/{archive_id}/events"
    headers = {**bearer(token), "Content-Type": "application/json"}
    bodies = [json.dumps({"events": events(first, batch)}).encode("utf-8")
              for first in range(1, total + 1, batch)]
    with requests.Session() as http:
        for i, body in enumerate(bodies):
            started = time.perf_counter()
            response = http.post(url, data=body, headers=headers, timeout=60)
            elapsed = time.perf_counter() - started
            expect(response)
            if on_batch:
                on_batch((i + 1) * batch, elapsed)


# ---------------------------------------------------------------- figures

def sample(call: Callable[[], requests.Response], repetitions: int, warmup: int = 0) -> tuple[list[float], int]:
    """Milliseconds of each call and the size of the last response; every response must be a 200."""
    for _ in range(warmup):
        expect(call())
    times, size = [], 0
    for _ in range(repetitions):
        started = time.perf_counter()
        response = call()
        times.append((time.perf_counter() - started) * 1000)
        expect(response)
        size = len(response.content)
    return times, size


def summary(times: list[float], size: int) -> dict:
    return {"median_ms": round(statistics.median(times), 2), "p95_ms": round(percentile(times, 95), 2),
            "bytes": size, "n": len(times)}


def interleaved(cases: dict[str, Callable[[], requests.Response]], repetitions: int,
                rounds: int = 5, warmup: int = 3) -> dict[str, dict]:
    """Each case timed in several alternating rounds, so drift on a shared machine hits every
    case alike; returns a summary per case."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    sizes: dict[str, int] = {}
    for call in cases.values():
        sample(call, 0, warmup)
    for _ in range(rounds):
        for name, call in cases.items():
            part, sizes[name] = sample(call, max(1, repetitions // rounds))
            times[name].extend(part)
    return {name: summary(times[name], sizes[name]) for name in cases}


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("inf")


def target(label: str, met: bool) -> str:
    return f"target {label}: {'MET' if met else 'NOT MET'}"


def finish(name: str, figures: dict) -> None:
    """The final line: every figure as one JSON object (for comparing runs)."""
    print(json.dumps({"benchmark": name, "server": server_label(), **figures}, sort_keys=False))
