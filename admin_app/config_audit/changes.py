"""What a configuration change changed: the object's stored settings before and after, reduced to
an allowlist of fields per kind of object (so a token, a token's hash, a sealed token or a
password hash can never reach the log, whatever a model grows), their SHA-256 over canonical
JSON, and a readable diff bounded by limits.CONFIG_AUDIT_DIFF_*."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

from .. import limits
from ..canonical import canonical_json, sha256_json

# Per kind, the only fields a snapshot keeps. Provider `secret_env` and a channel's are the NAME
# of an environment variable, never its value.
FIELDS: dict[str, tuple[str, ...]] = {
    "tool_provider": ("name", "base_url", "openapi", "secret_env", "timeout_ms", "rate_limit_per_min",
                      "tool_rate_limits", "spec_url", "spec_access_policy", "auto_refresh_min"),
    "route": ("route_key", "name", "description", "enabled", "audience", "target_config", "agent_client",
              "tools", "permission", "approvals", "target", "job_settings"),
    "client_app": ("app_id", "name", "allowed_routes", "enabled", "agent_authorize_url",
                   "rate_limit_per_min", "budget"),
    "approval_channel": ("name", "kind", "url", "secret_env", "recipients", "routes", "tools", "enabled"),
    "artifact_bucket": ("name", "kind", "dir", "public_base_url", "enabled"),
    "executor_target": ("name", "description", "enabled"),
    # Tokens: when one was issued, never the token nor its hash nor its last characters.
    "client_token": ("app_id", "token_issued_at"),
    "executor_token": ("name", "allowed_targets", "enabled", "description", "token_issued_at"),
    "admin": ("username", "role", "disabled"),
    "hub_pause": ("paused", "reason"),
    # Retention (admin_app/retention): what a policy keeps, a hold and its release, an erasure.
    "retention_policy": ("client_app_id", "route_key", "keep_days"),
    "legal_hold": ("scope", "value", "reason", "released", "released_by", "release_reason"),
    "erasure_request": ("principal_id", "reason", "state", "redacted", "archives"),
}
# Fields kept as the SHA-256 of their canonical JSON: a whole OpenAPI document is no diff to read.
DIGESTED = frozenset({("tool_provider", "openapi")})
# URLs whose path and query may be the receiver's secret (a webhook's, a callback's): kept as
# their origin and the SHA-256 of the whole, so a change still shows and nothing secret is kept.
SECRET_URLS = frozenset({("approval_channel", "url"), ("route", "job_settings.default_callback_url")})
# config apply's sections, by the kind of object each holds.
SECTION_KINDS = {"tool_providers": "tool_provider", "routes": "route", "client_apps": "client_app",
                 "approval_notifications": "approval_channel", "artifact_buckets": "artifact_bucket",
                 "executor_targets": "executor_target"}
NESTED_DEPTH = 3  # objects within objects are compared field by field this deep


def _plain(value: Any) -> Any:
    """A JSON value (times and other scalars as their text)."""
    return json.loads(json.dumps(value, default=str))


def snapshot(kind: str, values: Mapping[str, Any] | Any, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The allowlisted fields of `values` (a mapping, or an object read by attribute); `only`
    narrows them further (config apply compares the fields its records carry)."""
    allowed = FIELDS[kind]
    names = [f for f in allowed if only is None or f in only]
    read = values.get if isinstance(values, Mapping) else (lambda f: getattr(values, f, None))
    out: dict[str, Any] = {}
    for name in names:
        value = _plain(read(name))
        if (kind, name) in DIGESTED and value is not None:
            value = "sha256:" + sha256_json(value)
        out[name] = _masked(kind, name, value)
    return out


def _masked(kind: str, name: str, value: Any) -> Any:
    """`value` with the secret URLs of SECRET_URLS (at `name`, or one level down) masked."""
    if isinstance(value, str) and (kind, name) in SECRET_URLS:
        return masked_url(value)
    if isinstance(value, dict):
        return {k: masked_url(v) if isinstance(v, str) and (kind, f"{name}.{k}") in SECRET_URLS else v
                for k, v in value.items()}
    return value


