"""The trusted `task_binding` of a turn, as sent: exactly `{schema_version, task_id,
scope_hash}`, its task id normalised to lower case. Admission against the task itself is
tasks.agent.admit_turn; an admitted binding is frozen with the run and echoed at the top level of
the turn context."""
from __future__ import annotations

import re
from typing import Any

from ..errors import ApiError
from ..validation import UUID_V1_5

SCHEMA = "bailing.agent-task-binding.v1"
FIELDS = ("schema_version", "task_id", "scope_hash")
HEX64 = re.compile(r"[0-9a-f]{64}")


def _invalid(message: str) -> ApiError:
    return ApiError("TASK_INVALID_INPUT", message)


def parse(value: Any) -> dict:
    """The normalised binding, or the task-control refusal: 400 for a bad shape, 501 for a
    binding schema this hub does not know."""
    if not isinstance(value, dict) or set(value) != set(FIELDS):
        raise _invalid("task_binding must be exactly {schema_version, task_id, scope_hash}.")
    if not isinstance(value["schema_version"], str):
        raise _invalid("task_binding.schema_version must be a string.")
    if value["schema_version"] != SCHEMA:
        raise ApiError("TASK_UNSUPPORTED")
    task_id, scope_hash = value["task_id"], value["scope_hash"]
    if not isinstance(task_id, str) or not UUID_V1_5.fullmatch(task_id):
        raise _invalid("task_binding.task_id must be a UUID (versions 1 to 5).")
    if not isinstance(scope_hash, str) or not HEX64.fullmatch(scope_hash):
        raise _invalid("task_binding.scope_hash must be 64 lowercase hex digits.")
    return {"schema_version": SCHEMA, "task_id": task_id.lower(), "scope_hash": scope_hash}
