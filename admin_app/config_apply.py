"""`bailing-admin config apply FILE`: validate a whole configuration, then upsert it at once.

Everything is checked before anything is written, every bad field is reported with its path,
and the upsert runs in one transaction under an advisory lock, so a file either lands whole or
changes nothing, and two concurrent applies cannot interleave. `--check` (`check`) makes the same
checks and the same report in a read-only transaction, writing nothing.
"""
from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from . import limits
from .canonical import utc_now
from .catalog.compiler import COMPILER_VERSION, HTTP_METHODS, TOOL_NAME, CompileError, compile_provider
from .catalog.rate_limits import check_provider_rate_limits
from .catalog.store import compiled_providers
from .config_audit import changes
from .config_audit.log import record_object
from .identity import client_gate
from .identity.admins import operator
from .identity.models import ClientApp, Route, ToolProvider
from .jobs import budgets
from .jobs import rules as job_rules
from .jobs.models import ExecutorTarget
from .providers import config_pulls
from .providers.config_pulls import ConfigPull, Resolved
from .providers.spec_pull import POLICIES
from .runtime import artifact_config
from .runtime.artifact_storage import Bucket
from .notifications.channels import WEBHOOK_KINDS, Channel
from .validation import (MAX_JSON_DEPTH, Checker, Invalid, join, json_value_problems, repeats,
                         strict_json_loads)

# "bzconf" in ASCII: serialises concurrent applies.
APPLY_LOCK_KEY = 0x627A636F6E66
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")

CLIENT_FIELDS = ("app_id", "name", "allowed_routes", "enabled", "agent_authorize_url",
                 "rate_limit_per_min",  # the client gate (BUSINESS_SIDE §D.1), identity/client_gate.py
                 "budget")  # the Client API's launch-time budget (jobs/budgets.py)
# What a route does with Client API work (CLIENT_API_AND_EXECUTOR.md §A.3): kept in
# bz_routes.job_settings, beside its executor target (bz_routes.target).
JOB_SETTINGS = ("retry", "default_callback_url", "session_policy", "session_key_field", "budget")
ROUTE_FIELDS = ("route_key", "name", "description", "enabled", "audience", "target_config",
                "agent_client", "tools", "permission", "approvals", "target", *JOB_SETTINGS)
EXECUTOR_TARGET_FIELDS = ("name", "description", "enabled")
PROVIDER_FIELDS = ("name", "base_url", "openapi", "secret_env", "timeout_ms")
# Tool rate-limit policies (BUSINESS_SIDE §D.2, catalog/rate_limits.py); optional provider fields.
PROVIDER_RATE_FIELDS = ("rate_limit_per_min", "tool_rate_limits")
# A spec pulled from the business system instead of `openapi` (BUSINESS_SIDE §B, providers/).
PROVIDER_SPEC_FIELDS = ("spec_url", "spec_access_policy", "auto_refresh_min")


# ---------------------------------------------------------------- loading

def load_file(path: Path) -> dict:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise Invalid([("", f"cannot read {path}: {err.strerror}")]) from None
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise Invalid([("", "the file must end in .json or .toml")])
    try:
        doc = tomllib.loads(raw.decode("utf-8")) if suffix == ".toml" else strict_json_loads(raw)
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise Invalid([("", f"{path.name} is nested deeper than {MAX_JSON_DEPTH} levels")]) from None
    except (ValueError, UnicodeDecodeError) as err:
        located = _json_problems_by_path(raw) if suffix == ".json" else None
        if located:
            raise Invalid(located) from None
        raise Invalid([("", f"{path.name} is not valid {suffix[1:].upper()}: {err}")]) from None
    if not isinstance(doc, dict):
        raise Invalid([("", "the top level must be an object")])
    if _depth_exceeds(doc, MAX_JSON_DEPTH):
        raise Invalid([("", f"{path.name} is nested deeper than {MAX_JSON_DEPTH} levels")])
    problems = json_value_problems(doc)
    if problems:
        raise Invalid(problems)
    return doc


class _Members(dict):
    """An object as parsed leniently, with the keys its text gives more than once."""
    duplicates: tuple[str, ...] = ()


