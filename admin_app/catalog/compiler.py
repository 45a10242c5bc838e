"""OpenAPI 3.x + ACC (`x-agent-capability`) -> typed tools.

Every operation whose ACC is enabled becomes a Tool. The agent's input is one flat JSON object:
path and query parameters, plus the properties of a JSON object request body (an operation whose
body is not an object takes it whole under `body`). Anything the compiler cannot type safely is a
compile error naming the operation, so a provider is accepted whole or not at all.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from .. import limits
from ..canonical import sha256_json
from .public_schema import byte_size, public_input_schema
from .rate_limits import declared
from .text_bounds import Bounded, bound_description, bound_guidance

# Bump whenever a change here alters what agents are shown; revisions then change with it.
COMPILER_VERSION = 2

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# The name agents call a tool by; the official client refuses any other (a model function name).
TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
NUMERIC_OPS = {">", ">=", "<", "<="}
JSON_TYPES = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
              "array": (list,), "object": (dict,), "null": (type(None),)}


class CompileError(Exception):
    def __init__(self, problems: list[tuple[str, str]]):
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = problems


@dataclass(frozen=True)
class Tool:
    provider: str
    name: str
    scope: str
    method: str
    path: str
    input_schema: dict  # what calls are validated against
    public_schema: dict  # what agents are shown (allowlisted keywords, see public_schema.py)
    locations: dict  # argument name -> "path" | "query" | "body" | "whole_body"
    readonly: bool
    idempotent: bool
    risk: str
    approval_required: bool  # ACC approval.required, or high risk
    approval_rules: tuple
    approval_prompt: str | None
    subject_required: bool
    sensitive: bool
    timeout_ms: int
    description: Bounded
    guidance: Bounded
    usage_guidance_available: bool
    execution_fingerprint: str
    # ACC `execution.rate_limit` as (count, window seconds); None when absent or invalid. A gate
    # before dispatch, not part of the execution fingerprint: a changed limit runs nothing else.
    rate_limit: tuple[int, int] | None = None


@dataclass
class CompiledProvider:
    name: str
    tools: dict[str, Tool] = field(default_factory=dict)
    warnings: list[dict] = field(default_factory=list)


@lru_cache(maxsize=1)
def _acc_validator() -> Draft202012Validator:
    schema = json.loads(resources.files(__package__).joinpath("acc.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def _pointer(doc: dict, ref: str) -> Any:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node: Any = doc
    for raw in ref[2:].split("/"):
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise ValueError(f"$ref {ref!r} points at nothing")
    return node


def resolve(node: Any, doc: dict, stack: tuple[str, ...] = ()) -> Any:
    """A deep copy of `node` with every local $ref inlined; a $ref cycle is an error."""
    if isinstance(node, dict):
        if "$ref" in node and isinstance(node["$ref"], str):
            ref = node["$ref"]
            if ref in stack:
                raise ValueError(f"$ref {ref!r} refers to itself")
            target = resolve(_pointer(doc, ref), doc, stack + (ref,))
            siblings = {k: resolve(v, doc, stack) for k, v in node.items() if k != "$ref"}
            if siblings and isinstance(target, dict):
                return {**target, **siblings}
            return target
        return {k: resolve(v, doc, stack) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, doc, stack) for v in node]
    return copy.deepcopy(node)


def strip_extensions(node: Any) -> Any:
    """Schemas as agents see them: vendor `x-*` keys are the provider's business, not theirs."""
    if isinstance(node, dict):
        return {k: strip_extensions(v) for k, v in node.items()
                if not (isinstance(k, str) and k.startswith("x-"))}
    if isinstance(node, list):
        return [strip_extensions(v) for v in node]
    return node


def _schema_type(schema: Any) -> str | None:
    if isinstance(schema, dict) and isinstance(schema.get("type"), str):
        return schema["type"]
    return None


