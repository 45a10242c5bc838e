"""The SDK's typed errors: what the hub refused, what it answered off-contract, what the caller
asked for that the contract forbids, and what the hub does not support."""
from __future__ import annotations


class AgentSdkError(Exception):
    """Base of every error this SDK raises."""


class RequestRefused(AgentSdkError):
    """The caller asked for something the contract forbids; nothing was sent."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class ContractError(AgentSdkError):
    """The hub answered, but not as the contract says: the answer is refused as a whole."""

    def __init__(self, endpoint: str, field: str, reason: str):
        super().__init__(f"{endpoint}: {field or '(body)'}: {reason}")
        self.endpoint, self.field, self.reason = endpoint, field, reason


class HubError(AgentSdkError):
    """The hub refused with an error envelope (or an unexpected status)."""

    def __init__(self, endpoint: str, status: int, code: str | None, message: str | None, body: dict | None):
        super().__init__(f"{endpoint}: HTTP {status} {code or 'no error code'}"
                         + (f": {message}" if message else ""))
        self.endpoint, self.status, self.code, self.message, self.body = endpoint, status, code, message, body

    @property
    def public_code(self) -> str | None:
        """The code when it is one the contract names, else None (as the official SDK reports it)."""
        from .contract import PUBLIC_CODES

        return self.code if self.code in PUBLIC_CODES else None


class Unsupported(AgentSdkError):
    """The hub does not offer this capability (an older hub's 404, or a false probe)."""


class AgentAuthError(AgentSdkError):
    """Login, refresh or revoke failed; the person has to sign in again."""
