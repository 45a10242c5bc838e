"""The stored Agent Session: one JSON file only its user can read, and a lock file beside it.

Every refresh happens under an exclusive `flock` on the lock file and re-reads the file first, so
two processes sharing the session never both spend the same refresh token (the hub would treat
the second use as a replay and revoke the whole session)."""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from . import auth
from .contract import REFRESH_MARGIN_SECONDS
from .errors import AgentAuthError
from .models import SessionView, TokenSet

DEFAULT_STORE = Path.home() / ".config" / "bailing" / "agent-session.json"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def session_record(hub_url: str, tokens: TokenSet, view: SessionView | None, issued_at: float) -> dict:
    """What the file keeps: the tokens, their absolute expiries, and the session's routes."""
    issued = datetime.fromtimestamp(issued_at, UTC)
    record = {
        "hub_url": hub_url, "client_app_id": tokens.client_app_id, "session_id": tokens.session_id,
        "token_type": "Bearer", "access_token": tokens.access_token, "refresh_token": tokens.refresh_token,
        "expires_in": tokens.expires_in, "refresh_expires_in": tokens.refresh_expires_in,
        "access_expires_at": _iso(issued + timedelta(seconds=tokens.expires_in)),
        "refresh_expires_at": _iso(issued + timedelta(seconds=tokens.refresh_expires_in)),
    }
    if tokens.subject_display_status is not None:
        record["subject_display"] = tokens.subject_display
        record["subject_display_status"] = tokens.subject_display_status
    if view is not None:
        record["allowed_routes"] = list(view.allowed_routes)
        record["device_label"] = view.device_label
    return record


class SessionStore:
    def __init__(self, path: Path | str = DEFAULT_STORE, http: requests.Session | None = None):
        self.path = Path(path).expanduser()
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.http = http or requests.Session()

    # ------------------------------------------------------------ the file
    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            raise AgentAuthError("no stored Agent Session; run `bailing-admin agent login`") from None
        except ValueError:
            raise AgentAuthError(f"the session file {self.path.name} is not readable JSON") from None

    def save(self, session: dict) -> None:
        """Atomically: a reader sees the old file or the new one, never half of either."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(session, handle, indent=2)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self.path)
        except BaseException:
            if os.path.exists(temp):
                os.unlink(temp)
            raise
        os.chmod(self.path, 0o600)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    @contextmanager
    def locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # ------------------------------------------------------------ tokens
    def access_token(self, *, force: bool = False, stale: str | None = None) -> str:
        """A valid access token. Refreshed when it is about to expire, or when `force` (the hub
        answered 401 to `stale`); a token another process already renewed is used as it is."""
        session = self.load()
        if not force and not self._expiring(session):
            return session["access_token"]
        with self.locked():
            session = self.load()  # another process may have refreshed while we waited
            if force and stale is not None and session["access_token"] != stale:
                return session["access_token"]
            if not force and not self._expiring(session):
                return session["access_token"]
            return self._refresh(session)["access_token"]

    def refresh(self) -> dict:
        with self.locked():
            return self._refresh(self.load())

    @staticmethod
    def _expiring(session: dict) -> bool:
        try:
            expires = _parse(session["access_expires_at"])
        except (KeyError, ValueError):
            return True
        return expires.timestamp() - time.time() <= REFRESH_MARGIN_SECONDS

    def _refresh(self, session: dict) -> dict:
        started = time.time()
        tokens = auth.refresh(self.http, session["hub_url"], client_app_id=session["client_app_id"],
                              refresh_token=session["refresh_token"])
        if tokens.session_id != session["session_id"]:
            raise AgentAuthError("the refresh answered for another session")
        renewed = session_record(session["hub_url"], tokens, None, started)
        for key in ("allowed_routes", "device_label"):
            if key in session:
                renewed[key] = session[key]
        self.save(renewed)
        return renewed
