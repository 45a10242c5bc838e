"""`bailing-admin`: Flask's own commands (run, routes, shell) beside the hub's.

Every hub command prints JSON on stdout; a refusal prints a JSON error on stderr and exits 1.
"""
from __future__ import annotations

import copy
import json
import sys
from typing import Any
from functools import wraps
from pathlib import Path

import click
from flask import current_app
from flask.cli import FlaskGroup, with_appcontext
from flask.cli import run_command as flask_run_command

from . import create_app, error_codes, first_run, limits, migrations
from .errors import ApiError, invalid_request
from .validation import Invalid, strict_json_loads


def _hub():
    return current_app.extensions["bailing"]


def _emit(payload: dict) -> None:
    click.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def _fail(code: str, message: str | None = None, **extra) -> None:
    """Refuse with a registered code (error_codes); the message defaults to the registry's."""
    message = error_codes.message_of(code) if message is None else message
    click.echo(json.dumps({"error": code, "message": message, **extra}, indent=2,
                          ensure_ascii=False), err=True)
    sys.exit(1)


def hub_command(func):
    """Run inside the app context and turn every expected failure into a JSON error."""

    @with_appcontext
    @wraps(func)
    def wrapper(*args, **kwargs):
        import psycopg
        from sqlalchemy.exc import OperationalError, ProgrammingError

        try:
            return func(*args, **kwargs)
        except ApiError as err:
            _fail(err.code, err.message, **err.extra)
        except Invalid as err:
            body = invalid_request(err)
            _fail(body.code, body.message, **body.extra)
        except migrations.FeatureInstalled as err:
            _fail("feature_installed", str(err))
        except migrations.MigrationError as err:
            _fail("migration_error", str(err))
        except (OperationalError, psycopg.OperationalError) as err:
            _fail("database_unavailable", f"Cannot reach the database: {str(err).splitlines()[0]}")
        except ProgrammingError as err:
            if "does not exist" in str(err):
                _fail("schema_missing")
            raise

    return wrapper


class HubGroup(FlaskGroup):
    """Flask's command group without its generic options: `--app` (the hub always builds its own
    app), `--env-file` and `.env` files (python-dotenv is no dependency: the BAILING_* settings come
    from the environment, as a service manager or `set -a; . file` sets them, and a `.env` of
    whatever folder the command runs in must not change them) and `--debug` (`run --debug` keeps
    it). Flask's own --version (Python and Flask versions) gives way to the hub's."""

    GENERIC = frozenset({"env_file", "app", "debug"})

    def __init__(self, **extra: Any) -> None:
        super().__init__(load_dotenv=False, add_version_option=False, **extra)
        self.params = [param for param in self.params if param.name not in self.GENERIC]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # FlaskGroup's would read FLASK_APP and FLASK_ENV_FILE before a lone --help.
        return click.Group.parse_args(self, ctx, args)


@click.group(cls=HubGroup, create_app=create_app)
@click.version_option(package_name="bailing-hub", prog_name="bailing-admin",
                      message="%(prog)s %(version)s")
def main():
    """Administer the Bailing hub. Settings come from BAILING_* environment variables."""


# Flask's `run`, said as it is here: werkzeug's development server, to try the hub.
try_server = copy.copy(flask_run_command)
try_server.short_help = "Serve the hub to try it (in production: gunicorn)."
try_server.help = f"""Serve the hub from this process with Flask's development server, to try it on this
machine (`bailing-admin demo` does the same with demo data). It is not hardened: keep it on
127.0.0.1 and never expose it. `--debug` adds the reloader and an interactive debugger.

In production serve the hub with gunicorn, as the README's "Production" section does (after
`bailing-admin init`, with the same BAILING_* environment):

\b
{first_run.GUNICORN}
"""
main.add_command(try_server, "run")


# ------------------------------------------------------------------ db

@main.group()
def db():
    """Schema migrations and the embedded database."""


FEATURE_NAMES = ", ".join(migrations.FEATURES)


def _features(without: tuple[str, ...], with_: tuple[str, ...] = ()) -> None:
    """The features named are checked before the database is asked: a wrong one changes nothing."""
    problem = migrations.choice_problem(without, with_)
    if problem:
        _fail("invalid_request", f"--without and --with: {problem}")


@db.command("upgrade")
@click.option("--to", "to", metavar="NNN", help="Stop after migration NNN (e.g. 056).")
@click.option("--without", "without", multiple=True, metavar="FEATURE",
              help=f"Leave out a feature ({FEATURE_NAMES}), now and in every later upgrade.")
@click.option("--with", "with_", multiple=True, metavar="FEATURE",
              help="Install a feature left out before.")
@hub_command
def db_upgrade(to, without: tuple[str, ...], with_: tuple[str, ...]):
    """Apply pending sql/NNN_*.sql files, each in its own transaction."""
    target = None
    if to is not None:
        if not (to.isdigit() and len(to) <= 3):
            _fail("invalid_request", "--to takes a migration number such as 056")
        target = int(to)
    _features(without, with_)
    hub = _hub()
    applied = migrations.upgrade(hub.db.conninfo(), hub.settings.sql_dir, to=target, without=without, with_=with_)
    state = migrations.status(hub.db.conninfo(), hub.settings.sql_dir)
    _emit({"applied": applied, "pending": [m.filename for m in state.pending], "features": state.features})


@db.command("status")
@hub_command
def db_status():
    """Show applied and pending migrations; exit 1 when the set is inconsistent."""
    hub = _hub()
    state = migrations.status(hub.db.conninfo(), hub.settings.sql_dir)
    _emit(state.as_json())
    if state.problems:
        sys.exit(1)


@db.command("partition-events")
@click.option("--partitions", default=16, show_default=True, type=int, metavar="N",
              help="Hash partitions by archive, 2 to 256.")
@hub_command
def db_partition_events(partitions: int):
    """Partition the conversation events by archive (HASH on archive_id), in one transaction.
    Optional and offline: it rewrites every event while appends and reads wait, so stop the hub
    first. Run again with the same N, it changes nothing."""
    if not 2 <= partitions <= 256:
        _fail("invalid_request", "--partitions takes a number from 2 to 256")
    hub = _hub()
    _emit(migrations.partition_events(hub.db.conninfo(), hub.settings.sql_dir, partitions))


