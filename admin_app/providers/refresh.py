"""Refreshing a URL provider's spec and probing its authorization, on demand or on schedule.

Every step that talks to the business system runs outside any transaction; the database sees
three short ones: the claim (`spec_pull_attempted_at = now()`), the record of the outcome (under
the provider's row lock, compared with what is stored then), and the authorization probe's
result. The claim is what makes the schedule safe with several processes and hosts: a due
provider is claimed with `FOR UPDATE SKIP LOCKED` and its attempt time moves in the same
statement, so once one host claimed it no other finds it due until `auto_refresh_min` minutes
after that attempt, success or failure.

A pull that fails keeps the stored spec (the catalog goes on serving it) and records why. A
pulled spec equal to the stored one (as canonical JSON) only moves `spec_refreshed_at`; a
different one replaces it and moves `updated_at`, so every process recompiles it and the
capability revisions of the routes that show its tools move as after a `config apply`.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..canonical import canonical_json, utc_now
from ..catalog.compiler import COMPILER_VERSION, CompiledProvider, CompileError, compile_provider
from ..catalog.store import compiled_providers
from ..db import Database
from ..identity.models import ToolProvider
from . import authz_probe, spec_pull
from .spec_pull import Pulled

log = logging.getLogger(__name__)

ERROR_MAX = 500  # characters of a failure's reason kept on the provider (the column's CHECK)
# What the compiler raises on a document whose values are not the OpenAPI shapes it reads.
_UNREADABLE = (TypeError, AttributeError, KeyError, IndexError, ValueError, RecursionError)


class ProviderMissing(LookupError):
    """No tool provider by that name."""


class NotPulled(ValueError):
    """The provider's spec is given inline (`openapi`), not pulled from a URL."""


@dataclass(frozen=True)
class Source:
    name: str
    spec_url: str
    policy: str
    secret_env: str


_RETURNING = "RETURNING name, spec_url, spec_access_policy, secret_env"
_CLAIM_ONE = text(f"""
    UPDATE bz_tool_providers SET spec_pull_attempted_at = now()
    WHERE name = :name AND spec_url IS NOT NULL
    {_RETURNING}""")  # noqa: S608 - a constant of this module
# The due provider attempted longest ago; one another host is claiming is skipped, not waited for.
_CLAIM_DUE = text(f"""
    UPDATE bz_tool_providers SET spec_pull_attempted_at = now()
    WHERE id = (SELECT id FROM bz_tool_providers
                WHERE spec_url IS NOT NULL AND auto_refresh_min > 0
                  AND (spec_pull_attempted_at IS NULL
                       OR spec_pull_attempted_at <= now() - make_interval(mins => auto_refresh_min))
                ORDER BY spec_pull_attempted_at NULLS FIRST, name
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
    {_RETURNING}""")  # noqa: S608 - a constant of this module


def _short(reason: str) -> str:
    return reason if len(reason) <= ERROR_MAX else reason[:ERROR_MAX - 3] + "..."


