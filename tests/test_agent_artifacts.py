"""Agent artifacts (BUSINESS_SIDE.md H.1): uploads over real HTTP into a real local bucket, the
receipt, idempotency, and every refusal in Core's order, each leaving no row and no file."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import uuid
from pathlib import Path

import pytest
import requests

from admin_app import create_app
from tests.conftest import serve
from tests.helpers import apply_config, assert_error, assert_ok, session_bearer

CDN = "https://cdn.example.test/art"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg-body" * 100
WEBP = b"RIFF" + (1000).to_bytes(4, "little") + b"WEBPVP8 " + b"w" * 988
MIME_OF = {PNG: "image/png", JPEG: "image/jpeg", WEBP: "image/webp"}


def upload_id(n: int = 1) -> str:
    return hashlib.sha256(f"upload-{n}".encode()).hexdigest()


def metadata(data: bytes, **overrides) -> dict:
    meta = {"client_conversation_id": "conv-1", "client_turn_id": "turn-1", "name": "chart.png",
            "mime": MIME_OF.get(data, "image/png"), "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    meta.update(overrides)
    return {k: v for k, v in meta.items() if v is not None}


def header_of(meta) -> str:
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def config(bucket_dir: Path, *, upload: dict | None = None, public_base_url: str | None = CDN,
           kind: str = "local") -> dict:
    agent_client = {"enabled": True, "artifact_upload": upload if upload is not None else
                    {"enabled": True, "bucket": "shots"}}
    bucket = {"name": "shots", "kind": kind, "dir": str(bucket_dir)}
    if public_base_url:
        bucket["public_base_url"] = public_base_url
    return {
        "routes": [{"route_key": "gallery", "name": "Gallery", "agent_client": agent_client},
                   {"route_key": "other", "name": "Other", "agent_client": {"enabled": True}}],
        "client_apps": [{"app_id": "art-app", "name": "Art", "allowed_routes": ["gallery", "other"]}],
        "artifact_buckets": [bucket],
    }


class Hub:
    def __init__(self, server, cli, sql, tmp_path):
        self.server, self.cli, self.sql, self.tmp = server, cli, sql, tmp_path
        self.bucket = tmp_path / "bucket"
        self.apply(config(self.bucket))
        self.session = self.issue()

    def apply(self, doc: dict) -> dict:
        return apply_config(self.cli, self.tmp, doc)

    def issue(self, routes: str = "gallery,other") -> dict:
        code, out, err = self.cli("sessions", "issue", "--client", "art-app", "--routes", routes,
                                  "--principal", '{"id": "user-1", "tenant": "t-1"}')
        assert code == 0, err
        return out

    def post(self, data: bytes, meta=None, *, uid: str | None = None, route: str = "gallery",
             session: dict | None = None, headers: dict | None = None) -> requests.Response:
        meta = metadata(data) if meta is None else meta
        sent = {**session_bearer(session or self.session), "Content-Type": meta.get("mime", "image/png")
                if isinstance(meta, dict) else "image/png", "X-Bailing-Artifact": header_of(meta)}
        sent.update(headers or {})
        sent = {k: v for k, v in sent.items() if v is not None}
        return self.server.post(f"/agent-api/v1/workspaces/{route}/artifacts/{uid or upload_id()}",
                                data=data, headers=sent)

    def get(self, uid: str | None = None, *, route: str = "gallery", session: dict | None = None):
        return self.server.get(f"/agent-api/v1/workspaces/{route}/artifacts/{uid or upload_id()}",
                               headers=session_bearer(session or self.session))

    def rows(self) -> list[tuple]:
        return self.sql("SELECT upload_id, state, url, record_json FROM bz_agent_artifacts ORDER BY created_at")

    def files(self) -> list[str]:
        if not self.bucket.exists():
            return []
        return sorted(str(p.relative_to(self.bucket)) for p in self.bucket.rglob("*") if p.is_file())

    def assert_nothing_written(self) -> None:
        assert self.rows() == []
        assert self.files() == []

    def turn(self, conversation: str = "conv-1", turn: str = "turn-1", route: str = "gallery",
             session: dict | None = None) -> str:
        body = {"client_conversation_id": conversation, "client_turn_id": turn,
                "user_message_id": f"m-{turn}", "user_input": "Draw the chart."}
        response = self.server.post(f"/agent-api/v1/workspaces/{route}/turns", json=body,
                                    headers=session_bearer(session or self.session))
        return assert_ok(response)["run_id"]


@pytest.fixture
def hub(server, cli, sql, tmp_path) -> Hub:
    return Hub(server, cli, sql, tmp_path)


def expected_receipt(hub: Hub, data: bytes, uid: str, **extra) -> dict:
    meta = metadata(data, **{k: v for k, v in extra.items() if k == "run_id"})
    sha = meta["sha256"]
    ext = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}[meta["mime"]]
    return {"schema_version": "bailing.agent-artifact.v1", "upload_id": uid, "workspace": "gallery",
            "session_id": hub.session["session_id"], "state": "ready", **meta, "visibility": "public",
            "url": f"{CDN}/{sha[:2]}/{sha}.{ext}", "next_action": "use_url"}


# ------------------------------------------------------------------ the happy path

@pytest.mark.parametrize("data", [PNG, JPEG, WEBP], ids=["png", "jpeg", "webp"])
def test_an_image_is_stored_and_its_receipt_read_back(hub, data):
    uid = upload_id()
    receipt = assert_ok(hub.post(data, uid=uid))
    assert receipt == expected_receipt(hub, data, uid)
    sha = receipt["sha256"]
    stored = hub.bucket / receipt["url"][len(CDN) + 1:]
    assert stored.read_bytes() == data
    assert hub.files() == [f"{sha[:2]}/{stored.name}"]  # no temporary file left beside it
    assert assert_ok(hub.get(uid)) == receipt
    [(_, state, url, record)] = hub.rows()
    assert (state, url, record["bucket"], record["workspace"]) == ("ready", receipt["url"], "shots", "gallery")


def test_a_retry_gets_the_original_receipt_and_stores_nothing_twice(hub):
    first = assert_ok(hub.post(PNG))
    (hub.bucket / first["url"][len(CDN) + 1:]).unlink()  # the retry must not write again
    assert assert_ok(hub.post(PNG)) == first
    assert len(hub.rows()) == 1 and hub.files() == []


def test_the_same_bytes_under_two_upload_ids_share_one_object(hub):
    a = assert_ok(hub.post(PNG, uid=upload_id(1)))
    b = assert_ok(hub.post(PNG, uid=upload_id(2), meta=metadata(PNG, client_turn_id="turn-2")))
    assert a["url"] == b["url"] and len(hub.rows()) == 2 and len(hub.files()) == 1


def chunked(hub: Hub, data: bytes, meta: dict, route: str = "gallery") -> requests.Response:
    """The body sent chunked, without a Content-Length (requests does so for an iterator)."""
    return hub.server.post(f"/agent-api/v1/workspaces/{route}/artifacts/{upload_id()}",
                           data=iter([data[:100], data[100:]]),
                           headers={**session_bearer(hub.session), "Content-Type": meta["mime"],
                                    "X-Bailing-Artifact": header_of(meta)})


def test_a_chunked_upload_without_content_length_is_taken(hub):
    assert assert_ok(chunked(hub, PNG, metadata(PNG)))["state"] == "ready"


def test_a_run_of_the_same_turn_is_echoed(hub):
    run_id = hub.turn()
    receipt = assert_ok(hub.post(PNG, metadata(PNG, run_id=run_id)))
    assert receipt["run_id"] == run_id
    assert receipt == expected_receipt(hub, PNG, upload_id(), run_id=run_id)


# ------------------------------------------------------------------ refusals, in Core's order

def _header(raw) -> dict:
    return {"X-Bailing-Artifact": raw}


INVALID_HEADERS = {
    "missing": {"X-Bailing-Artifact": None},
    "padding": _header(header_of(metadata(PNG)) + "="),
    "too long": _header("A" * 4097),
    "not json": _header(header_of(b"not json")),
    "not utf-8": _header(header_of(b"\xff\xfe{}")),
    "not an object": _header(header_of([1])),
    "duplicate key": _header(header_of(b'{"name": "a", "name": "b"}')),
    "unknown key": _header(header_of({**metadata(PNG), "extra": 1})),
    "missing key": _header(header_of({k: v for k, v in metadata(PNG).items() if k != "sha256"})),
    "empty name": _header(header_of(metadata(PNG, name=""))),
    "name with slash": _header(header_of(metadata(PNG, name="a/b.png"))),
    "name with backslash": _header(header_of(metadata(PNG, name="a\\b.png"))),
    "control character": _header(header_of(metadata(PNG, client_turn_id="t\n1"))),
    "long conversation": _header(header_of(metadata(PNG, client_conversation_id="c" * 129))),
    "gif": _header(header_of(metadata(PNG, mime="image/gif"))),
    "bytes zero": _header(header_of(metadata(PNG, bytes=0))),
    "bytes over 6 MiB": _header(header_of(metadata(PNG, bytes=6 * 1024 * 1024 + 1))),
    "bytes not integer": _header(header_of(metadata(PNG, bytes="1032"))),
    "uppercase sha": _header(header_of(metadata(PNG, sha256=hashlib.sha256(PNG).hexdigest().upper()))),
    "short run id": _header(header_of(metadata(PNG, run_id="abc"))),
    "run id letters": _header(header_of(metadata(PNG, run_id="g" * 36))),
}


def test_bad_metadata_is_refused_first(hub):
    for label, headers in INVALID_HEADERS.items():
        # Even on a route the session may not use: the header is checked before the gate.
        response = hub.post(PNG, headers=headers, route="nowhere")
        assert response.status_code == 400, label
        assert_error(response, 400, "artifact_invalid_request")
        assert response.json().keys() == {"error", "message"}  # the header's content is not echoed
    hub.assert_nothing_written()


def test_the_declared_type_must_match(hub):
    for content_type in ("image/jpeg", "image/png; charset=x", "IMAGE/PNG", None):
        response = hub.post(PNG, headers={"Content-Type": content_type}, route="nowhere")
        assert_error(response, 400, "artifact_content_mismatch")
    hub.assert_nothing_written()


def test_a_content_length_other_than_bytes_is_refused_before_reading(hub):
    import socket
    from urllib.parse import urlsplit

    meta = metadata(PNG, bytes=len(PNG) - 1)  # the header lies by one
    parts = urlsplit(hub.server.url)
    request = (f"POST /agent-api/v1/workspaces/gallery/artifacts/{upload_id()} HTTP/1.1\r\n"
               f"Host: {parts.netloc}\r\nAuthorization: Bearer {hub.session['access_token']}\r\n"
               f"Content-Type: image/png\r\nX-Bailing-Artifact: {header_of(meta)}\r\n"
               f"Content-Length: {len(PNG)}\r\nConnection: close\r\n\r\n").encode() + PNG
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert json.loads(body)["error"] == "artifact_content_mismatch"
    hub.assert_nothing_written()


def test_a_body_longer_than_declared_is_refused_413(hub):
    # Chunked, so no Content-Length to compare; before the gate (the route is not allowed).
    body = assert_error(chunked(hub, PNG, metadata(PNG, bytes=100), route="nowhere"), 413, "artifact_too_large")
    assert body["max_bytes"] == 100
    hub.assert_nothing_written()


class CountingStream(io.RawIOBase):
    """An endless request body that counts what the hub reads of it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = len(buffer)
        buffer[:n] = b"\x89" * n
        self.read_bytes += n
        return n


