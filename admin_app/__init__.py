"""The Bailing hub: a governance hub for local AI agents working inside business systems."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from flask import Flask, redirect, url_for
from flask.json.provider import DefaultJSONProvider
from werkzeug.middleware.proxy_fix import ProxyFix

from . import resources
from .config import Settings
from .db import Database
from .errors import register_error_handlers
from .surfaces import is_api_path


@dataclass
class Hub:
    """What every request and command reaches through app.extensions["bailing"]."""

    settings: Settings
    db: Database

    @property
    def secret_key(self) -> str:
        """The app's secret key (BAILING_SECRET_KEY, else the data folder's), for code that has
        the hub but no app context: Client Tokens are sealed with it (identity/sealing.py)."""
        return self.settings.secret_key or _local_secret_key(self.settings.data_dir)


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app. `test_config` overrides Settings fields, e.g. {"database_url": ...}.
    Nothing here touches the database: it is reached on first use, and never migrated here."""
    settings = Settings.from_env()
    if test_config:
        settings = settings.replace(**test_config)
        if "notifications" not in test_config:
            # The suite's and the benchmarks' in-process apps deliver no notifications unless
            # they ask: their database is dropped under them when they are done.
            settings = settings.replace(notifications=False)
        if "spec_auto_refresh" not in test_config:
            settings = settings.replace(spec_auto_refresh=False)  # nor pull specs on a schedule
        if "job_callbacks" not in test_config:
            settings = settings.replace(job_callbacks=False)  # nor post job callbacks
        if "job_reaper" not in test_config:
            settings = settings.replace(job_reaper=False)  # nor reap jobs on a schedule

    app = _HubFlask(
        __name__,
        template_folder=str(resources.TEMPLATES_DIR),
        static_folder=str(resources.STATIC_DIR),
    )
    app.config.update(
        SECRET_KEY=settings.secret_key,  # None: made on first use, see _HubFlask
        MAX_CONTENT_LENGTH=None,  # bodies are limited per endpoint while they are read
        SESSION_COOKIE_SECURE=settings.cookie_secure,
        DISPLAY_TIMEZONE=settings.display_timezone,
        JSON_SORT_KEYS=False,
    )
    if settings.trusted_proxies:
        # Behind that many proxies the client address, scheme (so Secure cookies) and host are
        # the forwarded ones; with none, X-Forwarded-* is a client's claim and ignored.
        hops = settings.trusted_proxies
        # Flask's documented way to wrap the app in WSGI middleware.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)  # type: ignore[method-assign]
    app.extensions["bailing"] = Hub(settings=settings, db=Database(settings))

    from .api.auth import agent_bearer_is_valid

    register_error_handlers(app, agent_bearer_is_valid)
    from . import observability

    observability.init_app(app)  # request ids, the request log, GET /metrics
    from .api import (admin_api, admin_tasks, agent_artifacts, agent_audit, agent_auth, agent_invocations,
                      agent_runtime, agent_tasks, agent_tools, approval_decisions, artifact_files, config_audit,
                      hub_pause, usage)
    from .health import bp as health_bp

    app.register_blueprint(health_bp)
    app.register_blueprint(agent_auth.bp)
    app.register_blueprint(agent_tools.bp)
    app.register_blueprint(agent_runtime.bp)
    app.register_blueprint(agent_audit.bp)
    app.register_blueprint(agent_invocations.bp)
    app.register_blueprint(admin_api.bp)
    app.register_blueprint(agent_tasks.bp)
    app.register_blueprint(agent_artifacts.bp)
    app.register_blueprint(artifact_files.bp)
    app.register_blueprint(admin_tasks.bp)
    app.register_blueprint(usage.bp)  # /usage/v1: capabilities only (supported: false)
    app.register_blueprint(approval_decisions.bp)  # Core's business decision, outside the API prefixes
    app.register_blueprint(hub_pause.bp)  # POST /admin/pause|resume, GET /admin/api/status
    app.register_blueprint(config_audit.bp)  # GET /admin/api/config-audit
    from .api import evidence

    app.register_blueprint(evidence.bp)  # /admin/api/evidence: signed tree heads, keys, leaves, proofs
    from .api import retention as retention_api

    app.register_blueprint(retention_api.bp)  # retention policies and runs, legal holds, erasure requests
    from .api import admin_jobs

    app.register_blueprint(admin_jobs.bp)  # /admin/api/runs: Client API jobs (list, record, audit, rerun)
    from .api import client_api

    app.register_blueprint(client_api.bp)  # Core's Client API v1: POST /run, GET /jobs/<job_id>
    from .api import job_tools

    app.register_blueprint(job_tools.bp)  # a job's governed tools: /jobs/<job_id>/tools/defs|invoke
    from .jobs import tool_approvals  # noqa: F401 - registers: a finished job reruns when its approval is granted
    from .api import job_callbacks

    app.register_blueprint(job_callbacks.bp)  # /admin/api/delivery-dlq, /admin/api/jobs/<id>/callbacks
    from .api import executor_api

    executor_api.init_app(app)  # Core's /executor/*, the executors' admin API, the job reaper
    from .openapi import bp as openapi_bp

    app.register_blueprint(openapi_bp)
    from . import console

    console.init_app(app)
    if settings.notifications:
        from .notifications.worker import DeliveryWorker

        # Each process that serves requests (a forked gunicorn worker too) delivers approval
        # notifications in a thread of its own, started by its first request: commands that
        # only build the app (config apply, db upgrade...) start none.
        worker = DeliveryWorker(app.extensions["bailing"].db, settings)
        app.extensions["bailing.notifications"] = worker
        app.before_request(worker.ensure_started)
    if settings.job_callbacks:
        from .jobs.callback_worker import CallbackWorker

        # Likewise the completion callbacks of Client API jobs (jobs/callback_worker.py).
        poster = CallbackWorker(app.extensions["bailing"].db, settings, lambda: app.secret_key)
        app.extensions["bailing.job_callbacks"] = poster
        app.before_request(poster.ensure_started)
    if settings.spec_auto_refresh:
        from .providers.schedule import SpecRefreshWorker

        # Likewise a pass every 60 s over the URL providers due for an auto refresh; the database
        # decides which process pulls a provider (providers/refresh.py).
        refresher = SpecRefreshWorker(app.extensions["bailing"].db)
        app.extensions["bailing.spec_refresh"] = refresher
        app.before_request(refresher.ensure_started)
    if not test_config:
        from .config_audit import retention

        # With BAILING_AUDIT_RETENTION_DAYS > 0, a purge of the configuration-change log 60 s
        # after the process's first request, then every 6 h (the suite's apps start none).
        retention.init_app(app)
        from .evidence import worker as evidence_heads

        # A signed tree head every BAILING_EVIDENCE_HEAD_SECONDS (300) when leaves arrived.
        evidence_heads.init_app(app)
        from .integrity import worker as evidence_verifier

        # A verifier pass over the log and every row it covers every BAILING_EVIDENCE_VERIFY_SECONDS (3600).
        evidence_verifier.init_app(app)
        from .retention import worker as retention_purge

        # The retention purge every BAILING_RETENTION_PURGE_SECONDS (6 h), the first a minute in.
        retention_purge.init_app(app)

    @app.get("/")
    def index():
        return redirect(url_for("console_auth.home"))

    @app.after_request
    def _headers(response):
        from flask import request

        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if is_api_path(request.path):
            response.headers["Cache-Control"] = "no-store"
            if response.mimetype == "application/json" and "charset" not in response.mimetype_params:
                response.headers["Content-Type"] = "application/json; charset=utf-8"
        else:
            response.headers.setdefault(
                "Content-Security-Policy",
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            )
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return app


