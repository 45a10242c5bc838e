"""The evidence verifier in the console: a banner on every page for signed-in staff while the
latest verifier pass found a leaf that does not verify (integrity.verifier), and a conversation's
Verify control, which checks that transcript's leaves now (integrity.transcript)."""
from __future__ import annotations

import logging
import uuid
from typing import Any

from flask import Blueprint, Flask, abort, g, render_template
from flask.typing import ResponseReturnValue

from ..integrity import transcript, verifier
from .security import database, permission_required

bp = Blueprint("console_evidence", __name__, url_prefix="/console")
log = logging.getLogger(__name__)


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)

    @app.context_processor
    def _evidence_check() -> dict[str, object]:
        # A function, so only pages that show it ask the database, once a request.
        return {"evidence_check": latest_check}


def latest_check() -> dict[str, Any] | None:
    """The latest finished pass (one indexed lookup, kept for the request); None before any pass
    or when it cannot be read (the banner never breaks a page)."""
    if "bailing_evidence_check" not in g:
        try:
            with database().session() as db:
                g.bailing_evidence_check = verifier.latest(db)
        except Exception:
            log.info("console: the evidence check could not be read", exc_info=True)
            g.bailing_evidence_check = None
    return g.bailing_evidence_check


@bp.get("/conversations/<archive_id>/verify")
@permission_required("runs:read")
def verify_transcript(archive_id: str) -> ResponseReturnValue:
    """An htmx fragment: this transcript's leaves against its rows, and the head that covers them."""
    try:
        ident = uuid.UUID(archive_id)
    except ValueError:
        abort(404)
    with database().session() as db:
        report = transcript.verify_archive(db, ident)
    return render_template("console/partials/transcript_verify.html", report=report)