def test_a_body_is_never_read_beyond_its_declared_size(db_url, tmp_path):
    app = create_app({"database_url": db_url, "data_dir": tmp_path / "var"})
    try:
        from tests.conftest import cli_runner

        cli = cli_runner(app)
        apply_config(cli, tmp_path, config(tmp_path / "bucket"))
        code, session, err = cli("sessions", "issue", "--client", "art-app", "--routes", "gallery")
        assert code == 0, err
        stream = CountingStream()
        meta = metadata(PNG, bytes=1000)
        response = app.test_client().post(
            f"/agent-api/v1/workspaces/gallery/artifacts/{upload_id()}",
            headers={**session_bearer(session), "Content-Type": "image/png", "X-Bailing-Artifact": header_of(meta)},
            environ_overrides={"wsgi.input": stream, "wsgi.input_terminated": True,
                               "HTTP_TRANSFER_ENCODING": "chunked"})
        assert response.status_code == 413 and response.json["error"] == "artifact_too_large"
        assert 1000 < stream.read_bytes <= 1001
    finally:
        app.extensions["bailing"].db.dispose()


def test_the_route_gate_comes_after_the_body(hub):
    assert_error(hub.post(PNG, route="auto"), 400, "invalid_route")
    assert_error(hub.post(PNG, route="unlisted"), 403, "route_not_allowed")
    assert_error(hub.post(PNG, session=hub.issue(routes="other")), 403, "route_not_allowed")
    hub.assert_nothing_written()