def _json_problems_by_path(raw: bytes) -> list[tuple[str, str]] | None:
    """What strict parsing refused, named by path where a lenient parse can tell: duplicate
    keys, NaN and infinities, NUL and lone surrogates. None when the text is not JSON at all
    (or too deep to walk): the parser's own message says more then."""
    def pairs(items):
        obj = _Members(items)
        if len(obj) != len(items):
            obj.duplicates = tuple(dict.fromkeys(repeats(k for k, _ in items)))
        return obj

    try:
        decoded = raw.decode(json.detect_encoding(raw), "surrogatepass")
        doc = json.loads(decoded, object_pairs_hook=pairs)
        if _depth_exceeds(doc, MAX_JSON_DEPTH):
            return None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    problems: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, _Members):
            problems.extend((join(where, key), "is given more than once (duplicate key)")
                            for key in node.duplicates)
        if isinstance(node, dict):
            stack.extend((v, join(where, k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, join(where, i)) for i, v in reversed(list(enumerate(node))))
    problems.extend(json_value_problems(doc))
    return problems or None


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Iterative, so that a deep document cannot exhaust the stack of the walk itself."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


# ---------------------------------------------------------------- checks

def _is_loopback_dev_url(host: str | None, port: int | None) -> bool:
    if host is None or port is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(checker: Checker, value: Any, path: str, *, https_or_loopback: bool) -> str | None:
    url = checker.string(value, path, min_len=1, max_len=2048, single_line=True)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        checker.add(path, "is not a valid URL")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        checker.add(path, "must be an http(s) URL with a host")
    elif parts.username is not None or parts.password is not None:
        checker.add(path, "must not carry credentials")
    elif parts.fragment:
        checker.add(path, "must not have a #fragment")
    elif https_or_loopback and parts.scheme == "http" and not _is_loopback_dev_url(parts.hostname, port):
        checker.add(path, "must be https, or http on 127.0.0.1 or ::1 with an explicit port")
    else:
        return url
    return None


def check_openapi(checker: Checker, value: Any, path: str, base_dir: Path) -> dict | None:
    if isinstance(value, str):
        doc_path = (base_dir / value)
        shown = value if len(value) <= 200 else value[:200] + "..."  # a name, not a whole text
        try:
            value = strict_json_loads(doc_path.read_bytes())
        except OSError as err:
            checker.add(path, f"cannot read {shown}: {err.strerror}")
            return None
        except (ValueError, UnicodeDecodeError) as err:
            checker.add(path, f"{shown} is not valid JSON: {err}")
            return None
    if not isinstance(value, dict):
        checker.add(path, "must be an OpenAPI document or a path to one")
        return None
    version = value.get("openapi")
    if not isinstance(version, str) or not version.startswith("3."):
        checker.add(join(path, "openapi"), "must be an OpenAPI 3.x version string")
        return None
    if not isinstance(value.get("paths"), dict):
        checker.add(join(path, "paths"), "must be an object")
        return None
    return value


def check_spec_source(checker: Checker, item: dict, path: str, base_dir: Path,
                      pulled: dict[str, Resolved]) -> dict[str, Any]:
    """The provider's spec: `openapi` (a document or a file) or `spec_url`, exactly one; with
    `spec_url`, its access policy and auto refresh, and the document pulled before the apply's
    transaction (providers/config_pulls.py says when a failed pull refuses the apply)."""
    has_doc, has_url = "openapi" in item, "spec_url" in item
    if has_doc and has_url:
        checker.add(join(path, "spec_url"), "give either openapi or spec_url, not both")
    elif not has_doc and not has_url:
        checker.add(join(path, "openapi"), "is required")
    if not has_url:
        for key in ("spec_access_policy", "auto_refresh_min"):
            if key in item:
                checker.add(join(path, key), "is only for a provider whose spec is pulled from spec_url")
        return {"openapi": check_openapi(checker, item["openapi"], join(path, "openapi"), base_dir)
                if has_doc else None, "spec_url": None, "spec_access_policy": "signed_required",
                "auto_refresh_min": 0}
    url = check_url(checker, item["spec_url"], join(path, "spec_url"), https_or_loopback=False)
    policy = item.get("spec_access_policy", "signed_required")
    if policy not in POLICIES:
        checker.add(join(path, "spec_access_policy"), "must be 'signed_required' or 'public_allowed'")
    minutes = checker.integer(item.get("auto_refresh_min", 0), join(path, "auto_refresh_min"), minimum=0,
                              maximum=limits.SPEC_AUTO_REFRESH_MAX_MIN)
    found = pulled.get(item["name"]) if isinstance(item.get("name"), str) and not has_doc else None
    pullable = policy in POLICIES and isinstance(item.get("secret_env"), str)  # else not pulled: said above
    if url is not None and not has_doc and found is None and pullable:
        checker.add(join(path, "spec_url"), "was not pulled (its provider has other problems)")
    elif found is not None and found.refusal is not None:
        checker.add(join(path, "spec_url"), f"could not be pulled: {found.refusal}")
    return {"openapi": found.document if found else None, "spec_url": url, "spec_access_policy": policy,
            "auto_refresh_min": minutes}


def check_provider(checker: Checker, item: Any, path: str, base_dir: Path,
                   pulled: dict[str, Resolved] | None = None):
    """(record, CompiledProvider), or None when anything about the provider is wrong."""
    # Counted before the shape check, so a missing required key also stops the record.
    before = len(checker.problems)
    if checker.obj(item, path, required=("name", "base_url", "secret_env"),
                   optional=("openapi", "timeout_ms", *PROVIDER_RATE_FIELDS, *PROVIDER_SPEC_FIELDS)) is None:
        return None
    record: dict[str, Any] = {
        "name": checker.resource_key(item.get("name"), join(path, "name")) if "name" in item else None,
        "base_url": check_url(checker, item.get("base_url"), join(path, "base_url"),
                              https_or_loopback=False) if "base_url" in item else None,
        **check_spec_source(checker, item, path, base_dir, pulled or {}),
        "secret_env": checker.string(item.get("secret_env"), join(path, "secret_env"),
                                     pattern=ENV_NAME, pattern_text="an environment variable name "
                                     "(A-Z, 0-9, _)") if "secret_env" in item else None,
        "timeout_ms": checker.integer(item.get("timeout_ms", 10000), join(path, "timeout_ms"),
                                      minimum=1, maximum=600000),
        **check_provider_rate_limits(checker, item, path),
    }
    if len(checker.problems) != before:
        return None
    try:
        compiled = compile_provider(record["name"], record["openapi"], record["base_url"],
                                    record["timeout_ms"])
    except CompileError as err:
        for where, message in err.problems:
            checker.add(join(path, "openapi" if record["spec_url"] is None else "spec_url"), f"{where}: {message}")
        return None
    except _UNREADABLE:
        for where in _unreadable_operations(record):
            checker.add(join(path, "openapi" if record["spec_url"] is None else "spec_url"),
                        where + UNREADABLE_MESSAGE)
        return None
    record["compiler_version"] = COMPILER_VERSION
    record["compile_warnings"] = compiled.warnings
    return record, compiled


# The compiler reads an OpenAPI document as OpenAPI shapes it (a parameter's schema is an object,
# a body's content maps media types to objects, ...). A document of the file that breaks one of
# those shapes is the file's problem, refused by where it is, not a crash of the command.
_UNREADABLE = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)
UNREADABLE_MESSAGE = ("has a value of a type OpenAPI does not allow there (such as a parameter "
                      "schema, request body or media type object that is not an object)")


