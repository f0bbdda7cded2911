"""Sandbox commands held by the session host, so they outlive the gateway like gateway-host sessions: the
host holds the command's FIFO ends and spools its output; signals go through the container's supervisor
channel (the host cannot reach inside a container), now and after a new gateway adopts the session."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any

from engine.sandbox import docker_ops
from engine.sandbox import supervisor as sv
from engine.sessions import procs
from engine.sessions.host import HeldPaths, HostProcess
from engine.sessions.hostlink import HostLink

KIND = "sandbox"
STREAMS = ["stdout", "stderr", "status"]  # then "stdin" when the command reads it


class SandboxHeldProcess(HostProcess):
    """A held sandbox command: output and exit from the host, signals by the container's channel."""

    def __init__(self, paths: HeldPaths, link: HostLink | None, chan: int, meta: dict[str, Any]) -> None:
        raw = meta.get("sandbox")
        box: dict[str, Any] = raw if isinstance(raw, dict) else {}
        pty = bool(meta.get("pty"))
        super().__init__(paths, link, chan, pid=None, pty=pty, marker=str(meta.get("marker") or ""))
        self.container = str(box.get("container") or "")
        pid = box.get("pid")
        self._cpid = pid if isinstance(pid, int) and pid > 0 else None
        self._channel = sv.Channel(self.container)
        self._exec_id = str(box.get("execId") or "")
        self._docker_exec = str(box.get("dockerExec") or "")  # a terminal's `docker exec -t`
        self._inspecting = False
        self._sent_signal: int | None = None

    def on_exit(self, msg: dict[str, Any]) -> None:
        if self._docker_exec and msg.get("code") is None and msg.get("signal") is None:
            # A terminal's end carries no code: the engine keeps it with the exec.
            if not self._inspecting:
                self._inspecting = True
                asyncio.get_running_loop().create_task(self._inspect_exit(msg))
            return
        code = msg.get("code")
        status = sv.decode_status(code if isinstance(code, int) else None, self._sent_signal)
        if status.signal:
            msg = {**msg, "code": None, "signal": signal.Signals(status.signal).name}
        super().on_exit(msg)

    async def _inspect_exit(self, msg: dict[str, Any]) -> None:
        code: int | None = None

        def inspect() -> dict[str, Any]:
            return dict(docker_ops.client().api.exec_inspect(self._docker_exec))

        with contextlib.suppress(*docker_ops.api_errors(), docker_ops.SandboxUnavailable):
            for _ in range(50):
                info = await asyncio.to_thread(inspect)
                if not info.get("Running"):
                    code = info.get("ExitCode")
                    break
                await asyncio.sleep(0.02)
        self._docker_exec = ""  # asked once: what it said is the end
        self.on_exit({**msg, "code": code, "signal": None if isinstance(code, int) else "SIGKILL"})

    def resize(self, cols: int, rows: int) -> None:
        if not self.pty or not self._docker_exec or self._closed:
            return
        exec_id = self._docker_exec

        def apply() -> None:
            with contextlib.suppress(*docker_ops.api_errors(), docker_ops.SandboxUnavailable):
                docker_ops.client().api.exec_resize(exec_id, height=rows, width=cols)

        asyncio.get_running_loop().run_in_executor(None, apply)

    def close(self) -> None:
        super().close()
        if self._exec_id and self._exit.done():  # the command ended: its spec and dir may go
            self._channel.remove_exec_dir(self._exec_id)
            self._exec_id = ""

    def forget(self) -> None:
        if self._exec_id:
            self._channel.remove_exec_dir(self._exec_id)
            self._exec_id = ""
        super().forget()

    def signal_group(self, sig: int) -> None:
        if self._exit.done() or self._cpid is None:
            return
        self._sent_signal = sig
        with contextlib.suppress(sv.SupervisorUnavailable):
            self._channel.kill(self._cpid, sig)

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        from engine.sandbox.incontainer import terminate_in_container

        def note(sig: int) -> None:
            if not self._exit.done():
                self._sent_signal = sig

        await terminate_in_container(self._channel, self._cpid, self._marker, grace, self._exit.done, note)
        return []


def make_held(paths: HeldPaths, link: HostLink | None, chan: int, meta: dict[str, Any]) -> HostProcess:
    return SandboxHeldProcess(paths, link, chan, meta)
