"""The hub served by gunicorn with several worker processes on a loopback port, as in
production: for the load and crash tests and the benchmarks in bench/."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GunicornHub:
    """`with GunicornHub(db_url, workers=3) as hub:` starts gunicorn on 127.0.0.1 and waits until
    every worker answers. `env` adds variables (for instance a provider's signing secret);
    `threads` serves each worker's requests on that many threads (the gthread worker); `args` are
    added to gunicorn's command line; `secret_key` None leaves BAILING_SECRET_KEY unset (the key
    is then the data folder's own). `log()` is what gunicorn wrote on stderr, also after exit."""

    def __init__(self, db_url: str | None, *, workers: int = 3, data_dir: Path | None = None,
                 env: dict[str, str] | None = None, timeout: int = 60, threads: int | None = None,
                 args: tuple[str, ...] = (), secret_key: str | None = "gunicorn-hub-test-secret"):
        self.db_url = db_url
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.extra_env = env or {}
        self.timeout = timeout
        self.threads = threads
        self.args = args
        self.secret_key = secret_key
        self.process: subprocess.Popen | None = None
        self._final_log: str | None = None

    def __enter__(self) -> GunicornHub:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("BAILING_") and k != "PROMETHEUS_MULTIPROC_DIR"}
        env.update(self.extra_env)
        if self.db_url is not None:  # None: the embedded server of `data_dir`
            env["BAILING_DATABASE_URL"] = self.db_url
        if self.secret_key is not None:
            env["BAILING_SECRET_KEY"] = self.secret_key
        if self.data_dir:
            env["BAILING_DATA_DIR"] = str(self.data_dir)
        threaded = ["--worker-class", "gthread", "--threads", str(self.threads)] if self.threads else []
        # stderr carries a log line per request: into a file, since a pipe nobody reads fills up
        # and then blocks every worker on its next line.
        fd, name = tempfile.mkstemp(prefix="gunicorn-", suffix=".stderr")
        self.stderr_path = Path(name)
        self.stderr = os.fdopen(fd, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--workers", str(self.workers), *threaded,
             "--bind", f"127.0.0.1:{self.port}", "--timeout", str(self.timeout),
             "--graceful-timeout", "5", "--log-level", "warning", *self.args, "admin_app:create_app()"],
            env=env, stdout=subprocess.DEVNULL, stderr=self.stderr, text=True,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited: {self.log()[-4000:]}")
            try:
                if requests.get(self.url + "/health/live", timeout=2).status_code == 200 \
                        and len(self.worker_pids()) == self.workers:
                    return
            except requests.RequestException:  # not listening yet, or still importing
                pass
            time.sleep(0.1)
        self.__exit__(None, None, None)
        raise RuntimeError("gunicorn did not become ready within 60 s")

    def log(self) -> str:
        if self._final_log is not None:
            return self._final_log
        return self.stderr_path.read_text()

    def worker_pids(self) -> list[int]:
        """The master's live child processes (the workers)."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(pid) for pid in children.read_text().split()]
        except FileNotFoundError:
            return []

    def wait_for_workers(self, count: int | None = None, timeout: float = 30) -> list[int]:
        """Wait until the master has `count` (default: all) workers again, e.g. after a kill."""
        wanted = self.workers if count is None else count
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.worker_pids()
            if len(pids) == wanted:
                return pids
            time.sleep(0.05)
        raise RuntimeError(f"gunicorn has {len(self.worker_pids())} workers, wanted {wanted}")

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process and self._final_log is None:
            self.stderr.close()
            self._final_log = self.stderr_path.read_text()
            self.stderr_path.unlink()
