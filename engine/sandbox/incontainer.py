"""What every process inside a container shares: signals and kills go through the supervisor channel, by pid
and by marker, since the container's processes are not visible from here."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable

from engine.sandbox import supervisor as sv
from engine.sessions import procs
from engine.sessions.fdreader import FdReader


class InContainer:
    """What both kinds of in-container process share: signals go through the supervisor channel, by pid
    and by marker (processes inside the container are not visible from here)."""

    _channel: sv.Channel
    _marker: str
    _exit: asyncio.Future[tuple[int | None, str | None]]
    _sent_signal: int | None
    _stdin_closed: bool
    _closed: bool
    _streams: FdReader
    pid: int | None

    @property
    def stdin_open(self) -> bool:
        return not self._stdin_closed and not self._closed

    async def read(self) -> tuple[str, bytes] | None:
        return await self._streams.read()

    def signal_group(self, sig: int) -> None:
        if self.pid is None or self._exit.done():
            return
        self._sent_signal = sig
        with contextlib.suppress(sv.SupervisorUnavailable):
            self._channel.kill(self.pid, sig)

    async def wait(self) -> tuple[int | None, str | None]:
        return await asyncio.shield(self._exit)

    def stdio_holders(self) -> list[procs.ProcInfo]:
        return []  # terminate() finds the container's processes by marker instead

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        await terminate_in_container(
            self._channel, self.pid, self._marker, grace, self._finished, self._note_signal
        )
        return []

    def _note_signal(self, sig: int) -> None:
        if not self._exit.done():
            self._sent_signal = sig

    def _finished(self) -> bool:
        return self._exit.done()


async def terminate_in_container(
    channel: sv.Channel,
    pid: int | None,
    marker: str,
    grace: float,
    finished: Callable[[], bool],
    note: Callable[[int], None],
) -> None:
    """SIGTERM the group and every marked process in the container, grace, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        note(sig)
        with contextlib.suppress(sv.SupervisorUnavailable):
            if pid is not None:
                channel.kill(pid, sig)
                channel.kill(pid, signal.SIGCONT)
            channel.kill_marked(marker, sig)
        if sig == signal.SIGKILL:
            break
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline and not finished():
            await asyncio.sleep(0.02)
        if finished():
            break
