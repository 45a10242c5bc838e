"""Tool providers (admins, config:write): where each spec comes from, how its last pull went, what
the spec access check and the authorization probe saw, and two actions: pull the spec now (URL
providers) and probe authorization now. Both talk to the business system before they answer
(at most 30 s for a pull with its checks, 8 s for a probe). Error texts and probe reasons come
partly from business systems: shown escaped."""
from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, url_for

from ..providers.refresh import NotPulled, ProviderMissing, probe, refresh
from ..providers.status import list_all
from .security import database, permission_required

bp = Blueprint("console_providers", __name__, url_prefix="/console/providers")


@bp.get("/")
@permission_required("config:write")
def index():
    with database().session() as db:
        providers = list_all(db)
    return render_template("console/providers.html", providers=providers)


@bp.post("/<name>/refresh")
@permission_required("config:write")
def refresh_now(name: str):
    try:
        report = refresh(database(), name, "manual")
    except ProviderMissing:
        flash("No tool provider by that name.", "error")
    except NotPulled:
        flash(f"The spec of {name} is given inline: apply a new one with config apply.", "error")
    else:
        if report["ok"]:
            flash(f"Spec of {name} pulled: {report['status']} ({report['tools']} tools); authorization "
                  f"probe: {report['authz_probe']['status']}.", "ok")
        else:
            flash(f"The spec of {name} could not be pulled: {report['error']} The stored spec is kept.", "error")
    return redirect(url_for(".index"), code=303)


@bp.post("/<name>/probe")
@permission_required("config:write")
def probe_now(name: str):
    try:
        result = probe(database(), name)
    except ProviderMissing:
        flash("No tool provider by that name.", "error")
    else:
        flash(f"Authorization probe of {name}: {result['status']}.",
              "error" if result["status"] in ("suspect", "inconclusive") else "ok")
    return redirect(url_for(".index"), code=303)
