"""A hub set up for Core's Client API and executor protocol (CLIENT_API_AND_EXECUTOR.md), shared
by the job tests: the demo business system's providers, a route `desk` whose work goes to the
executor target `desk-worker`, the client app `ops-app` with a Client Token, and an executor
token scoped to `desk-worker`. HTTP goes to the real server (`server` fixture) with requests."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import requests

from tests.conftest import governed_config
from tests.helpers import Cli, apply_config, bearer

TARGET = "desk-worker"


def jobs_config(business_url: str, **route_overrides: Any) -> dict[str, Any]:
    """governed_config plus the executor target and the route's `target`."""
    doc = governed_config(business_url, **{"target": TARGET, **route_overrides})
    doc["executor_targets"] = [{"name": TARGET, "description": "The desk's executors"}]
    return doc


class JobsWorld:
    def __init__(self, server: Any, cli: Cli, business: Any, tmp_path: Path, **route_overrides: Any):
        self.url = server.url
        self.cli = cli
        apply_config(cli, tmp_path, jobs_config(business.url, **route_overrides))
        code, out, err = cli("clients", "token", "ops-app")
        assert code == 0, err
        self.client_token: str = out["client_token"]
        self.executor_token = self.issue_executor_token("desk-runner", [TARGET])

    def issue_executor_token(self, name: str, targets: list[str]) -> str:
        code, out, err = self.cli("executors", "token", "issue", name, "--targets", ",".join(targets))
        assert code == 0, err
        return str(out["token"])

    def submit(self, input_text: str = "Look up customer C-1001", token: str | None = None,
               **fields: Any) -> requests.Response:
        body = {"request_id": fields.pop("request_id", f"req-{uuid.uuid4()}"), "route": "desk",
                "input": input_text, **fields}
        return requests.post(f"{self.url}/run", json=body, headers=bearer(token or self.client_token), timeout=30)

    def job(self, job_id: str, token: str | None = None) -> requests.Response:
        return requests.get(f"{self.url}/jobs/{job_id}", headers=bearer(token or self.client_token), timeout=30)

    def claim(self, wait_ms: int = 0, executor_id: str = "runner-1", token: str | None = None,
              targets: list[str] | None = None, **fields: Any) -> requests.Response:
        body = {"executor_id": executor_id, "targets": targets or [TARGET], "wait_ms": wait_ms, **fields}
        return requests.post(f"{self.url}/executor/claim", json=body,
                             headers=bearer(token or self.executor_token), timeout=90)

    def report(self, job: dict[str, Any], token: str | None = None, **fields: Any) -> requests.Response:
        body = {"job_id": job["job_id"], "claim_token": job["claim_token"], "ok": True,
                "output": {"text": "done"}, **fields}
        return requests.post(f"{self.url}/executor/result", json=body,
                             headers=bearer(token or self.executor_token), timeout=30)


# ---------------------------------------------------------------- jobs written by SQL
# For the tests of the reads (console, admin API): a job in any state at any time, with the rows a
# timeline shows, without going through /run and an executor. `sql` is the fixture of that name.

def seed_client(sql: Any, app_id: str = "ops-app", routes: tuple[str, ...] = ("desk",)) -> None:
    sql("INSERT INTO bz_client_apps (app_id, name, allowed_routes) VALUES (%s, %s, %s) "
        "ON CONFLICT (app_id) DO NOTHING", (app_id, f"App {app_id}", list(routes)))


def seed_job(sql: Any, status: str = "queued", app: str = "ops-app", route: str = "desk", target: str = TARGET,
             input_text: str = "Look up customer C-1001", metadata: dict[str, Any] | None = None,
             result: Any = None, usage: dict[str, Any] | None = None, error: str | None = None,
             request_id: str | None = None, session_id: str | None = None, thread_key: str | None = None,
             executor_id: str | None = None, created_at: str | None = None, attempts: int = 0,
             principal: dict[str, Any] | None = None, callback_url: str | None = None) -> str:
    """A job row as the Client API and an executor would have left it; returns its id."""
    import json

    seed_client(sql, app)
    job_id = str(uuid.uuid4())
    dispatched = status == "dispatched"
    sql("""INSERT INTO bz_jobs (id, request_id, client_app_id, route_key, target, status, input, metadata,
                                principal, callback_url, session_id, thread_key, attempts, executor_id,
                                executor_token, claim_token, claimed_at, dispatched_at, lease_until, result,
                                usage, error, created_at, updated_at, finished_at)
           VALUES (%(id)s, %(request_id)s, %(app)s, %(route)s, %(target)s, %(status)s, %(input)s, %(metadata)s,
                   %(principal)s, %(callback_url)s, %(session)s, %(thread)s, %(attempts)s, %(executor)s,
                   %(token)s, %(claim)s, %(claimed)s, %(claimed)s, NULL, %(result)s, %(usage)s, %(error)s,
                   COALESCE(CAST(%(created)s AS timestamptz), now()),
                   COALESCE(CAST(%(created)s AS timestamptz), now()),
                   CASE WHEN %(status)s IN ('done', 'error', 'rejected') THEN now() END)""",
        {"id": job_id, "request_id": request_id or f"req-{job_id}", "app": app, "route": route, "target": target,
         "status": status, "input": input_text, "metadata": json.dumps(metadata or {}),
         "principal": json.dumps(principal) if principal is not None else None, "callback_url": callback_url,
         "session": session_id or str(uuid.uuid4()), "thread": thread_key or f"{route}:{uuid.uuid4()}",
         "attempts": attempts, "executor": executor_id, "token": "desk-runner" if executor_id else None,
         "claim": str(uuid.uuid4()) if dispatched else None,
         "claimed": "now" if dispatched else None,
         "result": json.dumps(result) if result is not None else None,
         "usage": json.dumps(usage) if usage is not None else None, "error": error, "created": created_at})
    if dispatched:
        sql("UPDATE bz_jobs SET lease_until = now() + interval '4 minutes' WHERE id = %s", (job_id,))
    return job_id


