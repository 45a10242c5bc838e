"""The explicit SQL migration runner.

Files are sql/NNN_name.sql. Each is applied in its own transaction and recorded in
bz_schema_migrations with its SHA-256. A PostgreSQL advisory lock serialises concurrent runners,
and the list of applied files is read only once the lock is held, so two `db upgrade` runs
apply each file exactly once. Nothing here runs at start-up: only `bailing-admin db upgrade`.
Pending files are applied in number order even when a higher number is already applied: some
files carry fixed numbers (057, 058) that releases after them must not be blocked by.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psycopg

from .canonical import iso

FILE_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# "bailing" in ASCII: the same key in every process of every hub sharing the database.
ADVISORY_LOCK_KEY = 0x6261696C696E67

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS bz_schema_migrations (
    filename   text PRIMARY KEY,
    sha256     char(64) NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(Exception):
    """The migration set cannot be applied as it stands; nothing was changed."""


@dataclass(frozen=True)
class MigrationFile:
    number: int
    filename: str
    path: Path
    sha256: str

    def sql(self) -> str:
        return self.path.read_text(encoding="utf-8")


@dataclass
class MigrationStatus:
    applied: list[dict] = field(default_factory=list)
    pending: list[MigrationFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "applied": self.applied,
            "pending": [m.filename for m in self.pending],
            "problems": self.problems,
        }


def discover(sql_dir: Path) -> list[MigrationFile]:
    sql_dir = Path(sql_dir)
    if not sql_dir.is_dir():
        raise MigrationError(f"migration folder not found: {sql_dir}")
    files: list[MigrationFile] = []
    numbers: dict[int, str] = {}
    for path in sorted(sql_dir.iterdir()):
        if path.suffix != ".sql":
            continue
        match = FILE_NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files must be named NNN_name.sql")
        number = int(match.group(1))
        if number in numbers:
            raise MigrationError(f"{path.name}: number {number:03d} is used by {numbers[number]} too")
        numbers[number] = path.name
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        files.append(MigrationFile(number, path.name, path, digest))
    return files


def _read_applied(conn: psycopg.Connection) -> dict[str, tuple[str, datetime]]:
    exists = conn.execute("SELECT to_regclass('bz_schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return {}
    rows = conn.execute(
        "SELECT filename, sha256, applied_at FROM bz_schema_migrations ORDER BY filename"
    ).fetchall()
    return {name: (digest, applied_at) for name, digest, applied_at in rows}


def _compare(files: list[MigrationFile], applied: dict) -> MigrationStatus:
    status = MigrationStatus()
    by_name = {m.filename: m for m in files}
    for name, (digest, applied_at) in sorted(applied.items()):
        status.applied.append(
            {"file": name, "sha256": digest, "applied_at": iso(applied_at)}
        )
        if name not in by_name:
            status.problems.append(f"{name} is recorded as applied but its file is missing")
        elif by_name[name].sha256 != digest:
            status.problems.append(
                f"{name} was changed after it was applied "
                f"(recorded sha256 {digest}, file now {by_name[name].sha256})"
            )
    status.pending = [m for m in files if m.filename not in applied]
    return status


def status(conninfo: str, sql_dir: Path) -> MigrationStatus:
    files = discover(sql_dir)
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return _compare(files, _read_applied(conn))


def upgrade(conninfo: str, sql_dir: Path, to: int | None = None) -> list[str]:
    """Apply pending files numbered up to and including `to` (e.g. 056: everything before the
    conversation audit); return the names applied."""
    files = discover(sql_dir)
    applied_now: list[str] = []
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_LOCK_KEY,))
        try:
            conn.execute(CREATE_LEDGER)
            current = _compare(files, _read_applied(conn))
            if current.problems:
                raise MigrationError("; ".join(current.problems))
            for migration in current.pending:
                if to is not None and migration.number > to:
                    break
                with conn.transaction():
                    conn.execute(migration.sql())
                    conn.execute(
                        "INSERT INTO bz_schema_migrations (filename, sha256) VALUES (%s, %s)",
                        (migration.filename, migration.sha256),
                    )
                applied_now.append(migration.filename)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
    return applied_now
