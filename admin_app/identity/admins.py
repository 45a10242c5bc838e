"""Console and admin-API users: argon2 passwords, personal API tokens, role permissions."""
from __future__ import annotations

import re

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ..canonical import iso, utc_now
from ..errors import ApiError
from . import tokens
from .models import Admin, AdminToken
from .roles import ROLES, permissions_of

USERNAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,63}$")
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024

_hasher = PasswordHasher()


def create_admin(db: Session, username: str, role: str, password: str) -> dict:
    if not USERNAME.match(username):
        raise ApiError(400, "invalid_request", "username must match ^[a-z0-9][a-z0-9._-]{1,63}$")
    if role not in ROLES:
        raise ApiError(400, "invalid_request", "role must be one of: " + ", ".join(ROLES))
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise ApiError(400, "invalid_request",
                       f"password must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters")
    if db.scalar(select(Admin.id).where(Admin.username == username)) is not None:
        raise ApiError(409, "admin_exists", f"An admin named {username} already exists.")
    admin = Admin(username=username, role=role, password_hash=_hasher.hash(password), disabled=False)
    db.add(admin)
    db.flush()
    return {"username": username, "role": role, "permissions": sorted(permissions_of(role))}


def verify_password(admin: Admin, password: str) -> bool:
    try:
        return _hasher.verify(admin.password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def issue_admin_token(db: Session, username: str) -> dict:
    admin = db.scalar(select(Admin).where(Admin.username == username))
    if admin is None:
        raise ApiError(404, "admin_not_found", f"No admin named {username}.")
    if admin.disabled:
        raise ApiError(409, "admin_disabled", f"{username} is disabled.")
    token, digest = tokens.new_token(tokens.ADMIN)
    row = AdminToken(admin_id=admin.id, token_hash=digest)
    db.add(row)
    db.flush()
    return {"username": username, "role": admin.role, "token": token, "created_at": iso(utc_now())}


def authenticate_admin_token(db: Session, bearer: str | None) -> Admin | None:
    if bearer is None or not tokens.well_formed(bearer, tokens.ADMIN):
        return None
    digest = tokens.hash_token(bearer)
    row = db.execute(
        select(AdminToken, Admin)
        .join(Admin, Admin.id == AdminToken.admin_id)
        .where(AdminToken.token_hash == digest)
    ).first()
    if row is None:
        return None
    token, admin = row
    if token.revoked_at is not None or admin.disabled or not tokens.same_hash(token.token_hash, digest):
        return None
    db.execute(update(AdminToken).where(AdminToken.id == token.id).values(last_used_at=utc_now()))
    return admin