def _unreadable_operations(record: dict) -> list[str]:
    """Where the compiler cannot read the document: each operation compiled alone (with its path
    item's shared keys), named as `paths./x.post: `; the whole document ("") when none alone
    fails."""
    doc = record["openapi"]
    found = []
    for route, item in doc["paths"].items():
        if not isinstance(item, dict):
            continue
        for method in (m for m in HTTP_METHODS if m in item):
            alone = {k: v for k, v in item.items() if k == method or k not in HTTP_METHODS}
            try:
                compile_provider(record["name"], {**doc, "paths": {route: alone}}, record["base_url"],
                                 record["timeout_ms"])
            except CompileError:
                continue
            except _UNREADABLE:
                found.append(f"paths.{route}.{method}: ")
    return found or [""]


def check_audience(checker: Checker, value: Any, path: str) -> None:
    lists = ("ids", "tenants", "roles", "audiences")
    if checker.obj(value, path, required=("enabled",), optional=("anonymous", *lists)) is None:
        return
    if "enabled" in value:
        checker.boolean(value["enabled"], join(path, "enabled"))
    if "anonymous" in value:
        checker.boolean(value["anonymous"], join(path, "anonymous"))
    for key in lists:
        if key in value:
            checker.string_list(value[key], join(path, key), max_items=1000)


# The official client refuses system-info text that is blank or holds any control character.
_SYSTEM_INFO_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _system_info_text(checker: Checker, value: Any, path: str, max_len: int) -> None:
    if checker.string(value, path, min_len=1, max_len=max_len) is None:
        return
    if not value.strip() or _SYSTEM_INFO_CONTROL.search(value):
        checker.add(path, "must be one non-blank line without control characters")


def check_system_info(checker: Checker, value: Any, path: str) -> None:
    """What system-info tells agents about the business system, within the official client's
    limits (limits.SYSTEM_*)."""
    if checker.obj(value, path, required=("name", "summary"), optional=("domains", "boundaries")) is None:
        return
    for key, max_len in (("name", limits.SYSTEM_NAME_MAX), ("summary", limits.SYSTEM_SUMMARY_MAX)):
        if key in value:
            _system_info_text(checker, value[key], join(path, key), max_len)
    for key, max_items, max_len in (("domains", limits.SYSTEM_MAX_DOMAINS, limits.SYSTEM_DOMAIN_MAX),
                                    ("boundaries", limits.SYSTEM_MAX_BOUNDARIES, limits.SYSTEM_BOUNDARY_MAX)):
        if key not in value:
            continue
        if not isinstance(value[key], list) or len(value[key]) > max_items:
            checker.add(join(path, key), f"must be a list of at most {max_items} texts")
            continue
        for i, item in enumerate(value[key]):
            _system_info_text(checker, item, join(join(path, key), i), max_len)


