"""A person at the business system's consent page, over plain HTTP: signs in, reads the request,
presses Allow (or Deny), and follows the hub's redirect back to the agent's loopback callback.

The demo seeding and the tests use it as the `open_url` of the SDK's login, so every agent
session they create went through the real consent page."""
from __future__ import annotations

import html
import re
from urllib.parse import urljoin

import requests

_FORM = re.compile(r'<form method="post" action="([^"]+)">(.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


class ConsentError(Exception):
    pass


def _form(page: requests.Response, action_suffix: str) -> tuple[str, dict]:
    for action, inner in _FORM.findall(page.text):
        if action.endswith(action_suffix):
            fields = {name: html.unescape(value) for name, value in _HIDDEN.findall(inner)}
            return urljoin(page.url, html.unescape(action)), fields
    raise ConsentError(f"the page at {page.url.split('?')[0]} has no {action_suffix} form (HTTP {page.status_code})")


class ConsentPage:
    """`ConsentPage("alice", password)(authorization_url)` approves as alice."""

    def __init__(self, username: str, password: str, decision: str = "approve"):
        self.username, self.password, self.decision = username, password, decision
        self.pages: list[requests.Response] = []

    def __call__(self, authorization_url: str) -> None:
        with requests.Session() as browser:  # a fresh browser: its own cookies, nothing shared
            signin = browser.get(authorization_url, timeout=30)
            action, fields = _form(signin, "/login")
            consent = browser.post(action, timeout=30, data={**fields, "username": self.username,
                                                             "password": self.password})
            action, fields = _form(consent, "/decide")
            done = browser.post(action, timeout=30, data={**fields, "decision": self.decision})
            self.pages = [signin, consent, done]
            if done.status_code != 200:
                raise ConsentError(f"the consent page answered HTTP {done.status_code}")
