"""Threads on one process: no request sees another's connection, a 2xx is committed, a 5xx never.

A. The stress run: audit appends (writers racing on shared archives and lone writers), admin
   reads of transcripts and runtime turns, all at once, on a threaded werkzeug server, on gunicorn
   gthread workers and on gunicorn sync workers, for BAILING_STRESS_SECONDS (3 s by default) per
   server. Afterwards every acknowledgement is checked against the database: no 5xx, every
   acknowledged batch and turn stored once, nothing stored that was not acknowledged. The audit
   driver and its checks are bench/load.py's; the turns driver is here.
B. Run links racing: the same run linked into two archives at once answers one 200 and one 409
   `conversation_audit_conflict`, never 500, and is stored once.
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager

import psycopg
import pytest
import requests

from admin_app import create_app
from bench.load import PRINCIPAL, Load, Plan, figures, final_read, provision, report, verify
from tests.conftest import LiveServer
from tests.helpers import session_bearer
from tests.gunicorn_hub import GunicornHub

SECONDS = float(os.environ.get("BAILING_STRESS_SECONDS", "3"))
TURN_CLIENTS = 3
RACES = int(os.environ.get("BAILING_RACES", "20"))
AUDITS = "/agent-api/v1/conversation-audits"
TURNS = "/agent-api/v1/workspaces/customers/turns"
ACK = "bailing.agent-conversation-audit-ack.v1"
CONFLICT = "conversation_audit_conflict"


def runner(cli):
    def run(*args: str, input: str | None = None):
        code, out, err = cli(*args, input=input)
        assert code == 0, (args, err)
        return out
    return run


def crm_session(run) -> dict:
    return run("sessions", "issue", "--client", "crm-demo", "--routes", "customers",
               "--principal", json.dumps(PRINCIPAL), "--on-behalf-of", "tenant-7:user-42",
               "--access-ttl", "3600")


# ============================================================================= A. the stress run

class Turns:
    """Clients preparing turns (each its own session and conversation) until told to stop;
    what each 200 acknowledged, and every other answer."""

    def __init__(self, base: str, sessions: list[dict]):
        self.base = base
        self.sessions = sessions
        self.acked: dict[tuple[str, str], str] = {}   # (session id, client turn id) -> run id
        self.statuses: Counter = Counter()
        self.lost = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(s,), daemon=True) for s in sessions]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in self.threads)

    def client(self, session: dict) -> None:
        http = requests.Session()
        n = 0
        while not self.stop.is_set():
            n += 1
            turn = f"turn-{n}"
            try:
                response = http.post(self.base + TURNS, headers=session_bearer(session), timeout=60, json={
                    "client_conversation_id": f"stress-{session['session_id']}", "client_turn_id": turn,
                    "user_message_id": f"msg-{n}", "user_input": f"Question {n}?"})
            except requests.RequestException:
                with self.lock:
                    self.lost += 1
                continue
            with self.lock:
                self.statuses[response.status_code] += 1
                if response.status_code == 200:
                    self.acked[(session["session_id"], turn)] = response.json()["run_id"]
        http.close()

    def verify(self, db_url: str) -> list[str]:
        with psycopg.connect(db_url) as conn:
            rows = conn.execute(
                "SELECT session_id::text, client_turn_id, id::text FROM bz_runs WHERE session_id = ANY(%s)",
                ([uuid.UUID(s["session_id"]) for s in self.sessions],)).fetchall()
        stored = Counter((s, t) for s, t, _ in rows)
        problems = [f"turn {key} stored {n} times" for key, n in stored.items() if n > 1]
        by_turn = {(s, t): run for s, t, run in rows}
        for key, run in self.acked.items():
            if by_turn.get(key) != run:
                problems.append(f"acknowledged turn {key} is stored as {by_turn.get(key)}, not {run}")
        problems += [f"turn {key} stored but never acknowledged" for key in by_turn if key not in self.acked]
        return problems


@contextmanager
def serving(kind: str, db_url: str, tmp_path):
    """The hub's base URL, served the way `kind` says."""
    if kind == "werkzeug-threaded":
        app = create_app({"database_url": db_url, "data_dir": tmp_path / "var"})
        live = LiveServer(app)
        try:
            yield live.url
        finally:
            live.stop()
            app.extensions["bailing"].db.dispose()
    elif kind == "gunicorn-gthread":
        with GunicornHub(db_url, workers=2, threads=8) as hub:
            yield hub.url
    else:
        with GunicornHub(db_url, workers=3) as hub:
            yield hub.url


