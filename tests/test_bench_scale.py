"""bench/scale.py at a tiny scale, into a fresh database of the suite's server: the data it makes
must hold the archives' invariants (checked here independently of the generator's own checks),
keep exactly the schema the migrations make, and be read by the hub as its own (every page a 200,
every archive replayed as identical retries)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from admin_app.canonical import sha256_json
from admin_app.identity.sessions import identity_hash
from tests.conftest import PROJECT_ROOT, _with_database

SCALE = "0.0005"  # 50 archives, 5,000 events, 50 runs, 5 approvals, 500 access-log rows


def _generate(url: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAILING_")}
    env["BAILING_DATABASE_URL"] = url
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "bench" / "scale.py"), "--database",
                           make_url(url).database, "--scale", SCALE, "--json", str(out), "--check-hub"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text("utf-8"))


def _rows(url: str, query: str, params=None) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


def test_scale_data_holds_the_invariants_and_the_hub_reads_it(databases, migrated_template, tmp_path):
    url = databases.create()
    info = _generate(url, tmp_path / "scale.json")

    # What was asked for, and the generator's own checks.
    assert info["counts"]["bz_agent_conversation_archives"] == 50
    assert info["counts"]["bz_runs"] == 50
    assert info["counts"]["bz_tool_approvals"] == 5
    assert info["counts"]["bz_access_log"] == 500
    assert info["schema_identical"] and not any(info["checks"].values())
    assert {name: r["status"] for name, r in info["hub"].items() if r["status"] != 200} == {}
    assert any(name.startswith("replay sample") for name in info["hub"])

    # Sequences contiguous and counters equal to the events, archive by archive.
    assert _rows(url, "SELECT sum(last_sequence) FROM bz_agent_conversation_archives")[0][0] == 5000
    assert _rows(url, """
        SELECT a.id FROM bz_agent_conversation_archives a
          JOIN (SELECT archive_id, count(*) n, min(sequence) lo, max(sequence) hi,
                       count(*) FILTER (WHERE kind IN ('user_message', 'assistant_message')) msgs,
                       count(*) FILTER (WHERE kind = 'turn_start') turns,
                       coalesce(sum(octet_length(content)), 0) bytes
                  FROM bz_agent_conversation_events GROUP BY archive_id) e ON e.archive_id = a.id
         WHERE e.n <> a.last_sequence OR e.lo <> 1 OR e.hi <> a.last_sequence OR e.msgs <> a.message_count
            OR e.turns <> a.turn_count OR e.bytes <> a.text_bytes""") == []
    assert _rows(url, """SELECT count(DISTINCT archive_id) FROM bz_agent_conversation_events""")[0][0] == 50

    # Every event's body_sha256 is the hub's hash of the event as its writer sent it.
    events = _rows(url, """SELECT sequence, event_id, client_turn_id, kind, content, status, run_id,
                                  member_session_id, body_sha256 FROM bz_agent_conversation_events""")
    for sequence, event_id, turn, kind, content, status, run_id, member, digest in events:
        event = {"event_id": event_id, "sequence": sequence, "client_turn_id": turn, "kind": kind}
        if content is not None:
            event["content"] = content
        if status is not None:
            event["status"] = status
        if run_id is not None:
            event.update(run_id=str(run_id), member_session_id=str(member))
        assert sha256_json(event) == digest, (sequence, event_id)

    # v1 and v2 archives; confirmed members frozen with their session's identity.
    versions = dict(_rows(url, """SELECT membership_version, count(*) FROM bz_agent_conversation_archives
                                  GROUP BY 1"""))
    assert set(versions) == {1, 2}
    members = _rows(url, """SELECT m.identity_hash, s.client_app_id, s.principal, s.on_behalf_of, m.confirmed_at
                             FROM bz_agent_conversation_members m JOIN bz_agent_sessions s ON s.id = m.session_id""")
    assert all(h == identity_hash(app, principal, obo) and confirmed for h, app, principal, obo, confirmed in members)

    # Exactly the migrations' indexes and constraints.
    schema = """SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
                UNION ALL
                SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
                 WHERE connamespace = 'public'::regnamespace
                ORDER BY 1, 2, 3"""
    assert _rows(url, schema) == _rows(_with_database(url, migrated_template), schema)

    # The pending approvals can still be decided; the large ones carry 100 KiB - 1 MiB snapshots.
    large = _rows(url, """SELECT snapshot_bytes FROM bz_tool_approvals WHERE id = ANY(%s::uuid[])""",
                  (info["large_pending_approval_ids"],))
    assert large and all(100 * 1024 <= size <= 1024 * 1024 for (size,) in large)
    assert _rows(url, """SELECT count(*) FROM bz_tool_approvals
                          WHERE status = 'pending' AND (expires_at IS NULL OR expires_at > now())""")[0][0] >= 1
