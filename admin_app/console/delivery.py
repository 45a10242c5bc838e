"""How the console reaches a browser: compressed pages and assets, fingerprinted static URLs.

Console pages, fragments and static files are compressed (br or gzip, by Accept-Encoding).
Nothing else is: the agent and admin APIs' wire contract names no content coding (the official SDK
and upstream Core's clients expect plain JSON), and health, metrics and OpenAPI documents keep
their answers too. Streamed responses (the transcript download) are left alone.

Every `url_for('static', ...)` carries the file's content hash (`?v=`), computed once at start
from the bytes of the folder Flask serves. A request with the current hash may be kept for a
year; any other is kept briefly and revalidated, so a stale page never pins an old asset.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from flask import Flask, Response, request
from flask_compress import Compress


FINGERPRINT = "v"
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "public, max-age=300, must-revalidate"

_compress = Compress()


def fingerprints(folder: Path) -> dict[str, str]:
    """Each file under `folder` (by its URL name, with forward slashes) -> a short content hash."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            for path in sorted(folder.rglob("*")) if path.is_file()}


def init_app(app: Flask) -> None:
    app.config.update(
        COMPRESS_REGISTER=False,  # applied below, to the console's responses only
        COMPRESS_ALGORITHM=["br", "gzip"],
        COMPRESS_STREAMS=False,
        COMPRESS_MIN_SIZE=500,
    )
    _compress.init_app(app)
    hashes = fingerprints(Path(app.static_folder)) if app.static_folder else {}
    app.extensions["bailing_static_hashes"] = hashes

    @app.url_defaults
    def _fingerprint(endpoint: str, values: dict[str, Any]) -> None:
        if endpoint == "static" and FINGERPRINT not in values:
            digest = hashes.get(str(values.get("filename", "")))
            if digest:
                values[FINGERPRINT] = digest

    @app.after_request
    def _deliver(response: Response) -> Response:
        if request.endpoint == "static":
            current = hashes.get(str((request.view_args or {}).get("filename", "")))
            fresh = current is not None and request.args.get(FINGERPRINT) == current
            response.headers["Cache-Control"] = IMMUTABLE if fresh else REVALIDATE
            if response.status_code == 200 and response.direct_passthrough:
                # send_file streams the file; read it whole (a few KiB) so it can be compressed.
                response.direct_passthrough = False
                response.get_data()
        if request.endpoint == "static" or _is_console(request.path):
            return _compress.after_request(response)
        return response


def _is_console(path: str) -> bool:
    return path == "/console" or path.startswith("/console/")
