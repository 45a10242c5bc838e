"""An OpenClaw-like executor (CLIENT_API_AND_EXECUTOR.md §E.1, §E.2, §B, §C), as a process of its
own: Core's OpenClaw runner with a scripted brain in place of `openclaw agent`.

    BAILING_HUB_URL=http://127.0.0.1:8000 BAILING_EXECUTOR_TOKEN=<token> BAILING_TARGET=desk-worker \\
    BAILING_PEER_PLAN='{"steps": [{"tool": "customer_get", "arguments": {"customer_id": "C-100234"}}]}' \\
        python -m tests.peers.openclaw_executor

Configuration, as the runner reads it (a bad value exits 2 before any request):
  BAILING_HUB_URL        required; https, or http only to localhost/127.0.0.1/::1; the origin only
                         (no path, query, fragment or userinfo)
  BAILING_EXECUTOR_TOKEN required; sent as `Authorization: Bearer`
  BAILING_TARGET         required; comma-separated targets, each 1-160 characters, no control characters
  BAILING_EXECUTOR_ID    default: the host name
  BAILING_WAIT_MS        integer 1000-60000, default 12000: the claim's long-poll budget
  BAILING_HEARTBEAT_MS   integer 5000-120000, default 30000
  BAILING_RUN_ONCE       1: process one job, then exit

What it does: a heartbeat thread posts `{executor_id, targets, capabilities}` every
BAILING_HEARTBEAT_MS (8 s timeout; a 401/403 is only logged). The claim loop posts `{executor_id,
targets, wait_ms, capabilities}` with a client timeout of wait_ms + 8 s and reads the reply up to
2 MiB; a 401 or 403 stops the runner (exit 1); another non-2xx, a network error or `{"job": null}`
is followed by 800 ms of sleep and the next claim. A job's `job_id` must be 1-200 characters
without control characters (otherwise exit 2, as the runner's configuration error); its input must
be non-blank and at most 4 MiB, or the job fails. The result is `{job_id, ok: true, output: {text}}`
or `{job_id, ok: false, output: {}, error}` (error cut to 500), plus `claim_token` when the job had
one, posted up to 3 times (12 s timeout each, 2 s then 4 s apart); a 401/403 ends the reporting,
any 2xx counts as delivered. SIGTERM/SIGINT: the current job is finished, then the runner exits 0.

The brain (the runner's `openclaw agent` child, replaced here): BAILING_PEER_PLAN or `--plan`
(JSON, or @file) holds `{"steps": [{"tool", "arguments"}...], "text": "...", "hold_ms": N,
"fail": "reason"}`. After `hold_ms` of "thinking", each step is one POST to the work item's
`tools.invoke_url` (relative to the hub) with `Authorization: Bearer <tools.tool_token>` and
`{"tool", "arguments"}`, as the generic executor's tool-using children do; the answer text is a
JSON document of `text`, each call's HTTP status and reply (`ok`, `status`, `text` cut to 2000),
`looked_up` (in catalog mode, the brain first reads the definitions of the tools it will call
through `tools.defs_url`, as §E.3 step 5: the names the hub returned; null in inline mode), and
whether the work item carried an `approved_note`. A plan with steps on a job without a `tools`
block, or with `fail`, reports the job failed.

Every event is one JSON line on stdout (`event`: start, claiming, claim, claimed, thinking, defs, tool, report,
finished, heartbeat, signal, stopped), never with a token in it."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests

from tests.peers._wire import TooLarge, emit, read_limited

MAX_HTTP_BODY = 2 * 1024 * 1024
MAX_TASK_BYTES = 4 * 1024 * 1024
REPORT_ATTEMPTS = 3
IDLE_SLEEP = 0.8
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LOOPBACK = ("localhost", "127.0.0.1", "::1")
CAPABILITIES = {"runtime": "openclaw", "labels": ["openclaw", "agent-governance", "outbound-executor"]}


class ConfigError(Exception):
    """Exit 2, as the runner's configuration errors."""


class Stop(Exception):
    """A 401 or 403 on claim: the token or its scope is wrong; the runner stops (exit 1)."""


