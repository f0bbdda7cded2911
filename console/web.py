"""`exechost console --web`: the same console served to a browser (textual-serve), loopback only, opened by
a one-use link.

Every browser tab runs its own `exechost console` process (textual-serve's model), which connects to the
gateway with the operator token from the state dir, exactly as in a terminal. The web server adds the
guard textual-serve lacks: only 127.0.0.1, a Host header naming it (no DNS rebinding), a request with an
Origin only from the page's own origin (no cross-site hijack), and keys that are each good once
(console.webkeys). The printed URL `/<ticket>/` carries a ticket: its page (our web_boot.js) trades it,
by a POST to `/<ticket>/session`, for a secret that only that page's memory holds, and opens its one
websocket as `/<secret>/ws`. The ticket is spent by the trade and the secret by the websocket: the URL in
the browser's history, session and cache (the operator's home, which host runs read) opens nothing again.
Each ticket expires 60 s after it is printed; Enter in the server's terminal prints another (one per tab).
The page and textual-serve's static files are public code (`/static/…`, `/exechost.js`); no route answers
anything of the operator's without a live key.

No cookie, ever: cookies are scoped by host, not port, so any page on another 127.0.0.1 port (an agent's
dev server) would receive it. A key is sent only where the page itself points, and the page points only
at its own origin (a CSP says so, no third-party font), with `Referrer-Policy: no-referrer` so a link
followed out of the console does not carry it either. The access log prints routes, never paths as sent, and
aiohttp's server log fixed lines (console.weblog).

Any local account can connect, key or not: a connection that has not shown a live key takes one of a
few slots (engine.preauth: the oldest shed first, 5 s each), so keyless peers never hold the process's
descriptors; and an error the loop reports (accept() at EMFILE) is logged plainly and never ends the
server (textual-serve's rich handler imported its traceback module right then, which failed with EMFILE
too, and the console exited).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import re
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from textual_serve.server import Server

from console.webkeys import SECRET_TTL_S, TICKET_TTL_S, OneUseKeys
from console.weblog import RouteAccessLog, ServerLog
from engine.preauth import PreAuth

HOST = "127.0.0.1"
BANNER = "exechost console on the web: "
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


SPENT = (
    "exechost console: this link was used or has expired (each opens one tab, once, within "
    f"{TICKET_TTL_S:g} s): press Enter where `exechost console --web` runs for a new one"
)
BOOT_JS = Path(__file__).with_name("web_boot.js")


class GuardedServer(Server):
    """textual-serve's server behind one-use keys (console.webkeys), with Host and Origin checks in front:
    `/<ticket>/` (the page) and `/<ticket>/session` (the trade) need a live ticket, `/<secret>/ws` the
    live secret the trade gave; the page's code is public."""

    def __init__(self, command: str, port: int) -> None:
        super().__init__(command, host=HOST, port=port, title="exechost console")
        self.tickets = OneUseKeys(TICKET_TTL_S)
        self.secrets = OneUseKeys(SECRET_TTL_S)
        self.allowed_hosts = {f"{HOST}:{port}", f"localhost:{port}"}
        self.preauth = PreAuth()  # connections that have not shown a live key yet

    def new_url(self) -> str:
        """A URL that opens one tab, once, within TICKET_TTL_S."""
        return f"http://{HOST}:{self.port}/{self.tickets.make()}/"

    def announce(self) -> None:
        """Print a new URL, the only place a ticket is ever shown."""
        print(f"{BANNER}{self.new_url()}", flush=True)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        # No download route: the console delivers no files, and textual.js would fetch it keyless.
        app.add_routes(
            [
                web.get("/{key}/", self._index, name="index"),
                web.post("/{key}/session", self._session, name="session"),
                web.get("/{key}/ws", self._websocket, name="websocket"),
                web.get("/static/{filename:.+}", self._static, name="static"),
                web.get("/exechost.js", self._boot, name="boot"),
            ]
        )
        app.on_response_prepare.append(self._headers)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints a banner with a keyless URL (a 403): `serve` prints the ones that work."""

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.allowed_hosts:
            raise web.HTTPForbidden(text="exechost console: wrong Host")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in {f"http://{h}" for h in self.allowed_hosts}:
            raise web.HTTPForbidden(text="exechost console: cross-origin request")
        route = request.match_info.route.name
        if route in ("static", "boot"):
            return await handler(request)  # public code; the connection is not admitted by it
        keys = self.secrets if route == "websocket" else self.tickets
        if not keys.valid(request.match_info.get("key", "")):
            raise web.HTTPForbidden(text=SPENT)
        self.preauth.admitted(request.protocol)  # the operator's: no longer counted or timed
        return await handler(request)

    @staticmethod
    async def _headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = POLICY

    async def _index(self, request: web.Request) -> web.Response:
        """The page, which holds no key: its script trades the ticket in its URL (web_boot.js)."""
        context: dict[str, Any] = {
            "font_size": 16,
            "app_websocket_url": "",  # set by web_boot.js from the trade's answer
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        html = THIRD_PARTY.sub("", aiohttp_jinja2.render_string("app_index.html", request, context))
        # Ours right after textual.js, which sets window.onload: web_boot.js holds that back until the trade.
        textual = '<script src="/static/js/textual.js"></script>'
        assert textual in html, "textual-serve's page changed: web_boot.js must run after textual.js"
        html = html.replace(textual, textual + '\n    <script src="/exechost.js"></script>', 1)
        return web.Response(text=html, content_type="text/html")

    async def _session(self, request: web.Request) -> web.Response:
        """The trade: the ticket is spent, and the page gets the one secret its websocket will prove."""
        if not self.tickets.redeem(request.match_info["key"]):
            raise web.HTTPForbidden(text=SPENT)
        return web.json_response({"websocket": f"ws://{request.host}/{self.secrets.make()}/ws"})

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.secrets.redeem(request.match_info["key"]):
            raise web.HTTPForbidden(text=SPENT)
        return await self.handle_websocket(request)

    async def _boot(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(BOOT_JS, headers={"Content-Type": "text/javascript"})

    async def _static(self, request: web.Request) -> web.FileResponse:
        root = self.statics_path.resolve()
        path = (root / request.match_info["filename"]).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(path)

    def initialize_logging(self) -> None:
        """Plain lines on stderr. textual-serve's rich handler imports modules while it formats a traceback,
        and the loop reports accept() failing with EMFILE exactly when no file can be opened: that import
        failed inside the loop's exception handler and ended the process."""
        logging.basicConfig(
            level="DEBUG" if self.debug else "INFO", format="%(message)s", handlers=[logging.StreamHandler()]
        )

    def serve(self, debug: bool = False) -> None:
        """Serve until SIGINT or SIGTERM, with the route-only access log."""
        self.debug = debug
        self.initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.INFO)
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(LoopErrors())
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        runner = web.AppRunner(await self._make_app(), access_log_class=RouteAccessLog, logger=ServerLog())
        await runner.setup()
        server = runner.server
        assert server is not None

        def accepted() -> asyncio.Protocol:
            """aiohttp's handler for a new connection, in a pre-auth slot until a request shows a live key."""
            handler = server()
            self.preauth.arrived(handler, functools.partial(_abort, handler))
            return handler

        listener = await loop.create_server(accepted, self.host, self.port, reuse_address=True)
        threading.Thread(target=_on_enter, args=(loop, self.announce), name="enter", daemon=True).start()
        try:
            await stop.wait()
        finally:
            listener.close()
            await runner.cleanup()


