"""The built package is a whole hub: the sdist and the wheel built from it carry every migration,
template, static asset and example of the checkout, and the wheel's code, run from outside the
checkout, migrates a database and serves the console with its assets.

Built offline (`python -m build --no-isolation`, sdist then a wheel from the sdist), with the
build requirements installed by the test extra.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import requests

from admin_app import resources
from admin_app.config import PROJECT_ROOT

# The sdist and wheel built and unpacked: the same on any server (.ci/wheel-smoke runs
# the installed wheel against each one).
pytestmark = pytest.mark.any_server

PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text("utf-8"))
VERSION = PYPROJECT["project"]["version"]
SKIPPED_PARTS = {"__pycache__"}


def shipped_files(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file the build ships from `root` (setup.py and MANIFEST.in
    leave out caches, compiled files and hidden files)."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        hidden = any(part.startswith(".") for part in rel.parts)
        if (path.is_file() and not hidden and not SKIPPED_PARTS & set(rel.parts)
                and path.suffix not in (".pyc", ".pyo")):
            files[rel.as_posix()] = path.read_bytes()
    return files


def build(source: Path, outdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(outdir), *args,
                           str(source)], capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    outdir = tmp_path_factory.mktemp("dist")
    result = build(PROJECT_ROOT, outdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = outdir.glob("bailing_hub-*.whl")
    (sdist,) = outdir.glob("bailing_hub-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="module")
def site(built, tmp_path_factory) -> Path:
    """The wheel unpacked as an installer lays it out in site-packages."""
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(built["wheel"]) as archive:
        archive.extractall(target)  # noqa: S202 - the wheel this session just built
    return target


def run_installed(site: Path, cwd: Path, *args: str, db_url: str | None = None,
                  data_dir: Path | None = None) -> subprocess.CompletedProcess:
    """Python with only the unpacked wheel ahead of the venv's dependencies, started in a
    folder that is not the checkout, so nothing can be imported or read from the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    if db_url:
        env["BAILING_DATABASE_URL"] = db_url
    if data_dir:
        env["BAILING_DATA_DIR"] = str(data_dir)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_wheel_carries_every_folder_byte_for_byte(built):
    with zipfile.ZipFile(built["wheel"]) as archive:
        names = set(archive.namelist())
        for folder in resources.FOLDERS:
            expected = shipped_files(PROJECT_ROOT / folder)
            assert expected, folder
            prefix = f"admin_app/_bundled/{folder}/"
            bundled = {name[len(prefix):]: archive.read(name) for name in names if name.startswith(prefix)}
            assert sorted(bundled) == sorted(expected), folder
            assert bundled == expected, folder
        # The package's own data files (catalog schema, API documents, demo knowledge) too.
        for rel, data in shipped_files(PROJECT_ROOT / "admin_app").items():
            if not rel.endswith(".py"):
                assert archive.read(f"admin_app/{rel}") == data, rel
        metadata = archive.read(f"bailing_hub-{VERSION}.dist-info/METADATA").decode()
        assert f"\nVersion: {VERSION}\n" in metadata
        assert f"bailing_hub-{VERSION}.dist-info/entry_points.txt" in names


def test_sdist_carries_every_folder_byte_for_byte(built):
    root = built["sdist"].name.removesuffix(".tar.gz")
    with tarfile.open(built["sdist"]) as archive:
        members = {m.name: m for m in archive.getmembers() if m.isfile()}
        for folder in resources.FOLDERS:
            expected = shipped_files(PROJECT_ROOT / folder)
            prefix = f"{root}/{folder}/"
            carried = {name[len(prefix):]: archive.extractfile(m).read()
                       for name, m in members.items() if name.startswith(prefix)}
            assert carried == expected, folder
        assert f"{root}/setup.py" in members and f"{root}/CHANGELOG.md" in members


