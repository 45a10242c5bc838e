"""/agent-api/v1 Runtime endpoints: workspaces, bootstrap, system-info, turns, capability search,
knowledge, run completion. Every call passes the route gate (identity.workspace) again."""
from __future__ import annotations

from flask import Blueprint, g, jsonify

from .. import limits
from .. import surfaces
from ..catalog.projection import project
from ..errors import ApiError, invalid_request
from ..identity import client_gate
from ..identity.workspace import resolve_route, workspace_routes
from ..invocations.service import envelope_too_large
from ..runtime import capability_search, knowledge, profile
from ..runtime.pause import refuse_when_paused
from ..runtime.system_info import system_info as describe_system
from ..runtime.turns import complete_run, prepare_turn
from ..validation import RESOURCE_KEY, Checker
from .auth import agent_session_required
from .body import read_json_object

bp = Blueprint("agent_runtime", __name__, url_prefix=surfaces.AGENT_API.prefix)



def _body(max_bytes: int) -> dict:
    # Every agent-api body over its cap is one refusal, the code the official client knows.
    return read_json_object(max_bytes, envelope_too_large)


def _path_route(route_key: str) -> str:
    """A path segment that cannot be a route key names no endpoint at all (`auto` can, and is
    refused by the gate)."""
    if RESOURCE_KEY.fullmatch(route_key) is None:
        raise ApiError("not_found", "No such endpoint.")
    return route_key


def _runtime_route(route_key: str):
    return resolve_route(g.db, g.agent_session, route_key, "runtime")


@bp.get("/workspaces")
@agent_session_required
def workspaces():
    routes = workspace_routes(g.db, g.agent_session, "runtime")
    return jsonify({"schema_version": profile.WORKSPACES_SCHEMA, "workspaces": [
        profile.workspace_entry(g.db, r, project(g.db, r, g.agent_session)) for r in routes]})


@bp.get("/workspaces/<route_key>/bootstrap")
@agent_session_required
def bootstrap(route_key: str):
    route = _runtime_route(_path_route(route_key))
    return jsonify(profile.bootstrap(g.db, route, project(g.db, route, g.agent_session)))


@bp.get("/workspaces/<route_key>/system-info")
@agent_session_required
def system_info(route_key: str):
    route = resolve_route(g.db, g.agent_session, _path_route(route_key), "system")
    return jsonify(describe_system(g.agent_session, route))


@bp.post("/workspaces/<route_key>/turns")
@agent_session_required
def turns(route_key: str):
    _path_route(route_key)
    refuse_when_paused(g.db)  # before the body is read (BUSINESS_SIDE.md § E.2)
    body = _body(limits.RUNTIME_BODY_MAX_BYTES)
    route = _runtime_route(route_key)
    return jsonify(prepare_turn(g.db, g.agent_session, route, body))


@bp.post("/workspaces/<route_key>/capabilities/search")
@agent_session_required
def capability_search_view(route_key: str):
    _path_route(route_key)
    body = _body(limits.SEARCH_BODY_MAX_BYTES)
    route = _runtime_route(route_key)
    return jsonify(capability_search.search(g.db, g.agent_session, route, body))


@bp.post("/runs/<run_id>/complete")
@agent_session_required
def complete(run_id: str):
    body = _body(limits.RUNTIME_BODY_MAX_BYTES)
    return jsonify(complete_run(g.db, g.agent_session, run_id, body))


# ------------------------------------------------------------------ knowledge (on demand)

def _knowledge_route(route_key: str):
    route = _runtime_route(_path_route(route_key))
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
        "search": {"max_query_chars": limits.KNOWLEDGE_QUERY_MAX, "max_results": limits.KNOWLEDGE_SEARCH_MAX_RESULTS,
                   "default_results": _default_results(settings), "hint_max_chars": limits.KNOWLEDGE_HINT_MAX},
        "read": {"max_chars": limits.KNOWLEDGE_READ_MAX},
    })


def _default_results(settings: dict) -> int:
    # top_k also bounds inline knowledge (up to 50); a search never returns more than its maximum.
    return min(settings["top_k"], limits.KNOWLEDGE_SEARCH_MAX_RESULTS)


def _enabled(settings: dict) -> None:
    if not settings["enabled"]:
        raise ApiError("knowledge_unavailable")


def _client_gate() -> None:
    """A search is charged to its client's bucket, as a tool call is (BUSINESS_SIDE §D.1; Core's
    /kb/search shares it); refused, 429 `rate_limited` with the exact wait in Retry-After."""
    refused = client_gate.check(g.db, g.agent_session.client_app_id)
    if refused is not None:
        err = ApiError("rate_limited", "This client's shared rate limit is reached; "
                                       "search again after Retry-After seconds.")
        err.headers["Retry-After"] = str(-(-refused.wait_ms // 1000))
        raise err


@bp.post("/workspaces/<route_key>/knowledge/search")
@agent_session_required
def knowledge_search(route_key: str):
    body = _body(limits.SMALL_BODY_MAX_BYTES)
    route, settings = _knowledge_route(route_key)
    checker = Checker()
    checker.obj(body, "", required=("query",), optional=("limit",))
    if "query" in body and checker.string(body["query"], "query", min_len=1,
                                          max_len=limits.KNOWLEDGE_QUERY_MAX) is not None \
            and not body["query"].strip():
        checker.add("query", "must not be blank")
    if "limit" in body:
        checker.integer(body["limit"], "limit", minimum=1, maximum=limits.KNOWLEDGE_SEARCH_MAX_RESULTS)
    if checker.problems:
        raise invalid_request(checker)
    _enabled(settings)
    _client_gate()
    limit = body.get("limit", _default_results(settings))
    rows = knowledge.search(g.db, route.route_key, body["query"], limit, settings["max_docs"])
    return jsonify({"schema": "bailing.agent-knowledge-search.v1", "route": route.route_key,
                    "trust": "reference_only", "limit": limit,
                    "results": [knowledge.hint_item(r) for r in rows]})


@bp.post("/workspaces/<route_key>/knowledge/read")
@agent_session_required
def knowledge_read(route_key: str):
    body = _body(limits.SMALL_BODY_MAX_BYTES)
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
