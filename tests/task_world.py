"""A hub with task control at hand, for the task tests: the demo business system behind route
`desk`, agent sessions of client `ops-app`, an administrator's API token, and a member agent that
binds turns and calls tools over HTTP as the official client does. The `world` fixture
(tests/conftest.py) is a World."""
from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import requests

from tests.conftest import governed_config
from tests.helpers import admin_token, apply_config, assert_ok, bearer

ROUTE = "desk"
TASKS = "/admin/api/agent-tasks"
APPROVALS = "/admin/api/tool-approvals"
AGENT = "/agent-api/v1"
INVOCATIONS = AGENT + "/tool-invocations"
BINDING_SCHEMA = "bailing.agent-task-binding.v1"
WRITE = "customer_update_credit_limit"  # a write; approval above 10000
READ = "customer_get"
SMALL = {"customer_id": "C-100234", "credit_limit": 500}
BIG = {"customer_id": "C-100234", "credit_limit": 50000}
CUSTOMER = {"customer_id": "C-100234"}
TASK_TABLES = ("bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements",
               "bz_agent_task_invocations", "bz_agent_task_runs", "bz_agent_task_events")
WRITTEN = ("bz_tool_invocations", "bz_tool_approvals", "bz_tool_journal", "bz_runs", "bz_threads",
           *TASK_TABLES)


def iid(name: str) -> str:
    """An invocation id (64 lowercase hex digits) named by a readable label."""
    return hashlib.sha256(name.encode()).hexdigest()


def task_config(business_url: str) -> dict:
    config = governed_config(business_url)
    # A member's client app needs its own authorization page (TASK_CONTROL.md §5).
    config["client_apps"][0]["agent_authorize_url"] = "http://127.0.0.1:9/authorize"
    return config


class Member:
    """One agent session acting as a task member in conversation `conversation`."""

    def __init__(self, server, session: dict, conversation: str):
        self.server = server
        self.session = session
        self.session_id = session["session_id"]
        self.conversation = conversation
        self.turns = 0

    @property
    def headers(self) -> dict:
        return bearer(self.session["access_token"])

    def coordinates(self, tools: list[str]) -> dict:
        return {"session_id": self.session_id, "client_app_id": "ops-app", "workspace": ROUTE,
                "client_conversation_id": self.conversation, "allowed_tools": tools}

    def snapshot_raw(self, task_id: str, **params) -> requests.Response:
        query = {"workspace": ROUTE, "client_conversation_id": self.conversation, **params}
        return self.server.get(f"{AGENT}/tasks/{task_id}", params=query, headers=self.headers)

    def turn_raw(self, binding: dict | None, turn: str | None = None) -> requests.Response:
        self.turns += 1
        name = turn or f"{self.conversation}-turn-{self.turns}"
        body: dict[str, Any] = {"client_conversation_id": self.conversation, "client_turn_id": name,
                                "user_message_id": f"{name}-msg", "user_input": "Raise the credit limit."}
        if binding is not None:
            body["task_binding"] = binding
        return self.server.post(f"{AGENT}/workspaces/{ROUTE}/turns", json=body, headers=self.headers)

    def turn(self, binding: dict | None) -> dict:
        response = self.turn_raw(binding)
        assert response.status_code == 200, response.text
        return response.json()

    def revision(self) -> str:
        response = self.server.get(f"{AGENT}/tools?route={ROUTE}", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()["capability_revision"]

    def invoke_body(self, tool: str, arguments: dict, name: str, run_id: str | None, revision: str) -> dict:
        body = {"invocation_id": iid(name), "route": ROUTE, "capability_revision": revision, "tool": tool,
                "arguments": arguments}
        if run_id is not None:
            body["agent_run_id"] = run_id
        return body

    def invoke_raw(self, tool: str, arguments: dict, name: str, run_id: str | None,
                   revision: str | None = None) -> requests.Response:
        body = self.invoke_body(tool, arguments, name, run_id, revision or self.revision())
        return self.server.post(INVOCATIONS, json=body, headers=self.headers)

    def invoke(self, tool: str, arguments: dict, name: str, run_id: str | None) -> dict:
        response = self.invoke_raw(tool, arguments, name, run_id)
        assert response.status_code == 200, response.text
        return response.json()

    def resume_raw(self, name: str) -> requests.Response:
        return self.server.post(f"{INVOCATIONS}/{iid(name)}/resume", headers=self.headers)

    def receipt_raw(self, name: str) -> requests.Response:
        return self.server.get(f"{INVOCATIONS}/{iid(name)}/receipt", headers=self.headers)

    def search_raw(self, run_id: str | None, query: str | None = "credit") -> requests.Response:
        body: dict[str, Any] = {}
        if query is not None:
            body["query"] = query
        if run_id is not None:
            body["run_id"] = run_id
        return self.server.post(f"{AGENT}/workspaces/{ROUTE}/capabilities/search", json=body, headers=self.headers)


class World:
    def __init__(self, server, cli, business, sql, tmp_path):
        self.server, self.cli, self.business, self.sql = server, cli, business, sql
        apply_config(cli, tmp_path, task_config(business.url))
        self.admin = admin_token(cli, "task-admin", "admin")
        self.requests = 0

    def session(self) -> dict:
        code, out, err = self.cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                                  "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}',
                                  "--on-behalf-of", "tenant-7:user-42")
        assert code == 0, err
        return out

    def member(self, conversation: str = "conv-1") -> Member:
        return Member(self.server, self.session(), conversation)

    @property
    def admin_headers(self) -> dict:
        return bearer(self.admin)

    def create_raw(self, body: Any, token: str | None = None) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.server.post(TASKS, data=data, headers=bearer(token or self.admin))

    def create(self, members: list[Member], *, tools: list[str] | None = None, max_write_calls: int | None = 5,
               max_concurrent: int = 2, expires_at: str | None = None, request_id: str | None = None) -> dict:
        body = self.create_body(members, tools=tools, max_write_calls=max_write_calls,
                                max_concurrent=max_concurrent, expires_at=expires_at, request_id=request_id)
        response = self.create_raw(body)
        assert response.status_code == 200, response.text
        return response.json()

    @staticmethod
    def create_body(members: list[Member], *, tools: list[str] | None = None, max_write_calls: int | None = 5,
                    max_concurrent: int = 2, expires_at: str | None = None, request_id: str | None = None) -> dict:
        return {"request_id": request_id or f"create-{uuid.uuid4().hex[:12]}",
                "members": [m.coordinates(tools or [WRITE, READ]) for m in members],
                "policy": {"max_write_calls": max_write_calls, "max_concurrent": max_concurrent,
                           "expires_at": expires_at}}

    def control_raw(self, task_id: str, action: str, revision: int, request_id: str | None = None,
                    token: str | None = None) -> requests.Response:
        body = {"request_id": request_id or f"{action}-{uuid.uuid4().hex[:12]}", "expected_revision": revision,
                "action": action}
        return self.server.post(f"{TASKS}/{task_id}/control", json=body, headers=bearer(token or self.admin))

    def control(self, task: dict, action: str) -> dict:
        response = self.control_raw(task["task_id"], action, task["revision"])
        assert response.status_code == 200, response.text
        return response.json()

    def detail(self, task_id: str, **params) -> dict:
        response = self.server.get(f"{TASKS}/{task_id}", params=params, headers=self.admin_headers)
        assert response.status_code == 200, response.text
        return response.json()

    def counters(self, task_id: str) -> dict:
        return self.detail(task_id)["task"]["counters"]

    def stored(self) -> dict[str, int]:
        return {t: int(self.sql(f"SELECT count(*) FROM {t}")[0][0]) for t in WRITTEN}