def check_agent_client(checker: Checker, value: Any, path: str) -> None:
    if checker.obj(value, path, required=("enabled",),
                   optional=("instructions", "memory", "knowledge", "max_tool_calls",
                             "active_tool_limit", "system_info", "artifact_upload")) is None:
        return
    if "artifact_upload" in value:
        artifact_config.check_upload(checker, value["artifact_upload"], join(path, "artifact_upload"))
    if "enabled" in value:
        checker.boolean(value["enabled"], join(path, "enabled"))
    if "active_tool_limit" in value:  # the official client takes at most 12 active tools
        checker.integer(value["active_tool_limit"], join(path, "active_tool_limit"), minimum=1, maximum=12)
    if "system_info" in value:
        check_system_info(checker, value["system_info"], join(path, "system_info"))
    if "instructions" in value:
        checker.string(value["instructions"], join(path, "instructions"), max_len=32000)
    if "max_tool_calls" in value:
        checker.integer(value["max_tool_calls"], join(path, "max_tool_calls"), minimum=0, maximum=100)
    # null is not an object: a present key must hold one (absent keys take the defaults).
    memory = value.get("memory")
    if "memory" in value and checker.obj(memory, join(path, "memory"), optional=(
            "recent_messages", "recent_budget_chars", "per_message_chars",
            "summary_enabled", "summary_max_chars")) is not None:
        limits = {"recent_messages": 200, "recent_budget_chars": 256000,
                  "per_message_chars": 64000, "summary_max_chars": 64000}
        for key, maximum in limits.items():
            if key in memory:
                checker.integer(memory[key], join(join(path, "memory"), key), minimum=0, maximum=maximum)
        if "summary_enabled" in memory:
            checker.boolean(memory["summary_enabled"], join(join(path, "memory"), "summary_enabled"))
    knowledge = value.get("knowledge")
    kpath = join(path, "knowledge")
    if "knowledge" in value and checker.obj(knowledge, kpath, optional=(
            "enabled", "mode", "top_k", "max_docs", "page_boost")) is not None:
        for key in ("enabled", "page_boost"):
            if key in knowledge:
                checker.boolean(knowledge[key], join(kpath, key))
        if "mode" in knowledge and knowledge["mode"] not in ("chunk", "document"):
            checker.add(join(kpath, "mode"), "must be 'chunk' or 'document'")
        for key in ("top_k", "max_docs"):
            if key in knowledge:
                checker.integer(knowledge[key], join(kpath, key), minimum=1, maximum=50)


def check_tools(checker: Checker, value: Any, path: str, providers: dict[str, Any]) -> dict[str, Any]:
    """`providers` maps a provider name to its CompiledProvider (from the file or the database),
    or to None for a provider of the file that has problems of its own (reported there). Returns
    the route's tools by name, as far as they could be told."""
    route_tools: dict[str, Any] = {}
    if checker.obj(value, path, optional=("sources", "agent_direct", "max_calls")) is None:
        return route_tools
    if "max_calls" in value:  # tool calls a Client API job may make (§C.2)
        checker.integer(value["max_calls"], join(path, "max_calls"), minimum=job_rules.MAX_CALLS_RANGE[0],
                        maximum=job_rules.MAX_CALLS_RANGE[1])
    sources = value.get("sources", [])
    spath = join(path, "sources")
    if not isinstance(sources, list):
        checker.add(spath, "must be a list")
        sources = []
    seen_providers: set[str] = set()
    for i, source in enumerate(sources):
        ipath = join(spath, i)
        if checker.obj(source, ipath, required=("provider", "allow")) is None:
            continue
        name = checker.resource_key(source.get("provider"), join(ipath, "provider")) \
            if "provider" in source else None
        compiled = providers.get(name) if name else None
        if name is not None:
            if name in seen_providers:
                checker.add(join(ipath, "provider"), f"'{name}' is listed twice")
            seen_providers.add(name)
            if name not in providers:
                checker.add(join(ipath, "provider"), f"no tool provider named '{name}'")
        if "allow" not in source or checker.string_list(source["allow"], join(ipath, "allow")) is None:
            continue
        if compiled is None:
            continue
        scopes = {tool.scope for tool in compiled.tools.values()}
        for j, scope in enumerate(source["allow"]):
            if scope != "*" and scope not in scopes:
                checker.add(join(join(ipath, "allow"), j),
                            f"'{scope}' is not a scope of an enabled tool of provider '{name}'")
        for tool in compiled.tools.values():
            if "*" in source["allow"] or tool.scope in source["allow"]:
                if tool.name in route_tools and route_tools[tool.name].provider != name:
                    checker.add(ipath, f"tool '{tool.name}' is also offered by provider "
                                       f"'{route_tools[tool.name].provider}'")
                route_tools[tool.name] = tool
    direct = value.get("agent_direct")
    dpath = join(path, "agent_direct")
    if "agent_direct" not in value or checker.obj(direct, dpath, required=("enabled",), optional=(
            "write_tools", "force_approval_tools", "unattended_write_tools")) is None:
        return route_tools
    if "enabled" in direct:
        checker.boolean(direct["enabled"], join(dpath, "enabled"))
    if "force_approval_tools" in direct and "unattended_write_tools" in direct:
        checker.add(join(dpath, "unattended_write_tools"),
                    "is deprecated and cannot be combined with force_approval_tools")
    for key in ("write_tools", "force_approval_tools", "unattended_write_tools"):
        if key not in direct or checker.string_list(direct[key], join(dpath, key)) is None:
            continue
        for j, op_id in enumerate(direct[key]):
            tool = route_tools.get(op_id)
            if tool is None:
                checker.add(join(join(dpath, key), j),
                            f"'{op_id}' is not a tool of this route's allowed sources")
            elif key != "force_approval_tools" and tool.readonly:
                checker.add(join(join(dpath, key), j), f"'{op_id}' is readonly, not a write tool")
    return route_tools


