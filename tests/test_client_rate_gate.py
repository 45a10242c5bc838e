"""The client gate (BUSINESS_SIDE.md §D.1): a client app's `rate_limit_per_min` (0 = off, the
default), one 60-second bucket `client:<app_id>` shared by every session and user of the client,
charged by each tool call before its tool and provider gates and by each knowledge search.

A call it refuses is `rejected_before_dispatch`, `auto_retry_allowed: true`, told
`retry_after_ms: 60000` on its first refusal only and never a `rate_limit` object; it charges no
other gate, asks for no approval and sends nothing; its resume runs every gate again.
"""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

import requests

from tests.conftest import governed_config
from tests.helpers import admin_token, apply_config, assert_error, assert_ok, bearer, cli_refused

BASE = "/agent-api/v1/tool-invocations"
ROUTE = "desk"
READ = "customer_get"
WRITE = "customer_update_credit_limit"  # approval above 10000
CUSTOMER = {"customer_id": "C-100234"}
BIG_CREDIT = {"customer_id": "C-100234", "credit_limit": 50000}
KNOWLEDGE = Path(__file__).parent / "data" / "knowledge"
CLIENT_TEXT = ("Not dispatched: this client's shared rate limit is reached. Wait a minute (retry_after_ms "
               "milliseconds when given), then resume this same invocation_id; do not make a new call.")


def iid(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def config(business_url: str, per_min: int | None, **route) -> dict:
    doc = governed_config(business_url, **route)
    if per_min is not None:
        doc["client_apps"][0]["rate_limit_per_min"] = per_min
    return doc


def client_refusal(result: dict, first: bool) -> dict:
    """A client gate's refusal as the agent sees it: `retry_after_ms` 60000 on a first call only,
    never a `rate_limit` object (the official client accepts only the tool and provider levels)."""
    assert result["state"] == "rejected_before_dispatch" and result["ok"] is False, result
    assert result["auto_retry_allowed"] is True and result["reason"] == "rate_limited"
    assert "rate_limit" not in result and "business_status" not in result
    assert result.get("retry_after_ms") == (60_000 if first else None), result
    assert result["text"] == CLIENT_TEXT
    return result


class Agent:
    def __init__(self, url: str, session: dict):
        self.url, self.headers = url, bearer(session["access_token"])
        response = requests.get(f"{url}/agent-api/v1/tools?route={ROUTE}", headers=self.headers, timeout=30)
        self.revision = assert_ok(response)["capability_revision"]

    def invoke(self, tool: str, arguments: dict, label: str) -> dict:
        body = {"invocation_id": iid(label), "route": ROUTE, "capability_revision": self.revision,
                "tool": tool, "arguments": arguments}
        return assert_ok(requests.post(self.url + BASE, json=body, headers=self.headers, timeout=60))

    def resume(self, label: str) -> dict:
        return assert_ok(requests.post(f"{self.url}{BASE}/{iid(label)}/resume", headers=self.headers, timeout=60))

    def receipt(self, label: str) -> dict:
        return assert_ok(requests.get(f"{self.url}{BASE}/{iid(label)}/receipt", headers=self.headers, timeout=30))

    def search(self, query: str) -> requests.Response:
        return requests.post(f"{self.url}/agent-api/v1/workspaces/{ROUTE}/knowledge/search",
                             json={"query": query}, headers=self.headers, timeout=30)


def second_session(cli) -> dict:
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", ROUTE,
                         "--principal", '{"id": "user-43", "tenant": "tenant-7"}',
                         "--on-behalf-of", "tenant-7:user-43")
    assert code == 0, err
    return out


def buckets(sql) -> dict[str, int]:
    return dict(sql("SELECT bucket, held FROM bz_tool_rate_buckets WHERE held > 0"))


