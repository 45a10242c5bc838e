"""Whether a client app's business authorization page (`agent_authorize_url`) is usable: HTTPS,
or plain HTTP only on 127.0.0.1 or ::1 with an explicit port (local development); never with
credentials or a fragment. An existing Agent Session stops working as soon as its client's page
stops passing this check."""
from __future__ import annotations

import ipaddress
from typing import TypeGuard
from urllib.parse import urlsplit
from .. import limits




def page_url_valid(url: str | None) -> TypeGuard[str]:
    if not isinstance(url, str) or not url or len(url) > limits.CALLBACK_MAX:
        return False
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if not parts.hostname or parts.username is not None or parts.password is not None or parts.fragment:
        return False
    if parts.scheme == "https":
        return True
    if parts.scheme != "http" or port is None:
        return False
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def sessions_usable(enabled: bool | None, authorize_url: str | None) -> bool:
    """A client's sessions may be used (bearer, refresh) while it is enabled and its page, when it
    has one, is valid. A client without a page only ever holds operator-issued sessions."""
    return bool(enabled) and (authorize_url is None or page_url_valid(authorize_url))
