"""`bailing-admin demo`: one command from an empty machine to a living hub.

It starts (or reuses) the database, applies the migrations (this explicit command is the step that
does it), serves the demo business system on a loopback port, loads the demo configuration and
admins, serves the hub, and seeds it through the hub's own HTTP APIs. Then it keeps serving the
console and prints where to sign in."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import click
import requests
from sqlalchemy import select
from werkzeug.serving import make_server

from .. import migrations
from ..config_apply import apply as apply_config
from ..identity.admins import authenticate_admin_token, create_admin, issue_admin_token
from ..identity.clients import authenticate_client_token, rotate_client_token
from ..identity.models import Admin
from ..runtime.knowledge import add_document
from .business import create_business_app
from .config import demo_config
from .seed import LONG_ARCHIVE_EVENTS, Seeder
from .state import ROLES, DemoState

KNOWLEDGE = {"customers": ["credit-policy.md"], "orders": ["order-handling.md"]}


def _reset(conninfo: str) -> None:
    """Drop the hub's own tables (and nothing else) so the demo starts from an empty schema."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'bz\\_%'")]
        if tables:
            conn.execute("DROP TABLE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")


def _serve(app, host: str, port: int):
    server = make_server(host, port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def _note(message: str) -> None:
    click.echo(message, err=True)  # progress notes on stderr: stdout stays clean for --seed-only JSON


def prepare(hub, data_dir: Path, business_port: int, hub_url: str, reset: bool, echo=_note):
    """Everything before seeding: schema, business system, configuration, admins, knowledge."""
    conninfo = hub.db.conninfo()
    state = DemoState(data_dir)
    if reset:
        echo("Resetting the demo database…")
        hub.db.dispose()
        _reset(conninfo)
        state.reset()
    applied = migrations.upgrade(conninfo, hub.settings.sql_dir)
    if applied:
        echo(f"Applied {len(applied)} migrations.")
    os.environ["DEMO_CRM_SECRET"] = state.data["secrets"]["crm"]
    os.environ["DEMO_ERP_SECRET"] = state.data["secrets"]["erp"]
    tokens: dict[str, str] = {}  # filled below; the consent pages read the Client Tokens from it
    business_app = create_business_app(state.data["secrets"], control_token=state.data["control"],
                                       hub_url=hub_url, client_tokens=tokens)
    business = _serve(business_app, "127.0.0.1", business_port)
    business_url = f"http://127.0.0.1:{business.server_port}"
    with hub.db.session() as db:
        apply_config(db, demo_config(business_url), Path("."))
        for app_id, system in (("crm-demo", "crm"), ("erp-demo", "erp")):
            token = state.data["client_tokens"].get(app_id)
            if token is None or authenticate_client_token(db, token) is None:
                token = rotate_client_token(db, app_id)["client_token"]
                state.data["client_tokens"][app_id] = token
            tokens[system] = token
        for role in ROLES:
            username = f"demo-{role}"
            if db.scalar(select(Admin.id).where(Admin.username == username)) is None:
                create_admin(db, username, role, state.data["passwords"][role])
        admin_token = state.data.get("admin_token")
        if admin_token is None or authenticate_admin_token(db, admin_token) is None:
            admin_token = state.data["admin_token"] = issue_admin_token(db, "demo-admin")["token"]
        for route, names in KNOWLEDGE.items():
            for name in names:
                add_document(db, route, Path(__file__).parent / "knowledge" / name)
    state.save()
    return state, business, business_url, admin_token


def seed(hub_url: str, state: DemoState, business_url: str, admin_token: str, show_progress: bool = True) -> dict:
    def fault(operation: str) -> None:
        requests.post(f"{business_url}/_demo/faults", timeout=10, json={"operation": operation, "mode": "drop_response"},
                      headers={"X-Demo-Control": state.data["control"]}).raise_for_status()

    total = LONG_ARCHIVE_EVENTS + 30
    with click.progressbar(length=total, label="Seeding the demo through the hub's APIs",
                           file=None if show_progress else open(os.devnull, "w")) as bar:
        made = Seeder(hub_url, state, admin_token, fault, progress=bar.update).run()
        bar.update(total)
    state.save()
    return made


def run_demo(app, host: str, port: int, reset: bool, serve: bool, business_port: int = 0) -> dict:
    hub = app.extensions["bailing"]
    data_dir = Path(hub.settings.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    server = _serve(app, host, port)
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    hub_url = f"http://{local}:{server.server_port}"
    state, business, business_url, admin_token = prepare(hub, data_dir, business_port, hub_url, reset)
    made = seed(hub_url, state, business_url, admin_token, show_progress=serve)
    summary = {"console": f"{hub_url}/console/", "business_system": business_url, **made,
               "sign_ins": {f"demo-{role}": state.data["passwords"][role] for role in ROLES}}
    if not serve:
        server.shutdown()
        business.shutdown()
        return summary
    click.echo("")
    click.echo(f"The hub is running: {hub_url}/console/")
    click.echo(f"The demo business system (consent pages, CRM and ERP): {business_url}")
    click.echo("Sign in as (username / password):")
    for role in ROLES:
        click.echo(f"  demo-{role:<9} {state.data['passwords'][role]}")
    click.echo("Press Ctrl+C to stop. The embedded database keeps running; `bailing-admin db stop` stops it.")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()
        business.shutdown()
    return summary

