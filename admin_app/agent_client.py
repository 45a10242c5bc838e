"""The Agent Auth client of `bailing-admin agent login`, kept importable here; the SDK itself lives
in `admin_app.agent_sdk`."""
from __future__ import annotations

from .agent_sdk import DEFAULT_STORE, AgentAuthError, SessionStore, login, pkce_pair
from .agent_sdk.contract import REFRESH_MARGIN_SECONDS as REFRESH_MARGIN

AgentSessionFile = SessionStore  # the former name of the session file

__all__ = ["DEFAULT_STORE", "REFRESH_MARGIN", "AgentAuthError", "AgentSessionFile", "login", "pkce_pair"]
