"""Core's Client API v1 (CLIENT_API_AND_EXECUTOR.md §1, §A): POST /run, GET /jobs/<id>, the Client
Token (issue, seal, revoke), and the route and client settings `config apply` takes for it.

Every refusal is sent over real HTTP and checked for its status, its exact body and that no job
(nor any of its events) was written."""
from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
import requests

from admin_app.identity import clients as client_tokens
from admin_app.jobs import principal, rules, submit
from tests.helpers import apply_config, bearer, cli_ok, cli_refused, row_counts
from tests.jobs_world import TARGET, JobsWorld

CORE_JSON = "application/json; charset=utf-8"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
SUBMIT_KEYS = {"job_id", "status", "request_id", "route", "target", "session_id", "continue"}
IDEMPOTENT_KEYS = {"job_id", "status", "request_id"}
UNAUTHORIZED = {"error": "unauthorized"}
NOT_FOUND = {"error": "not found"}
EXECUTOR_REFUSED = {"error": "Executor tokens are accepted only on /executor/* (claim, heartbeat, result)."}
REQUEST_ID_OR_INPUT = {"error": submit.REQUEST_ID_OR_INPUT}


@pytest.fixture
def jw(server, cli, business, tmp_path) -> JobsWorld:
    return JobsWorld(server, cli, business, tmp_path)