class _JSON(DefaultJSONProvider):
    sort_keys = False  # answers keep their keys in the order the code builds them


class _HubFlask(Flask):
    """With no BAILING_SECRET_KEY, the key is read from (or made in) the data folder when a request
    first needs it, not when the app is built: listing commands (`--help`) builds the app too, and
    must write nothing. Flask's sessions read `app.secret_key` on every request, which also fills
    config["SECRET_KEY"] for code that reads the config directly (Flask-Login)."""

    json_provider_class = _JSON

    @property
    def secret_key(self):
        key = self.config.get("SECRET_KEY")
        if key is None and "bailing" in self.extensions:
            key = _local_secret_key(self.extensions["bailing"].settings.data_dir)
            self.config["SECRET_KEY"] = key
        return key

    @secret_key.setter
    def secret_key(self, value):
        self.config["SECRET_KEY"] = value


def _local_secret_key(data_dir: Path) -> str:
    """A random key kept in the data folder (mode 0600), so cookies survive restarts and are
    shared by every worker without a secret in the repository."""
    import tempfile

    path = Path(data_dir) / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    # Written whole under a private name (mkstemp: mode 0600), then linked into place: the link
    # fails if another worker or thread got there first, and nobody reads a half-written key.
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(key)
        try:
            os.link(scratch, path)
        except FileExistsError:  # another worker won the race; use its key
            return path.read_text().strip()
    finally:
        os.unlink(scratch)
    return key
