"""/agent-api/v1 task control as an agent sees it: the capabilities and one member's snapshot of
a task (TASK_CONTROL.md §8.1-§8.2). Agents read tasks; they never create or control one."""
from __future__ import annotations

import re

from flask import Blueprint, Response, g, jsonify, request

from .. import surfaces
from ..canonical import utc_now
from ..errors import ApiError
from ..tasks import agent as task_agent
from .auth import agent_session_required

bp = Blueprint("agent_tasks", __name__, url_prefix=surfaces.AGENT_API.prefix)
# Only a segment of 36 hex digits and hyphens reaches the snapshot: anything else names no endpoint.
TASK_SEGMENT = re.compile(r"[0-9A-Fa-f-]{36}")


@bp.after_request
def _no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/task-control/capabilities")
@agent_session_required
def capabilities():
    return jsonify(task_agent.capabilities(g.db, g.agent_session))


@bp.get("/tasks/<task_id>")
@agent_session_required
def snapshot(task_id: str):
    if not TASK_SEGMENT.fullmatch(task_id):
        raise ApiError("not_found", "No such endpoint.")
    params = {key: request.args.get(key, "") for key in ("workspace", "client_conversation_id")}
    return jsonify(task_agent.snapshot(g.db, g.agent_session, task_id, params, utc_now()))
