"""`bailing-admin demo`: one command from an empty machine to a living hub.

It serves the hub (its console says the demo is being prepared until seeding is done), starts (or
reuses) the database, applies the migrations (this explicit command is the step that does it),
serves the demo business system on a loopback port, loads the demo configuration and admins, and
seeds the hub through its own HTTP APIs. Then it keeps serving the console and prints how to sign
in: the console users, the business users of the consent pages, and the agent login command."""
from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import click
import requests
from sqlalchemy import select
from werkzeug.serving import get_sockaddr, make_server, select_address_family

from .. import migrations
from ..agent_sdk.session_store import DEFAULT_STORE
from ..config_apply import apply as apply_config
from ..identity.admins import authenticate_admin_token, create_admin, issue_admin_token
from ..identity.clients import authenticate_client_token, rotate_client_token
from ..identity.models import Admin
from ..runtime.knowledge import add_document
from . import gate
from .business import create_business_app
from .config import demo_config
from .consent import business_users
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


class PortInUse(Exception):
    """A port the demo was told to use is taken; `option` is the command-line option that sets it."""

    def __init__(self, option: str, host: str, port: int):
        self.option, self.host, self.port = option, host, port
        super().__init__(f"Port {port} on {host} is already in use: choose another with {option} PORT, "
                         f"or {option} 0 for any free port.")


def _serve(app, host: str, port: int, option: str = "--port"):
    # Bound here rather than by werkzeug, which answers a taken port with plain text and exits.
    family = select_address_family(host, port)
    try:
        sock = socket.create_server(get_sockaddr(host, port, family), family=family, backlog=128)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise PortInUse(option, host, port) from None
        raise
    with sock:  # werkzeug serves a duplicate of it
        server = make_server(host, port, app, threaded=True, fd=sock.fileno())
    server.server_port = server.port  # the bound port (0 picks one), as an unbound HTTPServer lacks it
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return server


def _stop(server) -> None:
    server.shutdown()
    server.server_close()


def _note(message: str) -> None:
    click.echo(message, err=True)  # progress notes on stderr: stdout stays clean for --seed-only JSON


def prepare(hub, data_dir: Path, business_port: int, hub_url: str, reset: bool, echo=_note):
    """Everything before seeding: schema, business system, configuration, admins, knowledge."""
    state = DemoState(data_dir)
    tokens: dict[str, str] = {}  # filled below; the consent pages read the Client Tokens from it
    business_app = create_business_app(state.data["secrets"], control_token=state.data["control"],
                                       hub_url=hub_url, client_tokens=tokens)
    # Bound first: a taken port is refused before anything is reset, migrated or written.
    business = _serve(business_app, "127.0.0.1", business_port, "--business-port")
    business_url = f"http://127.0.0.1:{business.server_port}"
    echo(f"The demo business system (consent pages, CRM and ERP) is at {business_url}")
    try:
        _prepare_hub(hub, state, reset, tokens, business_url, echo)
    except BaseException:
        _stop(business)
        raise
    return state, business, business_url, state.data["admin_token"]


def _prepare_hub(hub, state: DemoState, reset: bool, tokens: dict[str, str], business_url: str, echo) -> None:
    conninfo = hub.db.conninfo()
    if reset:
        echo("Resetting the demo database…")
        hub.db.dispose()
        _reset(conninfo)
        state.reset()
    echo("Applying the schema…")
    applied = migrations.upgrade(conninfo, hub.settings.sql_dir)
    if applied:
        echo(f"Applied {len(applied)} migrations.")
    os.environ["DEMO_CRM_SECRET"] = state.data["secrets"]["crm"]
    os.environ["DEMO_ERP_SECRET"] = state.data["secrets"]["erp"]
    echo("Loading the demo configuration, admins and knowledge…")
    with hub.db.session() as db:
        apply_config(db, demo_config(business_url), Path("."))
        for app_id, system in (("crm-demo", "crm"), ("erp-demo", "erp")):
            token = state.data["client_tokens"].get(app_id)
            if token is None or authenticate_client_token(db, token) is None:
                token = rotate_client_token(db, app_id, hub.secret_key)["client_token"]
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