def post_run(jw: JobsWorld, body: Any = None, token: str | None = None, *, data: bytes | None = None,
             params: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> requests.Response:
    sent_headers = bearer(jw.client_token if token is None else token) if headers is None else headers
    if data is None:
        return requests.post(f"{jw.url}/run", json=body, headers=sent_headers, params=params, timeout=30)
    return requests.post(f"{jw.url}/run", data=data, headers=sent_headers, params=params, timeout=30)


def run_body(**fields: Any) -> dict[str, Any]:
    return {"request_id": f"req-{uuid.uuid4()}", "route": "desk", "input": "Look up customer C-1001", **fields}


def core_answer(response: requests.Response, status: int) -> Any:
    """Core's conventions on every answer (§1): the status, JSON in UTF-8, never cached, and no
    WWW-Authenticate challenge."""
    assert response.status_code == status, response.text[:2000]
    assert response.headers["Content-Type"] == CORE_JSON
    assert response.headers["Cache-Control"] == "no-store"
    assert "WWW-Authenticate" not in response.headers
    return response.json()


def nothing_written(sql) -> None:
    assert row_counts(sql, "bz_jobs", "bz_job_events") == {"bz_jobs": 0, "bz_job_events": 0}


def job_events(sql, job_id: str) -> list[str]:
    return [r[0] for r in sql("SELECT event FROM bz_job_events WHERE job_id = %s ORDER BY id", (job_id,))]


def add_client(cli, tmp_path, app_id: str, routes: list[str], **fields: Any) -> str:
    """Another client app on the same hub, with its Client Token."""
    apply_config(cli, tmp_path, {"client_apps": [{"app_id": app_id, "name": app_id, "allowed_routes": routes,
                                                  **fields}]})
    return str(cli_ok(cli("clients", "token", app_id))["client_token"])


def set_ops_app(cli, tmp_path, **fields: Any) -> None:
    apply_config(cli, tmp_path, {"client_apps": [{"app_id": "ops-app", "name": "Operations",
                                                  "allowed_routes": ["desk"], **fields}]})


def route_config(**fields: Any) -> dict[str, Any]:
    return {"route_key": "desk", "name": "Operations desk", "target": TARGET, **fields}


# ---------------------------------------------------------------- POST /run: a new job

def test_a_submission_queues_a_job_for_the_routes_executor_target(jw, sql):
    body = run_body(metadata={"order_id": "43", "principal": {"id": "u-1001", "tenant": "t-1", "roles": ["finance"]},
                              "on_behalf_of": "t-1:u-1001"})
    answer = core_answer(post_run(jw, body), 202)

    assert set(answer) == SUBMIT_KEYS
    assert answer["status"] == "queued"
    assert (answer["request_id"], answer["route"], answer["target"], answer["continue"]) == (
        body["request_id"], "desk", TARGET, False)
    job_id = uuid.UUID(answer["job_id"])
    assert (str(job_id), job_id.version) == (answer["job_id"], 4)
    assert uuid.UUID(answer["session_id"]).version == 4
    expected_principal = {"id": "u-1001", "tenant": "t-1", "roles": ["finance"], "channel": "ops-app",
                          "client_app_id": "ops-app"}
    row = sql("SELECT status, client_app_id, route_key, target, input, metadata, principal, on_behalf_of, "
              "callback_url, session_id, is_continue, thread_key, attempts, max_retries, error FROM bz_jobs")
    assert row == [("queued", "ops-app", "desk", TARGET, body["input"],
                    {**body["metadata"], "principal": expected_principal}, expected_principal, "t-1:u-1001",
                    None, answer["session_id"], False, f"req:{body['request_id']}", 0, 0, None)]
    assert job_events(sql, answer["job_id"]) == ["received", "awaiting_executor"]

    record = core_answer(jw.job(answer["job_id"]), 200)
    assert (record["job_id"], record["request_id"], record["status"], record["target"]) == (
        answer["job_id"], body["request_id"], "queued", TARGET)
    assert record["metadata"]["principal"] == expected_principal
    assert "claim_token" not in record


def test_limits_are_counted_in_utf16_units_and_a_request_at_each_limit_is_taken(jw, sql):
    emoji = "\U0001f600"  # two UTF-16 units
    at_limit = core_answer(post_run(jw, run_body(request_id=emoji * 64, input="x" * rules.INPUT_MAX)), 202)
    assert at_limit["request_id"] == emoji * 64
    for body in (run_body(request_id=emoji * 64 + "a"), run_body(input="x" * (rules.INPUT_MAX - 1) + emoji)):
        assert core_answer(post_run(jw, body), 400) == REQUEST_ID_OR_INPUT
    assert row_counts(sql, "bz_jobs")["bz_jobs"] == 1


def test_route_settings_give_retries_and_the_default_callback_url(jw, sql, cli, tmp_path):
    apply_config(cli, tmp_path, {"routes": [route_config(
        retry={"max": 3}, default_callback_url="https://business.example.com/hook")]})
    default = core_answer(post_run(jw, run_body()), 202)
    own = core_answer(post_run(jw, run_body(callback_url="http://127.0.0.1:9/cb")), 202)

    rows = dict(sql("SELECT id::text, (max_retries, callback_url)::text FROM bz_jobs"))
    assert rows == {default["job_id"]: "(3,https://business.example.com/hook)",
                    own["job_id"]: "(3,http://127.0.0.1:9/cb)"}


# ---------------------------------------------------------------- POST /run: refusals, in Core's order

REFUSALS: list[tuple[str, Any, int, dict[str, Any]]] = [
    ("body is an array", [], 400, {"error": "The request body must be a JSON object."}),
    ("body is a string", "run", 400, {"error": "The request body must be a JSON object."}),
    ("empty body", None, 400, REQUEST_ID_OR_INPUT),
    ("no request_id", {"route": "desk", "input": "x"}, 400, REQUEST_ID_OR_INPUT),
    ("request_id a number", run_body(request_id=7), 400, REQUEST_ID_OR_INPUT),
    ("blank request_id", run_body(request_id=" \u3000"), 400, REQUEST_ID_OR_INPUT),
    ("request_id of 129", run_body(request_id="r" * 129), 400, REQUEST_ID_OR_INPUT),
    ("no input", {"request_id": "r-1", "route": "desk"}, 400, REQUEST_ID_OR_INPUT),
    ("blank input", run_body(input="\n\t "), 400, REQUEST_ID_OR_INPUT),
    ("input too long", run_body(input="x" * (rules.INPUT_MAX + 1)), 400, REQUEST_ID_OR_INPUT),
    # PHP's HubClient sends an empty array when it has no metadata.
    ("metadata an array", run_body(metadata=[]), 400, {"error": "metadata must be a JSON object."}),
    ("metadata null", run_body(metadata=None), 400, {"error": "metadata must be a JSON object."}),
    ("callback_url ftp", run_body(callback_url="ftp://example.com/cb"), 400,
     {"error": "callback_url must be an http(s) URL of at most 2048 characters."}),
    ("callback_url no host", run_body(callback_url="https:///cb"), 400,
     {"error": "callback_url must be an http(s) URL of at most 2048 characters."}),
    ("callback_url too long", run_body(callback_url="https://example.com/" + "a" * 2029), 400,
     {"error": "callback_url must be an http(s) URL of at most 2048 characters."}),
    ("callback_url a number", run_body(callback_url=5), 400,
     {"error": "callback_url must be an http(s) URL of at most 2048 characters."}),
    ("no route", {"request_id": "r-1", "input": "x"}, 400,
     {"error": "route is required and must match ^[a-z0-9][a-z0-9_-]{1,63}$."}),
    ("route of one character", run_body(route="d"), 400,
     {"error": "route is required and must match ^[a-z0-9][a-z0-9_-]{1,63}$."}),
    # project/profile come before unknown fields: 403 even with wait_ms beside them.
    ("project", run_body(project="private-project", wait_ms=1000), 403,
     {"error": "A client cannot choose project or profile: the route decides them."}),
    ("profile an empty object", run_body(profile={}), 403,
     {"error": "A client cannot choose project or profile: the route decides them."}),
    ("unknown fields", run_body(wait_ms=1000, source="crm", project=""), 400,
     {"error": "Fields the Client API does not declare: wait_ms, source, project "
               "(a client sends only request_id, route, input, metadata, callback_url)."}),
    ("route not allowed", run_body(route="orders"), 403, {"error": "Client ops-app may not use route orders."}),
    ("auto", run_body(route="auto"), 400,
     {"error": "route=auto matched no route: this hub selects no route automatically; name the route.",
      "decision": {"mode": "auto", "ok": False, "candidates": [], "error": "route_auto_no_match"}}),
]


def test_every_refusal_of_the_body_answers_as_core_and_writes_no_job(jw, sql):
    for case, body, status, expected in REFUSALS:
        response = post_run(jw, data=b"") if body is None else post_run(jw, body)
        assert (case, response.status_code, response.json()) == (case, status, expected)
        core_answer(response, status)
    nothing_written(sql)


def test_credentials_pause_and_body_limits_are_checked_before_anything_else(jw, sql, cli):
    assert core_answer(post_run(jw, run_body(), headers={}), 401) == UNAUTHORIZED
    assert core_answer(post_run(jw, run_body(), token="bzct_" + "x" * 43), 401) == UNAUTHORIZED
    assert core_answer(post_run(jw, run_body(), headers={"Authorization": "Basic b3BzOmFwcA=="}), 401) == UNAUTHORIZED
    assert core_answer(post_run(jw, run_body(), token=jw.executor_token), 403) == EXECUTOR_REFUSED
    too_large = b'{"request_id": "r-1", "route": "desk", "input": "' + b"x" * rules.BODY_MAX_BYTES + b'"}'
    assert core_answer(post_run(jw, data=too_large), 413) == {"error": "payload too large", "max_bytes": 1048576}
    # Core answers malformed JSON with its catch-all 500; the hub says what is wrong.
    assert core_answer(post_run(jw, data=b'{"request_id": '), 400) == {
        "error": "The request body is not valid JSON (Expecting value at line 1 column 16)."}
    assert core_answer(post_run(jw, data=b'{"a": 1, "a": 2}'), 400) == {
        "error": "The request body is not valid JSON (or holds duplicate keys, NaN or Infinity, NUL characters "
                 "or lone surrogates)."}

    cli_ok(cli("pause", "--reason", "Maintenance"))
    # Paused: answered before the body is read, so even a body that is no JSON gets 503.
    assert core_answer(post_run(jw, data=b"not json"), 503) == {"status": "paused"}
    assert core_answer(post_run(jw, run_body()), 503) == {"status": "paused"}
    assert core_answer(post_run(jw, run_body(), headers={}), 401) == UNAUTHORIZED  # credentials come first
    nothing_written(sql)


def test_route_and_target_refusals_follow_the_rate_limit_and_write_no_job(jw, sql):
    sql("UPDATE bz_client_apps SET allowed_routes = '{*}' WHERE app_id = 'ops-app'")
    cases = [
        ("unknown route", None, run_body(route="ghost"), 400, {"error": "Unknown route: ghost."}),
        ("disabled route", "UPDATE bz_routes SET enabled = false", run_body(), 400,
         {"error": "Route desk is disabled."}),
        ("audience without a principal",
         "UPDATE bz_routes SET enabled = true, audience = '{\"enabled\": true, \"tenants\": [\"t-1\"]}'",
         run_body(), 403, {"error": "The principal may not use route desk.", "reason": "route_requires_principal"}),
        ("audience of another tenant", None, run_body(metadata={"user_id": "u-1", "tenant": "t-2"}), 403,
         {"error": "The principal may not use route desk.", "reason": "tenant_not_allowed"}),
        ("audience of another role", "UPDATE bz_routes SET audience = '{\"enabled\": true, \"roles\": [\"finance\"]}'",
         run_body(metadata={"principal": {"uid": 7, "role": "clerk, sales"}}), 403,
         {"error": "The principal may not use route desk.", "reason": "role_not_allowed"}),
        ("route without a target", "UPDATE bz_routes SET audience = '{\"enabled\": false}', target = NULL",
         run_body(), 400, {"error": submit.NO_TARGET.format(route="desk")}),
        ("unknown target", "UPDATE bz_routes SET target = 'ghost-worker'", run_body(), 400,
         {"error": "Unknown target: ghost-worker (it must be declared in executor_targets)."}),
        ("disabled target", f"UPDATE bz_routes SET target = '{TARGET}'; UPDATE bz_executor_targets SET enabled = false",
         run_body(), 400, {"error": f"Target {TARGET} is disabled."}),
    ]
    for case, setup, body, status, expected in cases:
        if setup:
            for statement in setup.split("; "):
                sql(statement)
        response = post_run(jw, body)
        assert (case, response.status_code, response.json()) == (case, status, expected)
        core_answer(response, status)
    nothing_written(sql)
    sql("UPDATE bz_executor_targets SET enabled = true")
    assert core_answer(post_run(jw, run_body()), 202)["status"] == "queued"


def test_the_audience_admits_the_principal_it_names(jw, sql):
    sql("UPDATE bz_routes SET audience = '{\"enabled\": true, \"tenants\": [\"t-1\"], \"roles\": [\"finance\"]}'")
    answer = core_answer(post_run(jw, run_body(metadata={"subject": {"user_id": "u-7", "org_id": "t-1",
                                                                      "roles": "finance,ops"}})), 202)
    assert sql("SELECT principal FROM bz_jobs WHERE id = %s", (answer["job_id"],))[0][0] == {
        "id": "u-7", "tenant": "t-1", "roles": ["finance", "ops"], "channel": "ops-app", "client_app_id": "ops-app"}


def test_the_client_rate_limit_answers_429_and_counts_retries_too(jw, sql, cli, tmp_path):
    set_ops_app(cli, tmp_path, rate_limit_per_min=2)
    first = run_body()
    assert core_answer(post_run(jw, first), 202)["status"] == "queued"
    assert core_answer(post_run(jw, run_body(route="ghost-route")), 403)  # refused before the limit: not counted
    assert core_answer(post_run(jw, run_body()), 202)["status"] == "queued"
    refused = {"error": "Rate limit exceeded (2/min): retry later with the same request_id."}
    assert core_answer(post_run(jw, run_body()), 429) == refused
    assert core_answer(post_run(jw, first), 429) == refused  # as Core: the limit before the stored job
    assert row_counts(sql, "bz_jobs")["bz_jobs"] == 2


def test_an_unexpected_failure_is_cores_500_with_the_request_id(jw, sql, monkeypatch):
    def broken(*args: Any) -> None:
        raise RuntimeError("boom: secret detail")

    monkeypatch.setattr(submit, "submit", broken)
    response = post_run(jw, run_body())
    assert core_answer(response, 500) == {"error": "internal_error", "request_id": response.headers["X-Request-Id"]}
    assert "boom" not in response.text
    nothing_written(sql)


# ---------------------------------------------------------------- Core's own vectors, replayed live

# CLIENT-RUN-* of contracts/client-api/v1/vectors.json (Core e9d44aa0), with what live Core answers.
RUN_VECTORS: list[tuple[str, dict[str, Any], int]] = [
    ("CLIENT-RUN-001", {"request_id": "crm:refund:20260723:1", "route": "refund_review",
                        "input": "Review refund request 42."}, 202),
    ("CLIENT-RUN-002", {"request_id": "crm:refund:20260723:2", "route": "refund_review",
                        "input": "Review refund request 43.",
                        "metadata": {"order_id": "43", "principal": {"id": "u-1001", "tenant": "t-1",
                                                                     "roles": ["finance"]}},
                        "callback_url": "https://business.example.com/bailinghub/callback"}, 202),
    ("CLIENT-RUN-INVALID-001", {"route": "refund_review", "input": "Missing the idempotency key."}, 400),
    ("CLIENT-RUN-INVALID-002", {"request_id": "crm:refund:3", "route": "Refund Review",
                                "input": "Invalid route syntax."}, 400),
    ("CLIENT-RUN-INVALID-003", {"request_id": "crm:refund:4", "route": "refund_review",
                                "input": "Client requests cannot override runtime ownership.",
                                "project": "private-project"}, 403),
    ("CLIENT-RUN-INVALID-004", {"request_id": " ", "route": "refund_review",
                                "input": "The idempotency key cannot be blank."}, 400),
    ("CLIENT-RUN-INVALID-005", {"request_id": "crm:refund:5",
                                "route": ("route_name_that_is_longer_than_the_public_client_api_"
                                          "sixty_four_character_limit"),
                                "input": "The route cannot exceed the public contract limit."}, 400),
]


def test_cores_run_vectors_replayed_live(jw, sql, cli, tmp_path):
    apply_config(cli, tmp_path, {"routes": [{"route_key": "refund_review", "name": "Refund review", "target": TARGET}],
                                 "client_apps": [{"app_id": "ops-app", "name": "Operations",
                                                  "allowed_routes": ["desk", "refund_review"]}]})
    accepted = []
    for case, body, status in RUN_VECTORS:
        response = post_run(jw, body)
        assert (case, response.status_code) == (case, status), response.text
        answer = core_answer(response, status)
        if status == 202:
            # The shape of CLIENT-SUBMIT-001 (target: our executor target instead of Core's `llm`).
            assert (case, set(answer), answer["status"], answer["route"]) == (case, SUBMIT_KEYS, "queued",
                                                                              "refund_review")
            accepted.append(body["request_id"])
        else:
            assert (case, set(answer), isinstance(answer["error"], str)) == (case, {"error"}, True)
    assert sorted(r[0] for r in sql("SELECT request_id FROM bz_jobs")) == sorted(accepted)
    # CLIENT-SUBMIT-IDEMPOTENT-001: a retry answers the three keys, with the current status.
    again = core_answer(post_run(jw, RUN_VECTORS[0][1]), 202)
    assert set(again) == IDEMPOTENT_KEYS and again["status"] == "queued"
    # CLIENT-ERROR-001: the 404 body.
    assert core_answer(jw.job(ZERO_UUID), 404) == {"error": "not found"}


# ---------------------------------------------------------------- idempotency

def test_a_retry_of_the_same_client_answers_the_stored_job_without_comparing_bodies(jw, sql):
    first = core_answer(post_run(jw, run_body(request_id="order-7")), 202)
    sql("UPDATE bz_jobs SET status = 'done', result = '{\"text\": \"ok\"}'")
    again = core_answer(post_run(jw, run_body(request_id="order-7", input="Something else entirely")), 202)

    assert again == {"job_id": first["job_id"], "status": "done", "request_id": "order-7"}
    assert sql("SELECT count(*), min(input) FROM bz_jobs") == [(1, "Look up customer C-1001")]
    assert job_events(sql, first["job_id"]) == ["received", "awaiting_executor"]


def test_another_clients_request_id_is_a_conflict(jw, sql, cli, tmp_path):
    first = core_answer(post_run(jw, run_body(request_id="shared-id")), 202)
    other = add_client(cli, tmp_path, "crm-two", ["desk"])

    assert core_answer(post_run(jw, run_body(request_id="shared-id"), token=other), 409) == {
        "error": "request_id is already used by another client: use an id of your own (prefix it with your app id)."}
    assert sql("SELECT id::text, client_app_id FROM bz_jobs") == [(first["job_id"], "ops-app")]
    # Nor can the other client read it.
    assert core_answer(jw.job(first["job_id"], token=other), 404) == NOT_FOUND


def test_concurrent_first_submissions_make_exactly_one_job(jw, sql):
    body = run_body(request_id="burst-1")
    answers: list[requests.Response] = []
    start = threading.Barrier(8)

    def send() -> None:
        start.wait()
        answers.append(post_run(jw, body))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    bodies = [core_answer(r, 202) for r in answers]
    assert len(bodies) == 8
    assert {b["job_id"] for b in bodies} == {sql("SELECT id::text FROM bz_jobs")[0][0]}
    assert sorted(len(b) for b in bodies) == [3] * 7 + [7]
    assert row_counts(sql, "bz_jobs")["bz_jobs"] == 1
    assert len(job_events(sql, bodies[0]["job_id"])) == 2


# ---------------------------------------------------------------- step 21: rejected jobs

def test_an_exhausted_route_budget_makes_a_rejected_job(jw, sql, cli, tmp_path):
    apply_config(cli, tmp_path, {"routes": [route_config(budget={"window": "day", "hard_tokens": 100})]})
    spent = core_answer(post_run(jw, run_body()), 202)
    sql("UPDATE bz_jobs SET status = 'done', usage = '{\"tokens\": 60}'")
    assert core_answer(post_run(jw, run_body()), 202)["status"] == "queued"  # 60 < 100
    sql("UPDATE bz_jobs SET usage = '{\"tokens\": 40, \"cost_usd\": \"9\"}' WHERE id <> %s", (spent["job_id"],))

    body = run_body()
    answer = core_answer(post_run(jw, body), 202)
    assert set(answer) == SUBMIT_KEYS and answer["status"] == "rejected"
    error = "Budget exceeded: the route's token budget for the last 24 hours is used up."
    assert sql("SELECT status, error, finished_at IS NOT NULL FROM bz_jobs WHERE id = %s", (answer["job_id"],)) == [
        ("rejected", error, True)]
    assert job_events(sql, answer["job_id"]) == ["received", "rejected"]
    detail = sql("SELECT detail FROM bz_job_events WHERE event = 'rejected'")[0][0]
    assert (detail["reason"], detail["usage"]["tokens"]) == ("budget_route_tokens_exceeded", 100)
    record = core_answer(jw.job(answer["job_id"]), 200)
    assert (record["status"], record["error"]) == ("rejected", error)
    # The rejected job keeps its request_id: a retry answers it.
    assert core_answer(post_run(jw, body), 202) == {"job_id": answer["job_id"], "status": "rejected",
                                                    "request_id": body["request_id"]}


def test_an_exhausted_client_budget_makes_a_rejected_job(jw, sql, cli, tmp_path):
    set_ops_app(cli, tmp_path, budget={"window_hours": 2, "hard_cost_usd": 0.5})
    core_answer(post_run(jw, run_body()), 202)
    sql("UPDATE bz_jobs SET status = 'done', usage = '{\"cost_usd\": 0.5}'")
    answer = core_answer(post_run(jw, run_body()), 202)
    assert answer["status"] == "rejected"
    assert sql("SELECT error FROM bz_jobs WHERE id = %s", (answer["job_id"],)) == [
        ("Budget exceeded: the client's cost budget for the last 2 hours is used up.",)]
    # Usage older than the window does not count.
    sql("UPDATE bz_jobs SET created_at = now() - interval '3 hours'")
    assert core_answer(post_run(jw, run_body()), 202)["status"] == "queued"


def test_a_passed_through_session_is_one_thread_with_an_in_flight_quota(jw, sql, cli, tmp_path):
    apply_config(cli, tmp_path, {"routes": [route_config(session_policy="passthrough",
                                                         session_key_field="conversation")]})
    answers = [core_answer(post_run(jw, run_body(metadata={"conversation": "chat-9"})), 202) for _ in range(6)]
    assert {(a["status"], a["session_id"], a["continue"]) for a in answers} == {("queued", "chat-9", True)}

    seventh = core_answer(post_run(jw, run_body(metadata={"conversation": "chat-9"})), 202)
    assert (seventh["status"], seventh["session_id"]) == ("rejected", "chat-9")
    assert sql("SELECT error FROM bz_jobs WHERE id = %s", (seventh["job_id"],)) == [
        ("Too many jobs in flight on this session (at least 6): wait for them to finish before sending more.",)]
    other = core_answer(post_run(jw, run_body(metadata={"conversation": 12})), 202)
    assert (other["status"], other["session_id"], other["continue"]) == ("queued", "12", True)
    fresh = core_answer(post_run(jw, run_body(metadata={"session_id": "not-the-field"})), 202)
    assert (fresh["status"], fresh["continue"]) == ("queued", False)
    assert uuid.UUID(fresh["session_id"]).version == 4
    # A finished job frees its place on the thread.
    sql("UPDATE bz_jobs SET status = 'done' WHERE id = %s", (answers[0]["job_id"],))
    assert core_answer(post_run(jw, run_body(metadata={"conversation": "chat-9"})), 202)["status"] == "queued"
    assert sql("SELECT DISTINCT thread_key FROM bz_jobs WHERE session_id = 'chat-9'") == [
        ("session:ops-app:desk:chat-9",)]


# ---------------------------------------------------------------- GET /jobs/<id>

def test_dify_credential_probe(jw):
    health = requests.get(f"{jw.url}/health", timeout=30)
    assert health.status_code == 200 and isinstance(health.json()["status"], str)
    assert core_answer(jw.job(ZERO_UUID), 404) == NOT_FOUND
    assert core_answer(jw.job(ZERO_UUID, token="bzct_" + "y" * 43), 401) == UNAUTHORIZED


def test_jobs_are_read_by_their_own_client_only(jw, sql, cli, tmp_path):
    job_id = core_answer(post_run(jw, run_body()), 202)["job_id"]
    other = add_client(cli, tmp_path, "crm-two", ["desk"])
    none = requests.get(f"{jw.url}/jobs/{job_id}", timeout=30)

    assert core_answer(jw.job(job_id), 200)["job_id"] == job_id
    assert core_answer(jw.job(job_id, token=other), 404) == NOT_FOUND
    assert core_answer(jw.job(job_id.upper()), 404) == NOT_FOUND
    assert core_answer(jw.job("not-a-uuid"), 404) == NOT_FOUND
    assert core_answer(jw.job(str(uuid.uuid4())), 404) == NOT_FOUND
    assert core_answer(jw.job(job_id, token=jw.executor_token), 403) == EXECUTOR_REFUSED
    assert core_answer(none, 401) == UNAUTHORIZED


def test_the_token_travels_in_the_query_and_the_header_wins(jw):
    query = {"token": jw.client_token}
    answer = core_answer(post_run(jw, run_body(), headers={}, params=query), 202)
    assert core_answer(requests.get(f"{jw.url}/jobs/{answer['job_id']}", params=query, timeout=30), 200)[
        "job_id"] == answer["job_id"]
    assert core_answer(requests.get(f"{jw.url}/jobs/{answer['job_id']}", params=query, timeout=30,
                                    headers=bearer("bzct_" + "z" * 43)), 401) == UNAUTHORIZED


def test_a_paused_hub_still_answers_what_became_of_a_job(jw, cli):
    job_id = core_answer(post_run(jw, run_body()), 202)["job_id"]
    cli_ok(cli("pause", "--reason", "Maintenance"))
    assert core_answer(jw.job(job_id), 200)["status"] == "queued"


def test_other_methods_are_not_found_once_the_caller_is_known(jw, sql):
    job_id = core_answer(post_run(jw, run_body()), 202)["job_id"]
    for method, path in (("GET", "/run"), ("PUT", "/run"), ("DELETE", f"/jobs/{job_id}"), ("POST", f"/jobs/{job_id}")):
        authorised = requests.request(method, jw.url + path, headers=bearer(jw.client_token), timeout=30)
        assert (method, path, core_answer(authorised, 404)) == (method, path, NOT_FOUND)
        assert core_answer(requests.request(method, jw.url + path, timeout=30), 401) == UNAUTHORIZED
    assert sql("SELECT status FROM bz_jobs") == [("queued",)]


# ---------------------------------------------------------------- the Client Token

def test_a_revoked_client_token_is_refused_and_its_sealed_copy_is_gone(jw, sql, cli):
    job_id = core_answer(post_run(jw, run_body()), 202)["job_id"]
    assert cli_ok(cli("clients", "revoke-token", "ops-app")) == {"app_id": "ops-app", "revoked": True}

    assert core_answer(post_run(jw, run_body()), 401) == UNAUTHORIZED
    assert core_answer(jw.job(job_id), 401) == UNAUTHORIZED
    assert sql("SELECT client_token_hash, client_token_sealed FROM bz_client_apps WHERE app_id = 'ops-app'") == [
        (None, None)]
    assert cli_ok(cli("clients", "revoke-token", "ops-app")) == {"app_id": "ops-app", "revoked": False}
    cli_refused(cli("clients", "revoke-token", "ghost-app"), "client_not_found")
    token = cli_ok(cli("clients", "token", "ops-app"))["client_token"]
    assert core_answer(jw.job(job_id, token=token), 200)["job_id"] == job_id


def test_the_client_token_is_sealed_for_callbacks_under_the_secret_key(jw, sql, cli, app):
    sealed = sql("SELECT client_token_sealed FROM bz_client_apps WHERE app_id = 'ops-app'")[0][0]
    assert sealed and jw.client_token not in sealed
    with app.app_context():
        key = app.secret_key
        with app.extensions["bailing"].db.session() as db:
            assert client_tokens.callback_secret(db, "ops-app", key) == jw.client_token
            assert client_tokens.callback_secret(db, "ops-app", "another secret key") is None
            assert client_tokens.callback_secret(db, "crm-two", key) is None  # no such app
        rotated = cli_ok(cli("clients", "token", "ops-app"))["client_token"]
        with app.extensions["bailing"].db.session() as db:
            assert client_tokens.callback_secret(db, "ops-app", key) == rotated
    # A seal that holds another token than the one in force is not used.
    sql("UPDATE bz_client_apps SET client_token_sealed = %s WHERE app_id = 'ops-app'", (sealed,))
    with app.app_context(), app.extensions["bailing"].db.session() as db:
        assert client_tokens.callback_secret(db, "ops-app", key) is None


# ---------------------------------------------------------------- configuration

def test_config_declares_targets_and_keeps_route_and_client_job_settings(jw, sql, cli, tmp_path):
    report = apply_config(cli, tmp_path, {
        "executor_targets": [{"name": "night-shift", "description": "Batch runners", "enabled": False}],
        "routes": [route_config(target="night-shift", retry={"max": 2}, session_policy="passthrough",
                                default_callback_url="https://business.example.com/cb",
                                budget={"window": "month", "hard_cost_usd": 12.5, "soft_tokens": 10},
                                tools={"max_calls": 9})],
        "client_apps": [{"app_id": "ops-app", "name": "Operations", "allowed_routes": ["desk"],
                         "budget": {"hard_tokens": 5000, "enabled": False}}]})

    assert report["created"]["executor_targets"] == ["night-shift"]
    assert sql("SELECT name, description, enabled FROM bz_executor_targets ORDER BY name") == [
        (TARGET, "The desk's executors", True), ("night-shift", "Batch runners", False)]
    assert sql("SELECT target, job_settings FROM bz_routes WHERE route_key = 'desk'") == [(
        "night-shift", {"retry": {"max": 2}, "default_callback_url": "https://business.example.com/cb",
                        "session_policy": "passthrough",
                        "budget": {"enabled": True, "window_hours": 720, "hard_cost_usd": 12.5, "soft_tokens": 10},
                        "max_calls": 9})]
    assert sql("SELECT job_budget FROM bz_client_apps WHERE app_id = 'ops-app'") == [
        ({"enabled": False, "window_hours": 24, "hard_tokens": 5000},)]
    # The target is disabled: the route takes no work.
    assert core_answer(post_run(jw, run_body()), 400) == {"error": "Target night-shift is disabled."}


def test_config_refuses_bad_job_settings_with_their_paths(jw, sql, cli, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({
        "executor_targets": [{"name": "Bad Name"}, {"name": "ok-target", "kind": "inhub"}],
        "routes": [route_config(target="ghost", retry={"max": 6, "backoff_ms": 5000}, default_callback_url="ftp://x",
                                session_policy="fixed", session_key_field="conv",
                                budget={"window": "week", "window_hours": 2, "hard_tokens": 0, "hard_cost_usd": True},
                                tools={"max_calls": 51}, wait_ms=5)],
        "client_apps": [{"app_id": "ops-app", "name": "Operations", "budget": {"hard_cost_usd": -1, "window": 7}}]}))
    before = sql("SELECT target, job_settings FROM bz_routes")
    code, out, err = cli("config", "apply", str(path))

    assert (code, out) == (1, "")
    problems = {p["path"]: p["message"] for p in err["problems"]}
    assert problems == {
        "executor_targets[0].name": "must match ^[a-z0-9][a-z0-9_-]{1,63}$",
        "executor_targets[1].kind": "is not a known field",
        "routes[0].wait_ms": "is not a known field",
        "routes[0].tools.max_calls": "must be at most 50",
        "routes[0].target": "no executor target named 'ghost' (declare it in executor_targets)",
        "routes[0].retry.backoff_ms": "is not a known field",
        "routes[0].retry.max": "must be at most 5",
        "routes[0].default_callback_url": "must be an http(s) URL of at most 2048 characters",
        "routes[0].session_policy": "must be 'new' or 'passthrough'",
        "routes[0].session_key_field": "is used only with session_policy 'passthrough'",
        "routes[0].budget.window_hours": "give either window or window_hours, not both",
        "routes[0].budget.hard_tokens": "must be at least 1",
        "routes[0].budget.hard_cost_usd": "must be a number above 0",
        "client_apps[0].budget.window": "must be 'hour', 'day' or 'month'",
        "client_apps[0].budget.hard_cost_usd": "must be a number above 0",
    }
    assert sql("SELECT target, job_settings FROM bz_routes") == before
    assert sql("SELECT name FROM bz_executor_targets") == [(TARGET,)]


# ---------------------------------------------------------------- rules, without a server

@pytest.mark.any_server
@pytest.mark.parametrize("metadata, expected", [
    ({"principal": {"id": " u-1 ", "tenant": "t-1", "roles": ["a", 2, True, " "], "audience": "staff"}},
     {"id": "u-1", "tenant": "t-1", "roles": ["a", "2"], "audience": "staff"}),
    ({"principal": "u-flat", "tenant_id": 42, "role": "a, b,,c", "user_type": "vip"},
     {"id": "u-flat", "tenant": "42", "roles": ["a", "b", "c"], "audience": "vip"}),
    ({"operator": {"openid": 1.0, "workspace_id": "w", "kind": "bot"}},
     {"id": "1", "tenant": "w", "roles": [], "audience": "bot"}),
    ({"principal": {"tenant": "t"}, "user_id": "ignored-when-an-object-is-there"}, None),
    ({"visitor_uid": "v-9"}, {"id": "v-9", "roles": []}),
    ({"principal_id": True, "uid": "\U0001f600" * 70}, {"id": "\U0001f600" * 64, "roles": []}),
    ({}, None),
])
def test_the_principal_is_normalised_as_core_does(metadata, expected):
    got = principal.normalise(metadata, "ops-app")
    assert got == (None if expected is None else {**expected, "channel": "ops-app", "client_app_id": "ops-app"})


@pytest.mark.any_server
@pytest.mark.parametrize("metadata, expected", [
    ({"on_behalf_of": "t-7:u-42", "visitor_uid": "v-1"}, "t-7:u-42"),
    ({"on_behalf_of": "  ", "visitor_uid": "v-1"}, "v-1"),
    ({"on_behalf_of": "a\nb"}, None),
    ({"on_behalf_of": "x" * 192}, None),
    ({"visitor_uid": 7}, None),
    ({"principal": {"id": "u-1"}}, None),
])
def test_the_subject_is_metadata_on_behalf_of_else_visitor_uid(metadata, expected):
    assert principal.subject(metadata) == expected


@pytest.mark.any_server
@pytest.mark.parametrize("url, ok", [
    ("https://business.example.com/cb?x=1", True), ("http://127.0.0.1:8080/cb", True), ("HTTPS://EXAMPLE.COM", True),
    ("ftp://example.com/cb", False), ("https://", False), ("https://exa mple.com", False),
    ("https://example.com:99999/", False), ("javascript:alert(1)", False), ("", False),
    ("https://example.com/" + "a" * 2028, True), ("https://example.com/" + "a" * 2029, False),
])
def test_callback_urls(url, ok):
    assert rules.callback_url_ok(url) is ok