def test_a_disabled_route_is_unavailable(hub):
    doc = config(hub.bucket)
    doc["routes"][0]["enabled"] = False
    hub.apply(doc)
    assert_error(hub.post(PNG), 404, "route_unavailable")
    hub.assert_nothing_written()


def test_the_audience_gate_applies(hub):
    doc = config(hub.bucket)
    doc["routes"][0]["audience"] = {"enabled": True, "tenants": ["t-2"]}
    hub.apply(doc)
    assert_error(hub.post(PNG), 403, "audience_not_allowed")
    hub.assert_nothing_written()


def test_a_route_without_agent_direct_or_tools_is_enough(hub):
    # The gate is the shared one without `agent_direct`: the gallery route has no tools at all.
    assert assert_ok(hub.post(PNG))["state"] == "ready"


def test_uploads_off_on_the_route_are_refused(hub):
    for agent_client in ({"enabled": False, "artifact_upload": {"enabled": True, "bucket": "shots"}},
                         {"enabled": True},
                         {"enabled": True, "artifact_upload": {"enabled": False, "bucket": "shots"}},
                         {"enabled": True, "artifact_upload": {"enabled": False}}):
        doc = config(hub.bucket)
        doc["routes"][0]["agent_client"] = agent_client
        hub.apply(doc)
        assert_error(hub.post(PNG), 403, "artifact_upload_disabled")
    hub.assert_nothing_written()


