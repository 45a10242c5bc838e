"""What an operator reads of the tool providers: where each spec comes from, how its last pull
went and what the two health checks saw (`provider show`, the console's provider page)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..canonical import iso
from ..identity.models import ToolProvider
from .refresh import ProviderMissing

# The statuses an operator must look at: a spec anyone can read, a business system that accepted
# the synthetic subject, or a check that could not tell.
WARN_ACCESS = frozenset({"public", "inconclusive"})
WARN_AUTHZ = frozenset({"suspect", "inconclusive"})


def _view(row: ToolProvider) -> dict[str, Any]:
    access = row.spec_access_probe
    authz = row.authz_probe
    return {
        "name": row.name,
        "base_url": row.base_url,
        "spec_source": "url" if row.spec_url else "inline",
        "spec_url": row.spec_url,
        "spec_access_policy": row.spec_access_policy if row.spec_url else None,
        "auto_refresh_min": row.auto_refresh_min,
        "spec_refreshed_at": iso(row.spec_refreshed_at),
        # A provider made inline again keeps its old pull columns: not shown, nothing to pull now.
        "last_pull": None if row.spec_pull_attempted_at is None or not row.spec_url else {
            "attempted_at": iso(row.spec_pull_attempted_at), "status": row.spec_pull_status,
            "error": row.spec_pull_error},
        "spec_access_probe": access,
        "authz_probe": authz,
        "warnings": [w for w in (
            "the last spec pull failed; the stored spec is kept"
            if row.spec_url and row.spec_pull_status == "failed" else None,
            f"spec access: {access.get('status')}" if access and row.spec_url
            and access.get("status") in WARN_ACCESS else None,
            f"authorization probe: {authz.get('status')}" if authz and authz.get("status") in WARN_AUTHZ else None,
        ) if w],
        "updated_at": iso(row.updated_at),
    }


def describe(db: Session, name: str) -> dict[str, Any]:
    row = db.scalar(select(ToolProvider).where(ToolProvider.name == name))
    if row is None:
        raise ProviderMissing(name)
    return _view(row)


def list_all(db: Session) -> list[dict[str, Any]]:
    return [_view(row) for row in db.scalars(select(ToolProvider).order_by(ToolProvider.name))]