def seed_event(sql: Any, job_id: str, event: str, actor: str | None = None,
               detail: dict[str, Any] | None = None, at: str | None = None) -> None:
    import json

    sql("INSERT INTO bz_job_events (job_id, event, actor, detail, at) "
        "VALUES (%s, %s, %s, %s, COALESCE(CAST(%s AS timestamptz), clock_timestamp()))",
        (job_id, event, actor, json.dumps(detail or {}), at))


def seed_call(sql: Any, job_id: str, tool: str = "customer_get", status: str = "executed",
              approval: str | None = None, at: str | None = None) -> dict[str, Any]:
    """A governed tool call the job made (an invocation it owns), with an approval in state
    `approval` if given; returns its ids."""
    call_id, invocation_id = str(uuid.uuid4()), f"inv-{uuid.uuid4().hex}"
    sql("""INSERT INTO bz_tool_invocations (id, session_id, job_id, invocation_id, route_key, tool, provider, scope,
                                            request_hash, args_hash, argument_keys, execution_fingerprint,
                                            capability_revision, status, business_status, created_at, updated_at)
           VALUES (%s, NULL, %s, %s, 'desk', %s, 'demo-crm', 'crm.customers', %s, %s, '{customer_id}', %s, %s, %s,
                   %s, COALESCE(CAST(%s AS timestamptz), now()), COALESCE(CAST(%s AS timestamptz), now()))""",
        (call_id, job_id, invocation_id, tool, "a" * 64, "b" * 64, "c" * 64, "d" * 64, status,
         200 if status == "executed" else None, at, at))
    out: dict[str, Any] = {"call_id": call_id, "invocation_id": invocation_id}
    if approval is not None:
        approval_id = str(uuid.uuid4())
        sql("""INSERT INTO bz_tool_approvals (id, job_id, tool, route_key, risk, policy, snapshot, args_hash,
                                              snapshot_bytes, argument_keys, summary, status, decided_by, decided_at,
                                              created_at)
               VALUES (%s, %s, %s, 'desk', 'high', '{}', '{}', %s, 2, '{customer_id}', 'a change', %s,
                       CASE WHEN %s <> 'pending' THEN 'alice' END,
                       CASE WHEN %s <> 'pending' THEN COALESCE(CAST(%s AS timestamptz), now()) END,
                       COALESCE(CAST(%s AS timestamptz), now()))""",
            (approval_id, call_id, tool, "b" * 64, approval, approval, approval, at, at))
        out["approval_id"] = approval_id
        out["approval_number"] = sql("SELECT number FROM bz_tool_approvals WHERE id = %s", (approval_id,))[0][0]
    return out


def seed_callback(sql: Any, job_id: str, url: str = "https://receiver.example/hook?secret=s3cr3t",
                  state: str = "delivered", attempts: tuple[tuple[int | None, str | None], ...] = ((200, None),),
                  at: str | None = None) -> int:
    """A completion callback of the job with its attempts (HTTP status, error); returns its id."""
    [(callback_id,)] = sql(
        """INSERT INTO bz_job_callbacks (job_id, url, body, state, attempts, last_status, last_error, created_at,
                                         delivered_at, died_at)
           VALUES (%s, %s, '{}', %s, %s, %s, %s, COALESCE(CAST(%s AS timestamptz), now()),
                   CASE WHEN %s = 'delivered' THEN now() END, CASE WHEN %s = 'dead' THEN now() END)
           RETURNING id""",
        (job_id, url, state, len(attempts), attempts[-1][0] if attempts else None,
         attempts[-1][1] if attempts else None, at, state, state))
    for n, (status, error) in enumerate(attempts, start=1):
        sql("INSERT INTO bz_job_callback_attempts (callback_id, attempt, http_status, error, duration_ms, at) "
            "VALUES (%s, %s, %s, %s, 12, COALESCE(CAST(%s AS timestamptz), now()) + %s * interval '1 second')",
            (callback_id, n, status, error, at, n))
    return int(callback_id)
