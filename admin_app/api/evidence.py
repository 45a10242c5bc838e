"""The evidence log's admin API (issue 33): signed tree heads, the public keys that verify them,
leaves, and inclusion and consistency proofs. Reads need `audit:read`; signing a head now needs
`system:write`. Hashes, keys and signatures are standard base64."""
from __future__ import annotations

import re

from flask import Blueprint, current_app, g, jsonify, request

from .. import surfaces
from ..errors import ApiError, invalid_field
from ..evidence import heads, proofs
from ..integrity import verifier
from ..validation import SAFE_INTEGER_MAX
from .auth import admin_permission_required

bp = Blueprint("evidence", __name__, url_prefix=surfaces.ADMIN_API.prefix + "/evidence")

_WHOLE = re.compile(r"\d{1,16}")


def _whole(name: str, raw: str | None) -> int:
    """A query value or path part that must be a whole number 0..2^53 - 1, written plainly."""
    if raw is None or raw == "":
        raise invalid_field(name, "is required")
    if not _WHOLE.fullmatch(raw) or int(raw) > SAFE_INTEGER_MAX:
        raise invalid_field(name, "must be a whole number from 0 to 9007199254740991")
    return int(raw)


def _query(name: str, required: bool = True) -> int | None:
    values = request.args.getlist(name)
    if len(values) > 1:
        raise invalid_field(name, "is given more than once")
    if not values and not required:
        return None
    return _whole(name, values[0] if values else None)


@bp.get("/heads/latest")
@admin_permission_required("audit:read")
def latest_head():
    return jsonify(proofs.latest_head(g.db))


@bp.get("/heads/<tree_size>")
@admin_permission_required("audit:read")
def head(tree_size: str):
    return jsonify(proofs.head_at(g.db, _whole("tree_size", tree_size)))


@bp.post("/heads")
@admin_permission_required("system:write")
def make_head():
    return jsonify(heads.make_head(g.db, current_app.extensions["bailing"].settings.data_dir))


@bp.get("/checks/latest")
@admin_permission_required("audit:read")
def latest_check():
    """The background verifier's latest finished pass (integrity.verifier)."""
    found = verifier.latest(g.db)
    if found is None:
        raise ApiError("evidence_not_found", "No verifier pass has finished yet.")
    return jsonify(found)


@bp.get("/keys")
@admin_permission_required("audit:read")
def keys():
    return jsonify(proofs.keys(g.db))


@bp.get("/leaves/<index>")
@admin_permission_required("audit:read")
def leaf(index: str):
    return jsonify(proofs.leaf(g.db, _whole("index", index)))


@bp.get("/proof/inclusion")
@admin_permission_required("audit:read")
def inclusion():
    index = _query("leaf")
    assert index is not None
    return jsonify(proofs.inclusion(g.db, index, _query("tree_size", required=False)))


@bp.get("/proof/consistency")
@admin_permission_required("audit:read")
def consistency():
    first, second = _query("first"), _query("second")
    assert first is not None and second is not None
    return jsonify(proofs.consistency(g.db, first, second))