def _is_json_media(media: str) -> bool:
    base = media.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _input(op: dict, path_item: dict, doc: dict, where: str, problems: list, warnings: list,
           name: str) -> tuple[dict, dict]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    locations: dict[str, str] = {}
    params: dict[tuple[str, str], dict] = {}
    for source in (path_item.get("parameters", []), op.get("parameters", [])):
        for raw in source if isinstance(source, list) else []:
            param = resolve(raw, doc)
            if isinstance(param, dict) and isinstance(param.get("name"), str):
                params[(param["name"], param.get("in", ""))] = param
    for (pname, location), param in params.items():
        if location not in ("path", "query"):
            if param.get("required"):
                problems.append((where, f"required {location} parameter '{pname}' cannot be supplied by an agent"))
            else:
                warnings.append({"code": "parameter_not_exposed", "tool": name,
                                 "message": f"optional {location} parameter '{pname}' is not offered to agents"})
            continue
        if pname in properties:
            problems.append((where, f"parameter '{pname}' is declared twice"))
            continue
        schema = dict(param.get("schema") or {})
        if "description" in param and "description" not in schema:
            schema["description"] = param["description"]
        properties[pname] = schema
        locations[pname] = location
        if param.get("required") or location == "path":
            required.append(pname)

    body = op.get("requestBody")
    if body is not None:
        body = resolve(body, doc)
        content = (body.get("content") if isinstance(body, dict) else None) or {}
        media = [m for m in content if _is_json_media(m)]
        if not media:
            problems.append((where, "the request body must have a JSON media type"))
        else:
            schema = content[media[0]].get("schema") or {}
            body_required = bool(body.get("required"))
            if _schema_type(schema) == "object" and isinstance(schema.get("properties"), dict):
                for prop, prop_schema in schema["properties"].items():
                    if prop in properties:
                        problems.append((where, f"body property '{prop}' has the name of a parameter"))
                        continue
                    properties[prop] = prop_schema
                    locations[prop] = "body"
                if body_required:
                    required.extend(r for r in schema.get("required", []) if r in schema["properties"])
            else:
                if "body" in properties:
                    problems.append((where, "a parameter named 'body' hides the request body"))
                properties["body"] = schema
                locations["body"] = "whole_body"
                if body_required:
                    required.append("body")
    input_schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        input_schema["required"] = sorted(set(required))
    return input_schema, locations


def _param_schema(input_schema: dict, dotted: str) -> dict | None:
    node: Any = input_schema
    for part in dotted.split("."):
        props = node.get("properties") if isinstance(node, dict) else None
        if not isinstance(props, dict) or part not in props:
            return None
        node = props[part]
    return node if isinstance(node, dict) else None


def _value_fits(value: Any, json_type: str) -> bool:
    if isinstance(value, bool) and json_type not in ("boolean",):
        return False
    if json_type == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, JSON_TYPES[json_type])


def _check_rule(rule: dict, input_schema: dict) -> str | None:
    param, op = rule["param"], rule["op"]
    schema = _param_schema(input_schema, param)
    if schema is None:
        return f"approval.when param '{param}' is not a parameter of this operation"
    json_type = _schema_type(schema)
    if json_type not in JSON_TYPES:
        return f"approval.when param '{param}' has no declared type"
    if op == "exists":
        return None
    if "value" not in rule:
        return f"approval.when '{param} {op}' needs a value"
    value = rule["value"]
    if op in NUMERIC_OPS:
        if json_type not in ("number", "integer") or not _value_fits(value, "number"):
            return f"approval.when '{param} {op}' compares numbers only (parameter is {json_type})"
    elif op in ("==", "!="):
        if not _value_fits(value, json_type):
            return f"approval.when '{param} {op}' value must be of type {json_type}"
    elif op == "in":
        if not isinstance(value, list) or not all(_value_fits(v, json_type) for v in value):
            return f"approval.when '{param} in' value must be a list of {json_type} values"
    elif op == "contains":
        if json_type == "string":
            if not isinstance(value, str):
                return f"approval.when '{param} contains' value must be a string"
        elif json_type == "array":
            item_type = _schema_type(schema.get("items"))
            if item_type is not None and not _value_fits(value, item_type):
                return f"approval.when '{param} contains' value must be of type {item_type}"
        else:
            return f"approval.when '{param} contains' needs a string or array parameter"
    return None


def _guidance_text(op: dict, acc: dict) -> str:
    parts: list[str] = []
    for key in ("summary", "description"):
        if isinstance(op.get(key), str) and op[key].strip():
            parts.append(op[key].strip())
    guidance = acc.get("guidance") or {}
    if isinstance(guidance.get("when_to_use"), str) and guidance["when_to_use"].strip():
        parts.append("When to use: " + guidance["when_to_use"].strip())
    if isinstance(guidance.get("returns"), str) and guidance["returns"].strip():
        parts.append("Returns: " + guidance["returns"].strip())
    examples = guidance.get("examples")
    if isinstance(examples, list) and examples:
        parts.append("Example: " + json.dumps(examples[0], ensure_ascii=False, sort_keys=True))
    return "\n\n".join(parts)