def test_invalid_stored_upload_settings_count_as_disabled(hub):
    hub.sql("""UPDATE bz_routes SET agent_client = '{"enabled": true, "artifact_upload":
               {"enabled": true, "bucket": "shots", "max_bytes": 0}}' WHERE route_key = 'gallery'""")
    assert_error(hub.post(PNG), 403, "artifact_upload_disabled")
    hub.assert_nothing_written()


@pytest.mark.parametrize("data, meta", [
    (PNG[:-1], metadata(PNG)),  # a chunked body one byte short (no Content-Length to catch it)
    (PNG[:-1] + b"x", metadata(PNG)),
], ids=["short", "other hash"])
def test_bytes_that_are_not_the_declared_ones_are_refused(hub, data, meta):
    assert_error(chunked(hub, data, meta), 400, "artifact_content_mismatch")
    hub.assert_nothing_written()


def test_a_type_not_allowed_or_bytes_of_another_type_are_415(hub):
    assert_error(hub.post(JPEG, metadata(JPEG, mime="image/png")), 415, "artifact_type_not_allowed")
    not_webp = b"RIFF" + b"\x00" * 4 + b"AVI " + b"x" * 100
    assert_error(hub.post(not_webp, metadata(not_webp, mime="image/webp")), 415, "artifact_type_not_allowed")
    doc = config(hub.bucket, upload={"enabled": True, "bucket": "shots", "allowed_mimes": ["image/jpeg"]})
    hub.apply(doc)
    assert_error(hub.post(PNG), 415, "artifact_type_not_allowed")
    hub.assert_nothing_written()


