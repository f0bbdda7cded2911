"""`exechost console --web`: the same console served to a browser (textual-serve), loopback only, behind a
random token that every request carries in its path.

Every browser tab runs its own `exechost console` process (textual-serve's model), which connects to the
gateway with the operator token from the state dir, exactly as in a terminal. The web server adds the
guard textual-serve lacks: only 127.0.0.1, a Host header naming it (no DNS rebinding), a websocket only
from the page's own origin (no cross-site hijack), and the token as the first path segment of every route
(`/<token>/`, `/<token>/ws`, `/<token>/static/…`). Nothing else is routed.

No cookie, ever: cookies are scoped by host, not port, so any page on another 127.0.0.1 port (an agent's
dev server) would receive it. A path is sent only where the page itself points, and the page points only
at its own origin (a CSP says so, no third-party font), with `Referrer-Policy: no-referrer` so a link
followed out of the console does not carry it either. The access log prints routes, never paths as sent,
and the only URL printed is the one that works.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from textual_serve.server import Server

HOST = "127.0.0.1"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# The page may load and connect to its own origin only; inline script and style are textual-serve's.
POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
THIRD_PARTY = re.compile(r"<link[^>]*https?://[^>]*>\s*")  # textual-serve's Google Fonts link


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class RouteAccessLog(AbstractAccessLogger):
    """One line per request naming the route it reached, rebuilt from what matched: never the path as
    sent (it holds the token, or whatever a prober typed), never the query or the Referer."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        info = getattr(request, "match_info", None)
        route = getattr(getattr(info, "route", None), "name", None)
        if response.status == 403:
            shown = "(refused)"
        elif route == "static":
            shown = f"/…/static/{info['filename']}"  # type: ignore[index]
        elif route in ("index", "websocket"):
            shown = "/…/" if route == "index" else "/…/ws"
        else:
            shown = "(no route)"
        self.logger.info("%s %s %s", request.method, shown, response.status)

    @property
    def enabled(self) -> bool:
        return True


class GuardedServer(Server):
    """textual-serve's server with every route under the token, and Host and Origin checks in front."""

    def __init__(self, command: str, port: int, token: str) -> None:
        super().__init__(command, host=HOST, port=port, title="exechost console")
        self.token = token
        self.allowed_hosts = {f"{HOST}:{port}", f"localhost:{port}"}

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        # No download route: the console delivers no files, and textual.js would fetch it tokenless.
        app.add_routes(
            [
                web.get("/{key}/", self._index, name="index"),
                web.get("/{key}/ws", self.handle_websocket, name="websocket"),
                web.get("/{key}/static/{filename:.+}", self._static, name="static"),
            ]
        )
        app.on_response_prepare.append(self._headers)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints a banner with a tokenless URL (a 403): `serve` prints the one that works."""

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.allowed_hosts:
            raise web.HTTPForbidden(text="exechost console: wrong Host")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.allowed_hosts}:
            raise web.HTTPForbidden(text="exechost console: cross-origin request")
        given = request.match_info.get("key", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise web.HTTPForbidden(
                text="exechost console: open the URL printed at start (it holds the token)"
            )
        return await handler(request)

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = POLICY

    async def _index(self, request: web.Request) -> web.Response:
        prefix = f"/{self.token}/"
        context: dict[str, Any] = {
            "font_size": 16,
            "app_websocket_url": f"ws://{request.host}{prefix}ws",
            "config": {"static": {"url": f"{prefix}static/"}},
            "application": {"name": self.title},
        }
        html = aiohttp_jinja2.render_string("app_index.html", request, context)
        return web.Response(text=THIRD_PARTY.sub("", html), content_type="text/html")

    async def _static(self, request: web.Request) -> web.FileResponse:
        root = self.statics_path.resolve()
        path = (root / request.match_info["filename"]).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    def serve(self, debug: bool = False) -> None:
        """textual-serve's `serve`, with the route-only access log."""
        self.debug = debug
        self.initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.INFO)
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            access_log_class=RouteAccessLog,
            print=None,
        )


def console_command(state: Path | None, config_path: str | None) -> str:
    """The command each browser tab runs: this Python, this console, this state dir and config."""
    argv = [sys.executable, "-m", "runner", "console", "--web-tab"]
    if state is not None:
        argv += ["--state-dir", str(state)]
    if config_path:
        argv += ["--config", config_path]
    return shlex.join(argv)


def serve(state: Path | None, config_path: str | None, port: int | None, command: str | None = None) -> int:
    """`command`: what each tab runs, when not the console on `state` (the demo's tabs)."""
    port = port or free_port()
    token = secrets.token_urlsafe(24)
    server = GuardedServer(command or console_command(state, config_path), port, token)
    print(f"exechost console on the web: http://{HOST}:{port}/{token}/", flush=True)
    print("Loopback only; the URL is the key (operator role): keep it to yourself. Ctrl-C stops.", flush=True)
    server.serve()
    return 0
