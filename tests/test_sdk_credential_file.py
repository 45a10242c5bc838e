"""`bailing-admin agent login --sdk-credential-file`: the session is written to the official Agent
Client SDK's credential file (BUSINESS_SIDE §I), so the official MCP server runs on it.

The hub and the demo business system (with its consent pages) run on loopback over a real
PostgreSQL; the consent is given over HTTP by `ConsentPage`. What was written is read back by
`sdk_load`, a reader written here from §I's load rules (not from the hub's writer), and the
session it holds is used against the hub. Every refusal is checked for writing nothing: no file,
no Agent Session or authorization at the hub, a stored session left alive.
"""
from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import re
import socket
import stat
import webbrowser
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from admin_app.agent_sdk import credential_file
from admin_app.demo.approver import ConsentPage
from admin_app.demo.business import create_business_app

from .conftest import DEMO_SECRETS, LiveServer
from .test_agent_auth import CLIENT, ROUTE, hub_config

# The same work on any server (a file on disk and a lock port; the sessions' SQL runs in tests/test_agent_auth.py).
pytestmark = pytest.mark.any_server

ALICE = ("alice", "alice-demo-password")
KEY_ORDER = ["schema_version", "base_url", "client_app_id", "route", "session_id", "access_token",
             "refresh_token", "access_expires_at", "refresh_expires_at"]
ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
SHARED = "/tmp/sdk-creds-refused.json"  # noqa: S108 - a shared directory, refused
TEMP_NAME = re.compile(r"\.agent-credentials-[0-9a-f]+\.tmp")


# ================================================================ the SDK's reader, from §I

def sdk_normal_url(url: str) -> str:
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname and not parts.username
    assert not parts.query and not parts.fragment
    default = {"http": 80, "https": 443}[parts.scheme]
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    netloc = host + ("" if parts.port in (None, default) else f":{parts.port}")
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def sdk_load(path: Path) -> dict:
    """What the SDK accepts on Linux, or an AssertionError naming the rule broken."""
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode), "not a regular file (or a symlink)"
    assert stat.S_IMODE(info.st_mode) == 0o600, oct(info.st_mode)
    assert info.st_uid == os.getuid()
    assert info.st_size <= 64 * 1024
    data = json.loads(path.read_text("utf-8"))
    assert isinstance(data, dict)
    assert data["schema_version"] == 1 and type(data["schema_version"]) is int
    limits = {"base_url": 2048, "client_app_id": 64, "route": 64, "session_id": 128, "access_token": 8192,
              "refresh_token": 8192, "access_expires_at": 100, "refresh_expires_at": 100}
    text = {}
    for key, limit in limits.items():
        assert isinstance(data[key], str), key
        text[key] = data[key].strip()
        assert 0 < len(text[key]) <= limit, key
    assert sdk_normal_url(text["base_url"]) == text["base_url"]
    ident = re.compile(r"[a-z0-9][a-z0-9_-]{1,63}")
    assert ident.fullmatch(text["client_app_id"])
    assert ident.fullmatch(text["route"]) and text["route"] != "auto"
    access = datetime.fromisoformat(text["access_expires_at"])
    refresh = datetime.fromisoformat(text["refresh_expires_at"])
    assert refresh > access
    return {"schema_version": 1, **text}


def sdk_port(path: str) -> int:
    return 10000 + int.from_bytes(hashlib.sha256(f"file:{path}".encode()).digest()[:4], "big") % 30000


# ================================================================ the hub and the business system

class Hub:
    def __init__(self, live: LiveServer, biz: LiveServer, sql):
        self.live, self.biz, self.sql = live, biz, sql
        self.url = live.url

    def view(self, access_token: str) -> requests.Response:
        return requests.get(self.url + "/agent-auth/v1/session", timeout=30,
                            headers={"Authorization": f"Bearer {access_token}"})

    def rows(self) -> tuple[int, int, int]:
        """(authorizations, sessions, live sessions): what a refused login must leave as it was."""
        [row] = self.sql("SELECT (SELECT count(*) FROM bz_agent_authorizations), (SELECT count(*) FROM "
                         "bz_agent_sessions), (SELECT count(*) FROM bz_agent_sessions WHERE revoked_at IS NULL)")
        return row

    def revoked(self, session_id: str) -> bool:
        return self.sql("SELECT revoked_at IS NOT NULL FROM bz_agent_sessions WHERE id = %s", (session_id,))[0][0]