def check_route_approvals(checker: Checker, value: Any, path: str, route_tools: dict[str, Any]) -> None:
    """`{"ttl_seconds": N, "tool_ttl_seconds": {operation: N}}`: how long an approval of this
    route's calls can be decided and resumed; a tool's own value wins over the route's."""
    if checker.obj(value, path, optional=("ttl_seconds", "tool_ttl_seconds")) is None:
        return
    low, high = limits.APPROVAL_TTL_SECONDS
    if "ttl_seconds" in value:
        checker.integer(value["ttl_seconds"], join(path, "ttl_seconds"), minimum=low, maximum=high)
    per_tool = value.get("tool_ttl_seconds", {})
    tpath = join(path, "tool_ttl_seconds")
    if checker.obj(per_tool, tpath, open_ended=True) is None:
        return
    for name, ttl in per_tool.items():
        if name not in route_tools:
            checker.add(join(tpath, name), f"'{name}' is not a tool of this route's allowed sources")
        checker.integer(ttl, join(tpath, name), minimum=low, maximum=high)


def check_job_settings(checker: Checker, item: dict, path: str, targets: set[str] | None) -> dict[str, Any]:
    """A route's Client API settings: its executor target (`targets`: the names declared in the
    database or the file; None when they cannot be told), and what bz_routes.job_settings keeps:
    `retry.max`, `default_callback_url`, `session_policy` (+ `session_key_field`), `budget`, and
    `tools.max_calls` (checked with the tools). Only what the file gives is kept."""
    settings: dict[str, Any] = {}
    if "target" in item and checker.string(item["target"], join(path, "target"), pattern=job_rules.ROUTE_PATTERN,
                                           pattern_text="an executor target name") is not None \
            and targets is not None and item["target"] not in targets:
        checker.add(join(path, "target"), f"no executor target named '{item['target']}' "
                                          "(declare it in executor_targets)")
    if "retry" in item and checker.obj(item["retry"], join(path, "retry"), optional=("max",)) is not None:
        if "max" in item["retry"]:
            checker.integer(item["retry"]["max"], join(join(path, "retry"), "max"), minimum=0,
                            maximum=job_rules.RETRY_MAX)
        settings["retry"] = {"max": item["retry"].get("max", 0)}
    if "default_callback_url" in item:
        if not job_rules.callback_url_ok(item["default_callback_url"]):
            checker.add(join(path, "default_callback_url"),
                        f"must be an http(s) URL of at most {job_rules.CALLBACK_URL_MAX} characters")
        settings["default_callback_url"] = item["default_callback_url"]
    policy = item.get("session_policy", "new")
    if "session_policy" in item:
        if policy not in job_rules.SESSION_POLICIES:
            checker.add(join(path, "session_policy"), "must be 'new' or 'passthrough'")
        settings["session_policy"] = policy
    if "session_key_field" in item:
        if policy != "passthrough":
            checker.add(join(path, "session_key_field"), "is used only with session_policy 'passthrough'")
        checker.string(item["session_key_field"], join(path, "session_key_field"), min_len=1,
                       max_len=job_rules.SESSION_KEY_FIELD_MAX, single_line=True)
        settings["session_key_field"] = item["session_key_field"]
    if "budget" in item:
        budget = budgets.check_policy(checker, item["budget"], join(path, "budget"))
        if budget is not None:
            settings["budget"] = budget
    tools = item.get("tools")
    if isinstance(tools, dict) and "max_calls" in tools:
        settings["max_calls"] = tools["max_calls"]
    return settings


def check_executor_target(checker: Checker, item: Any, path: str) -> dict | None:
    """One executor target (§B.1): a named slot routes send their Client API work to."""
    before = len(checker.problems)
    if checker.obj(item, path, required=("name",), optional=EXECUTOR_TARGET_FIELDS) is None:
        return None
    if "name" in item:
        checker.string(item["name"], join(path, "name"), pattern=job_rules.ROUTE_PATTERN,
                       pattern_text="^[a-z0-9][a-z0-9_-]{1,63}$")
    if "description" in item:
        checker.string(item["description"], join(path, "description"), max_len=limits.ROUTE_DESCRIPTION_MAX)
    if "enabled" in item:
        checker.boolean(item["enabled"], join(path, "enabled"))
    if len(checker.problems) != before:
        return None
    return {"name": item["name"], "description": item.get("description", ""), "enabled": item.get("enabled", True)}


