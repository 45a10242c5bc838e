"""GET /artifacts/<bucket>/<key>: the objects of the local buckets the hub publishes itself.

A local bucket with a `public_base_url` is published by whatever the operator points at its
folder; one without is published here, under BAILING_PUBLIC_URL, so that a receipt's URL works
with no web server of its own. The objects are public (the receipt says `visibility: public`) and
named by their content, so they are cached for good. Only names the store itself makes are served
(`ab/<sha256>.png|jpg|webp`), as the image type their name says, never as anything a browser
would run.
"""
from __future__ import annotations

from flask import Blueprint, abort, send_from_directory

from ..runtime import artifact_storage as storage
from .auth import database

bp = Blueprint("artifact_files", __name__, url_prefix=storage.HUB_SERVED_PREFIX)


@bp.get("/<bucket>/<fan>/<filename>")
def artifact_file(bucket: str, fan: str, filename: str):
    key = f"{fan}/{filename}"
    match = storage.OBJECT_KEY.fullmatch(key)
    if match is None or match.group(1) != match.group(2)[:2]:
        abort(404)
    with database().session() as db:
        folder = storage.served_folder(db, bucket) if storage.installed(db) else None
    if folder is None:
        abort(404)
    response = send_from_directory(folder, key, mimetype=storage.MIME_OF[match.group(3)], max_age=31536000,
                                   conditional=True, etag=True)
    response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
    response.headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response
