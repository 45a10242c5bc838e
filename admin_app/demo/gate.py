"""While `bailing-admin demo` prepares and seeds its hub, the console says so instead of showing half
a hub: a 503 page that reloads itself, with the progress. The APIs keep serving (the seeder uses
them); the readiness probe reports the seeding too. Only the demo installs this, so a hub started
any other way has no trace of it."""
from __future__ import annotations

import threading

from flask import Flask, jsonify, render_template_string, request

EXTENSION = "bailing_demo_gate"
RETRY_AFTER = 5  # seconds; the page reloads itself as often

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta http-equiv="refresh" content="{{ retry_after }}">
  <title>Preparing the demo · Bailing hub</title>
  <link rel="stylesheet" href="{{ url_for('static', filename='hub.css') }}">
  <link rel="stylesheet" href="{{ url_for('static', filename='console.css') }}">
</head>
<body>
  <header class="top"><span class="brand">Bailing hub</span></header>
  <main>
    <div class="card narrow" role="status" data-demo-seeding>
      <h1>The demo is still being prepared</h1>
      {% if total %}
      <p>Seeding through the hub's own APIs:
        <strong>{{ "{:,}".format(done) }} of {{ "{:,}".format(total) }}</strong> steps.</p>
      <progress max="{{ total }}" value="{{ done }}">{{ done }} of {{ total }}</progress>
      {% else %}
      <p>Applying the schema and starting the demo business system.</p>
      {% endif %}
      <p>This page reloads itself; the sign-in appears when the demo is ready.</p>
    </div>
  </main>
</body>
</html>"""


class Progress:
    """How far the demo is: `seeding` while it prepares, `done` of `total` steps once it seeds."""

    def __init__(self):
        self._lock = threading.Lock()
        self.seeding = False
        self.done = 0
        self.total = 0

    def start(self) -> None:
        with self._lock:
            self.seeding, self.done, self.total = True, 0, 0

    def begin_seeding(self, total: int) -> None:
        with self._lock:
            self.done, self.total = 0, total

    def advance(self, steps: int) -> None:
        with self._lock:
            self.done = min(self.done + steps, self.total)

    def finish(self) -> None:
        with self._lock:
            self.seeding = False
            self.done = self.total

    def snapshot(self) -> tuple[bool, int, int]:
        with self._lock:
            return self.seeding, self.done, self.total


def _is_console(path: str) -> bool:
    return path == "/" or path == "/console" or path.startswith("/console/")


def install(app: Flask) -> Progress:
    """Register the gate once per app (a second demo run on the same app reuses it)."""
    progress = app.extensions.get(EXTENSION)
    if progress is not None:
        return progress
    progress = app.extensions[EXTENSION] = Progress()

    @app.before_request
    def _demo_gate():
        seeding, done, total = progress.snapshot()
        if not seeding:
            return None
        if _is_console(request.path):
            response = app.make_response((render_template_string(PAGE, done=done, total=total,
                                                                 retry_after=RETRY_AFTER), 503))
        elif request.path == "/health/ready":
            response = jsonify({"status": "not_ready", "reason": "demo_seeding", "done": done, "total": total})
            response.status_code = 503
        else:
            return None
        response.headers["Retry-After"] = str(RETRY_AFTER)
        response.headers["Cache-Control"] = "no-store"
        return response

    return progress