def check_route(checker: Checker, item: Any, path: str, providers: dict[str, dict],
                targets: set[str] | None = None) -> dict | None:
    before = len(checker.problems)  # before the shape check: a missing route_key stops the record
    if checker.obj(item, path, required=("route_key", "name"), optional=ROUTE_FIELDS) is None:
        return None
    if "route_key" in item:
        checker.resource_key(item["route_key"], join(path, "route_key"), route=True)
    if "name" in item:
        checker.string(item["name"], join(path, "name"), min_len=1, max_len=limits.ROUTE_NAME_MAX, single_line=True)
    if "description" in item:
        checker.string(item["description"], join(path, "description"), max_len=limits.ROUTE_DESCRIPTION_MAX)
    if "enabled" in item:
        checker.boolean(item["enabled"], join(path, "enabled"))
    if "permission" in item and item["permission"] not in ("full", "readonly"):
        checker.add(join(path, "permission"), "must be 'full' or 'readonly'")
    if "audience" in item:
        check_audience(checker, item["audience"], join(path, "audience"))
    target = item.get("target_config", {})
    if checker.obj(target, join(path, "target_config"), open_ended=True) is not None \
            and "system_prompt" in target:
        checker.string(target["system_prompt"], join(join(path, "target_config"), "system_prompt"),
                       max_len=32000)
    if "agent_client" in item:
        check_agent_client(checker, item["agent_client"], join(path, "agent_client"))
    route_tools = check_tools(checker, item["tools"], join(path, "tools"), providers) if "tools" in item else {}
    if "approvals" in item:
        check_route_approvals(checker, item["approvals"], join(path, "approvals"), route_tools)
    job_settings = check_job_settings(checker, item, path, targets)
    if len(checker.problems) != before:
        return None
    return {
        "route_key": item["route_key"],
        "name": item["name"],
        "description": item.get("description", ""),
        "enabled": item.get("enabled", True),
        "audience": item.get("audience", {"enabled": False}),
        "target_config": target,
        "agent_client": item.get("agent_client", {"enabled": False}),
        "tools": item.get("tools", {}),
        "permission": item.get("permission", "full"),
        # Left out, a route keeps the approval settings it has ({} clears them).
        **({"approvals": item["approvals"]} if "approvals" in item else {}),
        "target": item.get("target"),
        "job_settings": job_settings,
    }


def check_client(checker: Checker, item: Any, path: str, route_keys: set[str]) -> dict | None:
    before = len(checker.problems)  # before the shape check: a missing app_id stops the record
    if checker.obj(item, path, required=("app_id", "name"), optional=CLIENT_FIELDS) is None:
        return None
    if "app_id" in item:
        checker.resource_key(item["app_id"], join(path, "app_id"))
    if "name" in item:
        checker.string(item["name"], join(path, "name"), min_len=1, max_len=191, single_line=True)
    if "enabled" in item:
        checker.boolean(item["enabled"], join(path, "enabled"))
    routes = item.get("allowed_routes", [])
    rpath = join(path, "allowed_routes")
    if checker.string_list(routes, rpath, max_items=1000) is not None:
        for i, route in enumerate(routes):
            if checker.resource_key(route, join(rpath, i), route=True) is not None \
                    and route not in route_keys:
                checker.add(join(rpath, i), f"no route named '{route}'")
    url = item.get("agent_authorize_url")
    if url is not None:
        check_url(checker, url, join(path, "agent_authorize_url"), https_or_loopback=True)
    per_minute = checker.integer(item.get("rate_limit_per_min", client_gate.PER_MINUTE_DEFAULT),
                                 join(path, "rate_limit_per_min"), minimum=0, maximum=client_gate.PER_MINUTE_MAX)
    budget = budgets.check_policy(checker, item["budget"], join(path, "budget")) if "budget" in item else None
    if len(checker.problems) != before:
        return None
    return {
        "app_id": item["app_id"],
        "name": item["name"],
        "allowed_routes": list(routes),
        "enabled": item.get("enabled", True),
        "agent_authorize_url": url,
        "rate_limit_per_min": per_minute,
        "job_budget": budget,
    }


# ---------------------------------------------------------------- approval notifications

# `business_webhook` (alias `approval_webhook`): the business system's own webhook, sent Core's
# `tool_approval_request`; its secret_env also verifies the decisions it signs (§F).
CHANNEL_FIELDS = {"webhook": ("url", "secret_env"), "email": ("to",),
                  "business_webhook": ("url", "secret_env"), "approval_webhook": ("url", "secret_env")}
CHANNEL_COMMON = ("routes", "tools", "enabled")
CHANNEL_TARGETS_MAX = 100  # routes or tools one channel names
EMAIL_RECIPIENTS_MAX = 20
# A plain address (no display name, comments or quoting): what a person types, and nothing a
# mail header could be bent with.
EMAIL_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}"
                           r"@(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                           r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+")


