"""A typed Agent Client SDK for Python agents, held to the hub's wire contract.

`login()` runs the browser flow and stores the session (mode 0600); `AgentClient(store)` then
speaks the Runtime, the governed tool calls and the conversation audit, refreshing its access
token under a lock shared with every process using the same session file."""
from __future__ import annotations

from .audit import Member
from .auth import pkce_pair
from .client import AgentClient
from .errors import AgentAuthError, AgentSdkError, ContractError, HubError, RequestRefused, Unsupported
from .login import login, revoke_stored
from .models import TaskBinding
from .session_store import DEFAULT_STORE, SessionStore

__all__ = ["DEFAULT_STORE", "AgentAuthError", "AgentClient", "AgentSdkError", "ContractError", "HubError",
           "Member", "RequestRefused", "SessionStore", "TaskBinding", "Unsupported", "login", "pkce_pair",
           "revoke_stored"]