def fingerprint(value: Any) -> str | None:
    """A claim token's first SHA-256 hex digits: enough to tell claims apart, never the token."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16] if isinstance(value, str) and value else None


def identifier(value: str, label: str, maximum: int = 160) -> str:
    if not value or len(value) > maximum or CONTROL.search(value):
        raise ConfigError(f"{label} must be 1-{maximum} characters without control characters")
    return value


def integer(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, str(default)).strip()
    if not re.fullmatch(r"-?\d+", raw) or not low <= int(raw) <= high:
        raise ConfigError(f"{name} must be an integer from {low} to {high}")
    return int(raw)


def hub_origin(raw: str) -> str:
    parts = urlsplit(raw)
    if not parts.scheme or not parts.netloc:
        raise ConfigError("BAILING_HUB_URL must be an absolute URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError("BAILING_HUB_URL must not contain credentials, query parameters, or a fragment")
    loopback = (parts.hostname or "") in LOOPBACK
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ConfigError("BAILING_HUB_URL must use HTTPS; HTTP is allowed only for loopback tests")
    if parts.path not in ("", "/"):
        raise ConfigError("BAILING_HUB_URL must be the BailingHub origin without a path")
    return f"{parts.scheme}://{parts.netloc}/"


def required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"Missing required environment variable: {name}")
    return value


def load_plan(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    text = Path(raw[1:]).read_text("utf-8") if raw.startswith("@") else raw
    try:
        plan = json.loads(text)
    except ValueError:
        raise ConfigError("the plan is not JSON") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("steps", []), list):
        raise ConfigError("the plan must be an object with a `steps` list")
    return plan


def tool_names(tools: dict[str, Any]) -> list[Any]:
    """The tool names a work item offers: its inline `defs`, or its `catalog` (§C.2)."""
    entries = tools.get("defs") if tools.get("mode") != "catalog" else tools.get("catalog")
    return [entry.get("name") for entry in entries or [] if isinstance(entry, dict)]


class Runner:
    def __init__(self, plan: dict[str, Any]):
        self.hub = hub_origin(required("BAILING_HUB_URL"))
        self.token = required("BAILING_EXECUTOR_TOKEN")
        self.targets = [identifier(t, "BAILING_TARGET") for t in
                        (part.strip() for part in required("BAILING_TARGET").split(",")) if t]
        if not self.targets:
            raise ConfigError("BAILING_TARGET must contain at least one target")
        executor_id = os.environ.get("BAILING_EXECUTOR_ID", "").strip() or socket.gethostname()
        self.executor_id = identifier(executor_id, "BAILING_EXECUTOR_ID")
        self.wait_ms = integer("BAILING_WAIT_MS", 12_000, 1_000, 60_000)
        self.heartbeat_ms = integer("BAILING_HEARTBEAT_MS", 30_000, 5_000, 120_000)
        self.run_once = os.environ.get("BAILING_RUN_ONCE", "").strip() == "1"
        self.plan = plan
        self.stopping = threading.Event()
        self.http = requests.Session()
        self.beats = requests.Session()  # the heartbeat thread's own connection

    # ------------------------------------------------------------ HTTP

    def post(self, path: str, body: dict[str, Any], timeout: float,
             session: requests.Session | None = None) -> tuple[int, bytes]:
        response = (session or self.http).post(
            urljoin(self.hub, path), data=json.dumps(body).encode("utf-8"), timeout=timeout, stream=True,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        return response.status_code, read_limited(response, MAX_HTTP_BODY)

    def heartbeat_loop(self) -> None:
        while not self.stopping.wait(self.heartbeat_ms / 1000):
            try:
                status, _ = self.post("/executor/heartbeat", {"executor_id": self.executor_id,
                                                              "targets": self.targets,
                                                              "capabilities": CAPABILITIES}, 8, self.beats)
            except (requests.RequestException, TooLarge) as err:
                emit({"event": "heartbeat", "error": type(err).__name__})
                continue
            emit({"event": "heartbeat", "status": status})

    def claim(self) -> dict[str, Any] | None:
        emit({"event": "claiming", "executor_id": self.executor_id})
        try:
            status, raw = self.post("/executor/claim", {"executor_id": self.executor_id, "targets": self.targets,
                                                        "wait_ms": self.wait_ms, "capabilities": CAPABILITIES},
                                    self.wait_ms / 1000 + 8)
        except (requests.RequestException, TooLarge) as err:
            emit({"event": "claim", "error": type(err).__name__})
            return None
        replied_at = time.time()
        if status in (401, 403):
            raise Stop(f"claim rejected with {status}: {raw[:500].decode('utf-8', 'replace')}")
        if not 200 <= status < 300:
            emit({"event": "claim", "status": status, "body": raw[:300].decode("utf-8", "replace")})
            return None
        try:
            reply = json.loads(raw) if raw else {}
        except ValueError:
            emit({"event": "claim", "status": status, "error": "invalid JSON"})
            return None
        job = reply.get("job") if isinstance(reply, dict) else None
        if not job:
            emit({"event": "claim", "status": status, "job": None, "paused": bool(reply.get("paused"))})
            return None
        tools = job.get("tools") if isinstance(job.get("tools"), dict) else None
        emit({"event": "claimed", "replied_at": replied_at, "job_id": job.get("job_id"),
              "request_id": job.get("request_id"), "target": job.get("target"),
              "claim_token_sha": fingerprint(job.get("claim_token")),
              "tools": None if tools is None else {"invoke_url": tools.get("invoke_url"),
                                                   "mode": tools.get("mode"), "max_calls": tools.get("max_calls"),
                                                   "approved_note": "approved_note" in tools,
                                                   "names": tool_names(tools)},
              "session": job.get("session"), "keys": sorted(job)})
        return job

    def report(self, job_id: str, payload: dict[str, Any]) -> bool:
        for attempt in range(1, REPORT_ATTEMPTS + 1):
            try:
                status, raw = self.post("/executor/result", {"job_id": job_id, **payload}, 12)
                emit({"event": "report", "job_id": job_id, "attempt": attempt, "status": status,
                      "ok": payload["ok"], "body": raw[:1000].decode("utf-8", "replace")})
                if 200 <= status < 300:
                    return True
                if status in (401, 403):
                    return False
            except (requests.RequestException, TooLarge) as err:
                emit({"event": "report", "job_id": job_id, "attempt": attempt, "error": type(err).__name__})
            if attempt < REPORT_ATTEMPTS:
                time.sleep(attempt * 2)
        return False

    # ------------------------------------------------------------ the brain

    def think(self, job: dict[str, Any]) -> str:
        """The scripted brain's answer text, or an exception for a failed job."""
        raw = job.get("input", "")
        task = raw if isinstance(raw, str) else json.dumps(raw)
        if not task.strip():
            raise ValueError("Claimed task input is empty")
        if len(task.encode("utf-8")) > MAX_TASK_BYTES:
            raise ValueError(f"Claimed task exceeds {MAX_TASK_BYTES} bytes")
        hold = float(self.plan.get("hold_ms", 0)) / 1000
        if hold:
            emit({"event": "thinking", "job_id": job["job_id"], "hold_ms": int(hold * 1000)})
            time.sleep(hold)
        if self.plan.get("fail"):
            raise ValueError(str(self.plan["fail"]))
        steps = self.plan.get("steps") or []
        tools = job.get("tools") if isinstance(job.get("tools"), dict) else None
        if steps and tools is None:
            raise ValueError("the work item offers no tools")
        looked_up = self.look_up(job["job_id"], tools, steps) if tools and tools.get("mode") == "catalog" else None
        calls = []
        for step in steps:
            calls.append(self.invoke(job["job_id"], tools or {}, step["tool"], step.get("arguments", {})))
        return json.dumps({"text": self.plan.get("text", "done"), "calls": calls, "looked_up": looked_up,
                           "approved_note": bool(tools and tools.get("approved_note"))})

    def look_up(self, job_id: str, tools: dict[str, Any], steps: list[dict[str, Any]]) -> list[Any] | None:
        """Catalog mode (§C.3): the definitions of the tools the plan will call, read once through
        `tools.defs_url` with the tool token; the names the hub returned (None if it refused)."""
        names = ",".join(dict.fromkeys(str(step["tool"]) for step in steps))
        try:
            response = self.http.get(urljoin(self.hub, str(tools.get("defs_url", ""))), params={"names": names},
                                     headers={"Authorization": f"Bearer {tools.get('tool_token', '')}"},
                                     timeout=30, stream=True)
            raw = read_limited(response, MAX_HTTP_BODY)
        except (requests.RequestException, TooLarge) as err:
            emit({"event": "defs", "job_id": job_id, "error": type(err).__name__})
            return None
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        defs = reply.get("defs") if isinstance(reply, dict) else None
        found = [d.get("name") for d in defs if isinstance(d, dict)] if isinstance(defs, list) else None
        emit({"event": "defs", "job_id": job_id, "http_status": response.status_code, "names": found,
              "body": None if found is not None else raw[:300].decode("utf-8", "replace")})
        return found

    def invoke(self, job_id: str, tools: dict[str, Any], tool: str, arguments: Any) -> dict[str, Any]:
        url = urljoin(self.hub, str(tools.get("invoke_url", "")))
        try:
            response = self.http.post(url, data=json.dumps({"tool": tool, "arguments": arguments}).encode("utf-8"),
                                      headers={"Authorization": f"Bearer {tools.get('tool_token', '')}",
                                               "Content-Type": "application/json"}, timeout=60, stream=True)
            raw = read_limited(response, MAX_HTTP_BODY)
        except (requests.RequestException, TooLarge) as err:
            call: dict[str, Any] = {"tool": tool, "http_status": None, "error": type(err).__name__}
            emit({"event": "tool", "job_id": job_id, **call})
            return call
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = raw[:2000].decode("utf-8", "replace")
        call = {"tool": tool, "http_status": response.status_code}
        if isinstance(reply, dict):
            call.update({key: reply[key] for key in ("ok", "status", "error") if key in reply})
            if isinstance(reply.get("text"), str):
                call["text"] = reply["text"][:2000]
        else:
            call["body"] = reply
        emit({"event": "tool", "job_id": job_id, **call})
        return call

    # ------------------------------------------------------------ the loop

    def run(self) -> int:
        emit({"event": "start", "executor_id": self.executor_id, "targets": self.targets,
              "wait_ms": self.wait_ms, "heartbeat_ms": self.heartbeat_ms, "run_once": self.run_once})
        beat = threading.Thread(target=self.heartbeat_loop, name="heartbeat", daemon=True)
        beat.start()
        try:
            while not self.stopping.is_set():
                job = self.claim()
                if not job:
                    time.sleep(IDLE_SLEEP)
                    continue
                job_id = identifier(str(job.get("job_id") or ""), "job_id", 200)
                started = time.monotonic()
                payload: dict[str, Any]
                try:
                    payload = {"ok": True, "output": {"text": self.think(job)}}
                except (ValueError, KeyError, TypeError) as err:
                    payload = {"ok": False, "output": {}, "error": CONTROL.sub(" ", str(err))[:500]}
                if job.get("claim_token"):
                    payload["claim_token"] = job["claim_token"]
                reported = self.report(job_id, payload)
                emit({"event": "finished", "job_id": job_id, "ok": payload["ok"], "reported": reported,
                      "duration_ms": int((time.monotonic() - started) * 1000)})
                if self.run_once:
                    break
        except Stop as err:
            emit({"event": "stopped", "reason": str(err), "exit": 1})
            return 1
        finally:
            self.stopping.set()
        emit({"event": "stopped", "reason": "run once" if self.run_once else "signal", "exit": 0})
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.openclaw_executor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", default=None, help="the brain's plan, JSON or @file (default: BAILING_PEER_PLAN)")
    args = parser.parse_args(argv)
    try:
        runner = Runner(load_plan(args.plan if args.plan is not None else os.environ.get("BAILING_PEER_PLAN")))
    except ConfigError as err:
        sys.stderr.write(f"[bailinghub-executor] configuration error: {err}\n")
        emit({"event": "stopped", "reason": f"configuration error: {err}", "exit": 2})
        return 2

    def stop(signum: int, _frame: Any) -> None:
        emit({"event": "signal", "signal": signal.Signals(signum).name})
        runner.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        return runner.run()
    except ConfigError as err:  # a work item's job_id the runner refuses
        emit({"event": "stopped", "reason": f"configuration error: {err}", "exit": 2})
        return 2


if __name__ == "__main__":
    sys.exit(main())
