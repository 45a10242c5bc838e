"""Admin roles and the permissions each holds: the one place this mapping lives."""
from __future__ import annotations

# clients:read / clients:write: task control (TASK_CONTROL.md §9.1), the admin role's alone.
# runs:write: Core's executor tokens, executors and job reruns (CLIENT_API_AND_EXECUTOR.md §F),
# the admin role's alone.
# system:write: pausing and resuming the hub (BUSINESS_SIDE.md § E.1), the admin role's alone.
PERMISSIONS = ("runs:read", "runs:write", "audit:read", "approvals:read", "approvals:decide", "config:write",
               "admins:manage", "clients:read", "clients:write", "system:write")

ROLES: dict[str, frozenset[str]] = {
    "admin": frozenset(PERMISSIONS),
    "auditor": frozenset({"runs:read", "audit:read"}),
    "approver": frozenset({"approvals:read", "approvals:decide"}),
    "support": frozenset({"runs:read"}),
}


def permissions_of(role: str) -> frozenset[str]:
    return ROLES.get(role, frozenset())
