"""/agent-api/v1/tools: the business-tool surface (catalog, and detail with usage guidance).

Gated by the route's `tools.agent_direct` only, not by `agent_client.enabled`. Reads revalidate
client, session, route and audience on every call, create nothing and dispatch nothing.
"""
from __future__ import annotations

import re

from flask import Blueprint, g, jsonify

from .. import surfaces
from ..catalog.projection import project
from ..errors import ApiError, invalid_field
from ..identity.workspace import resolve_route
from .auth import agent_session_required
from .query import query_params

bp = Blueprint("agent_tools", __name__, url_prefix=surfaces.AGENT_API.prefix)

REVISION = re.compile(r"^[0-9a-f]{64}$")
CATALOG_SCHEMA = "bailing.agent-tool-catalog.v1"
DETAIL_SCHEMA = "bailing.agent-tool-detail.v1"


@bp.get("/tools")
@agent_session_required
def list_tools():
    params = query_params(required=("route",))
    route = resolve_route(g.db, g.agent_session, params["route"], "tools")
    projection = project(g.db, route, g.agent_session)
    return jsonify({
        "schema_version": CATALOG_SCHEMA,
        "route": route.route_key,
        "capability_revision": projection.revision,
        **projection.counts(),
        "tools": [v.projection() for v in projection.tools.values()],
    })


@bp.get("/tools/<name>")
@agent_session_required
def tool_detail(name: str):
    params = query_params(required=("route", "capability_revision"))
    if not REVISION.fullmatch(params["capability_revision"]):
        raise invalid_field("capability_revision", "must be 64 hex digits")
    route = resolve_route(g.db, g.agent_session, params["route"], "tools")
    projection = project(g.db, route, g.agent_session)
    visible = projection.tools.get(name)
    if visible is None:
        raise ApiError("tool_not_found")
    if params["capability_revision"] != projection.revision:
        raise ApiError("capability_changed",
                       capability_revision=projection.revision)
    return jsonify({
        # Tool replies name their schema `schema_version`; `schema` is kept for earlier readers.
        "schema_version": DETAIL_SCHEMA,
        "schema": DETAIL_SCHEMA,
        "route": route.route_key,
        "capability_revision": projection.revision,
        "tool": visible.projection(),
        "usage_guidance": visible.usage_guidance(),
    })