@pytest.mark.any_server  # its cost is the servers' threads and workers and the clients
@pytest.mark.parametrize("kind", ["werkzeug-threaded", "gunicorn-gthread", "gunicorn-sync"])
def test_appends_turns_and_reads_on_a_threaded_server_store_exactly_what_was_acknowledged(
        kind, db_url, cli, tmp_path):
    run = runner(cli)
    plan = Plan(seconds=SECONDS, shared=2, writers_per_shared=3, members=3, separate=3, readers=3,
                rotate_at=400)
    cast = provision(run, plan, tmp_path)
    turn_sessions = [crm_session(run) for _ in range(TURN_CLIENTS)]
    started = time.monotonic()
    with serving(kind, db_url, tmp_path) as url:
        load = Load(url, cast, plan)
        turns = Turns(url, turn_sessions)
        turns.start()
        try:
            load.run()
        finally:
            turns.finish()
        problems = verify(load, db_url) + final_read(load) + turns.verify(db_url)
    fig = figures(load, problems)
    turn_requests = sum(turns.statuses.values())
    report(fig, problems)
    print(f"{kind}: {fig['requests'] + turn_requests} requests ({turn_requests} turns) in "
          f"{time.monotonic() - started:.1f} s, turn statuses {dict(turns.statuses)}")

    assert problems == []
    assert fig["server_errors_5xx"] == 0 and fig["lost_responses"] == 0
    assert turns.lost == 0 and set(turns.statuses) == {200}, turns.statuses
    # The only refusal allowed is the 409 on a shared archive's next sequence (bench/load.py
    # checks that the sequence really was taken).
    assert set(fig["ops"]["append"]["statuses"]) <= {"200", "409"}
    for op in ("read_page", "final_read"):
        assert set(fig["ops"][op]["statuses"]) == {"200"}, op
    # Enough happened to mean something.
    assert fig["batches_acked"] > 0 and fig["reader_events_checked"] > 0 and len(turns.acked) > 0


def test_the_turn_check_finds_a_lost_and_an_unacknowledged_turn(db_url, cli, tmp_path):
    """Turns.verify can fail: an acknowledged turn that is missing, and a stored one nobody was
    told about, are both reported."""
    run = runner(cli)
    run("config", "apply", str(_hub_config(tmp_path)))
    session = crm_session(run)
    with serving("werkzeug-threaded", db_url, tmp_path) as url:
        turns = Turns(url, [session])
        turns.start()
        while len(turns.acked) < 2:
            time.sleep(0.01)
        turns.finish()
    assert turns.verify(db_url) == []
    (first, run_id), (second, _) = list(turns.acked.items())[:2]
    del turns.acked[second]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM bz_messages WHERE run_id = %s", (run_id,))
        conn.execute("DELETE FROM bz_runs WHERE id = %s", (run_id,))
    found = turns.verify(db_url)
    assert f"acknowledged turn {first} is stored as None, not {run_id}" in found, found
    assert f"turn {second} stored but never acknowledged" in found, found


def _hub_config(tmp_path):
    from bench.load import hub_config

    path = tmp_path / "hub.json"
    path.write_text(json.dumps(hub_config()))
    return path


# ============================================================================= B. racing run links

def test_one_run_linked_into_two_archives_at_once_answers_200_and_409(server, cli, tmp_path, sql):
    run = runner(cli)
    run("config", "apply", str(_hub_config(tmp_path)))
    who = crm_session(run)
    outcomes: Counter = Counter()
    for race in range(RACES):
        conversation = f"race-{race}"
        turn = server.post(TURNS, headers=session_bearer(who), json={
            "client_conversation_id": conversation, "client_turn_id": "turn-1",
            "user_message_id": "msg-1", "user_input": "Link me twice."})
        assert turn.status_code == 200, turn.text
        run_id = turn.json()["run_id"]
        archives = []
        for _ in range(2):
            created = server.post(AUDITS, headers=session_bearer(who), json={
                "client_archive_id": str(uuid.uuid4()), "client_conversation_id": conversation,
                "route": "customers", "member_session_ids": [who["session_id"]]})
            assert created.status_code == 200, created.text
            cid = created.json()["conversation"]["conversation_id"]
            started = server.post(f"{AUDITS}/{cid}/events", headers=session_bearer(who), json={"events": [
                {"event_id": "start", "sequence": 1, "client_turn_id": "turn-1", "kind": "turn_start"}]})
            assert started.status_code == 200, started.text
            archives.append(cid)
        events_before = sql("SELECT count(*) FROM bz_agent_conversation_events")[0][0]
        barrier = threading.Barrier(2)
        answers: dict[str, requests.Response] = {}

        def link(cid: str) -> None:
            body = {"events": [{"event_id": "link", "sequence": 2, "client_turn_id": "turn-1",
                                "kind": "run_link", "run_id": run_id, "member_session_id": who["session_id"]}]}
            barrier.wait(timeout=10)
            answers[cid] = requests.post(f"{server.url}{AUDITS}/{cid}/events", headers=session_bearer(who),
                                         json=body, timeout=30)

        threads = [threading.Thread(target=link, args=(cid,)) for cid in archives]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        statuses = sorted(answers[cid].status_code for cid in archives)
        outcomes[tuple(statuses)] += 1
        assert statuses == [200, 409], {cid: (r.status_code, r.text) for cid, r in answers.items()}
        won = next(cid for cid in archives if answers[cid].status_code == 200)
        lost = next(cid for cid in archives if cid != won)
        assert answers[won].json() == {"schema": ACK, "conversation_id": won, "last_sequence": 2}
        refusal = answers[lost].json()
        assert refusal["error"] == CONFLICT and isinstance(refusal["message"], str)
        # Stored once, in the winner; the loser's archive unchanged.
        assert sql("SELECT archive_id::text FROM bz_agent_conversation_events WHERE run_id = %s",
                   (run_id,)) == [(won,)]
        assert sql("SELECT count(*) FROM bz_agent_conversation_events")[0][0] == events_before + 1
        assert sql("SELECT last_sequence FROM bz_agent_conversation_archives WHERE id = %s",
                   (lost,)) == [(1,)]
    assert outcomes == {(200, 409): RACES}