def seed(hub_url: str, state: DemoState, business_url: str, admin_token: str, show_progress: bool = True,
         progress: gate.Progress | None = None) -> dict:
    def fault(operation: str) -> None:
        requests.post(f"{business_url}/_demo/faults", timeout=10,
                      json={"operation": operation, "mode": "drop_response"},
                      headers={"X-Demo-Control": state.data["control"]}).raise_for_status()

    total = LONG_ARCHIVE_EVENTS + 30
    progress = progress or gate.Progress()
    progress.begin_seeding(total)
    with contextlib.ExitStack() as stack:
        # On stderr with the other progress notes: stdout holds only the guide (or the JSON summary).
        out = sys.stderr if show_progress else stack.enter_context(open(os.devnull, "w"))
        bar = stack.enter_context(click.progressbar(length=total, label="Seeding the demo through the hub's APIs",
                                                    file=out))

        def step(steps: int) -> None:
            bar.update(steps)
            progress.advance(steps)

        made = Seeder(hub_url, state, admin_token, fault, progress=step).run()
        bar.update(total)
    state.save()
    return made


def agent_login_command(hub_url: str) -> str:
    """The developer's command that connects a local agent to this demo's CRM."""
    return shlex.join(["bailing-admin", "agent", "login", "--hub", hub_url, "--client", "crm-demo",
                       "--route", "customers", "--device-label", "My laptop"])


@dataclass
class Demo:
    """A demo being served: the hub (behind the demo gate) and its business system, both on loopback."""

    app: object
    server: object
    business: object
    hub_url: str
    business_url: str
    state: DemoState
    admin_token: str
    progress: gate.Progress

    @property
    def console_url(self) -> str:
        return f"{self.hub_url}/console/"

    def seed(self, show_progress: bool = True) -> dict:
        made = seed(self.hub_url, self.state, self.business_url, self.admin_token, show_progress, self.progress)
        self.progress.finish()  # the console opens
        return {"console": self.console_url, "hub": self.hub_url, "business_system": self.business_url, **made,
                "sign_ins": {f"demo-{role}": self.state.data["passwords"][role] for role in ROLES},
                "business_users": business_users(), "agent_login": agent_login_command(self.hub_url)}

    def stop(self) -> None:
        _stop(self.server)
        _stop(self.business)


def start(app, host: str, port: int, reset: bool, business_port: int = 0, echo=_note) -> Demo:
    """Serve the hub (its console gated) and the business system, and prepare the hub for seeding."""
    hub = app.extensions["bailing"]
    data_dir = Path(hub.settings.data_dir)
    progress = gate.install(app)
    progress.start()
    server = _serve(app, host, port, "--port")
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104 - a comparison, not a bind
    hub_url = f"http://{f'[{local}]' if ':' in local else local}:{server.server_port}"
    echo(f"The console will open at {hub_url}/console/ when the demo is ready; until then it shows the progress.")
    try:
        state, business, business_url, admin_token = prepare(hub, data_dir, business_port, hub_url, reset, echo)
    except BaseException:
        _stop(server)
        raise
    return Demo(app, server, business, hub_url, business_url, state, admin_token, progress)


def print_guide(summary: dict) -> None:
    """What to do with the running demo: where it is, who signs in where, how an agent connects."""
    echo = click.echo
    echo("")
    echo(f"The hub is running: {summary['console']}")
    echo(f"The demo business system (consent pages, CRM and ERP): {summary['business_system']}"
         " (set its port with --business-port)")
    echo("")
    echo("Console sign-ins (username / password):")
    for username, password in summary["sign_ins"].items():
        echo(f"  {username:<15} {password}")
    echo("")
    echo("Business users of the consent pages (username / password / tenant / what they may do):")
    for user in summary["business_users"]:
        echo(f"  {user['username']:<6} {user['password']:<20} {user['tenant']:<9} "
             f"{', '.join(user['roles'])}, may {user['may']}")
    echo("")
    echo("Connect a local agent to this demo (sign in at the page it opens as a business user, then Allow):")
    echo(f"  {summary['agent_login']}")
    echo("  Add --no-browser to print the address instead; --client erp-demo --route orders for the ERP.")
    echo(f"  The session is stored in {DEFAULT_STORE} (mode 0600) unless --store names another file.")
    echo("")
    echo("Press Ctrl+C to stop. The embedded database keeps running; `bailing-admin db stop` stops it.")


def run_demo(app, host: str, port: int, reset: bool, serve: bool, business_port: int = 0) -> dict:
    demo = start(app, host, port, reset, business_port)
    try:
        summary = demo.seed(show_progress=serve)
    except BaseException:
        demo.stop()
        raise
    if not serve:
        demo.stop()
        return summary
    print_guide(summary)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        demo.stop()
    return summary
