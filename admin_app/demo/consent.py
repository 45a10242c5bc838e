"""The demo business system's consent page for Agent Auth.

It belongs to the business system, as the protocol wants: its own sign-in for demo users, a page
showing the account, tenant, device and requested workspace, and approve/deny buttons that call
the hub from the server with the Client Token (never shown to the browser). It navigates only to
the redirect the hub generated."""
from __future__ import annotations

import secrets
from typing import TypedDict
from urllib.parse import urlsplit

import requests
from flask import Blueprint, abort, redirect, render_template_string, request, session, url_for



class DemoUser(TypedDict):
    password: str
    name: str
    tenant: str
    roles: list[str]
    audience: str


DEMO_USERS: dict[str, DemoUser] = {
    "alice": {"password": "alice-demo-password", "name": "Alice Martin", "tenant": "tenant-7",
              "roles": ["manager"], "audience": "internal"},
    "bob": {"password": "bob-demo-password", "name": "Bob Chen", "tenant": "tenant-9",
            "roles": ["clerk"], "audience": "internal"},
}


def business_users() -> list[dict]:
    """The demo users as the demo prints them: who signs in at the consent pages, and what they may
    allow there (the demo routes admit both tenants); an agent they allow acts as `acts_as`."""
    return [{"username": username, "password": user["password"], "name": user["name"], "tenant": user["tenant"],
             "roles": user["roles"], "acts_as": f"{user['tenant']}:{username}",
             "may": "allow an agent in the CRM (crm-demo: customers) and the ERP (erp-demo: orders)"}
            for username, user in DEMO_USERS.items()]


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{{ title }} · Demo {{ system|upper }}</title></head>
<body><main>
<h1>{{ title }}</h1>
{% if error %}<p role="alert">{{ error }}</p>{% endif %}
{% if login %}
<form method="post" action="{{ url_for('consent.login', system=system) }}">
  <input type="hidden" name="csrf_token" value="{{ csrf }}"><input type="hidden" name="next" value="{{ next }}">
  <label>Username <input name="username" autocomplete="username"></label>
  <label>Password <input name="password" type="password" autocomplete="current-password"></label>
  <button type="submit">Sign in to the demo {{ system|upper }}</button>
</form>
{% else %}
<p>Signed in as <strong data-account>{{ user.name }}</strong> ({{ username }}), tenant <strong data-tenant>{{ user.tenant }}</strong>.</p>
<p>The local agent <strong>{{ ctx.client_name }}</strong> on device <strong data-device>{{ ctx.device_label or 'unnamed device' }}</strong>
asks to work in: <strong data-routes>{{ ctx.requested_routes | join(', ') }}</strong>.</p>
<form method="post" action="{{ url_for('consent.decide', system=system) }}">
  <input type="hidden" name="csrf_token" value="{{ csrf }}">
  <input type="hidden" name="authorization_id" value="{{ ctx.authorization_id }}">
  <button type="submit" name="decision" value="approve">Allow</button>
  <button type="submit" name="decision" value="deny">Deny</button>
</form>
{% endif %}
</main></body></html>"""


def create_consent_blueprint(hub_url: str, client_tokens: dict[str, str]) -> Blueprint:
    bp = Blueprint("consent", __name__, url_prefix="/consent/<system>")

    @bp.after_request
    def _headers(response):
        response.headers["Cache-Control"] = "no-store"
        response.headers["Content-Security-Policy"] = "default-src 'self'; frame-ancestors 'none'; form-action 'self' http://127.0.0.1:* http://[::1]:*"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    def csrf() -> str:
        session.setdefault("csrf", secrets.token_urlsafe(24))
        return session["csrf"]

    def check_csrf() -> None:
        expected, sent = session.get("csrf", ""), request.form.get("csrf_token", "")
        # An empty token never matches: a cross-site form carries no session and no token.
        if not expected or not sent or not secrets.compare_digest(sent, expected):
            abort(400)

    def hub(system: str, method: str, path: str, **kwargs):
        token = client_tokens.get(system)
        if token is None:
            abort(404)
        return requests.request(method, hub_url.rstrip("/") + path, timeout=10,
                                headers={"Authorization": f"Bearer {token}"}, **kwargs)

    def page(system: str, title: str, status: int = 200, **values):
        return render_template_string(PAGE, system=system, title=title, csrf=csrf(), **values), status

    @bp.get("/authorize")
    def authorize(system: str):
        authorization_id = request.args.get("authorization_id", "")
        username = session.get("user")
        if username not in DEMO_USERS:
            return page(system, "Sign in", login=True, next=authorization_id, error=None)
        response = hub(system, "GET", f"/agent-auth/v1/authorizations/{authorization_id}")
        if response.status_code != 200:
            return page(system, "Request not found", 404, login=False, ctx=None, user=None, username=None,
                        error="This authorization request does not exist.")
        ctx = response.json()
        if ctx["status"] != "pending":
            return page(system, "Request closed", 409, login=True, next="",
                        error=f"This request is {ctx['status']}; start again from the agent.")
        return page(system, "Allow a local agent?", ctx=ctx, user=DEMO_USERS[username], username=username,
                    login=False, error=None)

    @bp.post("/login")
    def login(system: str):
        check_csrf()
        username = request.form.get("username", "")
        user = DEMO_USERS.get(username)
        if user is None or not secrets.compare_digest(request.form.get("password", ""), user["password"]):
            return page(system, "Sign in", 401, login=True, next=request.form.get("next", ""),
                        error="Wrong username or password.")
        session.clear()
        session["user"] = username
        return redirect(url_for("consent.authorize", system=system,
                                authorization_id=request.form.get("next", "")), code=303)

    @bp.post("/decide")
    def decide(system: str):
        check_csrf()
        username = session.get("user")
        if username not in DEMO_USERS:
            abort(401)
        user = DEMO_USERS[username]
        authorization_id = request.form.get("authorization_id", "")
        if request.form.get("decision") == "approve":
            ctx = hub(system, "GET", f"/agent-auth/v1/authorizations/{authorization_id}")
            if ctx.status_code != 200:
                abort(409)
            body = {"principal": {"id": username, "tenant": user["tenant"], "roles": user["roles"],
                                  "audience": user["audience"]},
                    "on_behalf_of": f"{user['tenant']}:{username}",
                    "allowed_routes": ctx.json()["requested_routes"],
                    # The name the agent may show for the person it acts for (never used to authorize).
                    "subject_display": {"name": user["name"]}}
            response = hub(system, "POST", f"/agent-auth/v1/authorizations/{authorization_id}/approve", json=body)
        else:
            response = hub(system, "POST", f"/agent-auth/v1/authorizations/{authorization_id}/deny", json={})
        if response.status_code != 200:
            return page(system, "Could not complete", response.status_code, login=True, next="",
                        error=response.json().get("message", "The hub refused the decision."))
        target = response.json()["redirect_uri"]
        # Follow only a loopback redirect the hub generated, never anything else.
        if urlsplit(target).scheme != "http" or urlsplit(target).hostname not in ("127.0.0.1", "::1"):
            abort(502)
        return redirect(target, code=303)

    return bp
