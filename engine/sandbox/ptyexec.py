"""A sandbox PTY command: `docker exec -t` through the Engine API (a real PTY inside the container), its
exit code from `exec_inspect`; the terminal socket can be handed to the session host."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from typing import Any

from engine.sandbox import docker_ops
from engine.sandbox import supervisor as sv
from engine.sandbox.incontainer import InContainer
from engine.sessions.fdreader import FdReader

RESIZE_ATTEMPTS = 6  # ~2 s of retries in all (0.1 s, 0.2 s, …) before a resize is given up


def argv_for(busybox: str, exec_id: str) -> list[str]:
    """runpty.sh in the container, for the exec dir `exec_id`."""
    inner = f"{sv.CTL_MOUNT}/x/{exec_id}"
    shell = [busybox, "sh"] if busybox else ["/bin/sh"]
    return [*shell, f"{sv.BIN_MOUNT}/runpty.sh", busybox, inner]


class DockerPtyProcess(InContainer):
    """A PTY command: `docker exec -t` through the Engine API (a real PTY inside the container)."""

    pty = True

    def __init__(self, api: Any, channel: sv.Channel, container: str, marker: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._api = api
        self._channel = channel
        self._container = container
        self._marker = marker
        self.pid: int | None = None
        self._exec_id: str | None = None
        self._sock: socket.socket | None = None
        self._raw: Any = None
        self._streams = FdReader(self._loop, on_eof=self._on_eof)
        self._exit: asyncio.Future[tuple[int | None, str | None]] = self._loop.create_future()
        self._stdin_closed = False
        self._sent_signal: int | None = None
        self._dir: tuple[str, int, int] | None = None
        self._closed = False

    async def start(self, script: str, cols: int, rows: int, busybox: str, *, handoff: bool = False) -> None:
        """`handoff`: the terminal is not read here; `release()` hands it to the session host."""
        exec_id, xfd, efd = self._channel.new_exec_dir()
        self._dir = (exec_id, xfd, efd)
        sv.write_file("spec", script, efd)
        # The command's pid comes through a FIFO: the control dir is read-only in the container.
        os.mkfifo("pid", 0o600, dir_fd=efd)
        self._channel.give(["spec", "pid"], efd)
        pid_fd = sv.fifo_fd("pid", os.O_RDONLY | os.O_NONBLOCK, efd)
        try:
            await self._begin(argv_for(busybox, exec_id), cols, rows, handoff, pid_fd)
        finally:
            os.close(pid_fd)

    async def _begin(self, argv: list[str], cols: int, rows: int, handoff: bool, pid_fd: int) -> None:
        def create_and_start() -> tuple[str, Any]:
            created = self._api.exec_create(self._container, argv, stdin=True, tty=True)
            raw = self._api.exec_start(created["Id"], tty=True, socket=True)
            return created["Id"], raw

        self._exec_id, self._raw = await asyncio.to_thread(create_and_start)
        sock = getattr(self._raw, "_sock", self._raw)
        sock.setblocking(False)
        self._sock = sock
        # The reader owns a dup: its EOF close can never hit a reused fd number the socket still writes to.
        if not handoff:
            self._streams.add(os.dup(sock.fileno()), "pty")
        self.resize(cols, rows)
        said = b""
        for _ in range(200):
            with contextlib.suppress(BlockingIOError):
                said = (said + os.read(pid_fd, 32))[:32]
            if said.endswith(b"\n") and said.strip().isdigit():
                self.pid = int(said.strip())
                break
            await asyncio.sleep(0.005)

    def release(self) -> tuple[int, str, str]:
        """For the session host: (a dup of the terminal socket, the engine's exec id, the exec dir id).
        The dir stays until the command's end (engine.sandbox.held removes it); this handle is done."""
        if self._sock is None or self._exec_id is None or self._dir is None:
            raise sv.SupervisorUnavailable("the sandbox terminal ended before it could be handed over")
        fd = os.dup(self._sock.fileno())
        exec_dir, xfd, efd = self._dir
        self._dir = None
        os.close(efd)
        os.close(xfd)
        docker_exec = self._exec_id
        if not self._exit.done():
            self._exit.set_result((None, None))
        self.close()
        return fd, docker_exec, exec_dir

    def _on_eof(self) -> None:
        self._loop.create_task(self._collect_exit())

    async def _collect_exit(self) -> None:
        code: int | None = None  # unknown (engine gone, exec vanished): reported as killed
        with contextlib.suppress(*docker_ops.api_errors()):
            for _ in range(50):
                info = await asyncio.to_thread(self._api.exec_inspect, self._exec_id)
                if not info.get("Running"):
                    code = info.get("ExitCode")
                    break
                await asyncio.sleep(0.02)
        if not self._exit.done():
            status = sv.decode_status(code, self._sent_signal)
            if status.exit_code is None and status.signal is None:
                self._exit.set_result((None, "SIGKILL"))
            else:
                name = signal.Signals(status.signal).name if status.signal else None
                self._exit.set_result((status.exit_code, name))
        self._release_dir()

    def _release_dir(self) -> None:
        if self._dir is not None:
            exec_id, xfd, efd = self._dir
            self._dir = None
            sv.remove_exec_dir(exec_id, xfd, efd)

    async def write(self, data: bytes) -> None:
        if not self.stdin_open or self._sock is None:
            raise BrokenPipeError("stdin is closed")
        await self._loop.sock_sendall(self._sock, data)

    async def close_stdin(self) -> None:
        if self.stdin_open:
            await self.write(b"\x04")
        self._stdin_closed = True

    def resize(self, cols: int, rows: int) -> None:
        if self._exec_id is None or self._closed:
            return

        def apply() -> None:
            # A busy engine can refuse a resize (a loaded machine: several in a row); a lost one leaves the
            # terminal wrong until the next.
            for attempt in range(RESIZE_ATTEMPTS):
                try:
                    self._api.exec_resize(self._exec_id, height=rows, width=cols)
                    return
                except docker_ops.api_errors():  # or the exec just ended: then nothing is lost
                    if self._exit.done() or self._closed:
                        return
                    time.sleep(0.1 * (attempt + 1))

        self._loop.run_in_executor(None, apply)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stdin_closed = True
        self._streams.close()
        for closer in (self._sock, self._raw):
            with contextlib.suppress(OSError):
                if closer is not None:
                    closer.close()
        if self._exit.done():
            self._release_dir()
