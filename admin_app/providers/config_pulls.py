"""Pulls made by `bailing-admin config apply` for the providers a file gives a `spec_url`.

They run before the apply's transaction has its first statement (no lock, no connection is
held while a business system answers, for up to 10 s a request). What a pull brought is then
judged against the database under the apply's lock:

- pulled: the document is the provider's `openapi`, compiled and checked as a file's would be;
- failed, for a provider that already has this `spec_url` and a stored spec: the stored spec
  is kept (as a failed scheduled refresh keeps it) and the apply goes on, reporting and recording
  why the pull failed. An unreachable business system does not block the rest of a configuration;
- failed otherwise (a new provider, a changed `spec_url`, one that was inline): the apply is
  refused with the reason, and nothing is written, since there is no spec to serve.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..canonical import canonical_json
from ..identity.models import ToolProvider
from . import spec_pull
from .refresh import ERROR_MAX
from .spec_pull import POLICIES, Pulled

PARALLEL_PULLS = 4


@dataclass(frozen=True)
class ConfigPull:
    spec_url: str
    pulled: Pulled


@dataclass(frozen=True)
class Resolved:
    """What a provider of the file gets: `document` (pulled, or the stored one kept), or
    `refusal` (why the apply cannot take it)."""

    spec_url: str
    pulled: Pulled
    document: dict[str, Any] | None
    refusal: str | None
    status: str  # changed | unchanged | failed (the stored spec kept)

    def report(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": name, "status": self.status}
        if self.pulled.error:
            out["error"] = self.pulled.error
        if self.status == "failed":
            out["kept"] = "the stored spec is kept"
        out["spec_access_probe"] = self.pulled.access_probe
        return out


def _pullable(item: Any) -> tuple[str, str, str, str] | None:
    """(name, spec_url, policy, secret_env) of a provider item worth pulling; None for one whose
    problems validation reports anyway (it is not pulled)."""
    if not isinstance(item, dict) or "openapi" in item:
        return None
    name, url, env = item.get("name"), item.get("spec_url"), item.get("secret_env")
    policy = item.get("spec_access_policy", "signed_required")
    if not (isinstance(name, str) and isinstance(url, str) and isinstance(env, str) and isinstance(policy, str)
            and policy in POLICIES):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    return name, url, policy, env


def pull_for_config(doc: Any) -> dict[str, ConfigPull]:
    """Pull every URL provider of the document (a few at once); by provider name."""
    providers = doc.get("tool_providers") if isinstance(doc, dict) else None
    wanted = [p for p in map(_pullable, providers if isinstance(providers, list) else []) if p]
    if not wanted:
        return {}
    with ThreadPoolExecutor(max_workers=PARALLEL_PULLS, thread_name_prefix="bailing-spec-pull") as pool:
        done = list(pool.map(lambda p: spec_pull.pull(p[1], p[2], p[3]), wanted))
    return {name: ConfigPull(url, pulled) for (name, url, _, _), pulled in zip(wanted, done)}


def resolve(db: Session, pulls: dict[str, ConfigPull]) -> dict[str, Resolved]:
    out = {}
    for name, pull in pulls.items():
        row = db.execute(select(ToolProvider.spec_url, ToolProvider.openapi)
                         .where(ToolProvider.name == name)).first()
        pulled = pull.pulled
        if pulled.document is not None:
            same = row is not None and canonical_json(row.openapi) == canonical_json(pulled.document)
            out[name] = Resolved(pull.spec_url, pulled, pulled.document, None, "unchanged" if same else "changed")
        elif row is not None and row.spec_url == pull.spec_url and row.openapi:
            out[name] = Resolved(pull.spec_url, pulled, row.openapi, None, "failed")
        else:
            out[name] = Resolved(pull.spec_url, pulled, None, pulled.error or "no document", "failed")
    return out


def record(db: Session, resolved: dict[str, Resolved]) -> None:
    """The pulls' outcomes on the providers just written, in the apply's transaction."""
    for name, item in resolved.items():
        error = item.pulled.error
        db.execute(text("""
            UPDATE bz_tool_providers
            SET spec_pull_attempted_at = now(), spec_pull_status = :status, spec_pull_error = :error,
                spec_refreshed_at = CASE WHEN :ok THEN now() ELSE spec_refreshed_at END,
                spec_access_probe = COALESCE(CAST(:probe AS jsonb), spec_access_probe)
            WHERE name = :name AND spec_url = :url
        """), {"status": item.status, "ok": item.pulled.ok, "name": name, "url": item.spec_url,
               "error": None if error is None else error[:ERROR_MAX],
               "probe": None if item.pulled.access_probe is None else json.dumps(item.pulled.access_probe)})