def in_threads(count: int, work) -> list:
    start = threading.Barrier(count)
    answers: list = [None] * count

    def run(i: int) -> None:
        start.wait()
        answers[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


# ----------------------------------------------------------------------------- configuration

AT = "client_apps[0].rate_limit_per_min"
BAD = [(-1, "must be at least 0"), (1.5, "must be a whole number"), ("60", "must be a whole number"),
       (True, "must be a whole number"), (None, "must be a whole number"), (1_000_001, "must be at most 1000000")]


def _client(**fields) -> dict:
    return {"client_apps": [{"app_id": "ops-app", "name": "Operations", "allowed_routes": [], **fields}]}


def test_a_bad_client_limit_is_refused_by_its_path_and_writes_nothing(cli, sql, tmp_path):
    path = tmp_path / "hub.json"
    for value, message in BAD:
        path.write_text(json.dumps(_client(rate_limit_per_min=value)))
        problems = cli_refused(cli("config", "apply", str(path)), "invalid_request")["problems"]
        assert {"path": AT, "message": message} in problems, (value, problems)
        assert sql("SELECT count(*) FROM bz_client_apps") == [(0,)], value
    # A refused change leaves the stored client as it was.
    apply_config(cli, tmp_path, _client(rate_limit_per_min=30))
    before = sql("SELECT xmin::text, rate_limit_per_min FROM bz_client_apps")
    path.write_text(json.dumps(_client(rate_limit_per_min=-5, name="Renamed")))
    cli_refused(cli("config", "apply", str(path)), "invalid_request")
    assert sql("SELECT xmin::text, rate_limit_per_min FROM bz_client_apps") == before


def test_the_limit_defaults_to_off_and_a_change_is_reported(cli, sql, tmp_path):
    report = apply_config(cli, tmp_path, _client())
    assert report["created"]["client_apps"] == ["ops-app"]
    assert sql("SELECT rate_limit_per_min FROM bz_client_apps") == [(0,)]
    report = apply_config(cli, tmp_path, _client(rate_limit_per_min=1_000_000))
    assert report["changed"]["client_apps"] == ["ops-app (rate_limit_per_min)"]
    assert sql("SELECT rate_limit_per_min FROM bz_client_apps") == [(1_000_000,)]
    # Left out again: back to the default, as every field of the file.
    report = apply_config(cli, tmp_path, _client())
    assert report["changed"]["client_apps"] == ["ops-app (rate_limit_per_min)"]
    assert sql("SELECT rate_limit_per_min FROM bz_client_apps") == [(0,)]


# ----------------------------------------------------------------------------- tool calls

def test_concurrent_calls_of_two_sessions_dispatch_exactly_the_client_limit(server, cli, business, governed, sql,
                                                                           tmp_path):
    apply_config(cli, tmp_path, config(business.url, 5))
    agents = [Agent(server.url, governed), Agent(server.url, second_session(cli))]
    results = in_threads(12, lambda i: agents[i % 2].invoke(READ, CUSTOMER, f"burst-{i}"))
    states = [r["state"] for r in results]
    assert states.count("executed") == 5 and states.count("rejected_before_dispatch") == 7, states
    for refused in (r for r in results if r["state"] != "executed"):
        client_refusal(refused, first=True)
    assert len(business.executions(READ)) == 5
    # The refused calls charged no provider gate (demo-crm: Core's 120 a minute) and sent nothing.
    assert buckets(sql) == {"client:ops-app": 5, "provider:demo-crm": 5}
    assert sql("SELECT count(*) FROM bz_tool_journal") == [(5,)]
    assert sql("SELECT count(*) FROM bz_tool_deferred_calls") == [(7,)]


def test_a_refused_call_is_resumed_through_every_gate_and_told_no_wait_again(server, cli, business, governed, sql,
                                                                            tmp_path):
    apply_config(cli, tmp_path, config(business.url, 1))
    agent = Agent(server.url, governed)
    assert agent.invoke(READ, CUSTOMER, "first")["state"] == "executed"
    first = client_refusal(agent.invoke(READ, CUSTOMER, "second"), first=True)
    # Persisted: the receipt and an invoke replay say the same; the job trace names the gate.
    assert agent.invoke(READ, CUSTOMER, "second") == first
    receipt = agent.receipt("second")
    assert receipt["result"]["retry_after_ms"] == 60_000 and "rate_limit" not in receipt["result"]
    assert receipt["dispatch_state"] == "not_dispatched" and receipt["journal_state"] == "absent"
    [(job,)] = sql("SELECT id::text FROM bz_tool_invocations WHERE invocation_id = %s", (iid("second"),))
    support = bearer(admin_token(cli, "sam", "support"))
    trace = assert_ok(requests.get(f"{server.url}/admin/api/tool-jobs/{job}", headers=support, timeout=30))["job"]
    assert trace["rate_limit"] == {"level": "client", "count": 1, "window_sec": 60, "scope": "client_shared",
                                   "source": "client_total", "retry_after_ms": 60_000}
    # The resume runs the client gate again: still full, refused without either field.
    client_refusal(agent.resume("second"), first=False)
    assert "retry_after_ms" not in agent.receipt("second")["result"]
    assert buckets(sql) == {"client:ops-app": 1, "provider:demo-crm": 1}
    assert len(business.executions(READ)) == 1
    # The operator raises the limit: the same resume now passes every gate and sends once.
    apply_config(cli, tmp_path, config(business.url, 2))
    done = agent.resume("second")
    assert done["state"] == "executed" and "retry_after_ms" not in done and "rate_limit" not in done
    assert len(business.executions(READ)) == 2
    assert buckets(sql) == {"client:ops-app": 2, "provider:demo-crm": 2}
    assert sql("SELECT count(*) FROM bz_tool_deferred_calls") == [(0,)]
    assert sql("SELECT count(*) FROM bz_tool_invocations WHERE jsonb_typeof(rate_limit) = 'object'") == [(0,)]


def test_a_client_refusal_asks_for_no_approval_and_never_consumes_one(server, cli, business, governed, sql,
                                                                     tmp_path):
    apply_config(cli, tmp_path, config(business.url, 1))
    agent = Agent(server.url, governed)
    assert agent.invoke(READ, CUSTOMER, "read")["state"] == "executed"
    assert "approval_id" not in client_refusal(agent.invoke(WRITE, BIG_CREDIT, "write"), first=True)
    assert sql("SELECT count(*) FROM bz_tool_approvals") == [(0,)]
    assert buckets(sql) == {"client:ops-app": 1, "provider:demo-crm": 1}
    # Room again: the resume screens the sealed arguments and asks for the approval then.
    apply_config(cli, tmp_path, config(business.url, 2))
    waiting = agent.resume("write")
    assert waiting["state"] == "awaiting_approval", waiting
    approver = bearer(admin_token(cli, "ann", "approver"))
    approval = waiting["approval"]
    assert_ok(requests.post(f"{server.url}/admin/api/tool-approvals/{approval['id']}/approve",
                            json={"args_hash": approval["args_hash"]}, headers=approver, timeout=30))
    # The bucket is full (2 of 2): the approved call is held back before its approval is used.
    assert client_refusal(agent.resume("write"), first=False)["approval_id"] == waiting["approval_id"]
    assert sql("SELECT status, consumed_at FROM bz_tool_approvals") == [("approved", None)]
    assert agent.receipt("write")["approval"]["status"] == "approved"
    assert business.executions(WRITE) == []
    apply_config(cli, tmp_path, config(business.url, 3))
    assert agent.resume("write")["state"] == "executed"
    assert sql("SELECT consumed_at IS NOT NULL FROM bz_tool_approvals") == [(True,)]
    assert len(business.executions(WRITE)) == 1


def test_no_limit_charges_no_client_bucket(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, config(business.url, None))  # the default: off
    agent = Agent(server.url, governed)
    assert [agent.invoke(READ, CUSTOMER, f"free-{i}")["state"] for i in range(3)] == ["executed"] * 3
    assert buckets(sql) == {"provider:demo-crm": 3}


# ----------------------------------------------------------------------------- knowledge search

def test_knowledge_search_shares_the_client_bucket(server, cli, business, governed, sql, tmp_path):
    apply_config(cli, tmp_path, config(business.url, 3, agent_client={"enabled": True,
                                                                       "knowledge": {"enabled": True}}))
    assert cli("knowledge", "add", ROUTE, str(KNOWLEDGE / "refunds.md"))[0] == 0
    agent = Agent(server.url, governed)
    other = Agent(server.url, second_session(cli))
    assert assert_ok(agent.search("refund"))["results"]
    assert assert_ok(other.search("refund"))["results"]
    assert agent.invoke(READ, CUSTOMER, "after-searches")["state"] == "executed"
    assert buckets(sql) == {"client:ops-app": 3, "provider:demo-crm": 1}
    # Full: a search is refused 429 with the wait, and charges nothing.
    refused = other.search("refund")
    assert_error(refused, 429, "rate_limited")
    assert int(refused.headers["Retry-After"]) in range(1, 61)  # whole seconds of a 60 s window
    client_refusal(agent.invoke(READ, CUSTOMER, "after-full"), first=True)
    assert buckets(sql) == {"client:ops-app": 3, "provider:demo-crm": 1}
    # An invalid search is refused for what it is, before the gate.
    assert_error(requests.post(f"{server.url}/agent-api/v1/workspaces/{ROUTE}/knowledge/search",
                               json={"query": " "}, headers=agent.headers, timeout=30), 400, "invalid_request")