@db.command("start")
@hub_command
def db_start():
    """Start the embedded PostgreSQL, also after `db stop` (which running hubs respect)."""
    from . import embedded_pg

    settings = _hub().settings
    if settings.database_url:
        _fail("invalid_request", "BAILING_DATABASE_URL is set: there is no embedded server to start.")
    was_running = embedded_pg.is_running(settings.data_dir)
    try:
        embedded_pg.ensure_running(settings.data_dir)
    except embedded_pg.StartError as err:
        _fail("start_failed", f"The embedded server did not start: {err}",
              data_dir=str(settings.data_dir),
              log=str(embedded_pg.pgdata_path(settings.data_dir) / "log"))
    _emit({"started": not was_running, "data_dir": str(settings.data_dir)})


@db.command("stop")
@click.option("--all", "every", is_flag=True,
              help="Stop every embedded server this user started, whatever its data folder.")
@hub_command
def db_stop(every: bool):
    """Stop the embedded PostgreSQL (it keeps running across processes until told). Running
    hubs leave it stopped until `db start`, another command or a new hub process starts it."""
    from . import embedded_pg

    hub = _hub()
    hub.db.dispose()
    if every:
        # Servers of other data folders (the tests' own among them) come from the registry that
        # every start records; this folder's is included even if it was started before that.
        try:
            stopped = embedded_pg.stop_all(also=hub.settings.data_dir)
        except embedded_pg.StopFailed as err:
            _fail("stop_failed", "Some embedded servers did not stop.", stopped=err.stopped,
                  failed=err.failed)
        _emit({"stopped": stopped})
        return
    if hub.settings.database_url:
        _fail("invalid_request", "BAILING_DATABASE_URL is set: there is no embedded server to stop.")
    try:
        _emit({"stopped": embedded_pg.stop(hub.settings.data_dir)})
    except embedded_pg.StopError as err:
        _fail("stop_failed", f"The embedded server did not stop: {err}",
              data_dir=str(hub.settings.data_dir))


@db.command("where")
@hub_command
def db_where():
    """Show the data folder and which database is used, without starting anything."""
    from . import embedded_pg

    settings = _hub().settings
    embedded = not settings.database_url
    _emit({
        "data_dir": str(settings.data_dir),
        "database": "embedded" if embedded else "external",
        "pgdata": str(embedded_pg.pgdata_path(settings.data_dir)) if embedded else None,
        "running": embedded_pg.is_running(settings.data_dir) if embedded else None,
    })


# ------------------------------------------------------------------ init

@main.command("init")
@click.option("--admin", "username", required=True, metavar="USERNAME",
              help="The first admin, created with the admin role when the hub has none yet.")
@click.option("--password-stdin", is_flag=True,
              help="Read the admin's password from standard input (otherwise one is generated "
                   "and printed once).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A configuration file to apply, as `config apply FILE`.")
@click.option("--without", "without", multiple=True, metavar="FEATURE",
              help=f"Leave out a feature ({FEATURE_NAMES}), as `db upgrade --without`.")
@hub_command
def init(username: str, password_stdin: bool, config_file: Path | None, without: tuple[str, ...]):
    """First run: apply pending migrations, create the first admin, apply a configuration.
    Every input is checked before anything is written; running it again is safe."""
    from .first_run import initialize

    _features(without)
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else None
    _emit(initialize(_hub(), username, password, config_file, without))


# ------------------------------------------------------------------ config

@main.group()
def config():
    """Declarative configuration of client apps, routes and tool providers."""


@config.command("apply")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--check", "check_only", is_flag=True,
              help="Validate whole (against the database too) and show what would be created or "
                   "changed, writing nothing.")
@hub_command
def config_apply(file: Path, check_only: bool):
    """Validate FILE (JSON or TOML) whole, then upsert it in one transaction."""
    from .config_apply import apply, check, load_file

    doc = load_file(file)
    with _hub().db.session() as session:
        report = (check if check_only else apply)(session, doc, file.resolve().parent)
    if not check_only and report.get("spec_pulls"):
        from .providers.refresh import probe_all

        # Once committed, the authorization probe of each URL provider the file saved (created or
        # changed); inline providers are probed on demand (`provider probe`, the console).
        saved = set(report["created"]["tool_providers"]) | {
            c.split(" (")[0] for c in report["changed"]["tool_providers"]}
        pulled = [p["provider"] for p in report["spec_pulls"] if p["provider"] in saved]
        if pulled:
            report["authz_probes"] = probe_all(_hub().db, pulled)
    _emit(report)


# ------------------------------------------------------------------ config-audit

@main.group("config-audit")
def config_audit():
    """The configuration-change log (GET /admin/api/config-audit)."""


@config_audit.command("prune")
@hub_command
def config_audit_prune():
    """Delete the log's rows older than BAILING_AUDIT_RETENTION_DAYS now (0, the default, keeps
    them all), as each serving process does every 6 h; prints what was deleted."""
    from .config_audit.retention import days_from_env, prune_once

    _emit(prune_once(_hub().db, days_from_env()))


# ------------------------------------------------------------------ retention, holds, erasure

def _door(verb: str, path: str):
    """The command line's door into the configuration-change log: `cli:<login>`, a verb, a path."""
    from .identity.admins import operator
    from .retention.audit import Door

    return Door(operator().name, verb, path)


@main.group()
def retention():
    """Retention policies of conversation messages, and the purge that redacts what expired."""


@retention.group("policy")
def retention_policy():
    """How long an app's (or one route's) messages keep their text."""


@retention_policy.command("set")
@click.option("--app", "app_id", required=True, help="The client app_id.")
@click.option("--route", "route_key", default="*", show_default=True,
              help="A route key, or * for every route of the app without a policy of its own.")
@click.option("--keep-days", type=int, default=None, metavar="N", help="Redact messages older than N days.")
@click.option("--keep", is_flag=True, help="Keep the messages (a route's `keep` wins over the app's *).")
@hub_command
def retention_policy_set(app_id: str, route_key: str, keep_days: int | None, keep: bool):
    """Create or change the policy of APP (and ROUTE)."""
    from .retention import policies

    if keep == (keep_days is not None):
        _fail("invalid_request", "Give either --keep-days N or --keep.")
    app, route, days = policies.parse({"client_app_id": app_id, "route_key": route_key, "keep_days": keep_days})
    with _hub().db.session() as session:
        _emit(policies.set_policy(session, _door("SET", f"retention/policies/{app}/{route}"), app, route, days))


