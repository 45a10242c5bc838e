"""A completion-callback receiver (CLIENT_API_AND_EXECUTOR.md §D.1) on loopback, as a process of
its own: it verifies each POST as Core's connect SDK's `verify_callback` does and records it.

    BAILING_CALLBACK_SECRET=<client token> python -m tests.peers.callback_receiver --out deliveries.jsonl

The check: `X-Bailing-Timestamp` is Unix time in milliseconds, read as an integer (anything else
fails), and must be less than 5 minutes (300,000 ms) from now either way; `X-Bailing-Signature` must
be `sha256=` + the lowercase hex HMAC-SHA256, keyed with the secret (the job's client token), of
"<timestamp>.<raw body>", compared in constant time; an empty signature fails.

The first stdout line is `{"event": "listening", "url": ...}`. Each delivery is one JSON line
(in `--out`, else on stdout): `verified`, `reason`, the timestamp and signature headers, the body's
SHA-256 and the body itself (parsed when it is JSON). A verified delivery is answered 200 and a
failed check 401, unless `--fail-first N` answers the first N deliveries 500 (to see Core's retry)."""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.peers._wire import emit

WINDOW_MS = 300_000
MAX_BODY = 4 * 1024 * 1024


def verify_callback(secret: str, timestamp: str, body: bytes, signature: str,
                    window_ms: int = WINDOW_MS, now_ms: int | None = None) -> tuple[bool, str]:
    """(verified, reason) as the SDK decides: the window first, then the signature."""
    if not signature:
        return False, "no signature"
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False, "timestamp not an integer"
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if abs(now - ts) >= window_ms:
        return False, "timestamp outside the 5-minute window"
    expected = "sha256=" + hmac.new(secret.encode("utf-8"), timestamp.encode("utf-8") + b"." + body,
                                    hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode("utf-8"), signature.encode("utf-8", "replace")):
        return False, "bad signature"
    return True, "ok"


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, secret: str, out: Any, fail_first: int):
        super().__init__(("127.0.0.1", port), Handler)
        self.secret = secret
        self.out = out
        self.fail_left = fail_first
        self.lock = threading.Lock()
        self.count = 0


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: Any) -> None:
        return  # the JSON lines are the log

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, MAX_BODY))
        timestamp = self.headers.get("X-Bailing-Timestamp", "")
        signature = self.headers.get("X-Bailing-Signature", "")
        verified, reason = verify_callback(self.server.secret, timestamp, body, signature)
        try:
            parsed: Any = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            parsed = body[:2000].decode("utf-8", "replace")
        with self.server.lock:
            self.server.count += 1
            number = self.server.count
            failing = self.server.fail_left > 0
            if failing:
                self.server.fail_left -= 1
        status = 500 if failing else (200 if verified else 401)
        emit({"event": "delivery", "n": number, "path": self.path, "verified": verified, "reason": reason,
              "answered": status, "content_type": self.headers.get("Content-Type"), "timestamp": timestamp,
              "signature": signature, "body_sha256": hashlib.sha256(body).hexdigest(),
              "job_id": parsed.get("job_id") if isinstance(parsed, dict) else None,
              "status": parsed.get("status") if isinstance(parsed, dict) else None, "body": parsed},
             self.server.out)
        reply = json.dumps({"ok": status == 200}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.callback_receiver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="default: a free port")
    parser.add_argument("--out", default=None, help="JSON-lines file for deliveries (default: stdout)")
    parser.add_argument("--fail-first", type=int, default=0)
    args = parser.parse_args(argv)
    secret = os.environ.get("BAILING_CALLBACK_SECRET", "")
    if not secret:
        sys.stderr.write("BAILING_CALLBACK_SECRET (the client token) is required\n")
        return 2
    out = open(args.out, "a", encoding="utf-8") if args.out else sys.stdout
    server = Receiver(args.port, secret, out, args.fail_first)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    emit({"event": "listening", "url": f"http://127.0.0.1:{server.server_port}/callback"})
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
