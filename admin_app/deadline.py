"""One deadline for a whole exchange with another server (a notification's attempt, a business
call): name lookup, connect, TLS, the request and the answer.

A socket timeout bounds each read or write alone, so a peer that sends one byte at a time can
hold an attempt for as long as it likes. Here every socket of the attempt is opened with the
time left as its timeout, and a timer shuts them all down when the deadline passes: whatever the
attempt is blocked in (a TLS handshake, a header line, a reply) then ends at once.
"""
from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType

# Name lookups run here, so that a slow resolver is waited for only until the deadline; the
# lookup itself ends when the system resolver gives up.
_RESOLVER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bailing-resolve")


class Deadline:
    """`with Deadline(seconds) as deadline:` around one attempt; `deadline.connect(host, port)`
    opens its sockets. `expired` says whether the timer ended the attempt."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        # Duplicates of the attempt's sockets: shutdown acts on the connection, whichever handle
        # it is called on, and a duplicate stays valid when TLS takes the original over.
        self._watched: list[socket.socket] = []
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._timer.cancel()
        with self._lock:
            for duplicate in self._watched:
                duplicate.close()
            self._watched.clear()

    def left(self) -> float:
        """Seconds left; TimeoutError when none are."""
        left = self._end - time.monotonic()
        if left <= 0 or self.expired:
            raise TimeoutError("the attempt's deadline passed")
        return left

    def connect(self, host: str, port: int) -> socket.socket:
        """A TCP connection to `host`, watched by the deadline, its timeout the time left."""
        lookup = _RESOLVER.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        try:
            addresses = lookup.result(timeout=self.left())
        except FutureTimeout:
            raise TimeoutError("the name lookup did not finish before the deadline") from None
        error: OSError = OSError(f"no address for {host}")
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                self.watch(sock)
                sock.settimeout(self.left())
                sock.connect(address)
                return sock
            except OSError as err:  # TimeoutError included: try the next address while time is left
                sock.close()
                error = err
        raise error

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the deadline passes (at once, if it has)."""
        with self._lock:
            duplicate = sock.dup()
            self._watched.append(duplicate)
            if self.expired:
                _shut(duplicate)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for duplicate in self._watched:
                _shut(duplicate)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # not connected yet, or already closed: nothing blocks on it
        pass
