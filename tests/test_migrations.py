"""The explicit migration runner: ledger, checksums, --to, atomic files, concurrent runners."""
from __future__ import annotations

import hashlib
import shutil
import threading

import psycopg
import pytest

from admin_app import migrations
from tests.conftest import SQL_DIR, run_cli_process


def rows(url: str, query: str):
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def table_exists(url: str, name: str) -> bool:
    return rows(url, f"SELECT to_regclass('{name}') IS NOT NULL")[0][0]


@pytest.fixture
def sql_dir(tmp_path):
    """The real migrations plus two small ones of the test's own."""
    folder = tmp_path / "sql"
    shutil.copytree(SQL_DIR, folder)
    (folder / "900_counter.sql").write_text("CREATE TABLE bz_counter (n int);\nINSERT INTO bz_counter VALUES (900);\n")
    (folder / "901_more.sql").write_text("SELECT pg_sleep(0.5);\nINSERT INTO bz_counter VALUES (901);\n")
    return folder


def test_upgrade_applies_every_file_once_and_records_its_checksum(empty_db, sql_dir):
    applied = migrations.upgrade(empty_db, sql_dir)
    files = sorted(p.name for p in sql_dir.glob("*.sql"))
    assert applied == files
    ledger = dict(rows(empty_db, "SELECT filename, sha256 FROM bz_schema_migrations"))
    assert ledger == {name: hashlib.sha256((sql_dir / name).read_bytes()).hexdigest() for name in files}
    assert migrations.upgrade(empty_db, sql_dir) == []
    assert rows(empty_db, "SELECT n FROM bz_counter ORDER BY n") == [(900,), (901,)]


def test_upgrade_to_stops_at_the_named_file(empty_db, sql_dir):
    applied = migrations.upgrade(empty_db, sql_dir, to=900)
    assert applied[-1] == "900_counter.sql"
    state = migrations.status(empty_db, sql_dir)
    assert [m.filename for m in state.pending] == ["901_more.sql"]
    assert rows(empty_db, "SELECT n FROM bz_counter") == [(900,)]


def test_upgrade_to_a_number_without_a_file_stops_below_it(empty_db, sql_dir):
    applied = migrations.upgrade(empty_db, sql_dir, to=56)
    assert applied and all(int(name[:3]) <= 56 for name in applied)
    state = migrations.status(empty_db, sql_dir)
    assert [m.filename for m in state.pending][:2] == [
        "057_agent_conversation_audit.sql", "058_agent_conversation_member_bindings.sql"]
    assert not table_exists(empty_db, "bz_agent_conversation_events")


def test_a_tampered_applied_file_stops_everything(empty_db, sql_dir):
    migrations.upgrade(empty_db, sql_dir, to=900)
    (sql_dir / "900_counter.sql").write_text("CREATE TABLE bz_counter (n bigint);\n")
    with pytest.raises(migrations.MigrationError, match=r"900_counter\.sql was changed after it was applied"):
        migrations.upgrade(empty_db, sql_dir)
    # 901 stayed pending: nothing is applied while the set is inconsistent.
    assert "901_more.sql" not in dict(rows(empty_db, "SELECT filename, 1 FROM bz_schema_migrations"))
    result = run_cli_process(["db", "status"], empty_db, sql_dir=sql_dir)
    assert result.returncode == 1
    assert "900_counter.sql was changed" in result.stdout


def test_an_applied_entry_without_its_file_stops_everything(empty_db, sql_dir):
    migrations.upgrade(empty_db, sql_dir, to=900)
    (sql_dir / "900_counter.sql").unlink()
    with pytest.raises(migrations.MigrationError,
                       match=r"900_counter\.sql is recorded as applied but its file is missing"):
        migrations.upgrade(empty_db, sql_dir)
    result = run_cli_process(["db", "upgrade"], empty_db, sql_dir=sql_dir)
    assert result.returncode == 1
    assert '"error": "migration_error"' in result.stderr


def test_a_failing_file_is_rolled_back_whole_and_not_recorded(empty_db, sql_dir):
    (sql_dir / "902_broken.sql").write_text(
        "CREATE TABLE bz_half_done (n int);\nINSERT INTO bz_counter VALUES (902);\nSELECT 1/0;\n"
    )
    with pytest.raises(psycopg.errors.DivisionByZero):
        migrations.upgrade(empty_db, sql_dir)
    assert not table_exists(empty_db, "bz_half_done")
    assert rows(empty_db, "SELECT n FROM bz_counter ORDER BY n") == [(900,), (901,)]
    recorded = {r[0] for r in rows(empty_db, "SELECT filename FROM bz_schema_migrations")}
    assert "901_more.sql" in recorded and "902_broken.sql" not in recorded


def test_a_badly_named_file_is_refused(empty_db, sql_dir):
    (sql_dir / "7_oops.sql").write_text("SELECT 1;")
    with pytest.raises(migrations.MigrationError, match=r"7_oops\.sql: migration files must be named NNN_name\.sql"):
        migrations.upgrade(empty_db, sql_dir)


def test_two_numbers_alike_are_refused(empty_db, sql_dir):
    (sql_dir / "900_twin.sql").write_text("SELECT 1;")
    with pytest.raises(migrations.MigrationError, match="number 900 is used by"):
        migrations.status(empty_db, sql_dir)


def test_concurrent_upgrades_apply_each_file_exactly_once(empty_db, sql_dir):
    """Two threads and two real processes race; the advisory lock lets one apply each file."""
    results: list = []
    errors: list = []

    def in_thread():
        try:
            results.append(migrations.upgrade(empty_db, sql_dir))
        except Exception as err:  # noqa: BLE001 - surfaced below
            errors.append(err)

    def in_process():
        results.append(run_cli_process(["db", "upgrade"], empty_db, sql_dir=sql_dir))

    workers = [threading.Thread(target=in_thread), threading.Thread(target=in_thread),
               threading.Thread(target=in_process), threading.Thread(target=in_process)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors
    for r in results:
        if not isinstance(r, list):
            assert r.returncode == 0, r.stderr
    assert rows(empty_db, "SELECT n FROM bz_counter ORDER BY n") == [(900,), (901,)]
    names = [r[0] for r in rows(empty_db, "SELECT filename FROM bz_schema_migrations")]
    assert sorted(names) == sorted(p.name for p in sql_dir.glob("*.sql"))
    applied_by_threads = [name for r in results if isinstance(r, list) for name in r]
    assert len(applied_by_threads) == len(set(applied_by_threads))


def test_cli_upgrade_and_status_report_json(empty_db):
    before = run_cli_process(["db", "status"], empty_db)
    assert before.returncode == 0
    assert '"001_core_records.sql"' in before.stdout
    up = run_cli_process(["db", "upgrade", "--to", "001"], empty_db)
    assert up.returncode == 0, up.stderr
    assert '"applied": [\n    "001_core_records.sql"\n  ]' in up.stdout
    bad = run_cli_process(["db", "upgrade", "--to", "abc"], empty_db)
    assert bad.returncode == 1
    assert '"error": "invalid_request"' in bad.stderr


def test_nothing_migrates_at_start_up(empty_db, tmp_path):
    from admin_app import create_app
    from tests.conftest import serve

    live = serve(create_app({"database_url": empty_db, "data_dir": tmp_path}))
    try:
        assert live.get("/health/ready").status_code == 503
        assert live.get("/").status_code == 200
    finally:
        live.stop()
    assert not table_exists(empty_db, "bz_schema_migrations")
    assert not table_exists(empty_db, "bz_client_apps")