@retention_policy.command("remove")
@click.option("--app", "app_id", required=True, help="The client app_id.")
@click.option("--route", "route_key", default="*", show_default=True, help="A route key, or *.")
@hub_command
def retention_policy_remove(app_id: str, route_key: str):
    """Remove the policy of APP (and ROUTE): its messages are kept from then on, unless the app's
    * policy applies."""
    from .retention import policies

    with _hub().db.session() as session:
        _emit(policies.remove_policy(session, _door("REMOVE", f"retention/policies/{app_id}/{route_key}"),
                                     app_id, route_key))


@retention_policy.command("list")
@hub_command
def retention_policy_list():
    """Every policy, by app, its * first."""
    from .retention import policies

    with _hub().db.session() as session:
        _emit({"policies": policies.list_policies(session)})


@retention.command("run")
@hub_command
def retention_run():
    """Run the purge now (as every serving process does every BAILING_RETENTION_PURGE_SECONDS):
    redacts the messages whose policy's time is up, skipping held archives; prints the run."""
    from .identity.admins import operator
    from .retention import purge

    done = purge.run(_hub().db, operator().name)
    assert done is not None  # only a scheduled run answers none
    _emit(done)


@retention.command("runs")
@hub_command
def retention_runs():
    """The latest purge runs, newest first."""
    from .retention import purge

    with _hub().db.session() as session:
        _emit({"runs": purge.list_runs(session, limits.RETENTION_LIST_LIMIT[0])})


@main.group()
def holds():
    """Legal holds: while one is placed, no purge or erasure touches what it covers."""


@holds.command("place")
@click.option("--archive", "archive_id", default=None, help="An archive (conversation audit) id.")
@click.option("--principal", default=None, help="A principal id: every archive it is a member of.")
@click.option("--tenant", default=None, help="A tenant: every archive with a member of it.")
@click.option("--reason", required=True, help="Why (kept in the hold and the configuration-change log).")
@hub_command
def holds_place(archive_id: str | None, principal: str | None, tenant: str | None, reason: str):
    """Place a hold on one archive, one principal or one tenant."""
    from .retention import holds as legal_holds

    given = [(s, v) for s, v in (("archive", archive_id), ("principal", principal), ("tenant", tenant))
             if v is not None]
    if len(given) != 1:
        _fail("invalid_request", "Give exactly one of --archive, --principal, --tenant.")
    scope, value, why = legal_holds.parse_place({"scope": given[0][0], "value": given[0][1], "reason": reason})
    with _hub().db.session() as session:
        _emit(legal_holds.place(session, _door("PLACE", "legal-holds"), scope, value, why))


@holds.command("release")
@click.argument("hold_id")
@click.option("--reason", required=True, help="Why it is released.")
@hub_command
def holds_release(hold_id: str, reason: str):
    """Release hold HOLD_ID."""
    from .retention import holds as legal_holds

    number = legal_holds.parse_hold_id(hold_id)
    why = legal_holds.parse_release({"reason": reason})
    with _hub().db.session() as session:
        _emit(legal_holds.release(session, _door("RELEASE", f"legal-holds/{number}/release"), number, why))


@holds.command("list")
@hub_command
def holds_list():
    """Active holds, then released ones, newest first."""
    from .retention import holds as legal_holds

    with _hub().db.session() as session:
        _emit({"holds": legal_holds.list_holds(session, limits.RETENTION_LIST_LIMIT[2])})


@main.group()
def erasure():
    """Erasure of one principal's conversation messages."""


@erasure.command("request")
@click.option("--principal", required=True, help="The principal id whose messages are erased.")
@click.option("--reason", required=True, help="Why (e.g. the data subject's request and its reference).")
@hub_command
def erasure_request(principal: str, reason: str):
    """Erase the messages of PRINCIPAL's turns in every archive it is a member of, now; refused
    (legal_hold_applies, nothing erased) while a legal hold covers any of them."""
    from .retention import erasure as erasures

    principal_id, why = erasures.parse({"principal_id": principal, "reason": reason})
    with _hub().db.session() as session:
        _emit(erasures.request_erasure(session, _door("ERASE", "erasure-requests"), principal_id, why))


@erasure.command("list")
@hub_command
def erasure_list():
    """The erasure requests, newest first."""
    from .retention import erasure as erasures

    with _hub().db.session() as session:
        _emit({"requests": erasures.list_requests(session, limits.RETENTION_LIST_LIMIT[2])})


# ------------------------------------------------------------------ provider

@main.group()
def provider():
    """Tool providers: pull a spec from its spec_url now, probe authorization, show their state."""


def _provider_call(call, name: str):
    from .providers.refresh import NotPulled, ProviderMissing

    try:
        return call(name)
    except ProviderMissing:
        _fail("provider_not_found", f"No tool provider named {name}.")
    except NotPulled:
        _fail("provider_not_pulled", f"The spec of {name} is given inline (openapi): apply a new one with "
                                     "config apply.")


@provider.command("refresh")
@click.argument("name")
@hub_command
def provider_refresh(name: str):
    """Pull NAME's spec from its spec_url now; on success, probe its authorization."""
    from .providers.refresh import refresh

    report = _provider_call(lambda n: refresh(_hub().db, n, "manual"), name)
    if not report["ok"]:
        _fail("spec_pull_failed", f"The spec of {name} could not be pulled ({report['error']}); the stored "
                                  "spec is kept.", provider=name, spec_access_probe=report["spec_access_probe"])
    _emit(report)


@provider.command("probe")
@click.argument("name")
@hub_command
def provider_probe(name: str):
    """Run NAME's authorization probe now (a health check: it never blocks a call)."""
    from .providers.refresh import probe

    _emit({"provider": name, "authz_probe": _provider_call(lambda n: probe(_hub().db, n), name)})