def test_over_the_routes_max_bytes_is_413(hub):
    hub.apply(config(hub.bucket, upload={"enabled": True, "bucket": "shots", "max_bytes": len(PNG) - 1}))
    body = assert_error(hub.post(PNG), 413, "artifact_too_large")
    assert body["max_bytes"] == len(PNG) - 1
    hub.assert_nothing_written()
    hub.apply(config(hub.bucket, upload={"enabled": True, "bucket": "shots", "max_bytes": len(PNG)}))
    assert_ok(hub.post(PNG))


def test_a_run_of_another_identity_is_refused(hub):
    other_session = hub.issue()
    runs = {
        "another session": hub.turn(session=other_session),
        "another workspace": hub.turn(route="other"),
        "another conversation": hub.turn(conversation="conv-2"),
    }
    for label, run_id in runs.items():
        response = hub.post(PNG, metadata(PNG, run_id=run_id))
        assert response.json().get("error") == "artifact_run_mismatch", label
        assert_error(response, 403, "artifact_run_mismatch")
    for unknown in (str(uuid.uuid4()), "-" * 36):
        assert_error(hub.post(PNG, metadata(PNG, run_id=unknown)), 403, "artifact_run_mismatch")
    hub.assert_nothing_written()


def test_a_run_of_another_turn_is_refused(hub):
    run_id = hub.turn(turn="turn-9")
    assert_error(hub.post(PNG, metadata(PNG, run_id=run_id)), 403, "artifact_run_turn_mismatch")
    hub.assert_nothing_written()


def test_an_upload_id_reused_with_other_metadata_or_workspace_conflicts(hub):
    hub.apply({**config(hub.bucket), "routes": [
        config(hub.bucket)["routes"][0],
        {"route_key": "other", "name": "Other", "agent_client": {
            "enabled": True, "artifact_upload": {"enabled": True, "bucket": "shots"}}}]})
    first = assert_ok(hub.post(PNG))
    before = (hub.rows(), hub.files())
    assert_error(hub.post(PNG, metadata(PNG, name="other.png")), 409, "artifact_conflict")
    assert_error(hub.post(JPEG), 409, "artifact_conflict")
    assert_error(hub.post(PNG, route="other"), 409, "artifact_conflict")
    assert (hub.rows(), hub.files()) == before
    # Another session's same upload_id is another upload.
    assert assert_ok(hub.post(PNG, session=hub.issue()))["url"] == first["url"]


def test_storage_unavailable_writes_nothing(hub):
    for bucket in ({"name": "shots", "kind": "local", "dir": str(hub.bucket), "enabled": False},):
        hub.apply({"artifact_buckets": [bucket]})
        assert_error(hub.post(PNG), 503, "artifact_storage_unavailable")
    hub.apply(config(hub.bucket, upload={"enabled": True, "bucket": "missing"}))
    assert_error(hub.post(PNG), 503, "artifact_storage_unavailable")
    hub.apply(config(hub.bucket))
    hub.sql("UPDATE bz_artifact_buckets SET kind = 'cos'")  # a cloud bucket this hub cannot write to
    assert_error(hub.post(PNG), 503, "artifact_storage_unavailable")
    hub.assert_nothing_written()


def test_a_hub_served_bucket_needs_the_public_url(hub):
    hub.apply(config(hub.bucket, public_base_url=None))
    hub.sql("UPDATE bz_artifact_buckets SET public_base_url = NULL")
    assert_error(hub.post(PNG), 503, "artifact_storage_unavailable")  # BAILING_PUBLIC_URL is not set
    hub.assert_nothing_written()


def test_a_failed_write_leaves_the_upload_pending_until_a_retry(hub):
    hub.bucket.parent.mkdir(parents=True, exist_ok=True)
    hub.bucket.write_text("a file where the folder should be")
    response = hub.post(PNG)
    assert_error(response, 503, "artifact_upload_pending")
    [(_, state, url, _)] = hub.rows()
    assert (state, url) == ("pending", None)
    pending = assert_ok(hub.get())
    assert pending["state"] == "pending" and pending["next_action"] == "retry_same_upload"
    assert "url" not in pending
    hub.bucket.unlink()
    receipt = assert_ok(hub.post(PNG))
    assert receipt == expected_receipt(hub, PNG, upload_id())


