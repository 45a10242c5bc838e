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