@provider.command("show")
@click.argument("name", required=False)
@hub_command
def provider_show(name: str | None):
    """NAME's spec source, last pull and probes; every provider without NAME."""
    from .providers.status import describe, list_all

    with _hub().db.session() as session:
        if name is None:
            _emit({"providers": list_all(session)})
        else:
            _emit(_provider_call(lambda n: describe(session, n), name))


# ------------------------------------------------------------------ tools

@main.group()
def tools():
    """The compiled tool catalog."""


@tools.command("warnings")
@click.option("--provider", default=None, help="Only this provider.")
@hub_command
def tools_warnings(provider: str | None):
    """Compile warnings of every provider, as this version of the hub compiles them."""
    from sqlalchemy import select

    from .catalog.compiler import COMPILER_VERSION
    from .catalog.store import compiled_providers
    from .identity.models import ToolProvider

    with _hub().db.session() as session:
        query = select(ToolProvider).order_by(ToolProvider.name)
        if provider is not None:
            query = query.where(ToolProvider.name == provider)
        rows = list(session.scalars(query))
        if provider is not None and not rows:
            _fail("provider_not_found", f"No tool provider named {provider}.")
        compiled = compiled_providers(session, [r.name for r in rows])
        warnings: list[dict[str, Any]] = []
        for row in rows:
            current = compiled[row.name].warnings
            if row.compile_warnings != current or row.compiler_version != COMPILER_VERSION:
                row.compile_warnings, row.compiler_version = current, COMPILER_VERSION
            warnings.extend({"provider": row.name, **w} for w in current)
        _emit({"compiler_version": COMPILER_VERSION, "warnings": warnings})


# ------------------------------------------------------------------ demo

@main.command("demo")
@click.option("--reset", is_flag=True, help="Start from an empty database (drops the hub's tables).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the hub listens on.")
@click.option("--port", default=5000, show_default=True, type=int,
              help="Port of the hub and its console (0: any free port).")
@click.option("--business-port", default=0, show_default=True, type=int,
              help="Port of the demo business system on 127.0.0.1 (consent pages, CRM, ERP); "
                   "0: any free port, printed at the end.")
@click.option("--seed-only", is_flag=True, help="Seed, print a JSON summary and exit instead of serving.")
@hub_command
def demo(reset: bool, host: str, port: int, business_port: int, seed_only: bool):
    """Start a living demo hub: database, migrations, a demo CRM and ERP, data made through the
    hub's own APIs, and the console; then print the sign-ins and the agent login command."""
    import logging

    from .demo.command import PortInUse, run_demo
    from .demo.seed import SeedError

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log lines under the progress bar
    logging.getLogger("bailing.request").setLevel(logging.WARNING)  # nor the request log
    try:
        # current_app is a proxy typed as the app itself; this is its documented way to the real one.
        app = current_app._get_current_object()  # type: ignore[attr-defined]
        summary = run_demo(app, host, port, reset, serve=not seed_only, business_port=business_port)
    except PortInUse as err:
        _fail("port_in_use", str(err), option=err.option, port=err.port)
    except (SeedError, OSError) as err:
        _fail("demo_failed", str(err))
    if seed_only:
        _emit(summary)


# ------------------------------------------------------------------ agent (local developer)

@main.group()
def agent():
    """For local-agent developers: connect an agent to a hub through the browser."""


