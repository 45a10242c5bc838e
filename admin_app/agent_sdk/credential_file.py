"""The official Agent Client SDK's credential file (BUSINESS_SIDE §I), written by
`bailing-admin agent login --sdk-credential-file`, so that the official MCP server runs on a
session this CLI made.

The file holds one Agent Session as nine keys of compact JSON, in the SDK's order. The SDK reads it
only if it is a regular file of mode 0600 owned by its user, at most 64 KiB, every value within
its rules; so the hub writes exactly that, atomically (an exclusively created temp file renamed
over it), in a directory kept 0700, while holding the SDK's own cross-process lock (a listening
loopback port derived from the path). A session already in the file is revoked at its hub first,
as the SDK does before a new login; if the hub does not confirm (HTTP 200), nothing goes on.

The session goes to this file *instead of* the CLI's own session store: both would hold the same
refresh token, and the first to refresh would make the other's token a replay, which revokes the
session for both."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import requests

from . import auth
from .errors import AgentAuthError, AgentSdkError
from .login import authorize
from .models import SessionView, TokenSet

OPT_IN_ENV = "BAILINGHUB_ALLOW_FILE_CREDENTIAL_STORE"
FILE_ENV = "BAILINGHUB_CREDENTIAL_FILE"
NAMESPACE_ENV = "BAILINGHUB_AGENT_CLIENT_STORAGE_NAMESPACE"
NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAMESPACE_DOMAIN = b"bailinghub.agent-client-storage.v1\x00"
IDENTIFIER = re.compile(r"[a-z0-9][a-z0-9_-]{1,63}")  # client_app_id and route
KEYS = ("schema_version", "base_url", "client_app_id", "route", "session_id", "access_token", "refresh_token",
        "access_expires_at", "refresh_expires_at")
MAX_BYTES = 64 * 1024
TEXT_LIMITS = {"base_url": 2048, "client_app_id": 64, "route": 64, "session_id": 128, "access_token": 8192,
               "refresh_token": 8192, "access_expires_at": 100, "refresh_expires_at": 100}
DEFAULT_PORTS = {"http": 80, "https": 443}
LOCK_WAIT_SECONDS = 5.0  # the SDK only holds the lock for a refresh or a save
LOCK_POLL_SECONDS = 0.05

_rename = os.rename  # replaced by the tests to look at the lock while the file is renamed into place


class CredentialFileError(AgentAuthError):
    """A refusal about the file itself: nothing was written and no login was started."""


# ------------------------------------------------------------------ where, and which lock

def namespace_segment(namespace: str) -> str:
    if not NAMESPACE.fullmatch(namespace):
        raise CredentialFileError(f"{NAMESPACE_ENV} must be a lowercase identifier of 1 to 64 characters "
                                  "(a-z, 0-9, '.', '_', '-')")
    return "host-" + hashlib.sha256(NAMESPACE_DOMAIN + namespace.encode("utf-8")).hexdigest()[:32]


def default_path(env: Mapping[str, str] | None = None) -> str:
    """Where the SDK looks on Linux: `BAILINGHUB_CREDENTIAL_FILE`, else the namespaced or plain
    file under ~/.config/bailinghub (an invalid namespace is refused, as the SDK refuses it)."""
    env = os.environ if env is None else env
    namespace = env.get(NAMESPACE_ENV, "")
    segment = namespace_segment(namespace) if namespace else None
    explicit = env.get(FILE_ENV, "").strip()
    if explicit:
        return explicit
    base = Path.home() / ".config" / "bailinghub"
    return str((base / "hosts" / segment if segment else base) / "agent-credentials.json")


def lock_port(path: str) -> int:
    """The SDK's lock for a file store: 10000 + the first four bytes of SHA-256("file:<path as
    given>"), big-endian, modulo 30000."""
    digest = hashlib.sha256(("file:" + path).encode("utf-8")).digest()
    return 10_000 + int.from_bytes(digest[:4], "big") % 30_000


@contextmanager
def held(path: str, wait: float | None = None) -> Iterator[int]:
    """Hold the SDK's lock on `path` (a listening loopback port) for the block. A busy port is
    retried until `wait` seconds have passed, then refused."""
    port = lock_port(path)
    deadline = time.monotonic() + (LOCK_WAIT_SECONDS if wait is None else wait)
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Node listens; never shares a listener
        try:
            listener.bind(("127.0.0.1", port))
            listener.listen(1)
            break
        except OSError as err:
            listener.close()
            if err.errno != errno.EADDRINUSE:
                raise CredentialFileError(f"could not take the credential file's lock (127.0.0.1:{port}): "
                                          f"{err.strerror}") from None
            if time.monotonic() >= deadline:
                raise CredentialFileError(
                    f"the credential file is in use: its lock, loopback port {port}, stayed busy for "
                    f"{LOCK_WAIT_SECONDS if wait is None else wait:g} s (an Agent Client SDK process may be "
                    "refreshing the session, or another program holds the port); nothing was written, "
                    "try again") from None
            time.sleep(LOCK_POLL_SECONDS)
    try:
        yield port
    finally:
        listener.close()