def check_channel(checker: Checker, item: Any, path: str, route_keys: set[str],
                  tool_names: set[str] | None) -> dict | None:
    """One notification channel: a webhook (`url`, `secret_env`) or an e-mail list (`to`), firing
    for the approvals of the listed routes and tools (none listed: all). `tool_names` is None
    when the tools cannot all be told (a provider of the file has problems of its own)."""
    before = len(checker.problems)
    kind = item.get("kind") if isinstance(item, dict) else None
    known_kind = isinstance(kind, str) and kind in CHANNEL_FIELDS
    # An unknown kind is the one problem reported: its fields are not judged against a kind.
    own = CHANNEL_FIELDS[str(kind)] if known_kind else ()
    other = () if known_kind else tuple(dict.fromkeys(f for fields in CHANNEL_FIELDS.values() for f in fields))
    webhook = kind in WEBHOOK_KINDS
    if checker.obj(item, path, required=("name", "kind", *own), optional=(*CHANNEL_COMMON, *other)) is None:
        return None
    if "name" in item:
        checker.resource_key(item["name"], join(path, "name"))
    if "kind" in item and kind not in CHANNEL_FIELDS:
        checker.add(join(path, "kind"), "must be 'webhook' or 'email' (or 'business_webhook', alias "
                                             "'approval_webhook', for the business system)")
    if "url" in item and webhook:
        check_url(checker, item["url"], join(path, "url"), https_or_loopback=True)
    if "secret_env" in item and webhook:
        checker.string(item["secret_env"], join(path, "secret_env"), pattern=ENV_NAME,
                       pattern_text="an environment variable name (A-Z, 0-9, _)")
    if "to" in item and kind == "email":
        tpath = join(path, "to")
        to = checker.string_list(item["to"], tpath, max_items=EMAIL_RECIPIENTS_MAX, item_max_len=254)
        if to is not None and not to:
            checker.add(tpath, f"must list 1 to {EMAIL_RECIPIENTS_MAX} addresses")
        for i, address in enumerate(to or ()):
            if not EMAIL_ADDRESS.fullmatch(address):
                checker.add(join(tpath, i), "must be a plain e-mail address such as approvers@example.com")
    routes = item.get("routes", [])
    rpath = join(path, "routes")
    if checker.string_list(routes, rpath, max_items=CHANNEL_TARGETS_MAX) is not None:
        for i, route in enumerate(routes):
            if checker.resource_key(route, join(rpath, i), route=True) is not None and route not in route_keys:
                checker.add(join(rpath, i), f"no route named '{route}'")
    tools = item.get("tools", [])
    tpath = join(path, "tools")
    if checker.string_list(tools, tpath, max_items=CHANNEL_TARGETS_MAX, item_max_len=64,
                           item_pattern=TOOL_NAME) is not None and tool_names is not None:
        for i, tool in enumerate(tools):
            if tool not in tool_names:
                checker.add(join(tpath, i), f"'{tool}' is not a tool of any tool provider")
    if "enabled" in item:
        checker.boolean(item["enabled"], join(path, "enabled"))
    if len(checker.problems) != before:
        return None
    return {
        "name": item["name"],
        "kind": kind,
        "url": item["url"] if webhook else None,
        "secret_env": item["secret_env"] if webhook else None,
        "recipients": list(item["to"]) if kind == "email" else [],
        "routes": list(routes),
        "tools": list(tools),
        "enabled": item.get("enabled", True),
    }


def _section(checker: Checker, doc: dict, name: str) -> list:
    value = doc.get(name, [])
    if not isinstance(value, list):
        checker.add(name, "must be a list")
        return []
    return value


def _unique(checker: Checker, records: list[tuple[str, dict | None]], key: str) -> None:
    seen: dict[str, str] = {}
    for path, record in records:
        if record is None:
            continue
        if record[key] in seen:
            checker.add(join(path, key), f"'{record[key]}' is defined twice (also at {seen[record[key]]})")
        seen[record[key]] = path


def validate(db: Session, doc: dict, base_dir: Path,
             pulled: dict[str, Resolved] | None = None) -> dict[str, list[dict]]:
    """The records to write, or Invalid naming every bad field. Cross-references may point at
    records already in the database or defined in the same file. `pulled`: the URL providers'
    pulls as judged against the database; None pulls them here."""
    if pulled is None:
        pulled = config_pulls.resolve(db, config_pulls.pull_for_config(doc))
    checker = Checker()
    checker.obj(doc, "", optional=("client_apps", "routes", "tool_providers", "approval_notifications",
                                   "artifact_buckets", "executor_targets"))

    checked = [(join("tool_providers", i), check_provider(checker, item, join("tool_providers", i), base_dir,
                                                          pulled))
               for i, item in enumerate(_section(checker, doc, "tool_providers"))]
    providers = [(path, result[0] if result else None) for path, result in checked]
    _unique(checker, providers, "name")
    known_providers: dict[str, Any] = compiled_providers(db, list(db.scalars(select(ToolProvider.name))))
    for (_, result), item in zip(checked, _section(Checker(), doc, "tool_providers")):
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            known_providers[item["name"]] = result[1] if result else None

    targets = [(join("executor_targets", i), check_executor_target(checker, item, join("executor_targets", i)))
               for i, item in enumerate(_section(checker, doc, "executor_targets"))]
    _unique(checker, targets, "name")
    # Targets of the file count even when invalid, as routes do below.
    target_names = set(db.scalars(select(ExecutorTarget.name))) | {
        item["name"] for item in _section(Checker(), doc, "executor_targets")
        if isinstance(item, dict) and isinstance(item.get("name"), str)}

    routes = [(join("routes", i), check_route(checker, item, join("routes", i), known_providers, target_names))
              for i, item in enumerate(_section(checker, doc, "routes"))]
    _unique(checker, routes, "route_key")
    # Routes of the file count even when invalid: their own problems are reported already.
    route_keys = set(db.scalars(select(Route.route_key))) | {
        item["route_key"] for item in _section(Checker(), doc, "routes")
        if isinstance(item, dict) and isinstance(item.get("route_key"), str)}

    clients = [(join("client_apps", i), check_client(checker, item, join("client_apps", i), route_keys))
               for i, item in enumerate(_section(checker, doc, "client_apps"))]
    _unique(checker, clients, "app_id")

    tool_names = None if None in known_providers.values() else {
        name for compiled in known_providers.values() for name in compiled.tools}
    channels = [(join("approval_notifications", i),
                 check_channel(checker, item, join("approval_notifications", i), route_keys, tool_names))
                for i, item in enumerate(_section(checker, doc, "approval_notifications"))]
    _unique(checker, channels, "name")

    buckets = [(join("artifact_buckets", i), artifact_config.check_bucket(checker, item, join("artifact_buckets", i),
                                                                           base_dir))
               for i, item in enumerate(_section(checker, doc, "artifact_buckets"))]
    _unique(checker, buckets, "name")

    checker.raise_if_any()
    return {
        "tool_providers": [p for _, p in providers if p],
        "routes": [r for _, r in routes if r],
        "client_apps": [c for _, c in clients if c],
        "approval_notifications": [c for _, c in channels if c],
        "artifact_buckets": [b for _, b in buckets if b],
        "executor_targets": [t for _, t in targets if t],
    }


