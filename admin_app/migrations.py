"""The explicit SQL migration runner.

Files are sql/NNN_name.sql. Each is applied in its own transaction and recorded in
bz_schema_migrations with its SHA-256. A PostgreSQL advisory lock serialises concurrent runners,
and the list of applied files is read only once the lock is held, so two `db upgrade` runs
apply each file exactly once. Nothing here runs at start-up: only `bailing-admin db upgrade`.
Pending files are applied in number order even when a higher number is already applied: some
files carry fixed numbers (057, 058) that releases after them must not be blocked by.

Some files belong to a feature a hub may go without (FEATURES): `db upgrade --without NAME`
records the choice in bz_schema_without and every later upgrade leaves those files out, until
`db upgrade --with NAME` applies them, in number order, whatever was applied after them.

sql/optional/ holds changes no install needs and `db upgrade` never applies, each run by a
command of its own (partition_events below) and recorded in the same ledger as optional/NAME.sql,
so `db status` and readiness check their checksums and that the schema matches the record.
"""
from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psycopg

from .canonical import iso

FILE_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# "bailing" in ASCII: the same key in every process of every hub sharing the database.
ADVISORY_LOCK_KEY = 0x6261696C696E67
OPTIONAL_DIR = "optional"
PARTITION_EVENTS = f"{OPTIONAL_DIR}/partition_events.sql"
# A busy table makes the conversion give up rather than queue every reader behind its lock.
PARTITION_LOCK_TIMEOUT = "5s"

# The parts of the schema a hub may go without, each with the numbered files it needs. A file is
# applied only while no feature it belongs to is left out. Released files are never edited (their
# checksums are recorded), so what belongs to what is declared here, not in the files.
FEATURES: dict[str, frozenset[int]] = {
    # The archives (057), their search indexes (065) and list indexes (070), their messages'
    # salts and redactions (085).
    "conversation-audit": frozenset({57, 65, 70, 85}),
    # Members bound to their own client app and route (058): v2 creation.
    "cross-binding": frozenset({58}),
}
# What a feature builds on: leaving that out leaves the feature out, installing the feature
# installs that too.
NEEDS: dict[str, tuple[str, ...]] = {"cross-binding": ("conversation-audit",)}
# 070 also indexed tables of every hub; 072 builds those indexes (IF NOT EXISTS) wherever 070 was
# left out. 070 creates them without IF NOT EXISTS, so applied after 072 (the audit installed
# later) it is preceded by their drop, in its transaction, and builds them again alike.
DROPPED_BEFORE: dict[int, tuple[str, ...]] = {
    70: ("bz_messages_run", "bz_tool_approvals_settled", "bz_tool_approvals_decided",
         "bz_access_log_target_user_at"),
}
INSTALLED, NOT_INSTALLED, PENDING = "installed", "not installed", "pending"

CREATE_WITHOUT = """
CREATE TABLE IF NOT EXISTS bz_schema_without (
    feature     text PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT now()
)
"""