def test_installed_code_reads_the_bundled_folders(site, tmp_path):
    probe = ("import json, admin_app, admin_app.resources as r, admin_app.config as c; "
             "print(json.dumps({'package': admin_app.__file__, "
             "'settings_sql_dir': str(c.Settings.from_env().sql_dir), "
             "**{name: str(r.folder(name)) for name in r.FOLDERS}}))")
    result = run_installed(site, tmp_path, "-c", probe)
    assert result.returncode == 0, result.stderr
    where = json.loads(result.stdout)
    assert Path(where.pop("package")).is_relative_to(site)
    assert where.pop("settings_sql_dir") == str(site / "admin_app" / "_bundled" / "sql")
    assert where == {name: str(site / "admin_app" / "_bundled" / name) for name in resources.FOLDERS}


def test_checkout_reads_its_own_folders():
    # Editable installs and the tests read the top-level folders, never a stale copy.
    assert not resources.BUNDLED_DIR.exists()
    assert {name: resources.folder(name) for name in resources.FOLDERS} == {
        name: PROJECT_ROOT / name for name in resources.FOLDERS}
    with pytest.raises(ValueError, match="unknown resource folder"):
        resources.folder("docs")


def test_installed_version(site, tmp_path):
    result = run_installed(site, tmp_path, "-m", "admin_app.cli", "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"bailing-admin {VERSION}"
    assert list(tmp_path.iterdir()) == []  # --version writes nothing


def test_installed_hub_migrates_and_serves_the_console(site, tmp_path, empty_db):
    migrations = sorted(p.name for p in (PROJECT_ROOT / "sql").glob("*.sql"))
    cwd, data = tmp_path / "elsewhere", tmp_path / "data"
    cwd.mkdir()

    status = run_installed(site, cwd, "-m", "admin_app.cli", "db", "status", db_url=empty_db, data_dir=data)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {"applied": [], "pending": migrations, "problems": [], "left_out": [],
                                         "features": {"conversation-audit": "pending", "cross-binding": "pending"}}

    upgrade = run_installed(site, cwd, "-m", "admin_app.cli", "db", "upgrade", db_url=empty_db, data_dir=data)
    assert upgrade.returncode == 0, upgrade.stderr
    assert json.loads(upgrade.stdout) == {"applied": migrations, "pending": [], "features": {
        "conversation-audit": "installed", "cross-binding": "installed"}}

    serve = ("from werkzeug.serving import make_server\n"
             "from admin_app import create_app\n"
             "server = make_server('127.0.0.1', 0, create_app(), threaded=True)\n"
             "print(server.server_port, flush=True)\n"
             "server.serve_forever()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_") and k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(site), BAILING_DATABASE_URL=empty_db, BAILING_DATA_DIR=str(data))
    proc = subprocess.Popen([sys.executable, "-c", serve], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.poll() is not None else port
        base = f"http://127.0.0.1:{port}"
        with requests.Session() as http:
            ready = http.get(base + "/health/ready", timeout=30)
            assert ready.status_code == 200, ready.text
            login = http.get(base + "/console/login", timeout=30)
            assert login.status_code == 200, login.text[:2000]
            assert 'name="csrf_token"' in login.text and 'name="password"' in login.text
            assets = re.findall(r'(?:href|src)="/static/([^"?]+)', login.text)
            assert {"hub.css", "console.css", "console.js"} <= set(assets), assets
            for asset in assets:
                answer = http.get(f"{base}/static/{asset}", timeout=30)
                assert answer.status_code == 200, asset
                assert answer.content == (PROJECT_ROOT / "static" / asset).read_bytes(), asset
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert not (cwd / "var").exists()  # the data folder is the one named, not ./var


def test_build_refuses_without_a_folder(tmp_path):
    """A tree that lost one of the folders never yields a wheel without it."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(PROJECT_ROOT / name, source / name)
    shutil.copytree(PROJECT_ROOT / "admin_app", source / "admin_app",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in resources.FOLDERS:
        if name != "static":
            shutil.copytree(PROJECT_ROOT / name, source / name)
    outdir = tmp_path / "dist"
    result = build(source, outdir, "--wheel")
    assert result.returncode != 0
    assert "cannot build: the static/ folder is missing" in result.stdout + result.stderr
    assert not list(outdir.glob("*.whl"))
