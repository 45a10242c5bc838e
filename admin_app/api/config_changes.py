"""Recording admin API writes in the configuration-change log (BUSINESS_SIDE.md § G.1): a
non-GET request under the admin API prefix that ended 2xx, in the request's own transaction, so
it commits with the write and a refusal, an error or a failed commit records nothing. Only the
method and the path after the prefix are kept, never the body."""
from __future__ import annotations

import re
from typing import Any

from flask import current_app, request
from flask.typing import ResponseReturnValue

from .. import surfaces
from ..config_audit.log import record_change

READS = frozenset({"GET", "HEAD", "OPTIONS"})
# Core leaves out its run queue and tool approvals; here approvals are decided under the same
# path, and tasks (and their controls) are this hub's runs. Their own trails record them.
EXCLUDED_AREAS = ("tool-approvals", "runs", "agent-runs", "agent-tasks",
                  "evidence")  # signing a tree head changes no configuration
# Core's tests and syncs of a data source change no configuration; a provider's spec pull and
# authorization probe are this hub's equivalents, should they come to the admin API.
EXCLUDED_ENDINGS = re.compile(r"(^|/)(hittest|datasources/test|datasources/[^/]+/sync|refresh|probe)$")


def recorded_path(path: str) -> str | None:
    """The part after the admin API prefix when a write there is a configuration change."""
    prefix = surfaces.ADMIN_API.prefix + "/"
    if not path.startswith(prefix):
        return None
    rest = path[len(prefix):]
    if any(surfaces.is_under(rest, area) for area in EXCLUDED_AREAS) or EXCLUDED_ENDINGS.search(rest):
        return None
    return rest


def note_write(db: Any, by: str, result: ResponseReturnValue) -> ResponseReturnValue:
    """`result` of an admin API view, recorded first when it is a successful write."""
    if request.method in READS:
        return result
    path = recorded_path(request.path)
    if path is None:
        return result
    response = current_app.make_response(result)
    if 200 <= response.status_code < 300:
        record_change(db, by, request.method, path)
    return response
