"""Admin roles and the permissions each holds: the one place this mapping lives."""
from __future__ import annotations

PERMISSIONS = ("runs:read", "audit:read", "approvals:read", "approvals:decide", "config:write",
               "admins:manage")

ROLES: dict[str, frozenset[str]] = {
    "admin": frozenset(PERMISSIONS),
    "auditor": frozenset({"runs:read", "audit:read"}),
    "approver": frozenset({"approvals:read", "approvals:decide"}),
    "support": frozenset({"runs:read"}),
}


def permissions_of(role: str) -> frozenset[str]:
    return ROLES.get(role, frozenset())