def _on_enter(loop: asyncio.AbstractEventLoop, announce: Callable[[], None]) -> None:
    """Each line on stdin (Enter in the operator's terminal) prints a new one-use URL. A thread blocked in
    os.read on fd 0: it ends with the process, leaves stdin's flags (a terminal shared with the shell)
    alone, and holds no lock of sys.stdin's (a daemon thread inside sys.stdin.buffer's read made the
    interpreter abort at exit, unable to take that lock)."""
    with contextlib.suppress(OSError, RuntimeError):  # no stdin; the loop gone
        while chunk := os.read(0, 4096):
            for _ in range(chunk.count(b"\n")):
                loop.call_soon_threadsafe(announce)


def _abort(handler: RequestHandler) -> None:
    """Close a connection shed from its slot. One accepted in the same batch may have no transport yet:
    its connection_made is queued already, so the close is queued behind it (a shed that found no
    transport used to leave the connection open, uncounted)."""
    if handler.transport is not None:
        handler.transport.abort()
    else:
        asyncio.get_running_loop().call_soon(_abort_made, handler)


def _abort_made(handler: RequestHandler) -> None:
    if handler.transport is not None:  # None again: it was lost meanwhile
        handler.transport.abort()


class LoopErrors:
    """The loop's exception handler: it never raises into the loop, and asyncio's report of accept()
    failing for want of descriptors (which it retries a second later, reporting each failed accept of a
    batch: ~100 tracebacks a second) is one plain line per ACCEPT_REPORT_S. Anything else goes to
    asyncio's own handler (a plain log line with its traceback)."""

    ACCEPT_REPORT_S = 10.0

    def __init__(self) -> None:
        self._quiet_until = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        try:
            if isinstance(exc, OSError) and exc.errno in (
                errno.EMFILE,
                errno.ENFILE,
                errno.ENOBUFS,
                errno.ENOMEM,
            ):
                if loop.time() < self._quiet_until:
                    return
                self._quiet_until = loop.time() + self.ACCEPT_REPORT_S
                _line(
                    f"accept() failed ({exc.strerror}); retrying (said once per {self.ACCEPT_REPORT_S:g} s)"
                )
                return
            loop.default_exception_handler(context)
        except Exception:
            _line(f"{context.get('message')}: {exc!r}")


def _line(text: str) -> None:
    """One line on stderr, written directly: no handler, formatter or import between it and the fd."""
    with contextlib.suppress(Exception):
        os.write(2, f"exechost console: {text}\n".encode(errors="replace"))


def console_command(state: Path | None, config_path: str | None) -> str:
    """The command each browser tab runs: this Python, this console, this state dir and config. `-P`:
    textual-serve starts it in the server's cwd, which `-m` would put first on sys.path, so a `runner/`
    an agent's host run wrote into the operator's project dir would run as the operator."""
    argv = [sys.executable, "-P", "-m", "runner", "console", "--web-tab"]
    if state is not None:
        argv += ["--state-dir", str(state)]
    if config_path:
        argv += ["--config", config_path]
    return shlex.join(argv)


def serve(state: Path | None, config_path: str | None, port: int | None, command: str | None = None) -> int:
    """`command`: what each tab runs, when not the console on `state` (the demo's tabs)."""
    port = port or free_port()
    server = GuardedServer(command or console_command(state, config_path), port)
    server.announce()
    print(
        f"Loopback only; the URL opens one tab, once, within {TICKET_TTL_S:g} s (operator role): keep it to "
        "yourself. Enter prints another. Ctrl-C stops.",
        flush=True,
    )
    server.serve()
    return 0
