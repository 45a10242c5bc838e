"""The input schema as agents are shown it: allowlisted JSON-Schema keywords only.

Vendor keys, `$ref` leftovers, examples, defaults and every keyword outside the list are dropped;
sub-schemas deeper than the depth limit become `{}`; the root is always an object with
`properties`. The hub still validates calls against the full compiled schema, so the public
view can only be looser, never stricter, than what is enforced.
"""
from __future__ import annotations

import json
from typing import Any
from .. import limits


KEYWORDS = frozenset((
    "type", "properties", "required", "items", "description", "enum", "const", "oneOf", "anyOf",
    "allOf", "nullable", "format", "pattern", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "additionalProperties",
))
_SUBSCHEMA_LISTS = ("oneOf", "anyOf", "allOf")


def _schema(node: Any, depth: int) -> Any:
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict) or depth > limits.TOOL_SCHEMA_MAX_DEPTH:
        return {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in KEYWORDS:
            continue
        if key == "properties":
            if isinstance(value, dict):
                out[key] = {name: _schema(sub, depth + 1) for name, sub in value.items()}
        elif key == "items":
            out[key] = _schema(value, depth + 1)
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else _schema(value, depth + 1)
        elif key in _SUBSCHEMA_LISTS:
            if isinstance(value, list):
                out[key] = [_schema(sub, depth + 1) for sub in value]
        else:
            out[key] = value
    return out


def public_input_schema(schema: dict) -> dict:
    out = _schema(schema, 1)
    out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    return out


def byte_size(schema: dict) -> int:
    return len(json.dumps(schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
