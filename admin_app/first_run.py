"""`bailing-admin init`: an empty database to a hub someone can sign in to, in one command.

Order, so that a bad input changes nothing:

1. The inputs are checked: the admin's name and password (by the same rules as `admins create`),
   the configuration file's syntax.
2. A dry run in one transaction that is rolled back: the pending migrations are applied in it, and
   against that schema (with the records already there) the name is checked for a clash and the
   configuration is validated whole. Nothing of it stays; a refusal here leaves the database as it
   was, not migrated either.
3. The pending migrations are applied for real (`db upgrade`).
4. In one transaction: the first admin (unless the hub has one already) and the configuration.

Re-running is safe: migrations already applied are skipped, an existing admin is left alone (no
password is made or changed), and a configuration that is already there reports "unchanged".
"""
from __future__ import annotations

import secrets
from pathlib import Path

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from . import migrations
from .config_apply import apply as apply_config
from .config_apply import load_file
from .config_apply import validate as validate_config
from .errors import ApiError
from .identity.admins import USERNAME, check_password, create_admin
from .identity.models import Admin, ClientApp

# "bzinit" in ASCII: two `init` runs at once create one first admin, not two.
INIT_LOCK_KEY = 0x627A696E6974
# 32 URL-safe characters (192 bits), well inside the password rules (12 to 1024 characters).
GENERATED_PASSWORD_BYTES = 24
MAX_APPS_LISTED = 10
# As docs/operations.md serves the hub (its gunicorn settings sum every worker's metrics).
GUNICORN = ("gunicorn -c python:admin_app.observability.gunicorn_conf --worker-class gthread "
            "--workers 2 --threads 8 --timeout 60 --bind 127.0.0.1:8000 'admin_app:create_app()'")


def generate_password() -> str:
    return secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)


def _admins(db: Session) -> list[str]:
    """Names of the users with the admin role, disabled ones included (they can be enabled)."""
    return list(db.scalars(select(Admin.username).where(Admin.role == "admin").order_by(Admin.username)))


def _check_name_is_free(db: Session, username: str) -> None:
    """Only asked when the hub has no admin yet: the name must not belong to another user."""
    role = db.scalar(select(Admin.role).where(Admin.username == username))
    if role is not None:
        raise ApiError("admin_exists",
                       f"A user named {username} already exists (role {role}) and the hub has no admin: "
                       f"choose another name, or `bailing-admin admins set-role {username} admin`.")


def _dry_run(hub, username: str, config: tuple[dict, Path] | None, without: tuple[str, ...]) -> None:
    """Every check that needs the database, against the schema as the upgrade will leave it, in a
    transaction that is always rolled back."""
    with hub.db.engine.connect() as conn:
        raw = conn.connection.driver_connection
        try:
            # The upgrade's own lock: no upgrade runs beside this one, so what is pending once it
            # is held stays pending until the rollback.
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (migrations.ADVISORY_LOCK_KEY,))
            state = migrations.status(hub.db.conninfo(), hub.settings.sql_dir, without)
            if state.problems:
                raise migrations.MigrationError("; ".join(state.problems))
            for migration in state.pending:
                raw.execute(migrations.script(migration))
            with Session(bind=conn) as db:
                if not _admins(db):
                    _check_name_is_free(db, username)
                if config is not None:
                    validate_config(db, *config)
        finally:
            conn.rollback()


def _next_steps(username: str, created: bool, existing: list[str], apps: list[str], has_apps: bool,
                embedded: bool, data_dir: Path, secret_key_set: bool) -> list[str]:
    steps = [f"Start the hub (with the same BAILING_* environment): {GUNICORN}",
             (f"Sign in at http://127.0.0.1:8000/console/login as {username if created else existing[0]}"
              " (in production through your TLS proxy, https://YOUR-HOST/console/login)")]
    if not created:
        steps.append(f"The hub already has {len(existing)} admin(s) ({', '.join(existing[:5])}): init left "
                     "every admin as it was. `bailing-admin admins list` shows them; "
                     "`bailing-admin admins reset-password NAME --password-stdin` sets a new password.")
    if apps:
        steps += [f"Give the business system {name} its Client Token (shown once): "
                  f"bailing-admin clients token {name}" for name in apps[:MAX_APPS_LISTED]]
    elif not has_apps:
        steps.append("Describe client apps, routes and tool providers in a file (examples/hub.json is a "
                     "complete one): bailing-admin config apply FILE --check, then without --check; then "
                     "bailing-admin clients token APP_ID")
    if embedded:
        steps.append(f"This hub uses the embedded PostgreSQL in {data_dir / 'pgdata'}, which is for trying "
                     "the hub: set BAILING_DATABASE_URL for production")
    if not secret_key_set:
        steps.append(f"Set BAILING_SECRET_KEY (the same value on every host): until then "
                     f"{data_dir / 'secret_key'} signs the console's cookies")
    return steps


def initialize(hub, username: str, password: str | None, config_file: Path | None,
               without: tuple[str, ...] = ()) -> dict:
    """Migrate, create the first admin, apply the configuration; see the module's docstring.
    `password` None means: generate one and return it (it is shown once, never stored readable).
    `without`: features the hub goes without, as `db upgrade --without`."""
    if not USERNAME.match(username):
        raise ApiError("invalid_request", "--admin must match ^[a-z0-9][a-z0-9._-]{1,63}$")
    generated = password is None
    if password is None:
        password = generate_password()
    check_password(password)
    # The document and the folder its relative paths start from.
    given: tuple[dict, Path] | None = None
    if config_file is not None:
        given = (load_file(config_file), Path(config_file).resolve().parent)

    _dry_run(hub, username, given, without)
    applied = migrations.upgrade(hub.db.conninfo(), hub.settings.sql_dir, without=without)
    with hub.db.session() as db:
        db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": INIT_LOCK_KEY})
        existing = _admins(db)
        admin = None
        if not existing:
            admin = create_admin(db, username, "admin", password)
            if generated:
                admin["password"] = password
        config = apply_config(db, *given) if given is not None else None
        # Only apps without a token: issuing again would rotate, cutting off a working backend.
        apps = list(db.scalars(select(ClientApp.app_id).where(ClientApp.client_token_hash.is_(None))
                               .order_by(ClientApp.app_id)))
        has_apps = db.scalar(select(ClientApp.id).limit(1)) is not None

    settings = hub.settings
    embedded = not settings.database_url
    data_dir = Path(settings.data_dir).expanduser().resolve()
    uses_data_dir = embedded or not settings.secret_key
    return {
        "data_dir": str(data_dir) if uses_data_dir else None,
        "database": "embedded" if embedded else "external",
        "applied": applied,
        "admin": admin,
        "config": config,
        "next": _next_steps(username, admin is not None, existing, apps, has_apps, embedded, data_dir,
                            bool(settings.secret_key)),
    }
