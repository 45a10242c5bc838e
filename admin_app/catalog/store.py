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
        key = (provider_id, updated_at, COMPILER_VERSION)
        compiled = _cache.get(key)
        if compiled is None:
            row = db.get_one(ToolProvider, provider_id)
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
                _cache[key] = compiled
        out[name] = compiled
    return out
