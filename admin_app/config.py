"""Settings, read once from BAILING_* environment variables.

Every variable is listed in the README; this is the one place that reads them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise SystemExit(f"{name} must be at least {minimum}, got {value}")
    return value


def _zone(name: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SystemExit(f"BAILING_DISPLAY_TIMEZONE: unknown time zone {name!r}") from None
    return name


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    data_dir: Path = Path("var")
    sql_dir: Path = PROJECT_ROOT / "sql"
    secret_key: str | None = None
    db_pool_size: int = 5
    db_max_overflow: int = 5
    json_body_max_bytes: int = 1024 * 1024
    access_token_ttl: int = 15 * 60
    refresh_token_ttl: int = 30 * 24 * 3600
    cookie_secure: bool = False
    display_timezone: str = "UTC"
    console_idle_minutes: int = 30
    console_max_hours: int = 12
    trusted_proxies: int = 0  # proxy hops whose X-Forwarded-For/-Proto/-Host are believed

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            database_url=os.environ.get("BAILING_DATABASE_URL") or None,
            data_dir=Path(os.environ.get("BAILING_DATA_DIR") or "var"),
            sql_dir=Path(os.environ.get("BAILING_SQL_DIR") or PROJECT_ROOT / "sql"),
            secret_key=os.environ.get("BAILING_SECRET_KEY") or None,
            db_pool_size=_int("BAILING_DB_POOL_SIZE", 5),
            db_max_overflow=_int("BAILING_DB_MAX_OVERFLOW", 5, minimum=0),
            json_body_max_bytes=_int("BAILING_JSON_BODY_MAX_BYTES", 1024 * 1024),
            access_token_ttl=_int("BAILING_ACCESS_TOKEN_TTL", 15 * 60),
            refresh_token_ttl=_int("BAILING_REFRESH_TOKEN_TTL", 30 * 24 * 3600),
            cookie_secure=os.environ.get("BAILING_COOKIE_SECURE", "") in ("1", "true", "yes"),
            display_timezone=_zone(os.environ.get("BAILING_DISPLAY_TIMEZONE") or "UTC"),
            console_idle_minutes=_int("BAILING_CONSOLE_IDLE_MINUTES", 30),
            console_max_hours=_int("BAILING_CONSOLE_MAX_HOURS", 12),
            trusted_proxies=_int("BAILING_TRUSTED_PROXIES", 0, minimum=0),
        )

    def replace(self, **changes) -> "Settings":
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"unknown settings: {sorted(unknown)}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        if values["data_dir"] is not None:
            values["data_dir"] = Path(values["data_dir"])
        values["sql_dir"] = Path(values["sql_dir"])
        return Settings(**values)
