"""What the web console's server prints: routes and fixed lines only, never text a client sent (any local
account can connect, key or not, and the operator's terminal shows it)."""

from __future__ import annotations

import contextlib
import logging
import re
import traceback
from typing import Any, ClassVar

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError

_SHOWN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


def _route(request: web.BaseRequest, status: int) -> str:
    """The route as rebuilt from what matched. A request the parser refused is a BaseRequest with no
    match_info (web.Request's asserts one), and its path is whatever was sent: no route."""
    if status == 403:
        return "(refused)"
    info: web.UrlMappingMatchInfo | None = None
    if isinstance(request, web.Request):
        with contextlib.suppress(AssertionError):  # (no match yet: web.Request asserts one)
            info = request.match_info
    route = getattr(getattr(info, "route", None), "name", None)
    if route == "static" and info is not None:
        # a name as our files are named, else not shown: a prober's percent-decoded path wrote ESC and
        # BEL sequences into the operator's terminal (fresh round 17 b)
        name = str(info.get("filename", ""))
        return f"/static/{name}" if _SHOWN_NAME.fullmatch(name) else "/static/(a name not shown)"
    return RouteAccessLog.SHOWN.get(str(route), "(no route)")


class RouteAccessLog(AbstractAccessLogger):
    """One line per request naming the route it reached, rebuilt from what matched: never the path as
    sent (it holds a key, or whatever a prober typed), never the query or the Referer, and a method
    only when it is one of HTTP's. It never raises: aiohttp would print that traceback (fresh round
    18 b: a request its parser refused made `request.match_info` assert, ~40 lines each)."""

    SHOWN: ClassVar[dict[str, str]] = {
        "index": "/…/",
        "session": "/…/session",
        "websocket": "/…/ws",
        "boot": "/exechost.js",
    }

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        try:
            status = int(response.status)
            method = request.method if request.method in _METHODS else "(method not shown)"
            line = f"{method} {_route(request, status)} {status}"
        except Exception:  # whatever it was, one fixed line: never a traceback
            line = "(a request not shown)"
        self.logger.info("%s", line)

    @property
    def enabled(self) -> bool:
        return True


def _what(exc: BaseException | None) -> str:
    """A failed request as one fixed line: what class of failure (names from code, never its message,
    which quotes the request line or a header as sent), and for a bug in a handler its frames only."""
    if exc is None:
        return "a request failed"
    if isinstance(exc, HttpProcessingError):
        return f"refused a request it could not read ({type(exc).__name__}, {exc.code})"
    frames = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    return f"a request failed in its handler ({type(exc).__name__}; its message is not shown)\n{frames}"


class ServerLog(logging.Logger):
    """aiohttp's server logger for the web console (RequestHandler's `logger`): aiohttp logs a request its
    parser refused as 'Error handling request' with the exception, whose text is the request line as sent
    (a prober's bytes, control characters included) and a traceback. Here every record is its format
    string from aiohttp's code with no argument a client chose, and an exception becomes _what's line."""

    def __init__(self) -> None:
        super().__init__("exechost.web.server")
        self.parent = logging.getLogger("aiohttp")  # the handlers and level the console set up

    def _log(self, level: int, msg: object, args: Any, exc_info: Any = None, *rest: Any, **kw: Any) -> None:
        if exc_info:
            exc = exc_info if isinstance(exc_info, BaseException) else None
            if exc is None and isinstance(exc_info, tuple):
                exc = exc_info[1]
            text = f"web console: {_what(exc)}"
        else:
            text = f"web console: {str(msg).replace('%s', '…').replace('%r', '…').replace('%d', '…')}"
        super()._log(level, "%s", (text,), None, *rest, **kw)
