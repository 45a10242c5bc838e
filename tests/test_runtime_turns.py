"""Issue 4, items 2, 3 and 6: turns (bailing.agent-turn-context.v1), memory assembly with the
execution-summary marker, and run completion.

Every request goes over real HTTP to a live server backed by a real PostgreSQL. Each refusal is
checked for its status, its error code and that nothing was stored.
"""
from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from admin_app import limits
from tests.conftest import EXAMPLES
from tests.helpers import apply_config, assert_error, row_counts, session_bearer

JSON = {"Content-Type": "application/json"}
ROUTE = "customers"
BODY_MAX = limits.RUNTIME_BODY_MAX_BYTES
SUMMARY_SCHEMA = "bailing.authorization-execution-summary.v1"
TASK_BINDING = {"schema_version": "bailing.agent-task-binding.v1",
                "task_id": "9732feb7-11a4-4a72-a6fb-8f39ebf61199", "scope_hash": "a" * 64}
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
SUMMARY_KEYS = {"role", "message_id", "kind", "source", "trust", "schema", "invocations", "total",
                "omitted"}
RECORD_KEYS = {"invocation_id", "tool", "state", "next_action"}


# ----------------------------------------------------------------------------- helpers

def json_headers(session: dict) -> dict:
    """The agent session's bearer and a JSON content type (bodies are sent as bytes too)."""
    return {**session_bearer(session), **JSON}


def turns_path(route: str = ROUTE) -> str:
    return f"/agent-api/v1/workspaces/{route}/turns"


def complete_path(run_id: str) -> str:
    return f"/agent-api/v1/runs/{run_id}/complete"


def turn_body(n: int = 1, **changes) -> dict:
    body = {"client_conversation_id": "conv-1", "client_turn_id": f"turn-{n}",
            "user_message_id": f"msg-{n}", "user_input": "Find the customer named Ada"}
    body.update(changes)
    return body


def completion_body(n: int = 1, **changes) -> dict:
    body = {"assistant_message_id": f"asst-{n}", "status": "completed", "content": "Done.",
            "model": "local-model", "runtime": "local-runtime",
            "usage": {"input_tokens": 120, "cached_input_tokens": 80, "output_tokens": 30,
                      "total_tokens": 150, "tool_calls": 1}}
    body.update(changes)
    return body


def post_turn(server, session: dict, body, route: str = ROUTE):
    return server.post(turns_path(route), json=body, headers=json_headers(session))


def turn(server, session: dict, body, route: str = ROUTE) -> dict:
    response = post_turn(server, session, body, route)
    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    context = response.json()
    assert context["schema_version"] == "bailing.agent-turn-context.v1"
    return context


def complete(server, session: dict, run_id: str, body):
    return server.post(complete_path(run_id), json=body, headers=json_headers(session))


def exchange(server, session: dict, n: int, user_input: str, reply: str | None) -> dict:
    """Turn n of conv-1, completed with `reply` unless it is None; returns the turn context."""
    context = turn(server, session, turn_body(n, user_input=user_input))
    if reply is not None:
        response = complete(server, session, context["run_id"], completion_body(n, content=reply))
        assert response.status_code == 200, response.text
    return context


def assert_invalid(response, *paths: str) -> dict:
    body = assert_error(response, 400, "invalid_request")
    named = {p["path"] for p in body["problems"]}
    for path in paths:
        assert any(n == path or n.startswith((path + ".", path + "[")) for n in named), \
            (path, body)
    return body


def stored(sql) -> dict:
    return row_counts(sql, "bz_runs", "bz_messages", "bz_threads")


def run_row(sql, run_id: str):
    rows = sql("SELECT status, completion, completion_hash FROM bz_runs WHERE id = %s", (run_id,))
    assert len(rows) == 1
    return rows[0]


def memory_of(context: dict) -> dict:
    """The turn's memory with each entry's `created_at` checked and set aside, so that entries
    compare by what they say."""
    memory = copy.deepcopy(context["context"]["memory"])
    assert memory["summary"] is None
    for e in memory["recent"]:
        assert ISO_MS.match(e.pop("created_at")), e
    return memory


def entry(context: dict, message_id: str, role: str) -> dict:
    found = [e for e in memory_of(context)["recent"]
             if e["message_id"] == message_id and e["role"] == role]
    assert len(found) == 1, memory_of(context)
    return found[0]


def hub_route() -> dict:
    return json.loads((EXAMPLES / "hub.json").read_text())["routes"][0]


@pytest.fixture
def agent(issue_session) -> dict:
    return issue_session()


@pytest.fixture
def set_memory(cli, tmp_path, configured):
    """Re-apply the example route `customers` with these agent_client.memory settings."""

    def apply(**memory) -> None:
        route = hub_route()
        route["agent_client"]["memory"] = memory
        apply_config(cli, tmp_path, {"routes": [route]})

    return apply


# ----------------------------------------------------------------------------- turn: request rules

@pytest.mark.parametrize("field", ["client_conversation_id", "client_turn_id", "user_message_id",
                                   "user_input"])
def test_each_required_turn_field_is_required(server, agent, sql, field):
    body = turn_body()
    del body[field]
    before = stored(sql)

    problems = assert_invalid(post_turn(server, agent, body), field)["problems"]

    assert {"path": field, "message": "is required"} in problems
    assert stored(sql) == before


@pytest.mark.parametrize("extra", [{"reasoning": "x"}, {"model": "m"}, {"renderer": ["markdown"]},
                                   {"discovery": {}}])
