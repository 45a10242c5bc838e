"""/admin/api: the JSON face of the console, for admins' personal API tokens."""
from __future__ import annotations

from flask import Blueprint, g, jsonify

from ..identity.roles import permissions_of
from .auth import admin_permission_required

bp = Blueprint("admin_api", __name__, url_prefix="/admin/api")


@bp.get("/me")
@admin_permission_required(None)
def me():
    admin = g.admin
    return jsonify({"username": admin.username, "role": admin.role,
                    "permissions": sorted(permissions_of(admin.role))})
