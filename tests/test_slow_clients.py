"""Issue 16 item 6: slow clients cannot stall the hub in the recommended production set-up.

Two clients that send a request body a byte at a time hold both workers of a two-worker gunicorn
with sync workers, so nobody else is answered; with gthread workers (the recommended set-up,
docs/operations.md) they hold two threads and every other request is still answered promptly.
The figures for more set-ups and more clients come from bench/slow_clients.py."""
from __future__ import annotations

import pytest

from bench.slow_clients import PROBE_TIMEOUT, gunicorn_args, measure
from tests.gunicorn_hub import GunicornHub

# Gunicorn workers held by slow sockets: no SQL is at stake.
pytestmark = pytest.mark.any_server

WINDOW_S = 3.0
DRIP_S = 0.5


def test_two_slow_body_clients_stall_two_sync_workers(db_url):
    with GunicornHub(db_url, workers=2, env={"GUNICORN_CMD_ARGS": gunicorn_args("sync", 1)}) as hub:
        window = measure(hub.url, hub.port, slow=2, seconds=WINDOW_S, drip=DRIP_S)
    assert window.answered == 0 and window.failed == window.probes > 0
    assert window.longest_stall_s >= WINDOW_S - PROBE_TIMEOUT


def test_gthread_workers_keep_answering_beside_slow_body_clients(db_url):
    with GunicornHub(db_url, workers=2, env={"GUNICORN_CMD_ARGS": gunicorn_args("gthread", 4)}) as hub:
        window = measure(hub.url, hub.port, slow=2, seconds=WINDOW_S, drip=DRIP_S)
        # A gthread worker also accepts connections for which it has no free thread, so the set-up
        # is safe while slow clients are fewer than one worker's threads, not than all threads.
        busy = measure(hub.url, hub.port, slow=3, seconds=WINDOW_S, drip=DRIP_S)
    # Every probe answered within its timeout (a stalled hub answers none for the whole window);
    # how fast they were is the benchmark's to measure, not a test's on a shared machine.
    for probed in (window, busy):
        assert probed.ok, probed
        assert probed.probes >= WINDOW_S / 0.5 and probed.longest_stall_s < PROBE_TIMEOUT, probed
