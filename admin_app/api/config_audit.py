"""GET /admin/api/config-audit: the configuration-change log, newest first (BUSINESS_SIDE.md
§ G.2). Its paging is read as Core reads it: never refused, brought into bounds."""
from __future__ import annotations

import math
import re

from flask import Blueprint, g, jsonify, request

from .. import limits, surfaces
from ..config_audit.log import page
from .auth import admin_permission_required

bp = Blueprint("config_audit", __name__, url_prefix=surfaces.ADMIN_API.prefix)

_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_RADIX = re.compile(r"0([xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def js_number(values: list[str]) -> float:
    """JavaScript's Number() of a query value: blank is 0, anything unreadable (or a repeated
    parameter, which arrives there as an array) is NaN."""
    if len(values) != 1:
        return 0.0 if not values else math.nan
    raw = values[0].strip()
    if raw == "":
        return 0.0
    if _DECIMAL.fullmatch(raw):
        return float(raw)
    if raw in ("Infinity", "+Infinity", "-Infinity"):
        return float(raw.replace("Infinity", "inf"))
    if _RADIX.fullmatch(raw):
        return float(int(raw, 0))
    return math.nan


def limit_of(values: list[str]) -> int:
    """Default 100; non-numeric or 0 is 100; then brought into 1-500."""
    default, low, high = limits.CONFIG_AUDIT_LIMIT
    number = js_number(values)
    if math.isnan(number) or number == 0:
        number = default
    return int(min(max(number, low), high))


def offset_of(values: list[str]) -> int:
    """Default 0, floored, at least 0 (and at most what an offset can be)."""
    number = js_number(values)
    if math.isnan(number) or number <= 0:
        return 0
    return int(min(math.floor(number), limits.CONFIG_AUDIT_OFFSET_MAX))


@bp.get("/config-audit")
@admin_permission_required("audit:read")
def config_audit():
    return jsonify(page(g.db, limit_of(request.args.getlist("limit")),
                        offset_of(request.args.getlist("offset"))))
