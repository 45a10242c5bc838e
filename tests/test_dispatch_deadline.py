"""A tool's timeout bounds the whole business call, however slowly the business system answers.

requests' timeouts bound each read alone: a business system sending its answer a byte at a time
held a call (and a hub thread) for as long as it liked. Against a real loopback server that
trickles its status line, or its body, the call ends at the tool's timeout as `uncertain` (the
request was received, so the outcome is unknown), and the server saw exactly one request.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from admin_app.invocations import dispatch

TIMEOUT_MS = 1000
PACE_S = 0.25  # one byte of the answer this often: the whole answer would take many seconds


class Trickler:
    """A loopback HTTP server that reads one request and answers `head` promptly, then `slow`
    one byte every PACE_S (stopping when the client goes away)."""

    def __init__(self, head: bytes, slow: bytes):
        self.head, self.slow = head, slow
        self.requests: list[bytes] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(65536)
            self.requests.append(received)
            try:
                conn.sendall(self.head)
                for byte in self.slow:
                    conn.sendall(bytes([byte]))
                    time.sleep(PACE_S)
            except OSError:  # the hub hung up at its deadline
                pass

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=30)


@pytest.fixture
def trickler(request):
    made: list[Trickler] = []

    def make(head: bytes, slow: bytes) -> Trickler:
        made.append(Trickler(head, slow))
        return made[-1]

    yield make
    for server in made:
        server.close()


def call(server: Trickler) -> tuple[dispatch.Outcome, float]:
    prepared = dispatch.PreparedCall("POST", server.url + "/crm/notes", "/crm/notes", b'{"body":"x"}')
    started = time.monotonic()
    outcome = dispatch.send(prepared, secret="s" * 32, job_id="job-1", scope="crm.notes:write",
                            on_behalf_of="tenant-7:user-42", idempotency_key="k" * 64, timeout_ms=TIMEOUT_MS)
    return outcome, time.monotonic() - started


SLOW_HEADERS = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def test_a_status_line_sent_a_byte_at_a_time_ends_at_the_tools_timeout_as_unknown(trickler):
    server = trickler(b"", SLOW_HEADERS)
    outcome, took = call(server)
    assert outcome.uncertain and outcome.failure == dispatch.TIMED_OUT
    assert outcome.http_status is None
    # Cut off at the deadline, not when the answer would have been complete (20 s at this pace).
    assert took < len(SLOW_HEADERS) * PACE_S / 3, took
    assert len(server.requests) == 1 and server.requests[0].startswith(b"POST /crm/notes ")


def test_a_body_without_a_length_cut_off_by_the_deadline_is_not_taken_as_whole(trickler):
    """Read to the connection's end, a body cut at the deadline would look complete."""
    server = trickler(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                      b'{"id": "N-1", "body": "' + b"x" * 60 + b'"}')
    outcome, took = call(server)
    assert outcome.uncertain and outcome.failure == dispatch.TIMED_OUT
    assert outcome.http_status == 200 and outcome.body is None
    assert took < 80 * PACE_S / 3, took
    assert len(server.requests) == 1


def test_a_prompt_answer_is_read_whole(trickler):
    server = trickler(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"
                      b'{"id": "N-1"}', b"")
    outcome, _ = call(server)
    assert not outcome.uncertain
    assert (outcome.http_status, outcome.body) == (201, {"id": "N-1"})
    assert len(server.requests) == 1
