"""Capability search (bailing.agent-capability-search.v1): the authorized tools of a workspace,
ranked against a query or against the user input of one of the session's runs.

Every authorized tool is a candidate (zero scores are kept); at most `limit` are returned, by
default the route's active tool limit. A task-enrolled session searches only with a bound run
(tasks.agent.search_gate).
"""
from __future__ import annotations

from sqlalchemy.orm import Session

from .. import limits
from ..catalog.projection import project
from ..catalog.search import discovery, rank
from ..errors import ApiError, invalid_request
from ..identity.models import AgentSession, Route
from ..validation import Checker, client_text
from ..canonical import utc_now
from ..tasks import agent as task_agent
from . import client_input, profile
from .turns import find_run, user_input_of

SCHEMA = "bailing.agent-capability-search.v1"


def _run_not_found() -> ApiError:
    return ApiError("run_not_found")


def search(db: Session, session: AgentSession, route: Route, body: dict) -> dict:
    checker = Checker()
    checker.obj(body, "", optional=("query", "run_id", "limit"))
    query = ""
    if "query" in body:
        query = client_text(checker, body["query"], "query", limits.CAPABILITY_QUERY_MAX, blank_ok=True) or ""
    run_id = None
    if "run_id" in body:
        run_id = client_input.run_id(body["run_id"])
        if run_id is None:
            checker.add("run_id", "must be a UUID (versions 1 to 5)")
    if "limit" in body:
        checker.integer(body["limit"], "limit", minimum=1, maximum=limits.CAPABILITY_SEARCH_MAX_RESULTS)
    if not checker.problems and not query.strip() and run_id is None:
        checker.add("query", "a non-blank query or a run_id is required")
    if checker.problems:
        raise invalid_request(checker)

    run = find_run(db, session, run_id) if run_id is not None else None
    # Before the route's own checks: a bare query, or a run outside any task, would escape the
    # task's scope; a bound run's task must be able to dispatch.
    task_agent.search_gate(db, session, route.route_key, run, utc_now())
    if run_id is not None:
        if run is None or run.route_key != route.route_key:
            raise _run_not_found()
        if not query.strip():
            query = user_input_of(db, run)
    ranked_query = profile.safe_text(query, limits.CAPABILITY_QUERY_MAX)
    projection = project(db, route, session)
    limit = body.get("limit", profile.active_tool_limit(route))
    found = rank(projection, ranked_query)[:limit]
    response = {
        "schema_version": SCHEMA,
        "schema": SCHEMA,  # what earlier readers of this hub look for; the same string
        "route": route.route_key,
        "capability_revision": projection.revision,
        "query": ranked_query,
        "tools": [v.projection() for v in found],
        "discovery": discovery(len(found), len(projection.tools), limit),
    }
    if run is not None:
        response["run_id"] = str(run.id)
    return response
