"""/agent-api/v1/conversation-audits: the agent side of Conversation Audit (write-only).

There is no transcript read here: apart from the capabilities probe, every GET is a 404."""
from __future__ import annotations

from flask import Blueprint, g, jsonify

from .. import limits, surfaces
from ..conversation_audit import archives, events
from ..conversation_audit.availability import probe, require_archives
from ..errors import ApiError
from .auth import agent_session_required
from .body import read_empty_object, read_json_object

bp = Blueprint("agent_audit", __name__, url_prefix=surfaces.AGENT_AUDITS)

# Every POST of the surface reads at most this much.
BODY_MAX = limits.AUDIT_ENVELOPE_MAX_BYTES


def _too_large(max_bytes: int, observed: int) -> ApiError:
    return ApiError("conversation_audit_limit", f"The request body exceeds {max_bytes} bytes.",
                    max_bytes=max_bytes, observed_bytes=observed)


@bp.get("/capabilities")
@agent_session_required
def capabilities():
    found = probe(g.db)
    return jsonify({"schema": "bailing.agent-conversation-audit-capabilities.v1",
                    "cross_binding_members": found.cross_binding,
                    "member_bindings": "session-client-route.v1"})


@bp.post("")
@agent_session_required
def create():
    available = require_archives(g.db)
    body = read_json_object(BODY_MAX, _too_large)
    return jsonify(archives.create(g.db, g.agent_session, body, available))


@bp.post("/<archive_id>/confirm")
@agent_session_required
def confirm(archive_id: str):
    archives.parse_archive_id(archive_id)
    available = require_archives(g.db)
    read_empty_object("confirm", BODY_MAX, _too_large)
    return jsonify(archives.confirm(g.db, g.agent_session, archive_id, available))


@bp.post("/<archive_id>/events")
@agent_session_required
def append(archive_id: str):
    archives.parse_archive_id(archive_id)
    available = require_archives(g.db)
    body = read_json_object(BODY_MAX, _too_large)
    return jsonify(events.append(g.db, g.agent_session, archive_id, body, available))


@bp.route("", methods=["GET", "PUT", "PATCH", "DELETE"])
@bp.route("/<path:_rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
@agent_session_required
def no_reads(_rest: str = ""):
    """Transcripts are never readable with an agent bearer; unknown endpoints look the same."""
    raise archives.unknown_endpoint()