def test_a_pending_upload_whose_bucket_changed_is_409(hub):
    hub.bucket.parent.mkdir(parents=True, exist_ok=True)
    hub.bucket.write_text("not a folder")
    assert_error(hub.post(PNG), 503, "artifact_upload_pending")
    other = hub.tmp / "other-bucket"
    doc = config(hub.bucket, upload={"enabled": True, "bucket": "fresh"})
    doc["artifact_buckets"].append({"name": "fresh", "kind": "local", "dir": str(other)})
    hub.apply(doc)
    before = hub.rows()
    assert_error(hub.post(PNG), 409, "artifact_storage_changed")
    assert hub.rows() == before and not other.exists()


def test_uploads_are_refused_while_paused_and_receipts_still_read(hub):
    uid = upload_id()
    receipt = assert_ok(hub.post(PNG, uid=uid))
    hub.sql("UPDATE bz_hub_pause SET paused = true")
    assert_error(hub.post(JPEG, uid=upload_id(2), headers={"X-Bailing-Artifact": "!"}), 503, "hub_paused")
    assert len(hub.rows()) == 1
    assert assert_ok(hub.get(uid)) == receipt


# ------------------------------------------------------------------ the GET

def test_a_receipt_is_only_found_in_its_session_and_workspace(hub):
    uid = upload_id()
    assert_ok(hub.post(PNG, uid=uid))
    assert_error(hub.get(uid, route="other"), 404, "artifact_not_found")
    assert_error(hub.get(uid, session=hub.issue()), 404, "artifact_not_found")
    assert_error(hub.get(upload_id(2)), 404, "artifact_not_found")
    assert_error(hub.get(uid, route="unlisted"), 403, "route_not_allowed")


def test_other_upload_id_shapes_name_no_endpoint(hub):
    for uid in ("A" * 64, "a" * 63, "a" * 65, "g" * 64):
        assert_error(hub.get(uid), 404, "not_found")
        assert_error(hub.post(PNG, uid=uid), 404, "not_found")
        response = hub.server.request("PUT", f"/agent-api/v1/workspaces/gallery/artifacts/{uid}",
                                      headers=session_bearer(hub.session))
        assert_error(response, 404, "not_found")
    hub.assert_nothing_written()


def test_other_methods_are_405_and_a_bad_bearer_401(hub):
    path = f"/agent-api/v1/workspaces/gallery/artifacts/{upload_id()}"
    response = hub.server.request("PUT", path, data=PNG, headers=session_bearer(hub.session))
    body = assert_error(response, 405, "method_not_allowed")
    assert body and set(response.headers["Allow"].replace(" ", "").split(",")) >= {"GET", "POST"}
    assert_error(hub.post(PNG, session={"access_token": "bzat_" + "A" * 43}), 401, "unauthorized")
    assert_error(hub.get(session={"access_token": "nope"}), 401, "unauthorized")
    hub.assert_nothing_written()


def test_without_sql_077_uploads_are_unsupported(hub):
    hub.sql("DROP TABLE bz_agent_artifacts")
    assert_error(hub.post(PNG), 501, "artifact_unsupported")
    assert_error(hub.get(), 501, "artifact_unsupported")


# ------------------------------------------------------------------ the hub-served bucket and config

def test_the_hub_serves_a_bucket_without_public_base_url(db_url, tmp_path):
    app = create_app({"database_url": db_url, "data_dir": tmp_path / "var", "public_url": "https://hub.example.test"})
    live = serve(app)
    try:
        from tests.conftest import cli_runner

        cli = cli_runner(app)
        apply_config(cli, tmp_path, config(tmp_path / "bucket", public_base_url=None))
        code, session, err = cli("sessions", "issue", "--client", "art-app", "--routes", "gallery")
        assert code == 0, err
        response = live.post(f"/agent-api/v1/workspaces/gallery/artifacts/{upload_id()}", data=WEBP, headers={
            **session_bearer(session), "Content-Type": "image/webp", "X-Bailing-Artifact": header_of(metadata(WEBP))})
        receipt = assert_ok(response)
        sha = receipt["sha256"]
        assert receipt["url"] == f"https://hub.example.test/artifacts/shots/{sha[:2]}/{sha}.webp"
        served = live.get(receipt["url"].removeprefix("https://hub.example.test"))
        assert served.status_code == 200 and served.content == WEBP
        assert served.headers["Content-Type"] == "image/webp"
        assert "immutable" in served.headers["Cache-Control"]
        for path in (f"/artifacts/shots/{sha[:2]}/{sha}.png", f"/artifacts/shots/zz/{sha}.webp",
                     f"/artifacts/nobucket/{sha[:2]}/{sha}.webp", "/artifacts/shots/../x/y"):
            assert live.get(path).status_code == 404, path
    finally:
        live.stop()
        app.extensions["bailing"].db.dispose()


