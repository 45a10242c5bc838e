"""The published OpenAPI 3.1 contracts, one per API, shipped as JSON beside this module and
served at `<prefix>/openapi.json`. tests/test_openapi.py keeps them true to the routes."""
from __future__ import annotations

import json
from functools import cache
from importlib import resources

from flask import Blueprint, Response

from ..surfaces import SURFACES

# API prefix -> document file in this package.
DOCUMENTS = {surface.prefix: surface.document for surface in SURFACES}

# Views that exist only to refuse (every request they match is a 404), so they are not part of
# any contract: the agent side of Conversation Audit has no transcript reads, and its admin side
# only the two reads.
REFUSAL_ONLY_ENDPOINTS = frozenset({"agent_audit.no_reads", "admin_api.conversation_audits_elsewhere",
                                    "admin_tasks.not_here"})

bp = Blueprint("openapi", __name__)


@cache
def document_bytes(prefix: str) -> bytes:
    raw = resources.files(__package__).joinpath(DOCUMENTS[prefix]).read_bytes()
    json.loads(raw)  # a broken document fails loudly at first use, never served half-valid
    return raw


def document(prefix: str) -> dict:
    return json.loads(document_bytes(prefix))


def _register(prefix: str) -> None:
    def serve():
        return Response(document_bytes(prefix), mimetype="application/json")

    endpoint = DOCUMENTS[prefix].removesuffix(".json").replace("-", "_")
    bp.add_url_rule(f"{prefix}/openapi.json", endpoint, serve, methods=["GET"])


for _prefix in DOCUMENTS:
    _register(_prefix)
