"""Error pages for every path outside the APIs: the console's layout, its navigation, a link
home. A 400 shows its description (escaped by the template); a 500 shows only the request id,
so support can find the log line, never the exception."""
from __future__ import annotations

import logging

from flask import Flask, Response, g, render_template, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from ..errors import ERROR_PAGE
from ..observability.request_log import HEADER, request_id_from

log = logging.getLogger(__name__)

TITLES = {
    400: ("Bad request", "The console could not use this request."),
    403: ("Not allowed", "Your role does not allow this page."),
    404: ("Not found", "There is no page at this address."),
    405: ("Method not allowed", "This page does not accept that kind of request."),
    500: ("Something went wrong", "The hub could not answer this request. It has been logged."),
    503: ("Unavailable", "The hub cannot answer this request right now."),
}


def request_id() -> str:
    """The id the request log and the X-Request-Id header carry."""
    if "request_id" not in g:
        g.request_id = request_id_from(request.headers.get(HEADER))
    return str(g.request_id)


def error_page(err: HTTPException) -> Response:
    status = err.code or 500
    title, text = TITLES.get(status, (err.name, ""))
    # Werkzeug's own descriptions are generic English; only a description the hub chose is shown.
    default = type(err).description
    description = err.description if err.description and err.description != default else ""
    rid = request_id() if status >= 500 else None
    try:
        body = render_template("console/error.html", status=status, title=title, text=text,
                               description=description, request_id=rid)
    except Exception:  # the layout loads the session (the database), which may be what failed
        log.warning("error page could not be rendered", exc_info=True)
        body = f"{title}. Request id: {rid or request_id()}"
        response = Response(body, status=status, mimetype="text/plain")
    else:
        response = Response(body, status=status, mimetype="text/html")
    if isinstance(err, MethodNotAllowed) and err.valid_methods:
        response.headers["Allow"] = ", ".join(err.valid_methods)
    return response


def init_app(app: Flask) -> None:
    app.extensions[ERROR_PAGE] = error_page
