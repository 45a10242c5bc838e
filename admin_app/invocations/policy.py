"""Approval policy of one call: ACC `risk`/`approval.required`/`approval.when`, plus the route's
forced approval. `approval.when` compares with JSON types kept; a type mismatch is not "no match"
but a refusal before anything is sent."""
from __future__ import annotations

from typing import Any

_MISSING = object()


class TypeMismatch(Exception):
    pass


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "array"
    return "object"


def _lookup(arguments: dict, dotted: str) -> Any:
    node: Any = arguments
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def rule_matches(rule: dict, arguments: dict) -> bool:
    actual = _lookup(arguments, rule["param"])
    op = rule["op"]
    if op == "exists":
        return actual is not _MISSING and actual is not None
    if actual is _MISSING:
        return False
    expected: Any = rule.get("value")  # a JSON value of the ACC declaration
    if op in (">", ">=", "<", "<="):
        if _json_type(actual) != "number" or _json_type(expected) != "number":
            raise TypeMismatch(f"{rule['param']} {op} compares numbers only")
        return {">": actual > expected, ">=": actual >= expected,
                "<": actual < expected, "<=": actual <= expected}[op]
    if op in ("==", "!="):
        if _json_type(actual) != _json_type(expected):
            raise TypeMismatch(f"{rule['param']} {op}: {_json_type(actual)} is not {_json_type(expected)}")
        return (actual == expected) == (op == "==")
    if op == "in":
        types = {_json_type(v) for v in expected}
        if _json_type(actual) not in types:
            raise TypeMismatch(f"{rule['param']} in: {_json_type(actual)} is not among the listed types")
        return any(_json_type(v) == _json_type(actual) and v == actual for v in expected)
    if op == "contains":
        if isinstance(actual, str):
            if not isinstance(expected, str):
                raise TypeMismatch(f"{rule['param']} contains: a string contains only strings")
            return expected in actual
        if isinstance(actual, list):
            return any(_json_type(v) == _json_type(expected) and v == expected for v in actual)
        raise TypeMismatch(f"{rule['param']} contains: needs a string or an array")
    raise TypeMismatch(f"unknown operator {op}")


def approval_policy(tool, forced: bool, arguments: dict) -> dict | None:
    """Why this call needs approval, or None when it needs none. Raises TypeMismatch."""
    reasons: list[str] = []
    if tool.risk == "high":
        reasons.append("risk_high")
    if tool.approval_required and tool.risk != "high":
        reasons.append("acc_approval_required")
    if forced:
        reasons.append("route_force_approval")
    matched = [rule for rule in tool.approval_rules if rule_matches(rule, arguments)]
    if matched:
        reasons.append("approval_when")
    if not reasons:
        return None
    return {"reasons": reasons, "matched_rules": matched, "risk": tool.risk}