def _short_description(op: dict, acc: dict) -> str:
    for value in (op.get("summary"), op.get("description"), (acc.get("outcome") or {}).get("result")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _without_invalid_rate_limit(acc: Any, op_id: Any, warnings: list) -> Any:
    """An invalid `execution.rate_limit` means no limit (Core, BUSINESS_SIDE §D.2), with a
    warning, rather than refusing the whole provider: the declaration is dropped before the ACC
    is checked."""
    execution = acc.get("execution") if isinstance(acc, dict) else None
    if not isinstance(execution, dict) or "rate_limit" not in execution \
            or declared(execution["rate_limit"]) is not None:
        return acc
    warnings.append({"code": "rate_limit_declaration_invalid", "tool": op_id if isinstance(op_id, str) else None,
                     "message": "execution.rate_limit is not {count: positive integer, window: 1s|1m|1h|1d}; "
                                "the tool has no declared rate limit"})
    return {**acc, "execution": {k: v for k, v in execution.items() if k != "rate_limit"}}


def compile_provider(name: str, openapi: dict, base_url: str, timeout_ms: int) -> CompiledProvider:
    result = CompiledProvider(name)
    problems: list[tuple[str, str]] = []
    paths = openapi.get("paths")
    if not isinstance(paths, dict):
        raise CompileError([("paths", "must be an object")])
    base_url_hash = sha256_json(base_url)
    for path, item in paths.items():
        if not isinstance(item, dict):
            continue
        for method in HTTP_METHODS:
            op = item.get(method)
            if not isinstance(op, dict) or "x-agent-capability" not in op:
                continue
            op_id = op.get("operationId")
            where = f"paths.{path}.{method} ({op_id})" if isinstance(op_id, str) else f"paths.{path}.{method}"
            acc = _without_invalid_rate_limit(op["x-agent-capability"], op_id, result.warnings)
            errors = sorted(_acc_validator().iter_errors(acc), key=lambda e: list(e.absolute_path))
            if errors:
                for err in errors:
                    sub = ".".join(str(p) for p in err.absolute_path)
                    problems.append((where, f"x-agent-capability{'.' + sub if sub else ''}: {err.message}"))
                continue
            if not acc["enabled"]:
                continue
            if not isinstance(op_id, str) or not TOOL_NAME.match(op_id):
                problems.append((where, "an enabled capability needs an operationId matching "
                                        + TOOL_NAME.pattern))
                continue
            if op_id in result.tools:
                problems.append((where, f"operationId '{op_id}' is used twice"))
                continue
            op_problems: list[tuple[str, str]] = []
            try:
                # Only what this operation's input needs is resolved: a recursive response schema
                # elsewhere must not refuse the provider.
                input_schema, locations = _input(op, item, openapi, where, op_problems,
                                                 result.warnings, op_id)
            except ValueError as err:
                problems.append((where, str(err)))
                continue
            input_schema = strip_extensions(input_schema)
            public_schema = public_input_schema(input_schema)
            if byte_size(public_schema) > limits.TOOL_SCHEMA_MAX_BYTES:
                op_problems.append((where, (f"the input schema exceeds {limits.TOOL_SCHEMA_MAX_BYTES} bytes "
                                            "as agents are shown it")))
            approval = acc.get("approval") or {}
            rules = tuple(approval.get("when") or ())
            for rule in rules:
                message = _check_rule(rule, input_schema)
                if message:
                    op_problems.append((where, message))
            if op_problems:
                problems.extend(op_problems)
                continue
            execution = acc.get("execution") or {}
            readonly = execution.get("readonly", method in ("get", "head"))
            risk = (acc.get("risk") or {}).get("level", "low")
            description = bound_description(_short_description(op, acc))
            if not description.text.strip():  # agents are never shown a tool without one
                description = bound_description(op_id)
            guidance = bound_guidance(_guidance_text(op, acc))
            if description.truncated:
                result.warnings.append({
                    "code": "tool_description_truncated", "tool": op_id,
                    "message": f"description shortened from {description.source_chars} to "
                               f"{len(description.text)} code points"})
            if guidance.truncated:
                result.warnings.append({
                    "code": "tool_usage_guidance_truncated", "tool": op_id,
                    "message": f"usage guidance of {guidance.source_chars} code points / "
                               f"{guidance.source_bytes} bytes cut to the limits"})
            tool = dict(
                provider=name, name=op_id, scope=acc["scope"], method=method.upper(), path=path,
                input_schema=input_schema, public_schema=public_schema, locations=locations, readonly=bool(readonly),
                idempotent=bool(execution.get("idempotent", readonly)), risk=risk,
                approval_required=bool(approval.get("required", False)) or risk == "high",
                approval_rules=rules, approval_prompt=approval.get("prompt"),
                subject_required=bool((acc.get("subject") or {}).get("required", False)),
                sensitive=bool((acc.get("audit") or {}).get("sensitive", False)),
                timeout_ms=int(execution.get("timeout_ms", timeout_ms)),
                description=description, guidance=guidance,
                usage_guidance_available=bool(guidance.text) and guidance.text != description.text,
            )
            fingerprint = sha256_json({
                "compiler": COMPILER_VERSION, "base_url_sha256": base_url_hash,
                **{k: v for k, v in tool.items() if k not in ("description", "guidance",
                                                              "usage_guidance_available",
                                                              "public_schema")},
            })
            result.tools[op_id] = Tool(**tool, execution_fingerprint=fingerprint,
                                       rate_limit=declared(execution.get("rate_limit")))
    if problems:
        raise CompileError(problems)
    return result
