"""Compiled providers, compiled once per process per provider version.

The OpenAPI document is stored as given; what agents see is compiled from it by the running code,
so a compiler change shows up (and changes revisions) without anyone re-applying configuration.
The document is only read from the database when this process has not compiled that version yet.
"""
from __future__ import annotations

import logging
import threading
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..identity.models import ToolProvider
from .compiler import COMPILER_VERSION, CompiledProvider, CompileError, compile_provider

log = logging.getLogger(__name__)

_cache: dict[tuple[int, datetime, int], CompiledProvider] = {}
_lock = threading.Lock()


def compiled_providers(db: Session, names: list[str]) -> dict[str, CompiledProvider]:
    """The named providers that exist, compiled by this code (cached per provider version)."""
    if not names:
        return {}
    heads = db.execute(
        select(ToolProvider.id, ToolProvider.name, ToolProvider.updated_at)
        .where(ToolProvider.name.in_(names))
    ).all()
    out: dict[str, CompiledProvider] = {}
    for provider_id, name, updated_at in heads:
        compiled = _cache.get((provider_id, updated_at, COMPILER_VERSION))
        if compiled is None:
            compiled = _compile(db, provider_id, name)
        if compiled is not None:
            out[name] = compiled
    return out


def _compile(db: Session, provider_id: int, name: str) -> CompiledProvider | None:
    """The provider compiled from its stored document, cached under the version read with it.
    Read by columns, never through an object the session may hold from earlier in its
    transaction: a `config apply` committed since (on any host) would otherwise be compiled from
    the old document under the new version, and this process would keep serving it."""
    row = db.execute(
        select(ToolProvider.name, ToolProvider.openapi, ToolProvider.base_url, ToolProvider.timeout_ms,
               ToolProvider.updated_at).where(ToolProvider.id == provider_id)
    ).first()
    if row is None:  # removed since the names were read
        return None
    try:
        compiled = compile_provider(row.name, row.openapi, row.base_url, row.timeout_ms)
    except CompileError as err:
        # Fail closed: a stored document this compiler refuses offers no tools at all.
        log.error("provider %s no longer compiles: %s", name, err)
        compiled = CompiledProvider(name, warnings=[
            {"code": "provider_compile_failed", "tool": None, "message": str(err)}])
    with _lock:
        for stale in [k for k in _cache if k[0] == provider_id]:
            del _cache[stale]
        _cache[(provider_id, row.updated_at, COMPILER_VERSION)] = compiled
    return compiled