def masked_url(url: str) -> str:
    """`scheme://host[:port]/…` and the SHA-256 of the whole URL."""
    try:
        parts = urlsplit(url)
        shown = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.scheme and parts.netloc else "(URL)"
    except ValueError:
        shown = "(URL)"
    return f"{shown}/… (sha256:{hashlib.sha256(url.encode('utf-8')).hexdigest()})"


def settings_hash(settings: Mapping[str, Any] | None) -> str | None:
    return None if settings is None else sha256_json(settings)


def _bounded(value: Any) -> Any:
    most = limits.CONFIG_AUDIT_DIFF_VALUE_MAX
    if isinstance(value, str):
        return value if len(value) <= most else value[:most] + "…"
    if isinstance(value, (dict, list)):
        shown = canonical_json(value)
        return value if len(shown) <= most else shown[:most] + "…"
    return value


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """[{path, before, after}] of every field that differs (a created object: every field from
    null; a removed one: every field to null), objects compared key by key, values cut short,
    and at most CONFIG_AUDIT_DIFF_ITEMS_MAX entries (the last then says how many more)."""
    entries: list[dict[str, Any]] = []
    _walk("", before or {}, after or {}, entries, NESTED_DEPTH)
    most = limits.CONFIG_AUDIT_DIFF_ITEMS_MAX
    if len(entries) > most:
        more = len(entries) - (most - 1)
        entries = entries[:most - 1] + [{"path": "…", "before": None, "after": f"{more} more fields changed"}]
    return [{"path": e["path"], "before": _bounded(e["before"]), "after": _bounded(e["after"])} for e in entries]


def _walk(where: str, before: Mapping[str, Any], after: Mapping[str, Any], out: list, depth: int) -> None:
    for key in list(before) + [k for k in after if k not in before]:
        b, a = before.get(key), after.get(key)
        if b == a:
            continue
        path = f"{where}.{key}" if where else str(key)
        if isinstance(b, dict) and isinstance(a, dict) and depth > 1:
            _walk(path, b, a, out, depth - 1)
        else:
            out.append({"path": path, "before": b, "after": a})


def leaf_data(row: Mapping[str, Any]) -> bytes:
    """The canonical bytes of what one bz_config_audit row records, for the tamper-evident log:
    time (UTC, to the microsecond), actor, method, path, the event and object named, the two
    hashes and the SHA-256 of the diff's canonical JSON (null when none)."""
    ts = row["ts"]
    moment = ts if isinstance(ts, str) else ts.astimezone(UTC).isoformat(timespec="microseconds")
    record_diff = row.get("diff")
    return canonical_json({
        "ts": moment, "event": row.get("event"), "actor": row["actor"], "method": row["method"],
        "path": row["path"], "object_kind": row.get("object_kind"), "object_key": row.get("object_key"),
        "before_hash": row.get("before_hash"), "after_hash": row.get("after_hash"),
        "diff_hash": None if record_diff is None else sha256_json(record_diff),
    }).encode("utf-8")


REMOVAL_KIND = "config_removal"  # the purge's record of what it removed (bz_config_audit_removals)


def removal_ref(purge_id: int) -> str:
    return f"{REMOVAL_KIND}:{int(purge_id)}"


def removal_data(purge_id: int, cutoff: Any, ranges: list[list[int]]) -> bytes:
    """What a purge's removal leaf commits to: its own entry's id, its cutoff and the id ranges
    [first, last] it deleted, so a row in them is known to be gone lawfully."""
    moment = cutoff if isinstance(cutoff, str) else cutoff.astimezone(UTC).isoformat(timespec="microseconds")
    return canonical_json({"kind": REMOVAL_KIND, "purge_id": int(purge_id), "cutoff": moment,
                           "ranges": [[int(lo), int(hi)] for lo, hi in ranges]}).encode("utf-8")