# ------------------------------------------------------------------ the content

def normalise_base_url(url: str) -> str:
    """The hub's address as the SDK keeps it: absolute http(s), host in lower case, no default
    port, no trailing slash. An address with credentials, a query or a fragment is refused."""
    text = url.strip()
    if not text.isascii() or any(ch.isspace() or ord(ch) < 0x20 for ch in text):
        raise CredentialFileError("the hub address must be plain ASCII (an international host in its xn-- form)")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise CredentialFileError("the hub address must be an absolute http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise CredentialFileError("the hub address must not carry credentials")
    if parts.query or parts.fragment or "?" in text or "#" in text:
        raise CredentialFileError("the hub address must not have a query or a fragment")
    try:
        port = parts.port
    except ValueError:
        raise CredentialFileError("the hub address has an invalid port") from None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host = f"{host}:{port}"
    normalised = f"{scheme}://{host}{parts.path.rstrip('/')}"
    if len(normalised) > TEXT_LIMITS["base_url"]:
        raise CredentialFileError("the hub address is longer than 2048 characters")
    return normalised


def iso_ms(moment: datetime) -> str:
    """ISO-8601 UTC with milliseconds, `2026-01-01T00:00:00.000Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def record(base_url: str, route: str, tokens: TokenSet, view: SessionView) -> dict:
    """The nine keys in the SDK's order; both expiries as the hub's session view states them."""
    return {"schema_version": 1, "base_url": base_url, "client_app_id": tokens.client_app_id, "route": route,
            "session_id": tokens.session_id, "access_token": tokens.access_token,
            "refresh_token": tokens.refresh_token, "access_expires_at": iso_ms(view.expires_at),
            "refresh_expires_at": iso_ms(view.refresh_expires_at)}


def problems(content: object) -> list[str]:
    """What the SDK would refuse in `content` when loading it (empty: it loads)."""
    if not isinstance(content, dict):
        return ["not a JSON object"]
    found = []
    if content.get("schema_version") != 1 or isinstance(content.get("schema_version"), bool):
        found.append("schema_version: must be 1")
    texts = {}
    for key, limit in TEXT_LIMITS.items():
        value = content.get(key)
        if not isinstance(value, str) or not value.strip() or len(value.strip()) > limit:
            found.append(f"{key}: must be non-empty text of at most {limit} characters")
        else:
            texts[key] = value.strip()
    if "base_url" in texts:
        try:
            if normalise_base_url(texts["base_url"]) != texts["base_url"]:
                found.append("base_url: not in its normalised form")
        except CredentialFileError:
            found.append("base_url: not an http(s) address of a hub")
    if "client_app_id" in texts and not IDENTIFIER.fullmatch(texts["client_app_id"]):
        found.append("client_app_id: not an app id")
    if "route" in texts and (not IDENTIFIER.fullmatch(texts["route"]) or texts["route"] == "auto"):
        found.append("route: not a route key")
    moments = {}
    for key in ("access_expires_at", "refresh_expires_at"):
        if key in texts:
            try:
                moments[key] = datetime.fromisoformat(texts[key].replace("Z", "+00:00"))
                if moments[key].tzinfo is None:
                    raise ValueError
            except ValueError:
                found.append(f"{key}: not a date with its time zone")
    if len(moments) == 2 and moments["refresh_expires_at"] <= moments["access_expires_at"]:
        found.append("refresh_expires_at: must be later than access_expires_at")
    return found


def serialise(content: dict) -> bytes:
    wrong = problems(content)
    if wrong:
        raise CredentialFileError("the session cannot be written as the SDK reads it: " + "; ".join(wrong))
    data = json.dumps({key: content[key] for key in KEYS}, ensure_ascii=False, separators=(",", ":")).encode()
    if len(data) > MAX_BYTES:
        raise CredentialFileError("the session is larger than the SDK's 64 KiB limit")
    return data


# ------------------------------------------------------------------ the file

def stored(path: str) -> dict | None:
    """The session already in the file (None when there is no file), read as the SDK reads it:
    a file the SDK would refuse is refused here too, rather than overwritten unseen."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o600:
        raise CredentialFileError(f"{path} is not a regular file of mode 0600; remove it or choose another path")
    if info.st_uid != os.getuid():
        raise CredentialFileError(f"{path} belongs to another user")
    if info.st_size > MAX_BYTES:
        raise CredentialFileError(f"{path} is larger than 64 KiB; remove it or choose another path")
    try:
        content = json.loads(Path(path).read_bytes())
    except (ValueError, UnicodeDecodeError):
        content = None
    wrong = problems(content)
    if wrong:
        raise CredentialFileError(f"{path} is not a valid Agent credential file ({wrong[0]}); "
                                  "remove it or choose another path")
    assert isinstance(content, dict)
    return {key: value.strip() if isinstance(value, str) else value for key, value in content.items()}


def _directory(path: str, *, create: bool = True) -> Path | None:
    """The file's directory, created 0700 and kept 0700; a shared or foreign one is refused.
    Without `create`, a directory still to be made is only None."""
    directory = Path(path).parent
    if create:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(info.st_mode) and info.st_mode & (stat.S_ISVTX | stat.S_IWOTH):
        # e.g. /tmp: narrowing it to 0700 would lock every other user out of it
        raise CredentialFileError(f"the directory {directory} is shared with other users; choose a private one")
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise CredentialFileError(f"the directory {directory} is not a directory of this user")
    return directory


def check_target(path: str) -> None:
    """Before anything happens (and writing nothing): the directory can be kept private, and a
    file already there is one the SDK reads."""
    _directory(path, create=False)
    stored(path)


def write(path: str, content: dict) -> None:
    """Atomically: the SDK sees the old file or the new one, never a part of either."""
    data = serialise(content)
    directory = _directory(path)
    assert directory is not None  # just made
    os.chmod(directory, 0o700)
    temp = directory / f".agent-credentials-{secrets.token_hex(12)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        _rename(temp, path)
        os.chmod(path, 0o600)
        _sync_directory(directory)
    finally:
        temp.unlink(missing_ok=True)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def revoke_stored(path: str, http: requests.Session) -> dict | None:
    """Revoke the session in the file at its own hub, as the SDK does (`{client_app_id,
    refresh_token}`, nothing else) and remove the file; any answer but 200 stops here. Run
    under the lock."""
    previous = stored(path)
    if previous is None:
        return None
    try:
        auth.revoke(http, previous["base_url"], client_app_id=previous["client_app_id"],
                    refresh_token=previous["refresh_token"], access_token=None)
    except AgentSdkError as err:
        raise CredentialFileError(f"the session stored in {path} could not be revoked, so no new login was "
                                  f"started: {err}") from None
    Path(path).unlink(missing_ok=True)
    return previous


# ------------------------------------------------------------------ the login

def login(hub_url: str, client_app_id: str, route: str, *, path: str, device_label: str | None = None,
          open_url: Callable[[str], object] | None = None, timeout: float = 600,
          http: requests.Session | None = None) -> dict:
    """The browser login, its session written to the SDK's file at `path` (as given: the SDK
    must be given the same text, which also names the lock). Returns the written content and
    what was replaced."""
    http = http or requests.Session()
    base_url = normalise_base_url(hub_url)
    if not IDENTIFIER.fullmatch(client_app_id):
        raise CredentialFileError("the SDK's file holds only client app ids of 2-64 characters a-z, 0-9, '_', '-'")
    if not IDENTIFIER.fullmatch(route) or route == "auto":
        raise CredentialFileError("the SDK's file holds one route key of 2-64 characters a-z, 0-9, '_', '-' "
                                  "(not 'auto')")
    check_target(path)
    with held(path):
        replaced = revoke_stored(path, http)
    tokens, view, _ = authorize(http, base_url, client_app_id, [route], device_label=device_label,
                                open_url=open_url, timeout=timeout)
    try:
        if route not in view.allowed_routes:
            raise CredentialFileError(f"the session was not allowed route {route!r}")
        content = record(base_url, route, tokens, view)
        with held(path):
            write(path, content)
    except CredentialFileError:
        _forget(http, base_url, tokens)  # never leave a live session nobody holds
        raise
    return {"content": content, "allowed_routes": list(view.allowed_routes),
            "replaced_session_id": replaced["session_id"] if replaced else None}


def _forget(http: requests.Session, base_url: str, tokens: TokenSet) -> None:
    try:
        auth.revoke(http, base_url, client_app_id=tokens.client_app_id, refresh_token=tokens.refresh_token,
                    access_token=None)
    except AgentSdkError:
        pass  # the refusal being raised says what matters; this session expires on its own