@agent.command("login")
@click.option("--hub", "hub_url", required=True, help="The hub's base URL, e.g. http://127.0.0.1:5000")
@click.option("--client", "client_app_id", required=True, help="The business system's public app_id.")
@click.option("--route", "routes", required=True, multiple=True, help="The workspace (route) to request.")
@click.option("--device-label", default=None)
@click.option("--store", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to keep the session (default ~/.config/bailing/agent-session.json, mode 0600).")
@click.option("--no-browser", is_flag=True, help="Print the address instead of opening a browser.")
@click.option("--sdk-credential-file", "sdk_file", is_flag=False, flag_value="", default=None,
              metavar="[PATH]",
              help="Keep the session in the official Agent Client SDK's credential file instead (default "
                   "$BAILINGHUB_CREDENTIAL_FILE, else ~/.config/bailinghub/agent-credentials.json), so its "
                   "MCP server runs on it; one --route.")
def agent_login(hub_url, client_app_id, routes, device_label, store, no_browser, sdk_file):
    """Authorize a local agent in the business system's page and store its Agent Session."""
    from .agent_client import DEFAULT_STORE, AgentAuthError, login

    def show(url: str) -> None:
        click.echo(f"Open this address to approve the agent:\n  {url}", err=True)

    if sdk_file is not None:
        _agent_login_to_sdk_file(hub_url, client_app_id, routes, device_label, store, sdk_file,
                                 show if no_browser else None)
        return
    try:
        session = login(hub_url, client_app_id, list(routes), device_label=device_label,
                        store=store or DEFAULT_STORE, open_url=show if no_browser else None)
    except AgentAuthError as err:
        _fail("agent_login_failed", str(err))
    _emit({"session_id": session["session_id"], "allowed_routes": session["allowed_routes"],
           "access_expires_at": session["access_expires_at"],
           "refresh_expires_at": session["refresh_expires_at"],
           "stored_in": str(store or DEFAULT_STORE)})


def _agent_login_to_sdk_file(hub_url, client_app_id, routes, device_label, store, given, open_url):
    """`agent login --sdk-credential-file`: the session goes to the SDK's file only (one refresh
    token in two stores would be spent twice, which revokes the session)."""
    import os

    from .agent_sdk import credential_file
    from .agent_sdk.errors import AgentSdkError

    if store is not None:
        _fail("agent_login_failed", "--store and --sdk-credential-file exclude each other: "
                                    "a session lives in one store")
    if len(routes) != 1:
        _fail("agent_login_failed", "the SDK's credential file holds one route: give exactly one --route")
    try:
        path = given or credential_file.default_path()
        result = credential_file.login(hub_url, client_app_id, routes[0], path=path, device_label=device_label,
                                       open_url=open_url)
    except AgentSdkError as err:
        _fail("agent_login_failed", str(err))
    content = result["content"]
    environment = {credential_file.OPT_IN_ENV: "true"}
    if path != credential_file.default_path({k: v for k, v in os.environ.items() if k != credential_file.FILE_ENV}):
        environment[credential_file.FILE_ENV] = path
    click.echo("On Linux the Agent Client SDK reads this file only with "
               f"{credential_file.OPT_IN_ENV}=true in its environment"
               + (f" (and {credential_file.FILE_ENV}={path})" if credential_file.FILE_ENV in environment else "")
               + ".", err=True)
    _emit({"session_id": content["session_id"], "allowed_routes": result["allowed_routes"],
           "access_expires_at": content["access_expires_at"], "refresh_expires_at": content["refresh_expires_at"],
           "stored_in": os.path.abspath(path), "format": "bailinghub-agent-credentials-v1",
           "replaced_session_id": result["replaced_session_id"], "sdk_environment": environment})


# ------------------------------------------------------------------ knowledge

@main.group()
def knowledge():
    """Reference knowledge of routes."""


@knowledge.command("add")
@click.argument("route")
@click.argument("files", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@hub_command
def knowledge_add(route: str, files: tuple[Path, ...]):
    """Add or replace Markdown (.md) and text (.txt) FILES as ROUTE's knowledge, all or none."""
    from sqlalchemy import select

    from .identity.models import Route
    from .runtime.knowledge import add_document

    with _hub().db.session() as session:
        if session.scalar(select(Route.id).where(Route.route_key == route)) is None:
            _fail("route_not_found", f"No route named {route}.")
        _emit({"documents": [add_document(session, route, f) for f in files]})


# ------------------------------------------------------------------ clients

@main.group()
def clients():
    """Client apps (business systems)."""


def _note_command(session, verb: str, path: str) -> None:
    """A change made here, in the configuration-change log with what the service staged."""
    from .config_audit.log import record_change
    from .identity.admins import operator

    record_change(session, operator().name, verb, path)


@clients.command("token")
@click.argument("app_id")
@hub_command
def clients_token(app_id: str):
    """Issue or rotate APP_ID's Client Token; it is printed once."""
    from .identity.clients import rotate_client_token

    with _hub().db.session() as session:
        answer = rotate_client_token(session, app_id, _hub().secret_key)
        _note_command(session, "ROTATE" if answer["rotated"] else "ISSUE", f"clients/{app_id}/token")
    _emit(answer)


@clients.command("revoke-token")
@click.argument("app_id")
@hub_command
def clients_revoke_token(app_id: str):
    """Revoke APP_ID's Client Token (nothing is issued in its place)."""
    from .identity.clients import revoke_client_token

    with _hub().db.session() as session:
        answer = revoke_client_token(session, app_id)
        _note_command(session, "REVOKE", f"clients/{app_id}/token")
    _emit(answer)


# ------------------------------------------------------------------ executors

@main.group()
def executors():
    """Executors and their tokens (Core's executor protocol)."""


@executors.command("list")
@hub_command
def executors_list():
    """Executors as they last reported; `online` when seen within 2 minutes."""
    from .jobs.executor_tokens import list_executors

    with _hub().db.session() as session:
        _emit({"executors": list_executors(session)})


@executors.group("token")
def executors_token():
    """Executor tokens, scoped to targets; printed once on issue and rotation."""


@executors_token.command("issue")
@click.argument("name")
@click.option("--targets", required=True, help='Comma-separated target names, or "*" for all.')
@click.option("--description", default="", help="Shown in lists.")
@hub_command
def executors_token_issue(name: str, targets: str, description: str):
    """Issue a token for NAME (refused when NAME exists: rotate it instead)."""
    from .jobs.executor_tokens import note_command, issue

    with _hub().db.session() as session:
        answer = issue(session, name, targets.split(","), description)
        note_command(session, "ISSUE", name)
    _emit(answer)


@executors_token.command("rotate")
@click.argument("name")
@hub_command
def executors_token_rotate(name: str):
    """Issue a new token for NAME; the previous one stops working at once."""
    from .jobs.executor_tokens import note_command, rotate

    with _hub().db.session() as session:
        answer = rotate(session, name)
        note_command(session, "ROTATE", name)
    _emit(answer)


@executors_token.command("revoke")
@click.argument("name")
@hub_command
def executors_token_revoke(name: str):
    """Delete NAME's token: it is refused (401) from the next request on."""
    from .jobs.executor_tokens import note_command, revoke

    with _hub().db.session() as session:
        answer = revoke(session, name)
        note_command(session, "REVOKE", name)
    _emit(answer)


@executors_token.command("list")
@hub_command
def executors_token_list():
    """Every executor token, masked to its last four characters."""
    from .jobs.executor_tokens import list_tokens

    with _hub().db.session() as session:
        _emit({"tokens": list_tokens(session)})


# ------------------------------------------------------------------ sessions

@main.group()
def sessions():
    """Agent Sessions."""


@sessions.command("issue")
@click.option("--client", "client_app_id", required=True, help="The client app_id.")
@click.option("--routes", required=True, help="Comma-separated route keys.")
@click.option("--principal", "principal_json", help='JSON, e.g. {"id": "user-42", "tenant": "t7"}.')
@click.option("--on-behalf-of", "on_behalf_of", help="The subject sent to business tools.")
@click.option("--access-ttl", type=int, default=None, help="Access token lifetime in seconds.")
@click.option("--refresh-ttl", type=int, default=None, help="Session (refresh) lifetime in seconds.")
@click.option("--device-label", default=None)
@click.option("--task-enrolled", is_flag=True, help="Turns of this session must carry a task_binding.")
@hub_command
def sessions_issue(client_app_id, routes, principal_json, on_behalf_of, access_ttl, refresh_ttl,
                   device_label, task_enrolled):
    """Issue an Agent Session directly (operators and tests; agents use the browser flow)."""
    from .identity.sessions import issue_session

    principal = None
    if principal_json is not None:
        try:
            principal = strict_json_loads(principal_json)
        except ValueError as err:
            _fail("invalid_request", f"--principal is not valid JSON: {err}")
    settings = _hub().settings
    with _hub().db.session() as session:
        _emit(issue_session(
            session,
            client_app_id=client_app_id,
            routes=routes.split(","),
            principal=principal,
            on_behalf_of=on_behalf_of,
            access_ttl=settings.access_token_ttl if access_ttl is None else access_ttl,
            refresh_ttl=settings.refresh_token_ttl if refresh_ttl is None else refresh_ttl,
            device_label=device_label,
            task_enrolled=task_enrolled,
        ))


@sessions.command("revoke")
@click.argument("session_id")
@hub_command
def sessions_revoke(session_id: str):
    """Revoke an Agent Session at once: its tokens stop working."""
    from .identity.sessions import revoke_session

    with _hub().db.session() as session:
        _emit(revoke_session(session, session_id))


# ------------------------------------------------------------------ admins

@main.group()
def admins():
    """Console users and their API tokens."""


@admins.command("create")
@click.argument("username")
@click.option("--role", required=True, help="admin, auditor, approver or support.")
@click.option("--password-stdin", is_flag=True, required=True,
              help="Read the password from standard input (never from the command line).")
@hub_command
def admins_create(username: str, role: str, password_stdin: bool):
    """Create a console user."""
    from .identity.admins import create_admin

    password = sys.stdin.readline().rstrip("\r\n")
    with _hub().db.session() as session:
        _emit(create_admin(session, username, role, password))


@admins.command("token")
@click.argument("username")
@click.option("--days", type=int, default=90, show_default=True, help="Days until the token expires.")
@hub_command
def admins_token(username: str, days: int):
    """Issue a personal admin API token (a bearer for /admin/api); it is printed once."""
    from .identity.admins import issue_admin_token

    with _hub().db.session() as session:
        _emit(issue_admin_token(session, username, days=days))


@admins.command("list")
@hub_command
def admins_list():
    """Every console user: role, state, open sessions, live tokens."""
    from .identity.admins import list_admins

    with _hub().db.session() as session:
        _emit({"admins": list_admins(session)})


@admins.command("disable")
@click.argument("username")
@hub_command
def admins_disable(username: str):
    """Disable USERNAME: sign-in and tokens are refused, open sessions end."""
    from .identity.admins import operator, set_disabled

    with _hub().db.session() as session:
        _emit(set_disabled(session, operator(), username, True))


@admins.command("enable")
@click.argument("username")
@hub_command
def admins_enable(username: str):
    """Enable USERNAME again."""
    from .identity.admins import operator, set_disabled

    with _hub().db.session() as session:
        _emit(set_disabled(session, operator(), username, False))


@admins.command("set-role")
@click.argument("username")
@click.argument("role")
@hub_command
def admins_set_role(username: str, role: str):
    """Give USERNAME another ROLE (admin, auditor, approver or support)."""
    from .identity.admins import operator, set_role

    with _hub().db.session() as session:
        _emit(set_role(session, operator(), username, role))


@admins.command("reset-password")
@click.argument("username")
@click.option("--password-stdin", is_flag=True, required=True,
              help="Read the new password from standard input (never from the command line).")
@hub_command
def admins_reset_password(username: str, password_stdin: bool):
    """Set a new password for USERNAME; every session of theirs ends."""
    from .identity.admins import operator, reset_password

    password = sys.stdin.readline().rstrip("\r\n")
    with _hub().db.session() as session:
        _emit(reset_password(session, operator(), username, password))


@admins.group("tokens")
def admins_tokens():
    """An admin's API tokens."""


@admins_tokens.command("list")
@click.argument("username")
@hub_command
def admins_tokens_list(username: str):
    """USERNAME's tokens with their expiry, last use and state (never the token itself)."""
    from .identity.admins import list_tokens

    with _hub().db.session() as session:
        _emit({"username": username, "tokens": list_tokens(session, username)})


@admins_tokens.command("revoke")
@click.argument("username")
@click.option("--id", "token_id", type=int, default=None, help="The token to revoke.")
@click.option("--all", "every", is_flag=True, help="Revoke every live token of USERNAME.")
@hub_command
def admins_tokens_revoke(username: str, token_id: int | None, every: bool):
    """Revoke one of USERNAME's tokens (--id) or all of them (--all)."""
    from .identity.admins import operator, revoke_tokens

    if (token_id is None) == (not every):
        _fail("invalid_request", "Give exactly one of --id N and --all.")
    with _hub().db.session() as session:
        _emit(revoke_tokens(session, operator(), username, token_id))


@admins.group("sessions")
def admins_sessions():
    """An admin's console sessions."""


@admins_sessions.command("end")
@click.argument("username")
@hub_command
def admins_sessions_end(username: str):
    """End every console session of USERNAME at once."""
    from .identity.admins import operator, end_sessions

    with _hub().db.session() as session:
        _emit(end_sessions(session, operator(), username))


# ------------------------------------------------------------------ tasks

@main.group()
def tasks():
    """Task control (docs/operations.md, "Task control"): list, show, create and pause / resume /
    cancel tasks."""


def _task_actor(session, username: str) -> str:
    """The admin a create or control is made as: its username keys the request (the same admin
    repeating a request id addresses the same task or control), as the console and the API do."""
    from sqlalchemy import select

    from .identity.models import Admin
    from .identity.roles import permissions_of

    admin = session.scalar(select(Admin).where(Admin.username == username))
    if admin is None:
        _fail("admin_not_found", f"No admin named {username}.")
    if admin.disabled:
        _fail("admin_disabled", f"{username} is disabled.")
    if "clients:write" not in permissions_of(admin.role):
        _fail("forbidden", f"{username}'s role ({admin.role}) does not hold clients:write.")
    return username


def _task_body(file: str) -> Any:
    try:
        raw = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        _fail("invalid_request", f"Cannot read {file}: {err}")
    try:
        return strict_json_loads(raw)
    except (ValueError, RecursionError) as err:
        _fail("TASK_INVALID_INPUT", f"{file} is not valid JSON: {err}")


@tasks.command("list")
@click.option("--limit", default=None, metavar="N", help="Tasks per page, 1-100 (default 30).")
@click.option("--before", default=None, metavar="TASK_ID", help="Continue after this task (a next_cursor).")
@hub_command
def tasks_list(limit: str | None, before: str | None):
    """Tasks in the admin API's order (task id, descending) with next_cursor for the next page."""
    from .tasks import admin

    with _hub().db.session() as session:
        _emit(admin.list_tasks(session, admin.page_limit(limit), admin.cursor(before)))


@tasks.command("show")
@click.argument("task_id")
@click.option("--limit", default=None, metavar="N", help="Invocation records per page, 1-100 (default 30).")
@click.option("--before", default=None, metavar="JOB_ID", help="Continue the invocation records after this job.")
@hub_command
def tasks_show(task_id: str, limit: str | None, before: str | None):
    """One task with a page of its invocation records and its bound runs (newest first)."""
    from .tasks import admin

    with _hub().db.session() as session:
        view = admin.detail(session, task_id, admin.page_limit(limit), admin.cursor(before))
        _emit({**view, "runs": admin.runs(session, view["task"]["task_id"])})


@tasks.command("create")
@click.option("--actor", required=True, metavar="USERNAME",
              help="The admin the task is created as (an existing admin holding clients:write).")
@click.option("--file", "file", required=True, metavar="BODY.json",
              help='The create body, as POST /admin/api/agent-tasks takes it ("-": standard input).')
@hub_command
def tasks_create(actor: str, file: str):
    """Create a task (members verified and enrolled); repeating the same body is answered with
    the task it made."""
    from .tasks import admin

    body = _task_body(file)
    with _hub().db.session() as session:
        _emit(admin.create(session, _task_actor(session, actor), body))


@tasks.command("control")
@click.argument("task_id")
@click.option("--actor", required=True, metavar="USERNAME",
              help="The admin the control is made as (an existing admin holding clients:write).")
@click.option("--action", required=True, metavar="pause|resume|cancel", help="What to do.")
@click.option("--expected-revision", "expected_revision", required=True, metavar="N",
              help="The revision of the task as last read; a stale one is refused.")
@click.option("--request-id", "request_id", required=True, metavar="ID",
              help="Keep it when retrying the same control after a lost answer.")
@hub_command
def tasks_control(task_id: str, actor: str, action: str, expected_revision: str, request_id: str):
    """Pause, resume or cancel a task, as of the revision given."""
    from .tasks import admin

    revision: int | str = int(expected_revision) if expected_revision.isascii() and expected_revision.isdigit() \
        else expected_revision
    with _hub().db.session() as session:
        _emit(admin.control(session, _task_actor(session, actor), task_id,
                            {"request_id": request_id, "expected_revision": revision, "action": action}))


# ------------------------------------------------------------------ notifications

@main.group()
def notifications():
    """Notifications of new approvals (channels: `approval_notifications` in the config file)."""


@notifications.command("deliver")
@click.option("--once", is_flag=True, help="Send what is due now, print what was done, and exit.")
@hub_command
def notifications_deliver(once: bool):
    """Send due approval notifications: once, or on and on (as each serving process does in a
    thread of its own) until interrupted."""
    import threading

    from .notifications.bell import BELL
    from .notifications.worker import POLL_SECONDS, counts, deliver_due

    hub = _hub()
    if once:
        report = deliver_due(hub.db, hub.settings)
        _emit({**report.as_json(), "deliveries": counts(hub.db)})
        return
    stop = threading.Event()
    try:
        while True:
            seen = BELL.count
            deliver_due(hub.db, hub.settings, stop)
            BELL.wait(seen, POLL_SECONDS)
    except KeyboardInterrupt:
        stop.set()
        _emit({"stopped": True})


# ------------------------------------------------------------------ jobs

@main.group()
def jobs():
    """Client API jobs (Core's POST /run): their completion callbacks and dead letters."""


@jobs.command("callbacks")
@click.option("--dead", is_flag=True, help="Only the dead letters not yet resolved (as GET /admin/api/delivery-dlq).")
@click.option("--job", "job_id", default=None, metavar="JOB_ID", help="Every callback of this job, with its attempts.")
@click.option("--limit", type=click.IntRange(*limits.DEAD_LETTER_LIMIT[1:]), default=limits.DEAD_LETTER_LIMIT[0],
              show_default=True)
@hub_command
def jobs_callbacks(dead: bool, job_id: str | None, limit: int):
    """Completion callbacks, newest first, with their attempts; URLs shown as their origin only."""
    from .jobs import dead_letters

    with _hub().db.session() as session:
        if job_id is not None:
            found = dead_letters.of_job(session, job_id)
            if found is None:
                _fail("not_found", f"No job {job_id}.")
            assert found is not None
            _emit({"job_id": job_id, "callbacks": [c for c in found if not dead or c["state"] == "dead"]})
        elif dead:
            _emit({"items": dead_letters.letters(session, False, limit)})
        else:
            _emit({"callbacks": dead_letters.recent(session, False, limit)})


@jobs.command("deliver-callbacks")
@click.option("--once", is_flag=True, help="Send what is due now, print what was done, and exit.")
@hub_command
def jobs_deliver_callbacks(once: bool):
    """Post due completion callbacks: once, or on and on (as each serving process does in a thread
    of its own unless BAILING_JOB_CALLBACKS=off) until interrupted."""
    import threading

    from .jobs import callbacks
    from .jobs.callback_worker import deliver_due

    hub = _hub()
    if once:
        _emit(deliver_due(hub.db, hub.settings, current_app.secret_key).as_json())
        return
    stop = threading.Event()
    try:
        while True:
            seen = callbacks.BELL.count
            deliver_due(hub.db, hub.settings, current_app.secret_key, stop)
            callbacks.BELL.wait(seen, min(hub.settings.job_callback_poll_seconds, 1.0))
    except KeyboardInterrupt:
        stop.set()
        _emit({"stopped": True})


@jobs.command("callback-replay")
@click.argument("callback_id", type=click.IntRange(1, 2**63 - 1))
@hub_command
def jobs_callback_replay(callback_id: int):
    """Send a dead callback again now (a new cycle of attempts, the first one here). Exits 1 when
    it was not delivered."""
    from .identity.admins import operator
    from .jobs import dead_letters

    hub = _hub()
    done = dead_letters.replay(hub.db, hub.settings, current_app.secret_key, callback_id, operator().name)
    if done.status == "not_found":
        _fail("not_found", f"No callback {callback_id}.")
    ok = done.status == "delivered" or done.note is not None
    _emit({"ok": ok, "id": callback_id, "status": done.status,
           **({"note": done.note} if done.note else {}), **({} if ok else {"error": done.error})})
    if not ok:
        sys.exit(1)


@jobs.command("callback-resolve")
@click.argument("callback_id", type=click.IntRange(1, 2**63 - 1))
@hub_command
def jobs_callback_resolve(callback_id: int):
    """Mark a dead callback resolved: it leaves the dead-letter list, nothing more is sent."""
    from .identity.admins import operator
    from .jobs import dead_letters

    with _hub().db.session() as session:
        done = dead_letters.resolve(session, callback_id, operator().name)
    if done.status == "not_found":
        _fail("not_found", f"No callback {callback_id}.")
    ok = done.status == "resolved" or done.note is not None
    _emit({"ok": ok, "id": callback_id, "status": done.status,
           **({"note": done.note} if done.note else {}), **({} if ok else {"error": done.error})})
    if not ok:
        sys.exit(1)


# ------------------------------------------------------------------ hub pause

def _set_paused(paused: bool, reason: str | None) -> None:
    from .identity.admins import operator
    from .runtime import pause

    checked = pause.check_reason(reason)
    with _hub().db.session() as session:
        _emit(pause.set_paused(session, operator(), paused, checked, "cli"))


@main.command("pause")
@click.option("--reason", required=True, help="Why (shown on the console's banner; recorded).")
@hub_command
def pause_command(reason: str):
    """Pause the hub: every process stops taking new turns and governed calls (docs/operations.md)."""
    _set_paused(True, reason)


@main.command("resume")
@click.option("--reason", default=None, help="Why (recorded).")
@hub_command
def resume_command(reason: str | None):
    """Resume a paused hub."""
    _set_paused(False, reason)


# ------------------------------------------------------------------ evidence log

@main.group()
def evidence():
    """The evidence log: signed tree heads, key rotation, checks and offline proof verification."""


@evidence.command("head")
@hub_command
def evidence_head():
    """Sign a tree head of the log as committed now (the existing one when nothing was added)."""
    from .evidence.heads import make_head

    with _hub().db.session() as session:
        _emit(make_head(session, _hub().settings.data_dir))


@evidence.command("rotate-key")
@hub_command
def evidence_rotate_key():
    """A new signing key in the data folder; the old public key is kept, retired, so the heads it
    signed still verify."""
    from .evidence.heads import rotate_key

    with _hub().db.session() as session:
        _emit(rotate_key(session, _hub().settings.data_dir))


@evidence.command("backfill")
@click.option("--batch", "batch_size", type=click.IntRange(1, 50000), default=5000, show_default=True,
              help="Rows per transaction.")
@hub_command
def evidence_backfill(batch_size: int):
    """Leaves for the records stored before the evidence log covered them (messages first given
    their salt), in batches that commit one by one: resumable, and a second run appends nothing.
    Prints, per kind, the rows walked, leaves appended, salts given and rows left unverifiable."""
    from .integrity.backfill import run

    report = run(_hub().db.session, batch_size)
    _emit({"appended": sum(k["appended"] for k in report.values()), "kinds": report})
    if any(k["problems"] for k in report.values()):
        sys.exit(1)


@evidence.command("check")
@hub_command
def evidence_check():
    """Recompute every stored leaf against the latest signed head, and every row of every kind
    against its leaf (the background verifier's pass, recorded like its passes); exit 1 naming
    the first leaf that does not verify."""
    from .integrity.verifier import run_pass

    report = run_pass(_hub().db)
    _emit(report)
    if not report["ok"]:
        sys.exit(1)


@evidence.command("verify-proof")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--public-key", "public_keys", multiple=True, required=True, metavar="KEY",
              help="An Ed25519 public key: standard base64 of its 32 bytes, or a file holding that. "
                   "Repeat for heads signed before a rotation.")
def evidence_verify_proof(file: Path, public_keys: tuple[str, ...]):
    """Check an inclusion or consistency proof bundle (as GET /admin/api/evidence/proof/... answers)
    offline, with only the public key: prints ok, or exits 1 naming what failed."""
    import base64
    import binascii

    from .evidence.verify import BundleError, verify_bundle

    keys = []
    for given in public_keys:
        text = Path(given).read_text().strip() if Path(given).is_file() else given
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            _fail("invalid_request", f"--public-key {given}: not the base64 of a 32-byte Ed25519 public key")
        keys.append(raw)
    try:
        bundle = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        _fail("invalid_request", f"{file}: not a JSON file ({err})")
    try:
        shown = verify_bundle(bundle, keys)
    except BundleError as err:
        _emit({"ok": False, "problem": str(err)})
        sys.exit(1)
    _emit({"ok": True, "verified": shown})


# ------------------------------------------------------------------ audit

@main.group()
def audit():
    """Audit records checked anywhere: a transcript export verified offline."""


def _refuse(message: str) -> None:
    """A refusal of `audit verify`: exit 2, so that 1 always means "does not verify"."""
    click.echo(json.dumps({"error": "invalid_request", "message": message}, indent=2, ensure_ascii=False), err=True)
    sys.exit(2)


# No app context: checking a file needs no hub, and making one would cost seconds (it hashes a
# dummy password and imports every blueprint).
@audit.command("verify", with_appcontext=False)
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--public-key", "public_keys", multiple=True, required=True, metavar="KEY",
              help="An Ed25519 public key: standard base64 of its 32 bytes, or a file holding that "
                   "(GET /admin/api/evidence/keys). Repeat for heads signed before a rotation.")
def audit_verify(file: Path, public_keys: tuple[str, ...]):
    """Check a transcript export (the console's export.json) offline, with only the public key and
    no database: exit 0 when every record verifies, 1 naming the first leaf that does not, 2 when the
    file or a key cannot be read."""
    import base64
    import binascii

    from .evidence.transcript_verify import verify

    keys = []
    for given in public_keys:
        try:
            text = Path(given).read_text().strip() if Path(given).is_file() else given
            raw = base64.b64decode(text, validate=True)
        except (OSError, UnicodeDecodeError, binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            _refuse(f"--public-key {given}: not the base64 of a 32-byte Ed25519 public key")
        keys.append(raw)
    try:
        export = json.loads(file.read_bytes())
    except OSError as err:
        _refuse(f"{file}: cannot be read ({err.strerror or err})")
    except (ValueError, UnicodeDecodeError) as err:
        _refuse(f"{file}: not a JSON file ({err})")
    report = verify(export, keys).report()
    _emit(report)
    if not report["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