def binding(task: dict) -> dict:
    return {"schema_version": BINDING_SCHEMA, "task_id": task["task_id"], "scope_hash": task["scope_hash"]}


def stored(world: World, *task_ids: str) -> tuple[dict[str, int], list[tuple[str, int, int]]]:
    """What `world.stored()` counts (rows of every table a refusal must not write), and the
    (state, revision, ledger_sequence) of each named task, read in one round trip."""
    counts = ", ".join(f"(SELECT count(*) FROM {t})" for t in WRITTEN)
    [row] = world.sql(f"SELECT {counts}, (SELECT coalesce(json_agg(json_build_array(state, revision, "
                      "ledger_sequence) ORDER BY o.n), '[]') FROM unnest(CAST(%s AS uuid[])) WITH ORDINALITY "
                      "AS o (id, n) JOIN bz_agent_tasks t ON t.task_id = o.id)", (list(task_ids),))
    tasks = [(r[0], int(r[1]), int(r[2])) for r in row[-1]]
    assert len(tasks) == len(task_ids)
    return dict(zip(WRITTEN, (int(c) for c in row[:-1]), strict=True)), tasks


def counters(world: World, task_id: str) -> tuple[int, int, int]:
    """(write_reserved, write_consumed, active_permits) of a task, as stored."""
    [row] = world.sql("SELECT write_reserved, write_consumed, active_permits FROM bz_agent_tasks "
                      "WHERE task_id = %s", (task_id,))
    return int(row[0]), int(row[1]), int(row[2])


def approve(world: World, result: dict, decision: str = "approve") -> dict:
    """Decide the approval of an awaiting call through the admin API."""
    body: dict[str, Any] = {"args_hash": result["approval"]["args_hash"]}
    if decision == "deny":
        body["reason"] = "Not this quarter."
    return assert_ok(world.server.post(f"{APPROVALS}/{result['approval']['id']}/{decision}", json=body,
                                       headers=world.admin_headers))
