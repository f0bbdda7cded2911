"""`exechost node run`: the long-lived node service that owns this node's sessions between SSH links, on a
Unix socket in the node's state dir that `node serve --stdio` relays to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from engine import statefs, unixsock
from engine.commands import hostoutside
from engine.errors import ExecHostError
from engine.nodes.wire import MAX_LINE
from runner import daemonproc
from runner.node.relay import peer_is_us, socket_path

log = logging.getLogger("exechost.node")

SOCKET_CHECK_SEC = 5.0


class NodeServiceError(ExecHostError):
    """The service cannot start (already running, a path in the way) or its socket is not ours."""

    code = "node_service"


class NodeService:
    """One per node state dir (a lock says so): the NodeServer with service=True behind `node.sock`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = socket_path(state_dir)
        self._lock_fd: int | None = None
        self._unix: asyncio.AbstractServer | None = None
        self._socket_ino: int | None = None
        self._stopped = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        self.server: object | None = None  # NodeServer, imported late (it pulls in the engine)

    async def start(self) -> None:
        statefs.ensure_private_dir(self.state_dir)
        problem = unixsock.socket_path_problem(self.path)
        if problem is not None:
            raise NodeServiceError(f"{self.path}: socket path {problem}; refusing to replace it")
        self._lock_fd = statefs.try_lock(self.path)
        if self._lock_fd is None:
            raise NodeServiceError(f"a node service is already running for {self.state_dir}")
        try:
            if self.path.exists():
                # The lock is free, so whoever left this socket is gone; a live answer would still win.
                if await asyncio.to_thread(unixsock.socket_is_live, self.path, 1.0):
                    raise NodeServiceError(f"another node service is answering on {self.path}")
                os.unlink(self.path)
            from runner.node.serve import NodeServer

            self.server = NodeServer(self.state_dir, service=True)
            old = os.umask(0o177)  # born 0600: no window where anyone else could connect
            try:
                self._unix = await asyncio.start_unix_server(
                    self._on_connect, path=str(self.path), limit=MAX_LINE
                )
            finally:
                os.umask(old)
            os.chmod(self.path, 0o600)
            self._socket_ino = os.lstat(self.path).st_ino
        except BaseException:
            self._release()
            raise
        self._watchdog = asyncio.ensure_future(self._watch_socket())
        log.warning("node service listening on %s (pid %d)", self.path, os.getpid())

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from runner.node.links import Output
        from runner.node.serve import NodeServer

        ok, why = peer_is_us(writer)
        if not ok:
            log.warning("refused a connection on %s: %s", self.path, why)
            writer.close()
            return
        server = self.server
        assert isinstance(server, NodeServer)
        try:
            await server.serve(reader, Output(writer))
        finally:
            writer.close()

    async def _watch_socket(self) -> None:
        """A service whose socket was removed can never be reached again: it stops (and so do its sessions)
        rather than run on unseen."""
        while True:
            await asyncio.sleep(SOCKET_CHECK_SEC)
            try:
                ino: int | None = os.lstat(self.path).st_ino
            except OSError:
                ino = None
            if ino != self._socket_ino:
                log.warning("%s was removed or replaced; stopping", self.path)
                self._stopped.set()
                return

    def request_stop(self) -> None:
        self._stopped.set()

    async def run_until_stopped(self) -> None:
        await self._stopped.wait()
        await self.stop()

    async def stop(self) -> None:
        from runner.node.serve import NodeServer

        if self._watchdog is not None:
            self._watchdog.cancel()
        unix, self._unix = self._unix, None
        if unix is not None:
            unix.close()
        with contextlib.suppress(OSError):
            if os.lstat(self.path).st_ino == self._socket_ino:  # never remove a successor's socket
                os.unlink(self.path)
        if isinstance(self.server, NodeServer):
            self.server.approvals.close()
            await self.server.close_tools()
            await self.server.sessions.close()
        self._release()

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


async def run_service(notes: list[str] | None = None) -> int:
    """`exechost node run`: serve until SIGTERM/SIGINT; then the sessions are killed, as a gateway's are."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="exechost node: %(message)s")
    daemonproc.log_notes(notes or [])
    refused = hostoutside.home_refused()
    if refused:  # as the gateway does: every view this node makes would protect the wrong home
        print(f"exechost node run: {refused}", file=sys.stderr)
        return 1
    statefs.settle_umask()
    state = statefs.ensure_private_dir(daemonproc.pinned_state_dir())
    service = NodeService(state)
    loop = asyncio.get_running_loop()
    # Before the socket answers: a SIGTERM right after it does is a graceful stop, not a default death.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, service.request_stop)
    try:
        await service.start()
    except (NodeServiceError, statefs.StateFileError) as exc:
        print(f"exechost node run: {exc}", file=sys.stderr)
        return 1
    await service.run_until_stopped()
    return 0
