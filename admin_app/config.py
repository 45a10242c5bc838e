"""Settings, read once from BAILING_* environment variables.

Every variable is listed in the README; this is the one place that reads them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from . import resources

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


def _choice(name: str, allowed: tuple[str, ...], default: str, upper: bool = False) -> str:
    raw = (os.environ.get(name) or "").strip()
    value = (raw.upper() if upper else raw.lower()) or default
    if value not in allowed:
        raise SystemExit(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return value


def _switch(name: str, default: bool) -> bool:
    raw = (os.environ.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "on", "true", "yes"):
        return True
    if raw in ("0", "off", "false", "no"):
        return False
    raise SystemExit(f"{name} must be on or off, got {raw!r}")


def _public_url(raw: str | None) -> str | None:
    """BAILING_PUBLIC_URL: the console's address as people reach it (links in notifications),
    without a trailing slash."""
    if not raw:
        return None
    from urllib.parse import urlsplit

    problem = None
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        problem = "is not a valid URL"
    else:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problem = "must be an http(s) URL with a host"
        elif parts.username is not None or parts.password is not None or parts.query or parts.fragment:
            problem = "must not carry credentials, a query or a #fragment"
        elif any(ord(c) < 0x21 or c == "\x7f" for c in raw):
            problem = "must not contain spaces or control characters"
    if problem:
        raise SystemExit(f"BAILING_PUBLIC_URL {problem}, got {raw!r}")
    return raw.rstrip("/")


def _no_controls(name: str, raw: str | None) -> str | None:
    # These end up in mail headers and SMTP commands: a line break there would forge more.
    if raw and any(ord(c) < 0x20 or c == "\x7f" for c in raw):
        raise SystemExit(f"{name} must not contain line breaks or control characters")
    return raw or None


def _read_url(raw: str | None) -> str | None:
    """BAILING_READ_DATABASE_URL: a postgresql:// URL (its driver is chosen by the database layer)."""
    if not raw:
        return None
    from urllib.parse import urlsplit

    if urlsplit(raw).scheme not in ("postgres", "postgresql", "postgresql+psycopg"):
        raise SystemExit("BAILING_READ_DATABASE_URL must be a postgresql:// URL")
    return raw


def resolve_data_dir(value: str | os.PathLike | None) -> Path:
    """BAILING_DATA_DIR as one absolute folder, fixed when the settings are made, so that a later
    change of directory cannot point a process at a second embedded server. Unset, the user's data
    folder (on Linux $XDG_DATA_HOME/bailing, else ~/.local/share/bailing)."""
    if value is None or str(value) == "":
        import platformdirs

        value = platformdirs.user_data_dir("bailing", appauthor=False)
    return Path(value).expanduser().resolve()


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    # A streaming standby of that database for the console's and the admin API's reads that may
    # lag (docs/operations.md, "Read replica"), used while its replay lag is within the bound.
    read_database_url: str | None = None
    read_max_lag_seconds: int = 5
    # Given as a Path or a str; always an absolute Path once made (__post_init__).
    data_dir: Path = field(default_factory=lambda: resolve_data_dir(None))
    sql_dir: Path = resources.SQL_DIR
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
    metrics_token: str | None = None  # unset: /metrics answers loopback clients only
    log_format: str = "json"
    log_level: str = "INFO"
    # Approval notifications (admin_app/notifications): the delivery worker of each serving
    # process, the console's public address for links, and the SMTP server for e-mail channels.
    notifications: bool = True
    notification_max_attempts: int = 6
    notification_backoff_seconds: int = 30  # the first retry's delay; each next one 4 times longer
    # Tool providers' spec auto refresh (admin_app/providers/schedule.py): a pass every 60 s in
    # each serving process; the database decides which host pulls a due provider.
    spec_auto_refresh: bool = True
    # Completion callbacks of Client API jobs (admin_app/jobs/callback_worker.py): the delivery
    # worker of each serving process, and Core's schedule (§D.1): attempts at 0, +2 s and +10 s,
    # each within 10 s. The schedule is Core's; only the suite shortens it.
    job_callbacks: bool = True
    job_callback_retry_seconds: tuple[float, ...] = (2.0, 10.0)
    job_callback_timeout_seconds: float = 10.0
    job_callback_poll_seconds: float = 5.0
    # Core's executor protocol (admin_app/jobs/claims.py, reaper.py): an executor's lease on a
    # claimed job, and the reaper pass of each serving process with what it enforces: a queued
    # job's life and a claim's hard cap (§B.8). Core's values; only the suite shortens them.
    executor_lease_seconds: float = 240
    job_reaper: bool = True
    job_reaper_seconds: float = 60
    job_queue_ttl_seconds: float = 1800
    job_dispatch_max_seconds: float = 7200
    public_url: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_from: str | None = None
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", resolve_data_dir(self.data_dir))

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            database_url=os.environ.get("BAILING_DATABASE_URL") or None,
            read_database_url=_read_url(os.environ.get("BAILING_READ_DATABASE_URL")),
            read_max_lag_seconds=_int("BAILING_READ_MAX_LAG_SECONDS", 5, minimum=0),
            data_dir=resolve_data_dir(os.environ.get("BAILING_DATA_DIR")),
            sql_dir=Path(os.environ.get("BAILING_SQL_DIR") or resources.SQL_DIR),
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
            metrics_token=os.environ.get("BAILING_METRICS_TOKEN") or None,
            log_format=_choice("BAILING_LOG_FORMAT", ("json", "text"), "json"),
            log_level=_choice("BAILING_LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                              "INFO", upper=True),
            notifications=_switch("BAILING_NOTIFICATIONS", True),
            notification_max_attempts=_int("BAILING_NOTIFICATION_MAX_ATTEMPTS", 6),
            notification_backoff_seconds=_int("BAILING_NOTIFICATION_BACKOFF_SECONDS", 30, minimum=0),
            spec_auto_refresh=_switch("BAILING_SPEC_AUTO_REFRESH", True),
            job_callbacks=_switch("BAILING_JOB_CALLBACKS", True),
            executor_lease_seconds=_int("BAILING_EXECUTOR_LEASE_SECONDS", 240),
            job_reaper=_switch("BAILING_JOB_REAPER", True),
            job_reaper_seconds=_int("BAILING_JOB_REAPER_SECONDS", 60),
            job_queue_ttl_seconds=_int("BAILING_JOB_QUEUE_TTL_SECONDS", 1800),
            job_dispatch_max_seconds=_int("BAILING_JOB_DISPATCH_MAX_SECONDS", 7200),
            public_url=_public_url(os.environ.get("BAILING_PUBLIC_URL")),
            smtp_host=_no_controls("BAILING_SMTP_HOST", os.environ.get("BAILING_SMTP_HOST")),
            smtp_port=_int("BAILING_SMTP_PORT", 587),
            smtp_from=_no_controls("BAILING_SMTP_FROM", os.environ.get("BAILING_SMTP_FROM")),
            smtp_username=_no_controls("BAILING_SMTP_USERNAME", os.environ.get("BAILING_SMTP_USERNAME")),
            smtp_password=os.environ.get("BAILING_SMTP_PASSWORD") or None,
            smtp_starttls=_switch("BAILING_SMTP_STARTTLS", True),
        )

    def replace(self, **changes) -> Settings:
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise TypeError(f"unknown settings: {sorted(unknown)}")
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        values["sql_dir"] = Path(values["sql_dir"])
        return Settings(**values)
