"""Conversation Audit under load: real gunicorn workers, concurrent writers and readers.

Several writer threads race on each shared (multi-member) archive, lone writers fill archives of
their own, and readers page transcripts through the admin API, for BAILING_LOAD_SECONDS (6 s by
default) on loopback. Afterwards: no 5xx and no refusal the spec does not allow under contention,
and every archive holds exactly what was acknowledged. The driver and the checks live in
bench/load.py, which runs the same load for longer by hand; `pytest -s` prints the latency
percentiles, which never decide pass or fail.
"""
from __future__ import annotations

import os

import psycopg
import pytest

from bench.load import Load, Plan, figures, final_read, provision, report, verify
from tests.gunicorn_hub import GunicornHub

# Gunicorn workers under load: what costs is the workers and the clients, the same on
# any server (the SQL of appends and reads runs in tests/test_audit_*.py).
pytestmark = pytest.mark.any_server

SECONDS = float(os.environ.get("BAILING_LOAD_SECONDS", "6"))
WORKERS = 3


def test_writers_and_readers_under_gunicorn_leave_every_archive_exact(db_url, cli, tmp_path):
    def run(*args: str, input: str | None = None):
        code, out, err = cli(*args, input=input)
        assert code == 0, (args, err)
        return out

    # A low rotation threshold makes writers open (and members confirm) new archives mid-run.
    plan = Plan(seconds=SECONDS, shared=2, writers_per_shared=3, members=3, separate=3, readers=3,
                rotate_at=400)
    cast = provision(run, plan, tmp_path)
    with GunicornHub(db_url, workers=WORKERS) as hub:
        assert len(hub.worker_pids()) == WORKERS
        load = Load(hub.url, cast, plan)
        load.run()
        problems = verify(load, db_url) + final_read(load)
    fig = figures(load, problems)
    report(fig, problems)

    assert problems == []
    assert fig["server_errors_5xx"] == 0 and fig["lost_responses"] == 0
    # The only refusal allowed is the 409 conversation_audit_conflict on a shared archive's next
    # sequence (the driver checks its code, that the writer was a shared one, and that the archive
    # really held that sequence already); everything else is a 200 (creation included, as upstream).
    assert set(fig["ops"]["append"]["statuses"]) <= {"200", "409"}
    assert fig["ops"]["append"]["statuses"].get("409", 0) == fig["contention_409"]
    for op in ("read_page", "replay", "cursor", "confirm", "final_read"):
        assert set(fig["ops"].get(op, {"statuses": {"200": 0}})["statuses"]) == {"200"}, op
    assert set(fig["ops"]["create"]["statuses"]) == {"200"}
    # Enough happened to mean something: every group wrote, both extreme batch sizes and the
    # longest text were acknowledged, readers checked events.
    for group in load.groups:
        assert any(a.acked for a in load.registry.snapshot() if a.group is group), group.index
    assert fig["batch_sizes"]["1"] > 0 and fig["batch_sizes"]["50"] > 0 and fig["longest_texts"] > 0
    assert fig["reader_events_checked"] > 0

    # The check itself can fail: a changed text, an event nobody acknowledged and a lost last
    # event are each reported.
    shared = next(a for a in load.registry.snapshot() if a.group.shared and len(a.acked) > 1)
    alone = next(a for a in load.registry.snapshot() if not a.group.shared and a.acked)
    changed = next(e for b in shared.acked for e in b.events if "content" in e)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE bz_agent_conversation_events SET content = content || '!' "
                     "WHERE archive_id = %s AND sequence = %s", (shared.id, changed["sequence"]))
        conn.execute("DELETE FROM bz_agent_conversation_events WHERE archive_id = %s AND sequence = %s",
                     (alone.id, alone.acked_max))
    found = verify(load, db_url)
    assert any(p.startswith(f"{shared.id}: acknowledged event {changed['event_id']} ")
               and p.endswith("is different") for p in found), found
    assert f"{alone.id}: stored sequences are not 1..{alone.acked_max}" in found, found
