"""Who a Client API job acts for, read from its `metadata` as Core reads it
(CLIENT_API_AND_EXECUTOR.md §A.3 "On-behalf-of / principal").

The principal is the end user the route's audience gate judges: an object under `principal`
(else `subject`, else `operator`), or flat keys when there is none. Values are strings or
numbers (written as JavaScript writes them), trimmed; `roles` is a list or a comma-separated
text. As Core, over-long values are cut (id and tenant 128, each role and audience 64 UTF-16
units), and the principal is written back into the job's `metadata.principal`.

The subject (`on_behalf_of`, sent to business systems as `X-Bailing-On-Behalf-Of`) is Core's
job subject without its per-provider `subject_field` (the hub's providers declare none):
`metadata.on_behalf_of`, else `metadata.visitor_uid`, verbatim, when it is a one-line text of
1 to 191 characters. A job without one reaches no tool that requires a subject."""
from __future__ import annotations

from typing import Any

from .. import js_json, limits
from ..validation import CONTROL_CHARS, JS_BLANK

ID_KEYS = ("id", "principal_id", "user_id", "uid", "openid", "userid")
TENANT_KEYS = ("tenant", "tenant_id", "org_id", "workspace_id")
AUDIENCE_KEYS = ("audience", "kind", "type")
FLAT_ID_KEYS = ("principal_id", "principal", "subject", "user_id", "uid", "operator_id", "wecom_userid",
                "visitor_uid")
FLAT_AUDIENCE_KEYS = ("audience", "principal_type", "user_type")
SUBJECT_KEYS = ("on_behalf_of", "visitor_uid")


def utf16_prefix(text: str, units: int) -> str:
    """The first `units` UTF-16 code units of `text` (JavaScript's slice), never half a pair."""
    if text.isascii() or len(text) * 2 <= units:
        return text[:units]
    count = 0
    for i, char in enumerate(text):
        count += 2 if ord(char) > 0xFFFF else 1
        if count > units:
            return text[:i]
    return text


def first_text(value: Any) -> str | None:
    """A string or a number (as JavaScript writes it), trimmed; None when blank or of another type."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        text = js_json.number(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    text = text.strip(JS_BLANK)
    return text or None


def _first(*values: Any) -> str | None:
    return next((text for text in map(first_text, values) if text is not None), None)


def _roles(value: Any) -> list[str]:
    if isinstance(value, list):
        return [text for text in map(first_text, value) if text is not None]
    text = first_text(value)
    return [part.strip(JS_BLANK) for part in text.split(",") if part.strip(JS_BLANK)] if text else []


def normalise(metadata: dict[str, Any], app_id: str) -> dict[str, Any] | None:
    """The normalised principal `{id, tenant?, roles, audience?, channel, client_app_id}`, or
    None when the metadata names nobody."""
    nested = next((metadata[key] for key in ("principal", "subject", "operator")
                   if isinstance(metadata.get(key), dict)), None)
    if nested is not None:
        source: dict[str, Any] = nested
        pid = _first(*(source.get(k) for k in ID_KEYS))
        tenant = _first(*(source.get(k) for k in TENANT_KEYS))
        audience = _first(*(source.get(k) for k in AUDIENCE_KEYS))
    else:
        source = metadata
        pid = _first(*(source.get(k) for k in FLAT_ID_KEYS))
        tenant = _first(*(source.get(k) for k in TENANT_KEYS))
        audience = _first(*(source.get(k) for k in FLAT_AUDIENCE_KEYS))
    if pid is None:
        return None
    roles = _roles(source["roles"] if source.get("roles") is not None else source.get("role"))
    principal: dict[str, Any] = {"id": utf16_prefix(pid, 128)}
    if tenant is not None:
        principal["tenant"] = utf16_prefix(tenant, 128)
    principal["roles"] = [utf16_prefix(role, 64) for role in roles]
    if audience is not None:
        principal["audience"] = utf16_prefix(audience, 64)
    principal["channel"] = utf16_prefix(app_id, 128)
    principal["client_app_id"] = utf16_prefix(app_id, 128)
    return principal


def subject(metadata: dict[str, Any]) -> str | None:
    """The subject business tools are called on behalf of, or None."""
    for key in SUBJECT_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value.strip(JS_BLANK) and len(value) <= limits.ON_BEHALF_OF_MAX \
                and not CONTROL_CHARS.search(value) and "\n" not in value and "\r" not in value:
            return value
    return None
