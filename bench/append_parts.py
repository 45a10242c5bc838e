"""Where one event append's time goes: the same batches as bench/append.py, sent in-process
through Flask's test client (no HTTP, no gunicorn), with the wall and CPU time of each part.

Each part is timed by wrapping the function that does it; the parts nest as shown (indented
ones are inside the one above), and "request" is the whole WSGI call. CPU is this thread's time,
so wall minus CPU is mostly waiting for PostgreSQL.

    python bench/append_parts.py [--events 10000]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from common import EXAMPLES, Operator, bearer, events, fresh_database

from admin_app import create_app, db, limits
from admin_app.api import agent_audit, auth
from admin_app.conversation_audit import archives as audit_archives
from admin_app.conversation_audit import events as audit_events

BATCH = limits.AUDIT_BATCH_MAX_EVENTS

# (label, module or class, function name), in the order printed; indented labels nest in the one above.
PARTS = (
    ("bearer check (BEGIN, then the session: two round trips)", auth, "authenticate_access"),
    ("read and parse the body", agent_audit, "read_json_object"),
    ("append", audit_events, "append"),
    ("  validate the events", audit_events, "validate_batch"),
    ("  archive lock, members, share locks, earlier use (one round trip)", audit_events,
     "locked_archive_for_member"),
    ("  revalidate the members", audit_archives.LockedArchive, "check_bindings"),
    ("  hash each event", audit_events, "sha256_json"),
    ("insert, header and COMMIT (one round trip)", db, "_commit"),
    ("answer", agent_audit, "jsonify"),
)


def timed(wall: Counter, cpu: Counter, label: str, function):
    def wrapper(*args, **kwargs):
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            wall[label] += time.perf_counter() - started
            cpu[label] += time.thread_time() - started_cpu
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10000)
    args = parser.parse_args()
    total = args.events - args.events % BATCH

    wall, cpu = Counter(), Counter()
    with tempfile.TemporaryDirectory(prefix="bailing-bench-") as scratch, fresh_database() as db_url:
        operator = Operator(db_url, Path(scratch) / "var")
        operator("config", "apply", str(EXAMPLES / "hub.json"))
        session = operator.session("crm-demo", "customers")
        app = create_app({"database_url": db_url, "data_dir": Path(scratch) / "var"})
        client = app.test_client()
        headers = bearer(session["access_token"])
        created = client.post("/agent-api/v1/conversation-audits", headers=headers, json={
            "client_archive_id": str(uuid.uuid4()), "client_conversation_id": "parts",
            "route": "customers", "member_session_ids": [session["session_id"]]})
        path = f"/agent-api/v1/conversation-audits/{created.get_json()['conversation']['conversation_id']}/events"
        bodies = [json.dumps({"events": events(first, BATCH)}).encode("utf-8")
                  for first in range(1, total + 1, BATCH)]

        first = client.post(path, data=bodies[0], headers={**headers, "Content-Type": "application/json"})
        assert first.status_code == 200, first.get_data(as_text=True)  # unmeasured: connects, prepares
        for label, module, name in PARTS:
            setattr(module, name, timed(wall, cpu, label, getattr(module, name)))
        app.wsgi_app = timed(wall, cpu, "request", app.wsgi_app)
        for body in bodies[1:]:
            response = client.post(path, data=body, headers={**headers, "Content-Type": "application/json"})
            assert response.status_code == 200, response.get_data(as_text=True)
        app.extensions["bailing"].db.dispose()
        operator.close()

    batches = len(bodies) - 1
    print(f"one append of {BATCH} events, in-process, mean of {batches} batches (ms)")
    print(f"  {'part':<72} {'wall':>6} {'cpu':>6}")
    for label in ["request"] + [label for label, _, _ in PARTS]:
        print(f"  {label:<72} {wall[label] / batches * 1000:6.2f} {cpu[label] / batches * 1000:6.2f}")


if __name__ == "__main__":
    main()