# ---------------------------------------------------------------- writing

_MODELS: dict[str, tuple[type[ToolProvider | Route | ClientApp | Channel | Bucket | ExecutorTarget], str]] = {
    "tool_providers": (ToolProvider, "name"),
    "routes": (Route, "route_key"),
    "client_apps": (ClientApp, "app_id"),
    "approval_notifications": (Channel, "name"),
    "artifact_buckets": (Bucket, "name"),
    "executor_targets": (ExecutorTarget, "name"),
}


def apply(db: Session, doc: dict, base_dir: Path) -> dict:
    """Validate and upsert in the caller's transaction; report what was created or changed.
    URL providers are pulled first, before the transaction's first statement."""
    # Each object created or changed is recorded by _apply in this transaction (config_audit).
    return _apply(db, doc, base_dir, config_pulls.pull_for_config(doc), write=True)


def check(db: Session, doc: dict, base_dir: Path) -> dict:
    """What `apply` would report, with `"checked": true`, writing nothing. Must open the caller's
    transaction: it makes it READ ONLY, so the server itself refuses any write. The apply lock is
    taken too, so the plan is made against one state, not across a concurrent apply's commit."""
    pulls = config_pulls.pull_for_config(doc)  # before the transaction's first statement
    db.execute(text("SET TRANSACTION READ ONLY"))
    return {"checked": True, **_apply(db, doc, base_dir, pulls, write=False)}


def _apply(db: Session, doc: dict, base_dir: Path, pulls: dict[str, ConfigPull], *, write: bool) -> dict:
    db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": APPLY_LOCK_KEY})
    pulled = config_pulls.resolve(db, pulls)
    records = validate(db, doc, base_dir, pulled)
    buckets: dict[str, dict[str, list[str]]] = {"created": {}, "changed": {}, "unchanged": {}}
    now = utc_now()
    by = operator().name if write else ""
    # Referenced before referencing. Executor targets, notification channels and artifact buckets
    # are reported only by a file that has them, so that the report of every other file keeps its shape.
    sections = tuple(name for name in ("executor_targets",) if name in doc) + (
        "tool_providers", "routes", "client_apps") + tuple(
        name for name in ("approval_notifications", "artifact_buckets") if name in doc)
    for section in sections:
        model, key = _MODELS[section]
        for bucket in buckets.values():
            bucket[section] = []
        for record in records[section]:
            query = select(model).where(getattr(model, key) == record[key])
            # A check only reads: FOR UPDATE would lock (and so write to) the rows.
            row = db.scalar(query.with_for_update() if write else query)
            kind = changes.SECTION_KINDS[section]
            if row is None:
                if write:
                    db.add(model(**record))
                    record_object(db, by, "APPLY", "config", kind, record[key], None,
                                  changes.snapshot(kind, record, tuple(record)))
                buckets["created"][section].append(record[key])
                continue
            assert isinstance(row, model)  # for the type checker: select() of a union types its row as Base
            changed = [f for f, v in record.items() if getattr(row, f) != v]
            if changed:
                if write:
                    was = changes.snapshot(kind, row, tuple(record))
                    for f in changed:
                        setattr(row, f, record[f])
                    record_object(db, by, "APPLY", "config", kind, record[key], was,
                                  changes.snapshot(kind, record, tuple(record)))
                    row.updated_at = now
                buckets["changed"][section].append(f"{record[key]} ({', '.join(changed)})")
            else:
                buckets["unchanged"][section].append(record[key])
        if write:
            db.flush()
    warnings = [{"provider": p["name"], **w} for p in records["tool_providers"] for w in p["compile_warnings"]]
    if pulled:
        if write:
            config_pulls.record(db, pulled)
        warnings += [{"provider": name, "code": "spec_pull_failed", "tool": None,
                      "message": f"the spec could not be pulled ({r.pulled.error}); the stored spec is kept"}
                     for name, r in pulled.items() if r.status == "failed"]
    # Only a file with URL providers reports its pulls: every other report keeps its shape.
    spec_pulls = {"spec_pulls": [r.report(name) for name, r in pulled.items()]} if pulled else {}
    return {**buckets, "warnings": warnings, **spec_pulls}
