"""A real gateway daemon in a subprocess (`python -m runner gateway run`) that tests SIGKILL and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from engine.commands import gatewaydirs, hostoutside
from engine.protocol.frames import socket_path
from engine.unixsock import socket_is_live
from tests.helpers.gateway import REPO


class Daemon:
    """`start()` waits until the socket answers; `kill()` is SIGKILL (a crash: no cleanup runs)."""

    def __init__(self, state: Path, env: dict[str, str] | None = None, *, operators: bool = True) -> None:
        self.state = state
        self.env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO), **(env or {})}
        if operators:
            # the test made this state dir as the operator (tokens minted in it first, an image copied):
            # recorded as a gateway of the account would have (engine.commands.gatewaydirs.adopt refuses
            # an unrecorded one holding a gateway's files); `operators=False` for one a host run made
            gatewaydirs.record(hostoutside.home_dir(self.env), str(state))
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = state.parent / f"{state.name}-gateway.log"

    def start(self) -> Daemon:
        out = open(self.log, "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "gateway", "run"],
            env=self.env,
            cwd=str(REPO),
            stdout=out,
            stderr=out,
            start_new_session=True,  # a SIGKILL of the daemon is not a signal to our process group
        )
        out.close()
        deadline = time.monotonic() + 60
        while not socket_is_live(socket_path(self.state)):
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"gateway did not answer: {self.log.read_text()[-3000:]}")
            time.sleep(0.05)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the daemon and reap it (SIGKILL by default: no cleanup of any kind runs)."""
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.proc.wait(timeout=60)

    def restart(self) -> Daemon:
        self.kill()
        return self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