def _jsonb(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


# ---------------------------------------------------------------- refresh

def refresh(database: Database, name: str, via: str = "manual") -> dict[str, Any]:
    """Pull `name`'s spec now and record the outcome; after a successful pull, probe its
    authorization. ProviderMissing or NotPulled before anything is sent."""
    with database.session() as db:
        row = db.execute(_CLAIM_ONE, {"name": name}).first()
        if row is None:
            if db.scalar(select(ToolProvider.id).where(ToolProvider.name == name)) is None:
                raise ProviderMissing(name)
            raise NotPulled(name)
    return _refresh(database, Source(*row), via)


def refresh_due(database: Database, stop: threading.Event | None = None) -> list[dict[str, Any]]:
    """The schedule's pass: every URL provider with auto refresh whose last attempt is at least
    `auto_refresh_min` minutes old, one at a time, each claimed first. Returns the reports."""
    reports = []
    while stop is None or not stop.is_set():
        with database.session() as db:
            row = db.execute(_CLAIM_DUE).first()
        if row is None:
            break
        report = _refresh(database, Source(*row), "auto")
        if not report["ok"]:
            log.warning("spec auto refresh of provider %s failed: %s", report["provider"], report["error"])
        reports.append(report)
    return reports


def _refresh(database: Database, source: Source, via: str) -> dict[str, Any]:
    pulled = spec_pull.pull(source.spec_url, source.policy, source.secret_env)
    with database.session() as db:
        report = record(db, source, pulled)
    report["via"] = via
    if report["ok"]:
        report["authz_probe"] = probe(database, source.name)
    return report


def _fingerprints(compiled: CompiledProvider | None) -> dict[str, str]:
    """What makes a tool's calls safe or not, per tool: a change here is what an operator must see."""
    out = {}
    for tool in (compiled.tools.values() if compiled else ()):
        marks = [f"{tool.method} {tool.path}", f"scope={tool.scope}", f"risk={tool.risk}"]
        marks += ["approval"] * tool.approval_required + ["subject"] * tool.subject_required
        marks += ["sensitive"] * tool.sensitive + ["readonly"] * (tool.readonly and tool.method != "GET")
        if tool.approval_rules:
            marks.append(f"when={tool.approval_rules!r}")
        out[tool.name] = " ".join(marks)
    return out


def _compiled(row: Any, document: dict[str, Any]) -> CompiledProvider:
    return compile_provider(row.name, document, row.base_url, row.timeout_ms)


def record(db: Session, source: Source, pulled: Pulled) -> dict[str, Any]:
    """The pull's outcome on the provider, under its row lock: the stored spec replaced only by
    a different one that compiles; a failure recorded with the stored spec kept."""
    row = db.scalar(select(ToolProvider).where(ToolProvider.name == source.name).with_for_update())
    report: dict[str, Any] = {"provider": source.name, "ok": False, "status": "failed", "error": None,
                              "spec_access_probe": pulled.access_probe}
    if row is None or row.spec_url != source.spec_url:
        report["error"] = "the provider was removed or its spec_url changed during the pull; nothing was recorded"
        return report
    error = pulled.error
    new: CompiledProvider | None = None
    if pulled.document is not None:
        try:
            new = _compiled(row, pulled.document)
        except CompileError as err:
            error = "the spec does not compile: " + "; ".join(f"{w}: {m}" if w else m for w, m in err.problems)
        except _UNREADABLE:
            error = "the spec does not compile: it has values of types OpenAPI does not allow where they are"
    if pulled.access_probe is not None:
        row.spec_access_probe = pulled.access_probe
    if error is not None or new is None or pulled.document is None:
        row.spec_pull_status, row.spec_pull_error = "failed", _short(error or "no document")
        report["error"] = row.spec_pull_error
        return report
    now = utc_now()
    row.spec_refreshed_at, row.spec_pull_error = now, None
    report.update(ok=True, tools=len(new.tools), added=[], removed=[], changed=[])
    if canonical_json(pulled.document) == canonical_json(row.openapi):
        row.spec_pull_status = report["status"] = "unchanged"
        return report
    try:
        before = _fingerprints(_compiled(row, row.openapi))
    except (CompileError, *_UNREADABLE):
        before = {}
    after = _fingerprints(new)
    report["added"] = sorted(set(after) - set(before))
    report["removed"] = sorted(set(before) - set(after))
    report["changed"] = sorted(n for n in set(after) & set(before) if after[n] != before[n])
    row.openapi = pulled.document
    row.compiler_version, row.compile_warnings = COMPILER_VERSION, new.warnings
    row.spec_pull_status = report["status"] = "changed"
    row.updated_at = now  # the catalog's cache key: every process compiles the new document
    if report["added"] or report["removed"] or report["changed"]:
        log.warning("provider %s: the pulled spec changed its tools: added %s, removed %s, changed %s",
                    source.name, report["added"], report["removed"], report["changed"])
    return report


# ---------------------------------------------------------------- authorization probe

def probe(database: Database, name: str) -> dict[str, Any]:
    """Probe `name`'s authorization now and store the result (never read by invocations)."""
    with database.session() as db:
        row = db.execute(select(ToolProvider.base_url, ToolProvider.secret_env, ToolProvider.timeout_ms,
                                ToolProvider.openapi).where(ToolProvider.name == name)).first()
        if row is None:
            raise ProviderMissing(name)
        compiled = compiled_providers(db, [name]).get(name)
    result = authz_probe.run(base_url=row.base_url, secret=os.environ.get(row.secret_env),
                             timeout_ms=row.timeout_ms, openapi=row.openapi, compiled=compiled)
    with database.session() as db:
        db.execute(text("UPDATE bz_tool_providers SET authz_probe = CAST(:result AS jsonb) WHERE name = :name"),
                   {"result": _jsonb(result), "name": name})
    if result["status"] == "suspect":
        log.warning("provider %s: authorization probe suspect: %s", name, result.get("reason"))
    return result


def probe_all(database: Database, names: list[str]) -> dict[str, dict[str, Any]]:
    """Probe each named provider that still exists (after a configuration saved them)."""
    results = {}
    for name in names:
        try:
            results[name] = probe(database, name)
        except ProviderMissing:
            continue
    return results