UPLOAD_PROBLEMS = [
    ({"enabled": True}, "routes[0].agent_client.artifact_upload.bucket"),
    ({"enabled": True, "bucket": "no spaces"}, "routes[0].agent_client.artifact_upload.bucket"),
    ({"enabled": True, "bucket": "b", "max_bytes": 6 * 1024 * 1024 + 1},
     "routes[0].agent_client.artifact_upload.max_bytes"),
    ({"enabled": True, "bucket": "b", "allowed_mimes": []}, "routes[0].agent_client.artifact_upload.allowed_mimes"),
    ({"enabled": True, "bucket": "b", "allowed_mimes": ["image/gif"]},
     "routes[0].agent_client.artifact_upload.allowed_mimes[0]"),
    ({"enabled": "yes", "bucket": "b"}, "routes[0].agent_client.artifact_upload.enabled"),
    ({"enabled": True, "bucket": "b", "other": 1}, "routes[0].agent_client.artifact_upload.other"),
]
BUCKET_PROBLEMS = [
    ({"name": "b", "kind": "cos", "dir": "x"}, "artifact_buckets[0].kind"),
    ({"name": "b c", "kind": "local", "dir": "x"}, "artifact_buckets[0].name"),
    ({"name": "b", "kind": "local"}, "artifact_buckets[0].dir"),
    ({"name": "b", "kind": "local", "dir": "x", "public_base_url": "ftp://x"}, "artifact_buckets[0].public_base_url"),
    ({"name": "b", "kind": "local", "dir": "x", "public_base_url": "https://x/?q=1"},
     "artifact_buckets[0].public_base_url"),
    ({"name": "b", "kind": "local", "dir": "x", "public_base_url": "https://u:p@x/"},
     "artifact_buckets[0].public_base_url"),
]


def test_config_apply_checks_upload_settings_and_buckets(cli, tmp_path, sql):
    docs = [(config(tmp_path / "bucket", upload=upload), problem) for upload, problem in UPLOAD_PROBLEMS]
    docs += [({"artifact_buckets": [bucket]}, problem) for bucket, problem in BUCKET_PROBLEMS]
    path = tmp_path / "hub.json"
    for doc, problem in docs:
        path.write_text(json.dumps(doc))
        code, out, err = cli("config", "apply", str(path))
        assert code == 1, out
        assert problem in [p["path"] for p in err["problems"]], err
    assert sql("SELECT (SELECT count(*) FROM bz_routes), (SELECT count(*) FROM bz_artifact_buckets)") == [(0, 0)]


def test_a_relative_bucket_folder_is_taken_from_the_files_folder(cli, tmp_path, sql):
    report = apply_config(cli, tmp_path, {"artifact_buckets": [{"name": "rel", "kind": "local", "dir": "images"}]})
    assert report["created"]["artifact_buckets"] == ["rel"]
    assert sql("SELECT dir, public_base_url, enabled FROM bz_artifact_buckets") == [
        (str((tmp_path / "images").resolve()), None, True)]
    again = apply_config(cli, tmp_path, {"artifact_buckets": [{"name": "rel", "kind": "local", "dir": "images",
                                                               "public_base_url": CDN + "/"}]})
    assert again["changed"]["artifact_buckets"] == ["rel (public_base_url)"]
    assert sql("SELECT public_base_url FROM bz_artifact_buckets") == [(CDN,)]
