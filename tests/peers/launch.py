"""How a test or a benchmark runs a peer: as a separate process (`python -m tests.peers.<name>`)
whose JSON lines go to a file, read back while it runs. Not a peer itself."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Peer:
    """One peer process. `events()` are its stdout lines so far (complete lines only);
    `wait_for(match)` waits for a line `match` accepts; `finish()` waits for the exit."""

    def __init__(self, module: str, args: list[str], env: dict[str, str], folder: Path, name: str):
        self.name = name
        self.out_path = folder / f"{name}.out"
        self.err_path = folder / f"{name}.err"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("BAILING_", "BAILINGHUB_"))}
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen([sys.executable, "-m", f"tests.peers.{module}", *args],
                                            cwd=PROJECT_ROOT, env={**base, **env}, stdout=out, stderr=err)

    def events(self) -> list[dict[str, Any]]:
        text = self.out_path.read_text("utf-8")
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def stderr(self) -> str:
        return self.err_path.read_text("utf-8", "replace")

    def wait_for(self, match: Callable[[dict[str, Any]], bool], timeout: float = 20,
                 count: int = 1) -> list[dict[str, Any]]:
        """The first `count` lines `match` accepts, once there are that many; fails after `timeout`
        seconds or when the process ends without them."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.events() if match(e)]
            if len(found) >= count:
                return found[:count]
            exited = self.process.poll()
            if exited is not None:
                found = [e for e in self.events() if match(e)]
                if len(found) >= count:
                    return found[:count]
                raise AssertionError(f"{self.name} exited {exited} before the line awaited; "
                                     f"lines: {self.events()[-10:]}; stderr: {self.stderr()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no such line within {timeout} s; "
                                     f"lines: {self.events()[-10:]}; stderr: {self.stderr()[-2000:]}")
            time.sleep(0.02)

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.name} did not exit within {timeout} s; lines: {self.events()[-10:]}; "
                                 f"stderr: {self.stderr()[-2000:]}") from None

    def summary(self, timeout: float = 60) -> tuple[int, dict[str, Any]]:
        """A one-shot peer's exit code and its last line (the JSON summary)."""
        code = self.finish(timeout)
        lines = self.events()
        assert lines, f"{self.name} printed nothing; stderr: {self.stderr()[-2000:]}"
        return code, lines[-1]

    def send(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def stop(self, grace: float = 10) -> None:
        """End it if it still runs (SIGTERM, then SIGKILL after `grace` seconds)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Peers:
    """Starts peers in `folder` and stops every one still running at the end."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: list[Peer] = []

    def __call__(self, module: str, *args: str, env: dict[str, str] | None = None, name: str | None = None) -> Peer:
        peer = Peer(module, list(args), env or {}, self.folder, name or f"{module}-{len(self.started)}")
        self.started.append(peer)
        return peer

    def stop_all(self, grace: float = 10) -> None:
        for peer in self.started:
            if peer.process.poll() is None:
                peer.process.terminate()
        for peer in self.started:
            peer.stop(grace)
