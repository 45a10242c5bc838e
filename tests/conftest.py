"""Fixtures: a real PostgreSQL (embedded by default, or BAILING_DATABASE_URL's server), a fresh
database per test, the app built by its factory, and a real HTTP server on loopback."""
from __future__ import annotations

import json
import os
import atexit
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
import requests
from argon2 import PasswordHasher
from sqlalchemy.engine import make_url
from werkzeug.serving import make_server

from admin_app import create_app, embedded_pg, migrations
from admin_app.config import PROJECT_ROOT
from admin_app.identity import admins as _admins
from tests.browser import browser, hub, ui  # noqa: F401 - the console's browser fixtures, for every file
from tests.helpers import apply_config

# Password hashing at the hub's cost (argon2, 64 MiB, about 0.14 s a hash) would be most of the
# time of every test that makes an admin or signs in: the suite's in-process apps hash at argon2's
# lowest cost. (Hashes carry their parameters, so they verify the same; the processes the suite
# starts, bailing-admin and gunicorn, keep the hub's cost.)
_admins._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)

SQL_DIR = PROJECT_ROOT / "sql"
EXAMPLES = PROJECT_ROOT / "examples"

# Nothing a test runs may write into the user's own data folder (the default is in their home):
# apps and commands that name no folder of their own get this test process's scratch one.
os.environ["BAILING_DATA_DIR"] = tempfile.mkdtemp(prefix="bailing-test-data-")
atexit.register(shutil.rmtree, os.environ["BAILING_DATA_DIR"], ignore_errors=True)


def _with_database(url: str, name: str) -> str:
    return make_url(url).set(drivername="postgresql", database=name).render_as_string(hide_password=False)


def _test_data_dir() -> Path:
    """Where the suite's own embedded server lives: BAILING_TEST_DATA_DIR, else var/test of the
    checkout (never BAILING_DATA_DIR, so a run cannot touch the hub's own database)."""
    return Path(os.environ.get("BAILING_TEST_DATA_DIR") or PROJECT_ROOT / "var" / "test")


_STARTED_SERVER = pytest.StashKey[bool]()


def pytest_addoption(parser):
    parser.addoption(
        "--events-partitions", type=int, metavar="N",
        default=int(os.environ.get("BAILING_TEST_EVENT_PARTITIONS") or 0),
        help="Run the tests on databases whose conversation events are partitioned by archive into "
             "N parts (sql/optional/partition_events.sql); 0, the default: the plain table every "
             "install has. Also BAILING_TEST_EVENT_PARTITIONS.")


def pytest_collection_modifyitems(config, items):
    """With BAILING_TEST_SERVER_ONLY=1 (CI's second pass, on an external server, after a whole run
    on the embedded one) a run skips what does the same work whatever server the suite uses: the
    tests marked `own_servers` or `any_server`, and the browser tests (what the console does in
    Chromium is the same; the SQL behind its pages runs in the server-side console tests, which
    stay)."""
    if os.environ.get("BAILING_TEST_SERVER_ONLY") != "1":
        return
    own = pytest.mark.skip(reason="starts its own servers; already run in the embedded-server pass")
    same = pytest.mark.skip(reason="the same work on any server; already run in the embedded-server pass")
    in_browser = pytest.mark.skip(reason="a browser test; already run in the embedded-server pass")
    for item in items:
        if item.get_closest_marker("own_servers"):
            item.add_marker(own)
        elif item.get_closest_marker("any_server"):
            item.add_marker(same)
        elif "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(in_browser)


def pytest_sessionstart(session):
    # Only the controlling process decides (xdist workers have `workerinput`): it notes whether the
    # suite's embedded server was already running, in which case the run leaves it running.
    config = session.config
    if hasattr(config, "workerinput") or os.environ.get("BAILING_DATABASE_URL"):
        return
    config.stash[_STARTED_SERVER] = not embedded_pg.is_running(_test_data_dir())


