"""/agent-api/v1 Runtime endpoints: workspaces, bootstrap, turns, capability search, knowledge,
run completion. Every call revalidates session, client, route and audience."""
from __future__ import annotations

from flask import Blueprint, g, jsonify
from sqlalchemy import select

from ..catalog.projection import project
from ..catalog.search import SEARCH_LIMIT, discovery, rank
from ..errors import ApiError, invalid_request
from ..identity.workspace import resolve_route, workspace_routes
from ..runtime import knowledge, profile
from ..runtime.models import Message
from ..runtime.turns import complete_run, find_run, prepare_turn
from ..validation import Checker
from .auth import agent_session_required
from .body import read_json_object

bp = Blueprint("agent_runtime", __name__, url_prefix="/agent-api/v1")

RUNTIME_BODY_MAX = 512 * 1024  # turns and complete, as the spec sets it
SMALL_BODY_MAX = 64 * 1024


def _runtime_route(route_key: str):
    return resolve_route(g.db, g.agent_session, route_key, "runtime")


@bp.get("/workspaces")
@agent_session_required
def workspaces():
    routes = workspace_routes(g.db, g.agent_session, "runtime")
    return jsonify({"schema": "bailing.agent-workspace-list.v1", "workspaces": [
        {"route": r.route_key, "name": r.name, "description": r.description} for r in routes]})


@bp.get("/workspaces/<route_key>/bootstrap")
@agent_session_required
def bootstrap(route_key: str):
    route = _runtime_route(route_key)
    return jsonify(profile.bootstrap(g.db, route, project(g.db, route, g.agent_session)))


@bp.post("/workspaces/<route_key>/turns")
@agent_session_required
def turns(route_key: str):
    body = read_json_object(RUNTIME_BODY_MAX)
    route = _runtime_route(route_key)
    return jsonify(prepare_turn(g.db, g.agent_session, route, body))


@bp.post("/workspaces/<route_key>/capabilities/search")
@agent_session_required
def capability_search(route_key: str):
    body = read_json_object(SMALL_BODY_MAX)
    route = _runtime_route(route_key)
    checker = Checker()
    checker.obj(body, "", optional=("query", "run_id", "limit"))
    if "query" in body:
        checker.string(body["query"], "query", max_len=1000)
    if "run_id" in body:
        checker.string(body["run_id"], "run_id", min_len=1, max_len=64)
    if "limit" in body:
        checker.integer(body["limit"], "limit", minimum=1, maximum=SEARCH_LIMIT)
    query = body.get("query") if isinstance(body.get("query"), str) else ""
    if not checker.problems and not query.strip() and "run_id" not in body:
        checker.add("query", "a non-empty query or a run_id is required")
    if not checker.problems and g.agent_session.task_enrolled and "run_id" not in body:
        checker.add("run_id", "a task-bound session must search with its original run_id")
    if checker.problems:
        raise invalid_request(checker)
    if "run_id" in body:
        run = find_run(g.db, g.agent_session, body["run_id"])
        if run.route_key != route.route_key:
            raise ApiError(404, "run_not_found", "No such run for this session.")
        if not query.strip():
            query = g.db.scalar(select(Message.content).where(Message.run_id == run.id,
                                                              Message.role == "user"))
    projection = project(g.db, route, g.agent_session)
    limit = body.get("limit", SEARCH_LIMIT)
    found = rank(projection, query)[:limit]
    response = {
        "schema": "bailing.agent-capability-search.v1",
        "route": route.route_key,
        "capability_revision": projection.revision,
        "tools": [v.projection() for v in found],
        "discovery": discovery(len(found), len(projection.tools), limit),
    }
    if "run_id" in body:
        response["run_id"] = body["run_id"]
    return jsonify(response)


@bp.post("/runs/<run_id>/complete")
@agent_session_required
def complete(run_id: str):
    body = read_json_object(RUNTIME_BODY_MAX)
    run = find_run(g.db, g.agent_session, run_id, lock=True)
    _runtime_route(run.route_key)  # the route must still be in this session's workspace
    return jsonify(complete_run(g.db, g.agent_session, run, body))


# ------------------------------------------------------------------ knowledge (on demand)

def _knowledge_route(route_key: str):
    route = _runtime_route(route_key)
    settings = profile.knowledge_settings(g.db, route)
    return route, settings


@bp.get("/workspaces/<route_key>/knowledge/capabilities")
@agent_session_required
def knowledge_capabilities(route_key: str):
    route, settings = _knowledge_route(route_key)
    return jsonify({
        "schema": "bailing.agent-knowledge-capabilities.v1",
        "route": route.route_key,
        "enabled": settings["enabled"],
        "documents": settings["sources"],
        "delivery_modes": ["inline", "on_demand"],
        "trust": "reference_only",
        "search": {"max_query_chars": knowledge.QUERY_MAX_CHARS, "max_results": knowledge.SEARCH_MAX_RESULTS,
                   "default_results": _default_results(settings), "hint_max_chars": knowledge.HINT_CHARS},
        "read": {"max_chars": knowledge.READ_MAX_CHARS},
    })


def _default_results(settings: dict) -> int:
    # top_k also bounds inline knowledge (up to 50); a search never returns more than its maximum.
    return min(settings["top_k"], knowledge.SEARCH_MAX_RESULTS)


def _enabled(settings: dict) -> None:
    if not settings["enabled"]:
        raise ApiError(404, "knowledge_unavailable", "This workspace has no knowledge enabled.")


@bp.post("/workspaces/<route_key>/knowledge/search")
@agent_session_required
def knowledge_search(route_key: str):
    body = read_json_object(SMALL_BODY_MAX)
    route, settings = _knowledge_route(route_key)
    checker = Checker()
    checker.obj(body, "", required=("query",), optional=("limit",))
    if "query" in body and checker.string(body["query"], "query", min_len=1,
                                          max_len=knowledge.QUERY_MAX_CHARS) is not None \
            and not body["query"].strip():
        checker.add("query", "must not be blank")
    if "limit" in body:
        checker.integer(body["limit"], "limit", minimum=1, maximum=knowledge.SEARCH_MAX_RESULTS)
    if checker.problems:
        raise invalid_request(checker)
    _enabled(settings)
    limit = body.get("limit", _default_results(settings))
    rows = knowledge.search(g.db, route.route_key, body["query"], limit, settings["max_docs"])
    return jsonify({"schema": "bailing.agent-knowledge-search.v1", "route": route.route_key,
                    "trust": "reference_only", "limit": limit,
                    "results": [knowledge.hint_item(r) for r in rows]})


@bp.post("/workspaces/<route_key>/knowledge/read")
@agent_session_required
def knowledge_read(route_key: str):
    body = read_json_object(SMALL_BODY_MAX)
    route, settings = _knowledge_route(route_key)
    checker = Checker()
    checker.obj(body, "", required=("chunk_id",), optional=("offset",))
    if "chunk_id" in body:
        checker.integer(body["chunk_id"], "chunk_id", minimum=1, maximum=2**63 - 1)
    if "offset" in body:
        checker.integer(body["offset"], "offset", minimum=0, maximum=2**31 - 1)
    if checker.problems:
        raise invalid_request(checker)
    _enabled(settings)
    return jsonify(knowledge.read(g.db, route.route_key, body["chunk_id"], body.get("offset", 0)))
