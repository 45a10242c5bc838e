"""One data folder: BAILING_DATA_DIR is made absolute once, its default is the user's data folder,
listing commands writes nothing, and `db stop --all` reaches every embedded server started.

These run bailing-admin as real processes on the embedded side, whatever server the suite uses
(BAILING_DATABASE_URL is removed from their environment)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import click
import pytest

from admin_app import create_app, embedded_pg

# Every test here runs its own embedded servers (or none), whatever server the suite uses.
pytestmark = pytest.mark.own_servers
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


def _env(home: Path, **extra: str | Path) -> dict:
    """The process environment with HOME and every XDG folder inside `home`, and no BAILING_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BAILING_", "XDG_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_STATE_HOME=str(home / "state"),
               XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"),
               XDG_RUNTIME_DIR=str(home / "runtime"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _admin(args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "admin_app.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _side_by_side(jobs: list[tuple[list[str], dict, Path]]) -> list[tuple[int, str, str]]:
    """Several bailing-admin processes at once (each is its own process, as an operator types
    it); their (exit code, stdout, stderr) in order."""
    running = [subprocess.Popen([sys.executable, "-m", "admin_app.cli", *args], env=env, cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args, env, cwd in jobs]
    results = []
    for process in running:
        out, err = process.communicate(timeout=120)
        results.append((process.returncode, out, err))
    return results


def _where(env: dict, cwd: Path) -> dict:
    return _wheres([(env, cwd)])[0]


def _wheres(places: list[tuple[dict, Path]]) -> list[dict]:
    results = _side_by_side([(["db", "where"], env, cwd) for env, cwd in places])
    for code, _out, err in results:
        assert code == 0, err
    return [json.loads(out) for _code, out, _err in results]


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def places(tmp_path):
    """An empty home (HOME and XDG_*) and two empty working directories beside it."""
    home, first, second = tmp_path / "home", tmp_path / "a", tmp_path / "b"
    for folder in (home, first, second):
        folder.mkdir()
    return home, first, second


# ------------------------------------------------------------------ where the folder is

def test_a_relative_data_dir_becomes_one_absolute_folder(places, tmp_path):
    home, first, second = places
    # The same folder named relatively from two working directories is one folder, shown whole.
    from_first, from_second, bare, tilde = _wheres([
        (_env(home, BAILING_DATA_DIR="../shared"), first),
        (_env(home, BAILING_DATA_DIR="../shared"), second),
        (_env(home, BAILING_DATA_DIR="var"), first),
        (_env(home, BAILING_DATA_DIR="~/hub"), second),
    ])
    assert from_first["data_dir"] == from_second["data_dir"] == str(tmp_path / "shared")
    assert from_first["pgdata"] == str(tmp_path / "shared" / "pgdata")
    assert from_first["database"] == "embedded" and from_first["running"] is False

    # A bare relative name is taken from where the command runs, and printed absolute.
    assert bare["data_dir"] == str(first / "var")
    assert tilde["data_dir"] == str(home / "hub")
    # Looking started nothing and made no folder.
    assert not (tmp_path / "shared").exists()
    assert _files_under(first) == _files_under(second) == _files_under(home) == []


def test_the_default_is_the_users_data_folder_whatever_the_working_directory(places):
    home, first, second = places
    env = _env(home)
    shown = _wheres([(env, first), (env, second)])
    assert shown[0]["data_dir"] == shown[1]["data_dir"] == str(home / "data" / "bailing")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG layout is Linux's")
def test_without_xdg_data_home_the_default_is_under_home(places):
    home, first, _ = places
    env = _env(home)
    del env["XDG_DATA_HOME"]
    assert _where(env, first)["data_dir"] == str(home / ".local" / "share" / "bailing")


def test_with_an_external_database_where_shows_the_folder_and_no_server(places):
    home, first, _ = places
    shown = _where(_env(home, BAILING_DATABASE_URL=UNREACHABLE, BAILING_DATA_DIR="state"), first)
    assert shown == {"data_dir": str(first / "state"), "database": "external", "pgdata": None,
                     "running": None}


def test_settings_are_resolved_also_when_replaced(tmp_path, monkeypatch):
    from admin_app.config import Settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert Settings().data_dir == tmp_path / "xdg" / "bailing"
    assert Settings().replace(data_dir="rel").data_dir == tmp_path / "rel"
    assert Settings(data_dir=Path("x/../y")).data_dir == tmp_path / "y"


# ------------------------------------------------------------------ nothing written for --help

def _help_commands() -> list[list[str]]:
    from admin_app.cli import main

    commands = [["--help"], ["--version"], ["run", "--help"]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                commands.append([*prefix, name, "--help"])
                walk(command, [*prefix, name])

    walk(main, [])
    return commands


def test_help_and_version_write_no_file_anywhere(places):
    home, first, _ = places
    env = _env(home, BAILING_DATA_DIR=home / "hub")
    commands = _help_commands()
    assert ["db", "--help"] in commands and ["admins", "--help"] in commands
    results = _side_by_side([(args, env, first) for args in commands])
    for args, (code, out, err) in zip(commands, results):
        assert code == 0, (args, err)
        assert out, args
    assert _files_under(home) == [] and _files_under(first) == []


def test_the_secret_key_is_made_on_the_first_request_not_when_the_app_is_built(tmp_path):
    data_dir = tmp_path / "var"
    app = create_app({"database_url": UNREACHABLE, "data_dir": data_dir})
    assert not data_dir.exists()

    assert app.test_client().get("/health/live").status_code == 200
    key_file = data_dir / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert _files_under(data_dir) == ["secret_key"]  # the scratch copy is gone
    assert app.secret_key == app.config["SECRET_KEY"] == key_file.read_text()

    # Another process (here another app) on the same folder signs with the same key.
    again = create_app({"database_url": UNREACHABLE, "data_dir": data_dir})
    assert again.secret_key == app.secret_key


def test_a_configured_secret_key_writes_no_file(tmp_path):
    data_dir = tmp_path / "var"
    app = create_app({"database_url": UNREACHABLE, "data_dir": data_dir, "secret_key": "k" * 40})
    assert app.test_client().get("/health/live").status_code == 200
    assert app.secret_key == "k" * 40
    assert not data_dir.exists()


# ------------------------------------------------------------------ db stop --all

def test_db_stop_all_stops_the_servers_of_every_data_folder(places, server_root, tmp_path):
    home, first, _ = places
    folders = [server_root / "one", server_root / "two"]
    try:
        # `db status` starts each folder's server on first use; both start side by side.
        for code, _out, err in _side_by_side([(["db", "status"], _env(home, BAILING_DATA_DIR=f), first)
                                              for f in folders]):
            assert code == 0, err
        shown = _wheres([(_env(home, BAILING_DATA_DIR=f), first) for f in folders])
        assert [s["running"] for s in shown] == [True, True]
        registry = json.loads((home / "state" / "bailing" / "embedded-servers.json").read_text())
        assert sorted(registry["data_dirs"]) == [str(f) for f in folders]

        # Run from a third folder, with no server of its own: it reaches both through the registry.
        env = _env(home, BAILING_DATA_DIR=tmp_path / "elsewhere")
        done = _admin(["db", "stop", "--all"], env, first)
        assert done.returncode == 0, done.stderr
        assert sorted(json.loads(done.stdout)["stopped"]) == [str(f) for f in folders]
        for folder in folders:
            assert not (folder / "pgdata" / "postmaster.pid").exists()
        shown = _wheres([(_env(home, BAILING_DATA_DIR=f), first) for f in folders])
        assert [s["running"] for s in shown] == [False, False]

        again = _admin(["db", "stop", "--all"], env, first)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == {"stopped": []}
        assert not (tmp_path / "elsewhere").exists()
    finally:
        for folder in folders:
            if embedded_pg.is_running(folder):
                embedded_pg.stop(folder)


def test_db_stop_all_with_nothing_running_answers_an_empty_list_and_writes_nothing(places):
    home, first, _ = places
    done = _admin(["db", "stop", "--all"], _env(home), first)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stopped": []}
    assert _files_under(home) == [] and _files_under(first) == []


def test_db_stop_all_also_works_with_an_external_database_set(places):
    home, first, _ = places
    done = _admin(["db", "stop", "--all"], _env(home, BAILING_DATABASE_URL=UNREACHABLE), first)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stopped": []}


def test_db_stop_all_names_a_server_that_does_not_stop(places, tmp_path):
    """A postmaster.pid naming a live process in a folder that is no database cluster: pg_ctl
    refuses it before signalling anything."""
    home, first, _ = places
    folder = tmp_path / "broken"
    (folder / "pgdata").mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        pid_file = folder / "pgdata" / "postmaster.pid"
        pid_file.write_text("\n".join([str(bystander.pid), str(folder / "pgdata"), "1700000000",
                                       "5432", str(folder / "pgdata"), "", "1 2", "ready"]) + "\n")
        before = pid_file.read_bytes()
        done = _admin(["db", "stop", "--all"], _env(home, BAILING_DATA_DIR=folder), first)
        assert done.returncode == 1, done.stdout
        assert done.stdout == ""
        error = json.loads(done.stderr)
        assert error["error"] == "stop_failed"
        assert error["stopped"] == []
        assert [f["data_dir"] for f in error["failed"]] == [str(folder)]
        assert error["failed"][0]["message"]  # pg_ctl's own reason
        # Nothing was touched: the process still runs and the folder is as it was (beside the
        # lock that starts and stops take), not marked as stopped.
        assert bystander.poll() is None
        assert pid_file.read_bytes() == before
        assert _files_under(folder) == ["pgdata", "pgdata.lock", "pgdata/postmaster.pid"]
    finally:
        bystander.kill()
        bystander.wait()