def pytest_sessionfinish(session):
    """Stop the embedded server this run started (the workers have dropped their databases by
    now), unless another run is using it at this moment."""
    if not session.config.stash.get(_STARTED_SERVER, False):
        return
    data_dir = _test_data_dir()
    if not embedded_pg.is_running(data_dir):
        return
    try:
        admin_url = _with_database(embedded_pg.ensure_running(data_dir), "postgres")
        with psycopg.connect(admin_url, autocommit=True) as conn:
            # This run's databases are gone (dropped WITH FORCE); a connection to one that
            # exists is another run's.
            others = conn.execute("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE datname LIKE 'bz\\_test\\_%'").fetchone()[0]
        if not others:
            embedded_pg.stop(data_dir)
    except (psycopg.Error, embedded_pg.StopError) as err:  # the results stand; say so and go on
        sys.stderr.write(f"\nthe tests' embedded server was not stopped: {err}\n")


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """A URL on the server the suite uses, for creating and dropping test databases."""
    external = os.environ.get("BAILING_DATABASE_URL")
    if external:
        return _with_database(external, make_url(external).database or "postgres")
    admin_url = _with_database(embedded_pg.ensure_running(_test_data_dir()), "postgres")
    # This server holds only throwaway test databases: it need not survive a power cut, so it
    # skips the disk flushes that would otherwise dominate a run of thousands of small commits.
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")
    return admin_url


COPIES_AHEAD = 2


class Databases:
    """Creates uniquely named databases on the test server and drops them: a test's own as soon as
    it is done, in the background while the next tests run (`release`), the rest at the end."""

    def __init__(self, admin_url: str):
        self.admin_url = admin_url
        self.created: list[str] = []
        # Each DROP DATABASE waits for a checkpoint (~0.1 s): thousands of them at the end of a run
        # kept a worker busy for two minutes; one at a time beside the tests, they cost nothing.
        self._dropper = ThreadPoolExecutor(max_workers=1)
        self._dropping: list[Future] = []
        # Copies of a template made ahead, while the tests run: on a server that flushes to disk
        # (CI's second pass), a CREATE DATABASE waits on fsyncs for ~0.3 s, most of a test's setup,
        # and a few made side by side share their flushes.
        self._maker = ThreadPoolExecutor(max_workers=COPIES_AHEAD)
        self._ahead: dict[str, deque[Future[str]]] = {}

    def copy(self, template: str) -> str:
        """A new database copied from `template`, which must never change once copied."""
        ahead = self._ahead.setdefault(template, deque())
        while len(ahead) <= COPIES_AHEAD:
            ahead.append(self._maker.submit(self.create, template))
        return ahead.popleft().result()

    def create(self, template: str | None = None) -> str:
        name = f"bz_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            suffix = f' TEMPLATE "{template}"' if template else ""
            # A copy of the small migrated template: copying its files (one checkpoint) is faster
            # to make on the embedded server and several times faster to drop on a shared one than
            # PostgreSQL 15's default of WAL-logging every block (STRATEGY exists from 15 on).
            if template and conn.info.server_version >= 150000:
                suffix += " STRATEGY FILE_COPY"
            conn.execute(f'CREATE DATABASE "{name}"{suffix}')
        self.created.append(name)
        # A throwaway database: its commits need not wait for the disk (on a shared server too,
        # where the setting is this connection's own).
        return make_url(_with_database(self.admin_url, name)).update_query_dict(
            {"options": "-csynchronous_commit=off"}).render_as_string(hide_password=False)

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def release(self, url: str) -> None:
        """The test that used `url` is done (its apps, servers and connections torn down first,
        as they depend on it): drop its database in the background."""
        name = make_url(url).database
        assert name is not None
        self.created.remove(name)
        self._dropping.append(self._dropper.submit(self._drop, name))

    def drop_all(self) -> None:
        for ahead in self._ahead.values():
            for made in ahead:
                made.result()  # so in `created`, to be dropped below
        self._maker.shutdown()
        for dropping in self._dropping:
            dropping.result()  # a failed drop fails the run's end, not silently
        self._dropper.shutdown()
        # Dropped side by side, the rest (module and session databases) share checkpoints.
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._drop, self.created))
        self.created.clear()


@pytest.fixture(scope="session")
def databases(pg_admin_url):
    dbs = Databases(pg_admin_url)
    yield dbs
    dbs.drop_all()


@pytest.fixture(scope="session")
def migrated_template(databases, pytestconfig) -> str:
    """One database with every migration applied, cloned for each test that wants a schema; with
    --events-partitions N, its events table converted too, so every copy is partitioned."""
    url = databases.create()
    migrations.upgrade(url, SQL_DIR)
    partitions = pytestconfig.getoption("events_partitions")
    if partitions:
        migrations.partition_events(url, SQL_DIR, partitions)
    return make_url(url).database