CREATE_LEDGER = """
CREATE TABLE IF NOT EXISTS bz_schema_migrations (
    filename   text PRIMARY KEY,
    sha256     char(64) NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(Exception):
    """The migration set cannot be applied as it stands; nothing was changed."""


class FeatureInstalled(MigrationError):
    """`--without` named a feature some of whose files are applied: nothing is ever removed."""


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
    # Files not applied because a feature they belong to is left out; never pending.
    left_out: list[MigrationFile] = field(default_factory=list)
    features: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {
            "applied": self.applied,
            "pending": [m.filename for m in self.pending],
            "left_out": [m.filename for m in self.left_out],
            "features": self.features,
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


def discover_optional(sql_dir: Path) -> list[MigrationFile]:
    """sql/optional/*.sql, named optional/NAME.sql as the ledger records them (number 0: they
    belong to no place in the numbered order)."""
    folder = Path(sql_dir) / OPTIONAL_DIR
    if not folder.is_dir():
        return []
    return [MigrationFile(0, f"{OPTIONAL_DIR}/{path.name}", path, hashlib.sha256(path.read_bytes()).hexdigest())
            for path in sorted(folder.glob("*.sql"))]


def _read_applied(conn: psycopg.Connection) -> dict[str, tuple[str, datetime]]:
    exists = conn.execute("SELECT to_regclass('bz_schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return {}
    rows = conn.execute(
        "SELECT filename, sha256, applied_at FROM bz_schema_migrations ORDER BY filename"
    ).fetchall()
    return {name: (digest, applied_at) for name, digest, applied_at in rows}


def _read_without(conn: psycopg.Connection) -> set[str]:
    exists = conn.execute("SELECT to_regclass('bz_schema_without') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return set()
    return {row[0] for row in conn.execute("SELECT feature FROM bz_schema_without").fetchall()}


def _left_out(without: set[str]) -> set[str]:
    """The features named, and those that build on one of them."""
    return without | {name for name, needs in NEEDS.items() if without & set(needs)}


def _held_back(migration: MigrationFile, without: set[str]) -> bool:
    return any(migration.number in FEATURES.get(name, ()) for name in _left_out(without))


def _feature_states(files: list[MigrationFile], applied: dict, without: set[str]) -> dict[str, str]:
    states: dict[str, str] = {}
    for name, numbers in FEATURES.items():
        if all(m.filename in applied for m in files if m.number in numbers):
            states[name] = INSTALLED
        elif name in _left_out(without):
            states[name] = NOT_INSTALLED
        else:
            states[name] = PENDING
    return states


def script(migration: MigrationFile) -> str:
    """The SQL run for a file: its own, after the drops DROPPED_BEFORE names for it."""
    drops = "".join(f"DROP INDEX IF EXISTS {name};\n" for name in DROPPED_BEFORE.get(migration.number, ()))
    return drops + migration.sql()


def _compare(files: list[MigrationFile], applied: dict,
             optional: list[MigrationFile] | None = None, without: set[str] | None = None) -> MigrationStatus:
    status = MigrationStatus()
    by_name = {m.filename: m for m in files + (optional or [])}
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
    missing = [m for m in files if m.filename not in applied]
    status.pending = [m for m in missing if not _held_back(m, without or set())]
    status.left_out = [m for m in missing if _held_back(m, without or set())]
    status.features = _feature_states(files, applied, without or set())
    return status


def _current(conn: psycopg.Connection, sql_dir: Path, without: Iterable[str] = ()) -> MigrationStatus:
    """The ledger against the files, and against the schema where an optional file changed it;
    `without`: features left out beside those recorded (what an upgrade given them would do)."""
    applied = _read_applied(conn)
    state = _compare(discover(sql_dir), applied, discover_optional(sql_dir), _read_without(conn) | set(without))
    state.problems += _layout_problems(conn, applied)
    return state


def status(conninfo: str, sql_dir: Path, without: Iterable[str] = ()) -> MigrationStatus:
    discover(sql_dir)  # a broken folder is refused before the database is asked
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return _current(conn, sql_dir, without)


def _chosen(without: Iterable[str], with_: Iterable[str]) -> tuple[set[str], set[str]]:
    """The features to leave out and to install (with what they need)."""
    wanted = set(with_)
    return set(without), wanted | {need for name in wanted for need in NEEDS.get(name, ())}


def choice_problem(without: Iterable[str], with_: Iterable[str]) -> str | None:
    """What is wrong with a choice of features, checked before the database is asked."""
    left, wanted = _chosen(without, with_)
    unknown = sorted((left | wanted) - FEATURES.keys())
    if unknown:
        return f"unknown feature {', '.join(unknown)}: the features are {', '.join(FEATURES)}"
    if left & wanted:
        return f"{', '.join(sorted(left & wanted))} cannot be both left out and installed"
    return None


def _record_choice(conn: psycopg.Connection, sql_dir: Path, without: set[str], with_: set[str]) -> None:
    """Record the features left out and forget those to install; refused, changing nothing, when a
    feature to leave out has any file applied."""
    applied = _read_applied(conn)
    for name in sorted(without):
        have = [m.filename for m in discover(sql_dir) if m.number in FEATURES[name] and m.filename in applied]
        if have:
            raise FeatureInstalled(f"{name} is installed ({', '.join(have)} applied): "
                                   "a hub does not go without a feature it has")
    with conn.transaction():
        if without:
            conn.execute(CREATE_WITHOUT)
            for name in sorted(without):
                conn.execute("INSERT INTO bz_schema_without (feature) VALUES (%s) ON CONFLICT DO NOTHING", (name,))
        if with_ and _read_without(conn):
            conn.execute("DELETE FROM bz_schema_without WHERE feature = ANY(%s)", (sorted(with_),))


def upgrade(conninfo: str, sql_dir: Path, to: int | None = None, without: Iterable[str] = (),
            with_: Iterable[str] = ()) -> list[str]:
    """Apply pending files numbered up to and including `to` (e.g. 056: everything before the
    conversation audit); return the names applied. `without` records features to leave out
    (refused for one already installed), `with_` features to install after all."""
    discover(sql_dir)  # a broken folder is refused before the database is asked
    problem = choice_problem(without, with_)
    if problem:
        raise MigrationError(problem)
    left, wanted = _chosen(without, with_)
    applied_now: list[str] = []
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_LOCK_KEY,))
        try:
            conn.execute(CREATE_LEDGER)
            current = _current(conn, sql_dir)
            if current.problems:
                raise MigrationError("; ".join(current.problems))
            if left or wanted:
                _record_choice(conn, sql_dir, left, wanted)
                current = _current(conn, sql_dir)
            for migration in current.pending:
                if to is not None and migration.number > to:
                    break
                with conn.transaction():
                    conn.execute(script(migration))
                    conn.execute(
                        "INSERT INTO bz_schema_migrations (filename, sha256) VALUES (%s, %s)",
                        (migration.filename, migration.sha256),
                    )
                applied_now.append(migration.filename)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
    return applied_now


# ------------------------------------------------------------------ optional: events by archive


def event_partitions(conn: psycopg.Connection) -> int | None:
    """How many partitions bz_agent_conversation_events has; None when it is a plain table (or
    not there at all)."""
    row = conn.execute("""
        SELECT c.relkind = 'p', (SELECT count(*) FROM pg_inherits WHERE inhparent = c.oid)
          FROM pg_class c WHERE c.oid = to_regclass('bz_agent_conversation_events')""").fetchone()
    return int(row[1]) if row is not None and row[0] else None


def _layout_problems(conn: psycopg.Connection, applied: dict) -> list[str]:
    recorded = PARTITION_EVENTS in applied
    if recorded == (event_partitions(conn) is not None):
        return []
    if recorded:
        return [f"{PARTITION_EVENTS} is recorded as applied but bz_agent_conversation_events is not partitioned"]
    return [f"bz_agent_conversation_events is partitioned but {PARTITION_EVENTS} is not recorded as applied"]


def partition_events(conninfo: str, sql_dir: Path, partitions: int) -> dict:
    """Run sql/optional/partition_events.sql: the events table becomes PARTITION BY HASH
    (archive_id) in `partitions` parts, in one transaction under the migration lock. Asked again
    for the same number it changes nothing; another number is refused (rows are not re-spread)."""
    script = next((m for m in discover_optional(sql_dir) if m.filename == PARTITION_EVENTS), None)
    if script is None:
        raise MigrationError(f"{PARTITION_EVENTS} not found in {sql_dir}")
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (ADVISORY_LOCK_KEY,))
        try:
            existing = _check_partitionable(conn, sql_dir, partitions)
            if existing is not None:
                return {"converted": False, "partitions": existing,
                        "message": "bz_agent_conversation_events is already partitioned."}
            return _convert(conn, script, partitions)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))


def _check_partitionable(conn: psycopg.Connection, sql_dir: Path, partitions: int) -> int | None:
    """The partitions the table already has (None: a plain table, ready for the conversion);
    refused when the schema is not the one the conversion starts from."""
    conn.execute(CREATE_LEDGER)
    current = _current(conn, sql_dir)
    if current.problems:
        raise MigrationError("; ".join(current.problems))
    if current.pending:
        raise MigrationError("Apply the pending migrations first (db upgrade): "
                             + ", ".join(m.filename for m in current.pending))
    if current.features["conversation-audit"] != INSTALLED:
        raise MigrationError("The conversation audit is not installed on this hub "
                             "(bailing-admin db upgrade --with conversation-audit installs it).")
    existing = event_partitions(conn)
    if existing is not None and existing != partitions:
        raise MigrationError(f"bz_agent_conversation_events is already partitioned into {existing}; "
                             f"it is not re-partitioned into {partitions}.")
    return existing


def _convert(conn: psycopg.Connection, script: MigrationFile, partitions: int) -> dict:
    started = time.monotonic()
    try:
        with conn.transaction():
            conn.execute(f"SET LOCAL lock_timeout = '{PARTITION_LOCK_TIMEOUT}'")
            conn.execute("SELECT set_config('bailing.event_partitions', %s, true)", (str(partitions),))
            conn.execute(script.sql())
            conn.execute("INSERT INTO bz_schema_migrations (filename, sha256) VALUES (%s, %s)",
                         (script.filename, script.sha256))
            # What the script copied, as it noted for this transaction.
            copied = conn.execute("SELECT current_setting('bailing.events_copied')::bigint, "
                                  "current_setting('bailing.run_links_copied')::bigint").fetchone()
    except psycopg.errors.LockNotAvailable as err:
        raise MigrationError("The conversation audit tables are in use: stop the hub and run the "
                             "conversion again (nothing was changed).") from err
    except psycopg.Error as err:
        raise MigrationError(f"The conversion was rolled back, nothing was changed: {err}") from err
    assert copied is not None
    return {"converted": True, "partitions": partitions, "events": copied[0], "run_links": copied[1],
            "seconds": round(time.monotonic() - started, 3)}