@pytest.fixture
def hub(server, cli, sql, tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_CRM_SECRET", DEMO_SECRETS["crm"])
    monkeypatch.setenv("DEMO_ERP_SECRET", DEMO_SECRETS["erp"])
    tokens: dict[str, str] = {}
    biz = LiveServer(create_business_app(DEMO_SECRETS, hub_url=server.url, client_tokens=tokens))
    path = tmp_path / "hub.json"
    path.write_text(json.dumps(hub_config(biz.url)))
    code, out, err = cli("config", "apply", str(path))
    assert code == 0, (out, err)
    code, out, err = cli("clients", "token", CLIENT)
    assert code == 0, err
    tokens["crm"] = out["client_token"]
    yield Hub(server, biz, sql)
    biz.stop()


# What the tests below lock, relative to their folder. A lock port is 10000-39999; the system hands
# ports from its ephemeral range (32768 and up) to passing connections, the suite's own too, and one
# of those would hold a test's lock by chance: each test gets a folder where every file it names
# locks a port below that range that nothing listens on.
LOCKED_FILES = ("home/.config/bailinghub/agent-credentials.json", "creds/agent.json",
                "home/.config/bailinghub/hosts/host-" + hashlib.sha256(
                    b"bailinghub.agent-client-storage.v1\x00team.alpha").hexdigest()[:32] + "/agent-credentials.json",
                "explicit/creds.json", "given.d/x.json", "elsewhere.json")
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def tmp_path(tmp_path):
    ephemeral = int(RANGE_FILE.read_text().split()[0]) if RANGE_FILE.exists() else 32768
    for n in itertools.count():
        folder = tmp_path / f"t{n}"
        ports = [credential_file.lock_port(str(folder / name)) for name in LOCKED_FILES]
        if all(port < ephemeral and _free(port) for port in ports):
            folder.mkdir()
            return folder
    raise AssertionError("unreachable")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of the test's own, no SDK settings in the environment, the browser a consent page."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    for name in (credential_file.FILE_ENV, credential_file.NAMESPACE_ENV, credential_file.OPT_IN_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(webbrowser, "open", ConsentPage(*ALICE))
    return home


def login_cli(cli, hub_url: str, *extra: str):
    """(exit code, stdout JSON, the refusal's JSON or stderr): the in-process hub's request log
    shares stderr with the command."""
    code, out, err = cli("agent", "login", "--hub", hub_url, "--client", CLIENT, "--route", ROUTE, *extra)
    if isinstance(err, str) and '{\n  "error"' in err:
        err = json.loads(err[err.rindex('{\n  "error"'):])
    return code, out, err


def direct_login(hub: Hub, path: Path | str) -> dict:
    return credential_file.login(hub.url, CLIENT, ROUTE, path=str(path), device_label="Laptop",
                                 open_url=ConsentPage(*ALICE), timeout=60)


# ================================================================ what is written

def test_the_cli_writes_the_file_the_sdk_reads_and_its_session_works(hub, cli, home):
    port = urlsplit(hub.url).port
    code, out, err = login_cli(cli, f"http://LOCALHOST:{port}//", "--device-label", "Alice's laptop",
                               "--sdk-credential-file")
    assert code == 0, err
    path = home / ".config" / "bailinghub" / "agent-credentials.json"
    assert out["stored_in"] == str(path)
    assert out["sdk_environment"] == {"BAILINGHUB_ALLOW_FILE_CREDENTIAL_STORE": "true"}
    assert "BAILINGHUB_ALLOW_FILE_CREDENTIAL_STORE=true" in str(err)
    loaded = sdk_load(path)
    raw = path.read_bytes()
    # Compact, in the SDK's key order, no newline.
    assert list(json.loads(raw)) == KEY_ORDER
    assert raw == json.dumps(json.loads(raw), separators=(",", ":"), ensure_ascii=False).encode()
    assert loaded["base_url"] == f"http://localhost:{port}"
    assert (loaded["client_app_id"], loaded["route"], loaded["session_id"]) == (CLIENT, ROUTE, out["session_id"])
    assert loaded["access_token"].startswith("bha_") and loaded["refresh_token"].startswith("bhr_")
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    # The expiries are the session's own, as GET /agent-auth/v1/session states them, to the millisecond.
    view = hub.view(loaded["access_token"])
    assert view.status_code == 200, view.text
    assert view.json()["session_id"] == out["session_id"] and view.json()["device_label"] == "Alice's laptop"
    assert ISO_MS.fullmatch(loaded["access_expires_at"]) and ISO_MS.fullmatch(loaded["refresh_expires_at"])
    for key, field in (("access_expires_at", "expires_at"), ("refresh_expires_at", "refresh_expires_at")):
        assert datetime.fromisoformat(loaded[key]) == datetime.fromisoformat(view.json()[field])
    # The CLI's own store was not touched: one refresh token is never held in two stores.
    assert not (home / ".config" / "bailing").exists()


def test_a_second_login_revokes_the_stored_session_and_replaces_the_file_atomically_under_the_lock(
        hub, home, monkeypatch, tmp_path):
    path = tmp_path / "creds" / "agent.json"
    first = direct_login(hub, path)["content"]
    os.chmod(path.parent, 0o755)  # noqa: S103 - re-chmodded to 0700 on save
    seen: list[dict] = []
    real_rename = os.rename

    def watching_rename(source, target):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", sdk_port(str(path))))
            busy = False
        except OSError as err:
            busy = err.errno == errno.EADDRINUSE
        finally:
            probe.close()
        info = os.lstat(source)
        seen.append({"source": Path(source), "target": Path(target), "lock_held": busy,
                     "mode": stat.S_IMODE(info.st_mode), "old_session_revoked": hub.revoked(first["session_id"]),
                     "old_file_gone": not path.exists()})
        real_rename(source, target)

    monkeypatch.setattr(credential_file, "_rename", watching_rename)
    second = direct_login(hub, path)
    assert second["replaced_session_id"] == first["session_id"]
    [write] = seen
    assert write["source"].parent == path.parent and TEMP_NAME.fullmatch(write["source"].name)
    assert write["target"] == path and write["mode"] == 0o600
    assert write["lock_held"], "the SDK's loopback-port lock was not held while the file was written"
    assert write["old_session_revoked"] and write["old_file_gone"]
    # The old session is revoked at the hub; the new one is live and the only one in the file.
    assert hub.view(first["access_token"]).status_code == 401
    assert sdk_load(path)["session_id"] == second["content"]["session_id"] != first["session_id"]
    assert hub.view(second["content"]["access_token"]).status_code == 200
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == ["agent.json"]  # no temp file left


def test_the_default_path_follows_the_sdk_environment(hub, cli, home, monkeypatch, tmp_path):
    monkeypatch.setenv("BAILINGHUB_AGENT_CLIENT_STORAGE_NAMESPACE", "team.alpha")
    segment = "host-" + hashlib.sha256(b"bailinghub.agent-client-storage.v1\x00team.alpha").hexdigest()[:32]
    code, out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    assert code == 0, err
    path = home / ".config" / "bailinghub" / "hosts" / segment / "agent-credentials.json"
    assert out["stored_in"] == str(path) and sdk_load(path)["session_id"] == out["session_id"]
    # BAILINGHUB_CREDENTIAL_FILE wins over the namespace, and the SDK is told where to look.
    explicit = tmp_path / "explicit" / "creds.json"
    monkeypatch.setenv("BAILINGHUB_CREDENTIAL_FILE", f"  {explicit}  ")
    code, out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    assert code == 0, err
    assert out["stored_in"] == str(explicit) and sdk_load(explicit)["session_id"] == out["session_id"]
    assert out["sdk_environment"]["BAILINGHUB_CREDENTIAL_FILE"] == str(explicit)
    # An explicit PATH wins over both.
    given = tmp_path / "given.d" / "x.json"
    code, out, err = login_cli(cli, hub.url, "--sdk-credential-file", str(given))
    assert code == 0, err
    assert out["stored_in"] == str(given) and sdk_load(given)["session_id"] == out["session_id"]


@pytest.mark.parametrize(("url", "normal"), [
    ("HTTPS://Hub.Example.COM:443/", "https://hub.example.com"),
    ("http://hub.example.com:80/base//", "http://hub.example.com/base"),
    ("http://hub.example.com:8080/Base/", "http://hub.example.com:8080/Base"),
    ("https://[::1]:443/x", "https://[::1]/x"),
])
def test_base_urls_are_normalised_as_the_sdk_keeps_them(url, normal):
    assert credential_file.normalise_base_url(url) == normal == sdk_normal_url(normal)


def test_the_lock_port_is_the_sdks():
    for path in ("/home/a/.config/bailinghub/agent-credentials.json", "relative.json", "/srv/é.json"):
        assert credential_file.lock_port(path) == sdk_port(path)
        assert 10000 <= sdk_port(path) < 40000


# ================================================================ refusals write nothing

def stored_session(hub: Hub, home: Path) -> tuple[Path, dict, bytes]:
    path = home / ".config" / "bailinghub" / "agent-credentials.json"
    content = direct_login(hub, path)["content"]
    return path, content, path.read_bytes()


def test_a_busy_lock_port_fails_clearly_and_changes_nothing(hub, cli, home, monkeypatch):
    path, content, before = stored_session(hub, home)
    rows = hub.rows()
    monkeypatch.setattr(credential_file, "LOCK_WAIT_SECONDS", 0.3)
    holder = socket.socket()
    holder.bind(("127.0.0.1", sdk_port(str(path))))
    holder.listen(1)
    try:
        code, _out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    finally:
        holder.close()
    assert code == 1
    assert err["error"] == "agent_login_failed"
    assert str(sdk_port(str(path))) in err["message"] and "in use" in err["message"]
    assert path.read_bytes() == before and hub.rows() == rows
    assert hub.view(content["access_token"]).status_code == 200  # the stored session was not revoked


def test_an_unconfirmed_revocation_stops_the_login(hub, cli, home):
    path, content, _ = stored_session(hub, home)
    # A stored session the hub refuses to revoke (its refresh token is malformed: HTTP 400).
    broken = {**content, "refresh_token": "not-a-refresh-token"}
    path.write_text(json.dumps(broken))
    before, rows = path.read_bytes(), hub.rows()
    code, _out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    assert code == 1 and err["error"] == "agent_login_failed", err
    assert "could not be revoked" in err["message"] and "HTTP 400" in err["message"]
    assert path.read_bytes() == before and hub.rows() == rows


@pytest.mark.parametrize("spoil", ["mode", "json", "symlink", "order"])
def test_a_file_the_sdk_would_refuse_is_not_overwritten(hub, cli, home, tmp_path, spoil):
    path, content, _ = stored_session(hub, home)
    if spoil == "mode":
        os.chmod(path, 0o644)
    elif spoil == "json":
        path.write_text("{not json")
    elif spoil == "symlink":
        target = tmp_path / "elsewhere.json"
        path.rename(target)
        path.symlink_to(target)
    else:  # refresh expiry not after access expiry
        path.write_text(json.dumps({**content, "refresh_expires_at": content["access_expires_at"]}))
    before, rows = os.lstat(path), hub.rows()
    code, _out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    assert code == 1 and err["error"] == "agent_login_failed", err
    assert "remove it or choose another path" in err["message"]
    after = os.lstat(path)
    assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (before.st_ino, before.st_mtime_ns, before.st_mode)
    assert hub.rows() == rows
    assert hub.view(content["access_token"]).status_code == 200


@pytest.mark.parametrize(("args", "words"), [
    (("--store", "x.json", "--sdk-credential-file"), "exclude each other"),
    (("--route", "billing", "--sdk-credential-file"), "exactly one --route"),
    (("--sdk-credential-file", SHARED), "shared with other users"),
], ids=["with-store", "two-routes", "shared-directory"])
def test_refused_options_write_nothing(hub, cli, home, args, words):
    rows = hub.rows()
    code, _out, err = login_cli(cli, hub.url, *args)
    assert code == 1 and err["error"] == "agent_login_failed" and words in err["message"], err
    assert hub.rows() == rows
    assert not (home / ".config").exists() and not Path("x.json").exists()
    assert not Path(SHARED).exists()


@pytest.mark.parametrize(("hub_url", "words"), [
    ("http://user:pw@127.0.0.1:9", "credentials"),
    ("http://127.0.0.1:9/?x=1", "query"),
    ("ftp://127.0.0.1:9", "http"),
])
def test_refused_hub_addresses_write_nothing(hub, cli, home, hub_url, words):
    rows = hub.rows()
    code, _out, err = login_cli(cli, hub_url, "--sdk-credential-file")
    assert code == 1 and words in err["message"], err
    assert hub.rows() == rows and not (home / ".config").exists()


def test_an_invalid_namespace_is_refused_as_the_sdk_refuses_it(hub, cli, home, monkeypatch):
    monkeypatch.setenv("BAILINGHUB_AGENT_CLIENT_STORAGE_NAMESPACE", "Team Alpha")
    rows = hub.rows()
    code, _out, err = login_cli(cli, hub.url, "--sdk-credential-file")
    assert code == 1 and "BAILINGHUB_AGENT_CLIENT_STORAGE_NAMESPACE" in err["message"], err
    assert hub.rows() == rows and not (home / ".config").exists()