def test_an_unknown_turn_field_is_refused(server, agent, sql, extra):
    before = stored(sql)

    assert_invalid(post_turn(server, agent, turn_body(**extra)))

    assert stored(sql) == before


@pytest.mark.parametrize("text, accepted", [
    ("a" * 64000, True),
    ("a" * 64001, False),
    ("😀" * 32000, True),             # 2 UTF-16 code units each: exactly 64,000
    ("😀" * 32000 + "a", False),
    ("é" * 64000, True),              # one unit each, though two UTF-8 bytes
    ("", False),
    (" \n\t ", False),
    ("a\x07b", False),
    ("a\x7fb", False),
    ("\tline one\r\nline two\n", True),  # tab, CR and LF are text; kept exactly
], ids=["ascii-64000", "ascii-64001", "astral-32000", "astral-32000+1", "latin-64000", "empty", "blank",
        "bell", "delete", "tab-cr-lf"])
def test_user_input_is_limited_to_64000_utf16_code_units(server, agent, sql, text, accepted):
    before = stored(sql)

    response = post_turn(server, agent, turn_body(user_input=text))

    if accepted:
        assert response.status_code == 200, response.text[:500]
        rows = sql("SELECT content FROM bz_messages WHERE role = 'user' AND message_id = 'msg-1'")
        assert rows == [(text,)]  # stored whole, not truncated
    else:
        assert_invalid(response, "user_input")
        assert stored(sql) == before


@pytest.mark.parametrize("value", [None, 42, ["text"], {"text": "hi"}])
def test_user_input_must_be_a_string(server, agent, sql, value):
    before = stored(sql)
    assert_invalid(post_turn(server, agent, turn_body(user_input=value)), "user_input")
    assert stored(sql) == before


@pytest.mark.parametrize("field", ["client_conversation_id", "client_turn_id", "user_message_id"])
@pytest.mark.parametrize("value, accepted", [("i" * 128, True), ("i" * 129, False), ("", False),
                                             ("a\nb", False), ("a\x07b", False), (7, False),
                                             ("Ab9_.:-z", True), ("-leading", False), ("a b", False),
                                             ("é", False), ("  padded-id \n", True)],
                         ids=["128", "129", "empty", "newline", "control", "int", "all-classes",
                              "leading-dash", "space", "non-ascii", "trimmed"])
def test_turn_identifiers_follow_the_client_identifier_pattern(server, agent, sql, field, value, accepted):
    before = stored(sql)

    response = post_turn(server, agent, turn_body(**{field: value}))

    if accepted:
        assert response.status_code == 200, response.text
        assert response.json()[field] == value.strip()
    else:
        assert_invalid(response, field)
        assert stored(sql) == before


@pytest.mark.parametrize("page", [
    {"url": "/" + "u" * 5000, "title": "a\nb", "referrer": "/y", "nested": {"list": [1, None, True]}},
    {},
], ids=["any-object", "empty"])
def test_page_context_is_any_json_object(server, agent, page):
    context = turn(server, agent, turn_body(page_context=page))
    assert context["context"]["page_context"] == page


def test_page_context_defaults_to_an_empty_object(server, agent):
    context = turn(server, agent, turn_body())
    assert context["context"]["page_context"] == {} and context["context"]["renderers"] == []


@pytest.mark.parametrize("page", ["/staff", ["a"], 7, None], ids=["string", "list", "number", "null"])
def test_a_page_context_that_is_not_an_object_is_400(server, agent, sql, page):
    before = stored(sql)
    assert_invalid(post_turn(server, agent, turn_body(page_context=page)), "page_context")
    assert stored(sql) == before


