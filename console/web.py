"""`exechost console --web`: the same console served to a browser (textual-serve), loopback only, behind a
random token.

Every browser tab runs its own `exechost console` process (textual-serve's model), which connects to the
gateway with the operator token from the state dir, exactly as in a terminal. The web server adds the
guard textual-serve lacks: only 127.0.0.1, a Host header naming it (no DNS rebinding), a websocket only
from the page's own origin (no cross-site hijack), and a token — in the printed URL once, then an
HttpOnly, SameSite=Strict cookie. Anything else gets 403.
"""

from __future__ import annotations

import hmac
import secrets
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from textual_serve.server import Server

HOST = "127.0.0.1"
COOKIE = "exechost_console"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class GuardedServer(Server):
    """textual-serve's server with the token, Host and Origin checks in front of every route."""

    def __init__(self, command: str, port: int, token: str) -> None:
        super().__init__(command, host=HOST, port=port, title="exechost console")
        self.token = token
        self.allowed_hosts = {f"{HOST}:{port}", f"localhost:{port}"}

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.allowed_hosts:
            raise web.HTTPForbidden(text="exechost console: wrong Host")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.allowed_hosts}:
            raise web.HTTPForbidden(text="exechost console: cross-origin request")
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            raise web.HTTPForbidden(text="exechost console: open the URL with its token (printed at start)")
        response = await handler(request)
        if request.query.get("token") and not response.prepared:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response


def console_command(state: Path | None, config_path: str | None) -> str:
    """The command each browser tab runs: this Python, this console, this state dir and config."""
    argv = [sys.executable, "-m", "runner", "console"]
    if state is not None:
        argv += ["--state-dir", str(state)]
    if config_path:
        argv += ["--config", config_path]
    return shlex.join(argv)


def serve(state: Path | None, config_path: str | None, port: int | None) -> int:
    port = port or free_port()
    token = secrets.token_urlsafe(24)
    server = GuardedServer(console_command(state, config_path), port, token)
    url = f"http://{HOST}:{port}/?token={token}"
    print(f"exechost console on the web: {url}", flush=True)
    print("Loopback only; the token is the key (operator role). Ctrl-C stops it.", flush=True)
    server.serve()
    return 0