@pytest.fixture
def empty_db(databases):
    url = databases.create()
    yield url
    databases.release(url)


@pytest.fixture
def db_url(databases, migrated_template):
    url = databases.copy(migrated_template)
    yield url
    databases.release(url)


@pytest.fixture
def app(db_url, tmp_path):
    application = create_app({"database_url": db_url, "data_dir": tmp_path / "var"})
    yield application
    application.extensions["bailing"].db.dispose()


@pytest.fixture
def sql(db_url):
    """Run a query on the test database and return its rows (for checking what was written)."""

    def run(query: str, params=None):
        with psycopg.connect(db_url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    return run


class LiveServer:
    def __init__(self, application):
        self.server = make_server("127.0.0.1", 0, application, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        # shutdown() waits for the serving loop to look up: every 0.5 s by default, which would
        # add half a second to each of the suite's hundreds of servers.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()
        self.http = requests.Session()

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        return self.http.request(method, self.url + path, timeout=30, **kwargs)

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.request("POST", path, **kwargs)

    def stop(self) -> None:
        self.http.close()
        self.server.shutdown()
        self.server.server_close()


def serve(application) -> LiveServer:
    return LiveServer(application)


# The background threads an app of a test's own settings may start (admin_app/__init__.py).
BACKGROUND_WORKERS = ("bailing.notifications", "bailing.job_callbacks", "bailing.spec_refresh", "bailing.job_reaper",
                      "bailing.retention_purge", "bailing.evidence_verifier")


@pytest.fixture
def hub_app(db_url, tmp_path):
    """`hub_app(setup=None, **settings)`: an app of the test's own settings (a metrics token, a
    trusted proxy, a log format...), `setup(app)` run on it, served on loopback."""
    made = []

    def build(setup=None, **settings):
        application = create_app({"database_url": db_url, "data_dir": tmp_path / "var", **settings})
        if setup is not None:
            setup(application)
        live = serve(application)
        made.append((application, live))
        return live

    yield build
    for application, live in made:
        live.stop()
        for name in BACKGROUND_WORKERS:  # before the database goes: they would log its absence
            if name in application.extensions:
                application.extensions[name].stop(5)
        application.extensions["bailing"].db.dispose()


@pytest.fixture
def server(app):
    live = serve(app)
    yield live
    live.stop()


def cli_of(app):
    """bailing-admin in-process against `app`, for a command that must succeed; returns its JSON."""
    from admin_app.cli import main

    runner = app.test_cli_runner()

    def run(*args: str, input: str | None = None):
        result = runner.invoke(main, list(args), input=input)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        return json.loads(result.stdout)

    return run


@pytest.fixture
def cli(app):
    """Run a bailing-admin command in-process; returns (exit_code, stdout_json_or_text, stderr)."""
    return cli_runner(app)


def cli_runner(app):
    """bailing-admin in-process against `app`: (exit code, stdout JSON or text, stderr JSON or text)."""
    runner = app.test_cli_runner()

    def run(*args: str, input: str | None = None):
        from admin_app.cli import main

        result = runner.invoke(main, list(args), input=input)
        if result.exception and not isinstance(result.exception, SystemExit):
            raise result.exception
        return result.exit_code, _maybe_json(result.stdout), _maybe_json(result.stderr)

    return run


def _maybe_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


@pytest.fixture
def server_root():
    """A folder for real servers outside pytest's own temporary tree: as root, PostgreSQL runs as
    another user who must reach it, and each pytest run closes that tree to others again."""
    with tempfile.TemporaryDirectory(prefix="bailing-test-") as folder:
        yield Path(folder).resolve()


def run_cli_process(args: list[str], db_url: str | None, *, data_dir: Path | None = None,
                    input: str | None = None, sql_dir: Path | None = None) -> subprocess.CompletedProcess:
    """bailing-admin as a real separate process, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    if db_url:
        env["BAILING_DATABASE_URL"] = db_url
    if data_dir:
        env["BAILING_DATA_DIR"] = str(data_dir)
    if sql_dir:
        env["BAILING_SQL_DIR"] = str(sql_dir)
    return subprocess.run(
        [sys.executable, "-m", "admin_app.cli", *args], env=env, input=input,
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture
def apply(cli, tmp_path):
    """`apply(doc)`: the configuration `doc` applied, which must be accepted; returns the report."""
    return lambda doc: apply_config(cli, tmp_path, doc)


@pytest.fixture
def configured(cli):
    """The example configuration applied: provider demo-crm, route customers, client crm-demo."""
    code, out, err = cli("config", "apply", str(EXAMPLES / "hub.json"))
    assert code == 0, err
    return out


@pytest.fixture
def issue_session(cli, configured):
    def issue(*extra: str, routes: str = "customers", client: str = "crm-demo") -> dict:
        code, out, err = cli("sessions", "issue", "--client", client, "--routes", routes,
                             "--principal", '{"id": "user-42", "tenant": "tenant-7", "roles": ["clerk"]}',
                             "--on-behalf-of", "tenant-7:user-42", *extra)
        assert code == 0, err
        return out

    return issue


# ---------------------------------------------------------------- the demo business system

DEMO_SECRETS = {"crm": "demo-crm-signing-secret", "erp": "demo-erp-signing-secret"}
DEMO_CONTROL = "demo-control-token"


class Business:
    """The demo business system on a loopback port, with its control endpoints at hand."""

    def __init__(self):
        from admin_app.demo.business import create_business_app

        self.app = create_business_app(DEMO_SECRETS, control_token=DEMO_CONTROL)
        self.live = LiveServer(self.app)
        self.url = self.live.url

    def fault(self, operation: str, mode: str = "drop_response", count: int = 1, **extra) -> None:
        response = self.live.post("/_demo/faults", headers={"X-Demo-Control": DEMO_CONTROL},
                                  json={"operation": operation, "mode": mode, "count": count, **extra})
        assert response.status_code == 200, response.text

    def executions(self, operation: str | None = None) -> list[dict]:
        response = self.live.get("/_demo/executions", headers={"X-Demo-Control": DEMO_CONTROL})
        assert response.status_code == 200, response.text
        return [e for e in response.json()["executions"] if operation in (None, e["operation"])]


@pytest.fixture
def business(monkeypatch):
    monkeypatch.setenv("DEMO_CRM_SECRET", DEMO_SECRETS["crm"])
    monkeypatch.setenv("DEMO_ERP_SECRET", DEMO_SECRETS["erp"])
    biz = Business()
    yield biz
    biz.live.stop()


def governed_config(business_url: str, **route_overrides) -> dict:
    """Both example providers served by the demo business system, one route over all their
    tools, CRM and ERP client apps. Route fields can be overridden by keyword."""
    route = {
        "route_key": "desk", "name": "Operations desk", "enabled": True,
        "audience": {"enabled": False},
        "target_config": {"system_prompt": "You help the operations desk."},
        "agent_client": {"enabled": True},
        "tools": {"sources": [{"provider": "demo-crm", "allow": ["*"]},
                              {"provider": "demo-erp", "allow": ["*"]}],
                  "agent_direct": {"enabled": True, "write_tools": [
                      "customer_update_credit_limit", "customer_note_add", "customer_update_email",
                      "customer_merge", "order_create", "order_cancel", "inventory_adjust",
                      "inventory_reserve", "order_update_shipping_address"]}},
    }
    route.update(route_overrides)
    return {
        "tool_providers": [
            {"name": "demo-crm", "base_url": business_url + "/crm",
             "openapi": str(EXAMPLES / "crm.openapi.json"), "secret_env": "DEMO_CRM_SECRET"},
            {"name": "demo-erp", "base_url": business_url + "/erp",
             "openapi": str(EXAMPLES / "erp.openapi.json"), "secret_env": "DEMO_ERP_SECRET"},
        ],
        "routes": [route],
        "client_apps": [{"app_id": "ops-app", "name": "Operations", "allowed_routes": ["desk"],
                         "enabled": True}],
    }


@pytest.fixture
def world(server, cli, business, sql, tmp_path):
    """The hub with task control at hand (tests/task_world.py)."""
    from tests.task_world import World

    return World(server, cli, business, sql, tmp_path)


@pytest.fixture
def governed(cli, business, tmp_path):
    """The hub configured over the demo business system; returns an agent session on `desk`."""
    path = tmp_path / "governed.json"
    path.write_text(json.dumps(governed_config(business.url)))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, err
    code, out, err = cli("sessions", "issue", "--client", "ops-app", "--routes", "desk",
                         "--principal", '{"id": "user-42", "tenant": "tenant-7"}',
                         "--on-behalf-of", "tenant-7:user-42")
    assert code == 0, err
    return out