def _page_of(size: int) -> dict:
    """A page context whose JSON.stringify is exactly `size` UTF-8 bytes ("é" is 2)."""
    page = {"title": ""}
    fill = size - len(json.dumps(page, separators=(",", ":")))
    page["title"] = "é" * (fill // 2) + "x" * (fill % 2)
    return page


@pytest.mark.parametrize("size, accepted", [(16384, True), (16385, False)])
def test_page_context_is_limited_to_16_kib_of_json(server, agent, sql, size, accepted):
    page = _page_of(size)
    assert len(json.dumps(page, separators=(",", ":"), ensure_ascii=False).encode()) == size
    before = stored(sql)

    response = post_turn(server, agent, turn_body(page_context=page))

    if accepted:
        assert response.status_code == 200, response.text[:300]
    else:
        assert_error(response, 413, "page_context_too_large")
        assert stored(sql) == before


def test_twenty_unique_valid_renderers_are_accepted_and_echoed(server, agent):
    renderers = ["markdown", "bailing-form.v1"] + [f"r{i}.v1" for i in range(18)]
    assert len(set(renderers)) == 20

    context = turn(server, agent, turn_body(renderers=renderers))

    assert context["context"]["renderers"] == renderers


def test_renderer_names_may_use_upper_case_and_colons(server, agent):
    renderers = ["markdown", "Markdown", "bailing:form.v1", "x" * 64]
    assert turn(server, agent, turn_body(renderers=renderers))["context"]["renderers"] == renderers


@pytest.mark.parametrize("renderers", [
    [f"r{i}" for i in range(21)],
    ["markdown", "markdown"],
    ["Bad Name"],
    ["-markdown"],
    [""],
    ["x" * 65],
    [7],
    "markdown",
], ids=["21", "duplicate", "bad-name", "leading-dash", "empty-name", "too-long", "not-string", "not-list"])
def test_bad_renderers_are_refused(server, agent, sql, renderers):
    before = stored(sql)
    assert_invalid(post_turn(server, agent, turn_body(renderers=renderers)), "renderers")
    assert stored(sql) == before


@pytest.mark.parametrize("delivery", ["inline", "ON_DEMAND", "", None, True, ["on_demand"]])
def test_knowledge_delivery_other_than_on_demand_is_refused(server, agent, sql, delivery):
    before = stored(sql)
    assert_invalid(post_turn(server, agent, turn_body(knowledge_delivery=delivery)), "knowledge_delivery")
    assert stored(sql) == before


@pytest.mark.parametrize("binding", [
    {**TASK_BINDING, "schema_version": 2},
    {k if k != "schema_version" else "schema": v for k, v in TASK_BINDING.items()},
    {**TASK_BINDING, "task_id": "task-1"},
    {**TASK_BINDING, "task_id": "9732feb7-11a4-6a72-a6fb-8f39ebf61199"},
    {**TASK_BINDING, "scope_hash": "a" * 63},
    {**TASK_BINDING, "scope_hash": "a" * 65},
    {**TASK_BINDING, "scope_hash": "A" * 64},
    {**TASK_BINDING, "scope_hash": "g" * 64},
    {**TASK_BINDING, "task_id": ""},
    {**TASK_BINDING, "task_id": 7},
    {k: v for k, v in TASK_BINDING.items() if k != "task_id"},
    {k: v for k, v in TASK_BINDING.items() if k != "scope_hash"},
    {k: v for k, v in TASK_BINDING.items() if k != "schema_version"},
    {**TASK_BINDING, "granted_by": "admin"},
    "task-1",
    None,
], ids=["schema-not-string", "old-schema-key", "task-not-uuid", "task-uuid-v6", "hash-63", "hash-65",
        "hash-upper", "hash-nonhex", "task-empty", "task-int", "no-task", "no-hash", "no-schema",
        "unknown-key", "string", "null"])
def test_a_malformed_task_binding_is_task_invalid_input(server, agent, sql, binding):
    before = stored(sql)
    assert_error(post_turn(server, agent, turn_body(task_binding=binding)), 400, "TASK_INVALID_INPUT")
    assert stored(sql) == before


def test_a_task_binding_of_another_schema_is_task_unsupported(server, agent, sql):
    before = stored(sql)
    binding = {**TASK_BINDING, "schema_version": "bailing.agent-task-binding.v2"}
    assert_error(post_turn(server, agent, turn_body(task_binding=binding)), 501, "TASK_UNSUPPORTED")
    assert stored(sql) == before


def test_ordinary_turn_fields_are_checked_before_the_task_binding(server, agent, sql):
    before = stored(sql)
    assert_invalid(post_turn(server, agent, turn_body(user_input="", task_binding="x")), "user_input")
    assert stored(sql) == before


def test_a_task_enrolled_session_cannot_omit_its_task_binding(server, issue_session, sql):
    enrolled = issue_session("--task-enrolled")
    before = stored(sql)

    assert_error(post_turn(server, enrolled, turn_body()), 409, "TASK_REQUIRED")

    assert stored(sql) == before  # a bound turn of a real task: tests/test_task_control.py


def _padded(body: dict, size: int) -> bytes:
    """`body` as JSON preceded by JSON whitespace, exactly `size` bytes long."""
    raw = json.dumps(body).encode()
    assert len(raw) < size
    return b" " * (size - len(raw)) + raw


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("endpoint", ["turn", "complete"])
def test_runtime_bodies_are_limited_to_512_kib(server, agent, sql, framing, endpoint):
    if endpoint == "turn":
        path, make = turns_path(), (lambda: turn_body(2, user_input="x" * 64000))
    else:
        run_id = turn(server, agent, turn_body())["run_id"]
        path, make = complete_path(run_id), (lambda: completion_body(content="y" * 64000))

    def send(size: int):
        data = _padded(make(), size)
        assert len(data) == size
        if framing == "chunked":
            data = iter([data[:200000], data[200000:]])
        return server.post(path, data=data, headers=json_headers(agent))

    before = stored(sql)
    body = assert_error(send(BODY_MAX + 1), 413, "arguments_too_large")
    assert body["max_bytes"] == BODY_MAX and body["limit_scope"] == "request_body"
    assert stored(sql) == before

    response = send(BODY_MAX)
    assert response.status_code == 200, response.text[:500]
    after = stored(sql)
    assert after["bz_messages"] == before["bz_messages"] + 1  # the user or the assistant message


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_turn_body_is_read_as_json_whatever_its_content_type(server, agent, content_type):
    headers = session_bearer(agent)
    if content_type:
        headers["Content-Type"] = content_type

    response = server.post(turns_path(), data=json.dumps(turn_body()).encode(), headers=headers)

    assert response.status_code == 200, response.text


@pytest.mark.parametrize("data", [b"", b"not json", b"[1, 2]", b'"text"', "{}".encode("utf-16")],
                         ids=["empty", "not-json", "array", "string", "not-utf8"])
def test_a_turn_body_that_is_not_a_json_object_with_the_fields_is_400(server, agent, sql, data):
    before = stored(sql)
    response = server.post(turns_path(), data=data, headers=json_headers(agent))
    assert_error(response, 400, "invalid_request")
    assert stored(sql) == before


def test_a_turn_after_the_session_is_revoked_is_401(server, agent, cli, sql):
    code, _, err = cli("sessions", "revoke", agent["session_id"])
    assert code == 0, err
    before = stored(sql)
    assert_error(post_turn(server, agent, turn_body()), 401, "unauthorized")
    assert stored(sql) == before


# ----------------------------------------------------------------------------- turn: idempotency

def test_the_same_turn_returns_the_same_frozen_run_and_context(server, agent, sql):
    first = turn(server, agent, turn_body())
    reordered = dict(reversed(list(turn_body().items())))  # same request, keys in another order

    again = turn(server, agent, turn_body())
    third = turn(server, agent, reordered)

    uuid.UUID(first["run_id"])
    assert again == first and third == first
    assert stored(sql) == {"bz_runs": 1, "bz_messages": 1, "bz_threads": 1}
    assert first["client_conversation_id"] == "conv-1"
    assert first["client_turn_id"] == "turn-1"
    assert first["user_message_id"] == "msg-1"
    assert first["route"] == ROUTE


@pytest.mark.parametrize("change", [
    {"user_input": "Find the customer named Grace"},
    {"user_message_id": "msg-other"},
    {"knowledge_delivery": "on_demand"},
    {"renderers": ["markdown"]},
    {"page_context": {"url": "/staff", "title": "Staff"}},
], ids=["user_input", "user_message_id", "knowledge_delivery", "renderers", "page_context"])
def test_a_changed_payload_under_the_same_turn_key_is_409(server, agent, sql, change):
    first = turn(server, agent, turn_body())
    before = stored(sql)

    assert_error(post_turn(server, agent, turn_body(**change)), 409, "turn_conflict")

    assert stored(sql) == before
    assert turn(server, agent, turn_body()) == first  # the original is still what the key means


def test_a_user_message_id_cannot_be_reused_by_another_turn_of_the_conversation(server, agent, sql):
    turn(server, agent, turn_body(1))
    before = stored(sql)

    assert_error(post_turn(server, agent, turn_body(2, user_message_id="msg-1")), 409, "turn_conflict")

    assert stored(sql) == before
    # The same message id in another conversation is another ledger and is fine.
    turn(server, agent, turn_body(2, user_message_id="msg-1", client_conversation_id="conv-2"))


def test_knowledge_delivery_is_echoed_only_when_negotiated(server, agent):
    inline = turn(server, agent, turn_body(1))
    on_demand = turn(server, agent, turn_body(2, knowledge_delivery="on_demand"))

    assert "knowledge_delivery" not in inline["context"]  # echoed only when negotiated
    assert on_demand["context"]["knowledge_delivery"] == "on_demand"
    assert "task_binding" not in inline and "task_binding" not in inline["context"]


def test_a_turn_key_belongs_to_one_session(server, agent, issue_session, sql):
    mine = exchange(server, agent, 1, "Who is Ada?", "Ada is customer 7.")
    other = issue_session()

    theirs = turn(server, other, turn_body(1, user_input="Something else"))

    assert theirs["run_id"] != mine["run_id"]
    assert memory_of(theirs)["recent"] == []
    assert stored(sql)["bz_threads"] == 2


# ----------------------------------------------------------------------------- turn: concurrency

CLIENTS = 6


def race(server, session: dict, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Send each body from its own HTTP client, all released at the same moment."""
    barrier = threading.Barrier(len(bodies))

    def send(body: dict):
        with requests.Session() as http:
            barrier.wait(timeout=10)
            response = http.post(server.url + turns_path(), json=body, headers=json_headers(session), timeout=60)
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(send, bodies))


@pytest.mark.parametrize("conversation", ["new", "existing"])
def test_the_same_turn_sent_by_several_clients_at_once_yields_one_run(server, agent, sql, conversation):
    if conversation == "existing":
        turn(server, agent, turn_body(1))
    before = stored(sql)

    results = race(server, agent, [turn_body(2)] * CLIENTS)

    assert [status for status, _ in results] == [200] * CLIENTS, results
    assert len({body["run_id"] for _, body in results}) == 1
    assert all(body == results[0][1] for _, body in results)
    assert sql("SELECT count(*) FROM bz_runs WHERE client_turn_id = 'turn-2'") == [(1,)]
    assert sql("SELECT count(*) FROM bz_messages WHERE role = 'user' AND message_id = 'msg-2'") == [(1,)]
    assert stored(sql)["bz_threads"] == 1
    assert stored(sql)["bz_runs"] == before["bz_runs"] + 1


def test_different_turns_racing_with_one_user_message_id_store_it_once(server, agent, sql):
    bodies = [turn_body(n, user_message_id="msg-shared") for n in range(2, 2 + CLIENTS)]

    results = race(server, agent, bodies)

    statuses = sorted(status for status, _ in results)
    assert statuses == [200] + [409] * (CLIENTS - 1), results
    assert all(body["error"] == "turn_conflict" for status, body in results if status == 409)
    assert stored(sql) == {"bz_runs": 1, "bz_messages": 1, "bz_threads": 1}


# ----------------------------------------------------------------------------- turn: workspace

@pytest.fixture
def wide_session(cli, tmp_path, configured, issue_session) -> dict:
    """A session whose request names routes that exist but lie outside its runtime workspace."""
    hub = json.loads((EXAMPLES / "hub.json").read_text())
    client = hub["client_apps"][0]
    routes = [
        {"route_key": "orders", "name": "Orders", "agent_client": {"enabled": True}},
        {"route_key": "quiet", "name": "Quiet", "agent_client": {"enabled": False}},
        {"route_key": "closed", "name": "Closed", "enabled": False, "agent_client": {"enabled": True}},
        {"route_key": "staff", "name": "Staff", "agent_client": {"enabled": True},
         "audience": {"enabled": True, "ids": ["someone-else"]}},
        {"route_key": "dropped", "name": "Dropped", "agent_client": {"enabled": True}},
    ]
    everything = ["customers", "orders", "quiet", "closed", "staff", "dropped"]
    apply_config(cli, tmp_path, {"routes": routes, "client_apps": [{**client, "allowed_routes": everything}]})
    session = issue_session(routes="customers,quiet,closed,staff,dropped")
    # Afterwards the client no longer allows `dropped`, which the session still lists.
    apply_config(cli, tmp_path, {"client_apps": [
        {**client, "allowed_routes": [r for r in everything if r != "dropped"]}]})
    return session


@pytest.mark.parametrize("route, status, code", [
    ("orders", 403, "route_not_allowed"),
    ("quiet", 403, "agent_client_disabled"),
    ("closed", 404, "route_unavailable"),
    ("staff", 403, "audience_not_allowed"),
    ("dropped", 403, "route_not_allowed"),
    ("auto", 400, "invalid_route"),
    ("Customers", 404, "not_found"),
], ids=["not-in-session", "agent-client-disabled", "route-disabled", "audience-mismatch",
        "no-longer-allowed-by-client", "auto", "not-a-route-key"])
def test_a_turn_outside_the_workspace_gets_the_gate_code(server, wide_session, sql, route, status, code):
    before = stored(sql)

    assert_error(post_turn(server, wide_session, turn_body(), route=route), status, code)

    assert stored(sql) == before
    turn(server, wide_session, turn_body())  # the session itself works in its workspace


def test_a_route_outside_the_lists_is_refused_before_its_existence_is_looked_at(server, wide_session):
    missing = post_turn(server, wide_session, turn_body(), route="no-such-route")
    unlisted = post_turn(server, wide_session, turn_body(), route="orders")
    assert_error(missing, 403, "route_not_allowed")
    assert missing.content == unlisted.content


# ----------------------------------------------------------------------------- memory

def test_memory_is_read_before_the_current_user_message_is_appended(server, agent):
    first = exchange(server, agent, 1, "Who is Ada?", "Ada is customer 7.")
    second = exchange(server, agent, 2, "And her limit?", None)
    third = turn(server, agent, turn_body(3, user_input="Raise it."))

    assert memory_of(first)["recent"] == []
    assert memory_of(first)["omitted_messages"] == 0
    assert memory_of(second)["recent"] == [
        {"role": "user", "message_id": "msg-1", "content": "Who is Ada?", "truncated": False},
        {"role": "assistant", "message_id": "asst-1", "content": "Ada is customer 7.", "truncated": False},
    ]
    assert [(e["role"], e["message_id"]) for e in memory_of(third)["recent"]] == [
        ("user", "msg-1"), ("assistant", "asst-1"), ("user", "msg-2")]
    # The frozen turn 2 still answers with the memory it was prepared with.
    assert turn(server, agent, turn_body(2, user_input="And her limit?")) == second


def test_memory_belongs_to_one_conversation(server, agent):
    exchange(server, agent, 1, "Who is Ada?", "Ada is customer 7.")

    other = turn(server, agent, turn_body(2, client_conversation_id="conv-2"))

    assert memory_of(other)["recent"] == []


def test_memory_keeps_at_most_recent_messages(server, agent, set_memory):
    set_memory(recent_messages=2)
    for n in (1, 2, 3):
        exchange(server, agent, n, f"question {n}", f"answer {n}")

    context = turn(server, agent, turn_body(4, user_input="question 4"))

    assert memory_of(context)["recent"] == [
        {"role": "user", "message_id": "msg-3", "content": "question 3", "truncated": False},
        {"role": "assistant", "message_id": "asst-3", "content": "answer 3", "truncated": False},
    ]
    assert memory_of(context)["limits"]["recent_messages"] == 2


def test_memory_truncates_each_message_at_per_message_chars(server, agent, set_memory):
    set_memory(per_message_chars=10)
    exchange(server, agent, 1, "0123456789", "0123456789A")

    context = turn(server, agent, turn_body(2, user_input="next"))

    assert memory_of(context)["recent"] == [
        {"role": "user", "message_id": "msg-1", "content": "0123456789", "truncated": False},
        {"role": "assistant", "message_id": "asst-1", "content": "0123456789", "truncated": True},
    ]


@pytest.mark.parametrize("budget, kept, omitted", [(30, ["msg-1", "asst-1", "msg-2"], 0),
                                                    (29, ["asst-1", "msg-2"], 1),
                                                    (10, ["msg-2"], 2),
                                                    (9, [], 3)])
def test_memory_omits_older_messages_beyond_recent_budget_chars(server, agent, set_memory,
                                                                budget, kept, omitted):
    set_memory(recent_budget_chars=budget)
    exchange(server, agent, 1, "a" * 10, "b" * 10)
    exchange(server, agent, 2, "c" * 10, None)

    memory = memory_of(turn(server, agent, turn_body(3, user_input="next")))

    assert [e["message_id"] for e in memory["recent"]] == kept
    assert all(e["truncated"] is False for e in memory["recent"])
    assert memory["omitted_messages"] == omitted


def summary(count: int, **extra) -> dict:
    return {"schema": SUMMARY_SCHEMA,
            "invocations": [{"invocation_id": f"inv-{i}", "tool": "customer_update_credit_limit",
                             "state": "reconciliation_required", "next_action": "inspect_original",
                             "result_text": "SECRET"} for i in range(1, count + 1)],
            "total": count, "omitted": 0, **extra}


def projected(i: int) -> dict:
    return {"invocation_id": f"inv-{i}", "tool": "customer_update_credit_limit",
            "state": "reconciliation_required", "next_action": "inspect_original"}


@pytest.mark.parametrize("content", [
    json.dumps(summary(1)),
    json.dumps(summary(1, source="bailing_core", trust="verified", kind="audit", verified=True)),
], ids=["plain", "claims-authority"])
def test_an_assistant_execution_summary_is_projected_as_reference_only_facts(server, agent, content):
    exchange(server, agent, 1, "Raise the limit of customer 7.", content)

    response = post_turn(server, agent, turn_body(2, user_input="What happened?"))

    assert response.status_code == 200, response.text
    assert "SECRET" not in response.text and "result_text" not in response.text
    assert entry(response.json(), "asst-1", "assistant") == {
        "role": "assistant", "message_id": "asst-1", "kind": "authorization_execution_summary",
        "source": "agent_client", "trust": "reference_only", "schema": SUMMARY_SCHEMA,
        "invocations": [projected(1)], "total": 1, "omitted": 0}


def test_a_user_message_carrying_the_marker_stays_plain_text(server, agent):
    content = json.dumps(summary(1))
    exchange(server, agent, 1, content, "Noted.")

    context = turn(server, agent, turn_body(2, user_input="next"))

    assert entry(context, "msg-1", "user") == {"role": "user", "message_id": "msg-1",
                                               "content": content, "truncated": False}


def test_invalid_invocation_records_are_dropped_and_counted(server, agent):
    raw = summary(2)
    raw["invocations"].append({"invocation_id": "inv-x", "tool": "t", "state": "made_up_state"})
    raw["invocations"].append("not a record")
    raw["total"] = 4
    exchange(server, agent, 1, "go", json.dumps(raw))

    found = entry(turn(server, agent, turn_body(2, user_input="next")), "asst-1", "assistant")

    assert found["invocations"] == [projected(1), projected(2)]
    assert found["omitted"] == 2
    assert found["total"] == 4


MARKER = f'{{"schema":"{SUMMARY_SCHEMA}",'


@pytest.mark.parametrize("content", [
    MARKER + '"invocations":{"inv-1":"executed"}}',
    MARKER + '"invocations":"inv-1"}',
    MARKER + '"invocations":5}',
    MARKER + '"invocations":true}',
    MARKER + '"invocations":[{"invocation_id":"inv-1","tool":"t","state":["executed"]}]}',
    MARKER + '"x":' + "[" * 3000 + "]" * 3000 + "}",
], ids=["invocations-object", "invocations-string", "invocations-int", "invocations-bool",
        "state-list", "deep-nesting"])
def test_a_malformed_summary_from_the_client_never_breaks_the_next_turn(server, agent, content):
    """The client writes the completion content; whatever it holds, later turns of the
    conversation must still be prepared (here they are a 500 for as long as the message stays in
    the memory window)."""
    exchange(server, agent, 1, "go", content)

    response = post_turn(server, agent, turn_body(2, user_input="next"))

    assert response.status_code == 200, response.text
    found = entry(response.json(), "asst-1", "assistant")
    if found.get("kind") != "authorization_execution_summary":
        # Not a summary after all: plain text, bounded like any message (2,000 characters here).
        assert found["content"] == content[:2000]
        assert found["truncated"] is (len(content) > 2000)


@pytest.mark.parametrize("limit", ["per_message_chars", "recent_budget_chars"])
def test_memory_limits_drop_whole_invocation_records_and_count_them(server, agent, set_memory, limit):
    set_memory(**{limit: 400})
    exchange(server, agent, 1, "go", json.dumps(summary(3)))

    found = entry(turn(server, agent, turn_body(2, user_input="next")), "asst-1", "assistant")

    assert set(found) == SUMMARY_KEYS
    assert found["source"] == "agent_client" and found["trust"] == "reference_only"
    kept = found["invocations"]
    assert 0 < len(kept) < 3, found
    assert kept == [projected(i) for i in range(1, len(kept) + 1)]  # whole records, in order
    assert all(set(r) <= RECORD_KEYS for r in kept)
    assert found["omitted"] == 3 - len(kept)
    assert found["total"] == 3
    assert len(json.dumps(found, separators=(",", ":"))) <= 400


@pytest.mark.parametrize("limit", ["per_message_chars", "recent_budget_chars"])
def test_a_very_small_limit_gives_an_explicit_omission_notice_never_cut_json(server, agent, set_memory,
                                                                              limit):
    set_memory(**{limit: 40})
    exchange(server, agent, 1, "go", json.dumps(summary(3)))

    found = entry(turn(server, agent, turn_body(2, user_input="next")), "asst-1", "assistant")

    assert found["omitted_notice"] is True
    assert found["kind"] == "authorization_execution_summary"
    assert found["source"] == "agent_client" and found["trust"] == "reference_only"
    assert "content" not in found and "invocations" not in found
    assert not any(isinstance(v, str) and ("{" in v or SUMMARY_SCHEMA in v) for v in found.values())


# ----------------------------------------------------------------------------- complete

@pytest.fixture
def run_id(server, agent) -> str:
    return turn(server, agent, turn_body())["run_id"]


def assistant_rows(sql):
    return sql("SELECT run_id::text, message_id, content FROM bz_messages WHERE role = 'assistant'")


def test_a_completion_is_stored_and_joins_the_ledger(server, agent, sql, run_id):
    response = complete(server, agent, run_id, completion_body())

    assert response.status_code == 200, response.text
    assert response.headers.get("Cache-Control") == "no-store"
    body = response.json()
    assert body["schema_version"] == body["schema"] == "bailing.agent-run-completion.v1"
    assert body["idempotent_replay"] is False
    assert ISO_MS.match(body["completed_at"])
    assert body["run_id"] == run_id
    assert body["status"] == "completed"
    assert body["assistant_message_id"] == "asst-1"
    assert body["completed_at"]
    assert assistant_rows(sql) == [(run_id, "asst-1", "Done.")]
    status, completion, _ = run_row(sql, run_id)
    assert status == "completed" and completion == completion_body()


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_run_can_end_failed_or_cancelled(server, agent, sql, run_id, status):
    response = complete(server, agent, run_id, completion_body(status=status))
    assert response.status_code == 200, response.text
    assert response.json()["status"] == status
    assert run_row(sql, run_id)[0] == status


def test_an_identical_completion_replays_the_same_answer(server, agent, sql, run_id):
    first = complete(server, agent, run_id, completion_body())
    reordered = dict(reversed(list(completion_body().items())))

    again = complete(server, agent, run_id, completion_body())
    third = complete(server, agent, run_id, reordered)

    assert first.status_code == again.status_code == third.status_code == 200
    assert first.json()["idempotent_replay"] is False
    replayed = {**first.json(), "idempotent_replay": True}
    assert again.json() == replayed and third.json() == replayed
    assert len(assistant_rows(sql)) == 1


@pytest.mark.parametrize("change", [
    {"content": "Done!"},
    {"status": "failed"},
    {"model": "other-model"},
    {"runtime": "other-runtime"},
    {"usage": {**completion_body()["usage"], "output_tokens": 31}},
    {"assistant_message_id": "asst-other"},
], ids=["content", "status", "model", "runtime", "usage.output_tokens", "assistant_message_id"])
def test_any_changed_completion_field_is_409(server, agent, sql, run_id, change):
    assert complete(server, agent, run_id, completion_body()).status_code == 200
    before, row = stored(sql), run_row(sql, run_id)

    assert_error(complete(server, agent, run_id, completion_body(**change)), 409, "run_completion_conflict")

    assert stored(sql) == before
    assert run_row(sql, run_id) == row
    assert assistant_rows(sql) == [(run_id, "asst-1", "Done.")]


@pytest.mark.parametrize("removed", ["model", "runtime", "usage"])
def test_leaving_out_an_optional_field_on_replay_is_409(server, agent, sql, run_id, removed):
    assert complete(server, agent, run_id, completion_body()).status_code == 200
    body = completion_body()
    del body[removed]
    assert_error(complete(server, agent, run_id, body), 409, "run_completion_conflict")


def test_an_assistant_message_id_cannot_be_reused_in_the_conversation(server, agent, sql, run_id):
    assert complete(server, agent, run_id, completion_body()).status_code == 200
    second = turn(server, agent, turn_body(2))["run_id"]
    before = stored(sql)

    assert_error(complete(server, agent, second, completion_body(content="Again.")), 409,
                 "assistant_message_conflict")

    assert stored(sql) == before
    assert run_row(sql, second)[0] == "prepared"


@pytest.mark.parametrize("field, value, accepted", [
    ("content", "a" * 64000, True),
    ("content", "a" * 64001, False),
    ("content", "😀" * 32000, True),
    ("content", "😀" * 32000 + "a", False),
    ("content", "", False),
    ("content", " \n ", False),
    ("content", "a\x1bb", False),
    ("content", "\tDone.\r\n", True),
    ("model", "m" * 191, True),
    ("model", "m" * 192, False),
    ("model", "😀" * 95 + "m", True),   # 191 UTF-16 code units, counted as content is
    ("model", "😀" * 96, False),        # 192 units, though only 96 characters
    ("model", "", True),
    ("model", "a\x07b", False),
    ("runtime", "r" * 191, True),
    ("runtime", "r" * 192, False),
    ("runtime", "😀" * 96, False),
    ("assistant_message_id", "i" * 128, True),
    ("assistant_message_id", "i" * 129, False),
    ("assistant_message_id", "a b", False),
], ids=["content-64000", "content-64001", "content-astral-64000", "content-astral-64001",
        "content-empty", "content-blank", "content-escape", "content-tab-cr-lf",
        "model-191", "model-192", "model-astral-191", "model-astral-192", "model-empty", "model-control",
        "runtime-191", "runtime-192", "runtime-astral-192", "assistant-id-128", "assistant-id-129",
        "assistant-id-space"])
def test_completion_text_limits(server, agent, sql, run_id, field, value, accepted):
    before = stored(sql)

    response = complete(server, agent, run_id, completion_body(**{field: value}))

    if accepted:
        assert response.status_code == 200, response.text[:500]
        assert run_row(sql, run_id)[1][field] == value
        if field == "content":
            assert assistant_rows(sql) == [(run_id, "asst-1", value)]
    else:
        assert_invalid(response, field)
        assert stored(sql) == before
        assert run_row(sql, run_id) == ("prepared", None, None)


def _without(key: str) -> dict:
    body = completion_body()
    del body[key]
    return body


USAGE = completion_body()["usage"]

BAD_COMPLETIONS = {
    "reasoning": (completion_body(reasoning="I thought hard"), "reasoning"),
    "hidden_reasoning": (completion_body(hidden_reasoning="secret chain"), "hidden_reasoning"),
    "usage.reasoning_tokens": (completion_body(usage={**USAGE, "reasoning_tokens": 5}), "usage"),
    "usage-negative": (completion_body(usage={**USAGE, "input_tokens": -1}), "usage"),
    "usage-negative-cost": (completion_body(usage={**USAGE, "cost_usd": -0.01}), "usage"),
    "usage-string": (completion_body(usage={**USAGE, "total_tokens": "150"}), "usage"),
    "usage-null": (completion_body(usage={**USAGE, "total_tokens": None}), "usage"),
    "usage-bool": (completion_body(usage={**USAGE, "tool_calls": True}), "usage"),
    "usage-list": (completion_body(usage=[1, 2]), "usage"),
    "status-done": (completion_body(status="done"), "status"),
    "status-upper": (completion_body(status="Completed"), "status"),
    "status-prepared": (completion_body(status="prepared"), "status"),
    "status-null": (completion_body(status=None), "status"),
    "content-null": (completion_body(content=None), "content"),
    "model-int": (completion_body(model=5), "model"),
    "content-blank": (completion_body(content="   "), "content"),
    "no-assistant_message_id": (_without("assistant_message_id"), "assistant_message_id"),
    "no-status": (_without("status"), "status"),
    "no-content": (_without("content"), "content"),
}


@pytest.mark.parametrize("case", list(BAD_COMPLETIONS))
def test_an_invalid_completion_is_refused_and_nothing_is_stored(server, agent, sql, run_id, case):
    body, path = BAD_COMPLETIONS[case]
    before = stored(sql)

    assert_invalid(complete(server, agent, run_id, body), path)

    assert stored(sql) == before
    assert run_row(sql, run_id) == ("prepared", None, None)
    # Refused, not normalised: the run can still be completed properly afterwards.
    assert complete(server, agent, run_id, completion_body()).status_code == 200


def test_hidden_reasoning_is_never_stored(server, agent, sql, run_id):
    complete(server, agent, run_id, completion_body(hidden_reasoning="secret chain"))
    complete(server, agent, run_id, completion_body())

    dump = sql("SELECT completion::text FROM bz_runs")[0][0] + "".join(
        row[2] for row in assistant_rows(sql))
    assert "secret chain" not in dump and "reasoning" not in dump


def test_a_run_of_another_session_is_a_completion_conflict(server, agent, issue_session, sql, run_id):
    other = issue_session()
    before = stored(sql)

    stolen = complete(server, other, run_id, completion_body())
    missing = complete(server, other, str(uuid.uuid4()), completion_body())

    assert_error(stolen, 409, "run_completion_conflict")
    assert stolen.content == missing.content  # no hint that the run exists
    assert stored(sql) == before
    assert run_row(sql, run_id) == ("prepared", None, None)


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "0" * 33, "%20",
                                    "9732feb7-11a4-6a72-a6fb-8f39ebf61199"])
def test_a_non_uuid_run_id_is_400(server, agent, sql, bad_id):
    before = stored(sql)
    assert_invalid(complete(server, agent, bad_id, completion_body()), "run_id")
    assert stored(sql) == before


def test_usage_takes_any_finite_number_of_at_least_zero_and_cost_usd(server, agent, sql, run_id):
    usage = {**USAGE, "output_tokens": 30.5, "cost_usd": 0.0125}
    response = complete(server, agent, run_id, completion_body(usage=usage))
    assert response.status_code == 200, response.text
    assert run_row(sql, run_id)[1]["usage"] == usage
    # A whole number is the same number however it is written, as for a JavaScript client.
    again = complete(server, agent, run_id, completion_body(usage={**usage, "input_tokens": 120.0}))
    assert again.status_code == 200 and again.json()["idempotent_replay"] is True


def test_completion_after_the_session_is_revoked_is_401(server, agent, cli, sql, run_id):
    code, _, err = cli("sessions", "revoke", agent["session_id"])
    assert code == 0, err
    before = stored(sql)

    assert_error(complete(server, agent, run_id, completion_body()), 401, "unauthorized")

    assert stored(sql) == before
    assert run_row(sql, run_id) == ("prepared", None, None)


# ----------------------------------------------------------------------------- complete: concurrency

def race_completions(server, session: dict, jobs: list[tuple[str, dict]]) -> list[tuple[int, dict]]:
    barrier = threading.Barrier(len(jobs))

    def send(job):
        run, body = job
        with requests.Session() as http:
            barrier.wait(timeout=10)
            response = http.post(server.url + complete_path(run), json=body, headers=json_headers(session),
                                 timeout=60)
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(send, jobs))


def test_the_same_completion_sent_at_once_completes_once(server, agent, sql, run_id):
    results = race_completions(server, agent, [(run_id, completion_body())] * CLIENTS)

    assert [status for status, _ in results] == [200] * CLIENTS, results
    assert sorted(body["idempotent_replay"] for _, body in results) == [False] + [True] * (CLIENTS - 1)
    first = results[0][1]
    assert all({**body, "idempotent_replay": None} == {**first, "idempotent_replay": None} for _, body in results)
    assert assistant_rows(sql) == [(run_id, "asst-1", "Done.")]


ROUNDS = 8  # the race is lost in most rounds; eight make a lucky all-pass vanishingly rare


def test_runs_racing_to_complete_with_one_assistant_message_id_get_one_200_and_409s(server, agent, sql):
    for round_ in range(ROUNDS):
        conversation = f"race-{round_}"
        runs = [turn(server, agent, turn_body(n, client_conversation_id=conversation))["run_id"]
                for n in range(1, CLIENTS + 1)]

        results = race_completions(server, agent, [
            (r, completion_body(assistant_message_id="asst-shared")) for r in runs])

        statuses = sorted(status for status, _ in results)
        assert statuses == [200] + [409] * (CLIENTS - 1), (round_, results)
        assert all(body["error"] == "assistant_message_conflict" for status, body in results if status == 409)
        assert len([r for r in assistant_rows(sql) if r[0] in runs]) == 1
