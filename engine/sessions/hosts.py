"""Every session host of a state dir: one host process's open-file limit caps what it can hold (2 fds per
idle pipe session, so about 10,000 under a hard limit of 20,000), so new sessions go to the next host once
one is full.

The first host keeps `<state>/holders/`, as it always has; the k-th after it `<state>/holders/h<k>/`, each
a complete session host (its own socket, lock, session files and spools), started the first time it is
needed and adopted, like the first, by the next gateway. Which host holds a session matters only to its
HostProcess (its link and its files): ids, listing and every verb are the same for all.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine.sessions import host_io as wire
from engine.sessions.host import DEFAULT_SPOOL_CAP, HeldFactory, HostLauncher, HostProcess
from engine.sessions.hostlink import HostLink
from engine.sessions.launcher import Launcher, RunSpec
from engine.unixsock import socket_is_live

MAX_HOSTS = 8  # 8 hosts at a hard limit of 20,000: ~79,000 idle sessions
_MORE = re.compile(r"^h([1-9][0-9]*)$")


class SessionHosts:
    """The Launcher a gateway runs held sessions with: the first host with room takes each new one."""

    def __init__(
        self,
        directory: Path,
        fallback: Launcher,
        spool_cap: int = DEFAULT_SPOOL_CAP,
        max_hosts: int = MAX_HOSTS,
    ) -> None:
        self.directory = directory
        self.fallback = fallback
        self.spool_cap = spool_cap
        self.max_hosts = max_hosts
        # Shared by every host: the sandbox registers its kind once.
        self.held_kinds: dict[str, HeldFactory] = {}
        self.hosts: list[HostLauncher] = [self._make(0)]
        self._discovered = False

    def host_dir(self, k: int) -> Path:
        return self.directory if k == 0 else self.directory / f"h{k}"

    def _make(self, k: int) -> HostLauncher:
        return HostLauncher(self.host_dir(k), self.fallback, self.spool_cap, held_kinds=self.held_kinds)

    def _host(self, k: int) -> HostLauncher:
        while len(self.hosts) <= k:
            self.hosts.append(self._make(len(self.hosts)))
        return self.hosts[k]

    # -- what the first host stands for (status, logs)
    @property
    def link(self) -> HostLink | None:
        return self.hosts[0].link

    @property
    def problem(self) -> str | None:
        return self.hosts[0].problem

    def status(self) -> list[dict[str, Any]]:
        """Each host this gateway speaks to: its pid, dir and the sessions it holds for us."""
        rows = []
        for host in self.hosts:
            link = host.link
            if link is not None and not link.closed:
                row = {"pid": link.host_pid, "dir": str(host.directory), "sessions": len(link.chans)}
                rows.append(row | {"fdsUsed": link.fds_used, "fdLimit": link.fd_limit})
        return rows

    # -- start, adoption, stop
    async def connect(self) -> HostLink | None:
        """The first host, started or re-attached; hosts past it that hold something from before are
        known from now on (adoption reads them)."""
        link = await self.hosts[0].connect()
        if not self._discovered and self.directory.is_dir():
            self._discovered = True
            for entry in self.directory.iterdir():
                m = _MORE.match(entry.name)
                if m and int(m.group(1)) < self.max_hosts and _holds_something(entry):
                    self._host(int(m.group(1)))
        return link

    def launchers(self) -> list[HostLauncher]:
        """The hosts to adopt from: the first, and each one after it whose dir holds something."""
        return [h for k, h in enumerate(self.hosts) if k == 0 or _holds_something(h.directory)]

    async def close(self, *, bye: bool = True) -> None:
        for host in self.hosts:
            await host.close(bye=bye)

    # -- Launcher
    async def spawn(self, spec: RunSpec) -> Any:
        cost = 1 if spec.pty else 2
        return await self._on_host_with_room(cost, lambda host: host.spawn(spec))

    async def hold(
        self,
        session_id: str,
        fds: tuple[int, ...],
        streams: list[str],
        meta: dict[str, Any],
        make: HeldFactory,
        status: bytes = b"",
        output_cap: int | None = None,
    ) -> HostProcess | None:
        """engine.sandbox hands a started command's streams over (HostLauncher.hold), to a host with room."""
        return await self._on_host_with_room(
            len(fds), lambda host: host.hold(session_id, fds, streams, meta, make, status, output_cap)
        )

    async def _on_host_with_room(self, cost: int, run: Callable[[HostLauncher], Awaitable[Any]]) -> Any:
        """`run(host)` on the first host with room for `cost` fds; a host that turns out full (its link
        refused the session, or the host said EMFILE) passes it on to the next. With every host full, the
        last refusal stands."""
        refused: set[int] = set()
        while True:
            k = await self._with_room(cost, refused)
            try:
                return await run(self.hosts[k])
            except OSError as exc:
                if exc.errno != errno.EMFILE or k in refused:
                    raise
                refused.add(k)

    async def _with_room(self, cost: int, refused: set[int]) -> int:
        for k in range(self.max_hosts):
            if k in refused:
                continue
            link = await self._host(k).connect()
            if link is None:
                # The first host unavailable: its launcher runs plain children (and says so). A later
                # one that cannot start: the first one's refusal explains the limit.
                return 0
            if link.room(cost):
                return k
        return 0

    def open_file_limit_text(self, running: int) -> str:
        """Why a spawn failed with EMFILE with every host full."""
        limits = sorted({h.link.fd_limit for h in self.hosts if h.link is not None and h.link.fd_limit})
        limit = "/".join(str(n) for n in limits) or "reached"
        live = sum(1 for h in self.hosts if h.link is not None and not h.link.closed)
        return (
            f"Too many open files: {live} session host(s), each limited to {limit} open files, hold "
            f"{running} running sessions (2 fds each, 1 for a PTY; at most {self.max_hosts} hosts). Remove "
            "finished or unneeded sessions (process remove), or raise the hard limit (LimitNOFILE= in the "
            "service unit, ulimit -Hn) and restart the gateway and its session hosts."
        )


def _holds_something(directory: Path) -> bool:
    """Session files from before, or a host still listening there."""
    if not directory.is_dir():
        return False
    return any(directory.glob("*.json")) or socket_is_live(directory / wire.SOCKET_NAME)
