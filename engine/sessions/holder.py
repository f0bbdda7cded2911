"""Sessions whose process and terminal a holder owns (holder_main.py), so they outlive the gateway.

`HolderLauncher` starts each gateway-host command under its own holder process and returns a
`HolderProcess`, the same `ProcessHandle` the session manager drives for a local child: output frames
arrive over the holder's Unix socket; writes, EOF, resize go back over it; kills signal the command's
process group directly (same uid). Next to the socket, in `<state>/holders/` (0700), each session keeps
`<id>.json` (what the session is: written before the holder starts), `<id>.spool` (every output byte, framed,
written by the holder) and `<id>.exit` (its end). A new gateway adopts what it finds there
(engine.sessions.adopt): a live holder is re-attached, a finished one is replayed with its exit code and time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import statefs
from engine.sessions import procs
from engine.sessions.launcher import DEFAULT_TERM, Launcher, RunSpec
from engine.unixsock import SUN_PATH_MAX, socket_is_live

log = logging.getLogger("exechost.sessions")

HOLDERS_DIR = "holders"
HOLDER_MAIN = str(Path(__file__).with_name("holder_main.py"))
HEADER = struct.Struct(">BI")
STREAM_NAMES = {0: "stdout", 1: "stderr", 2: "pty"}
CONTROL = 255
MAX_FRAME = 1024 * 1024
START_TIMEOUT_SEC = 30.0
META_VERSION = 1


@dataclass(frozen=True)
class HeldPaths:
    """A held session's files in the holders dir."""

    directory: Path
    session_id: str

    def _p(self, suffix: str) -> Path:
        return self.directory / f"{self.session_id}.{suffix}"

    @property
    def meta(self) -> Path:
        return self._p("json")

    @property
    def spool(self) -> Path:
        return self._p("spool")

    @property
    def exit(self) -> Path:
        return self._p("exit")

    @property
    def socket(self) -> Path:
        return self._p("sock")

    @property
    def done(self) -> Path:
        """Written once a gateway recorded the end: the next one lists it without reporting it again."""
        return self._p("done")

    def read_done(self) -> dict[str, Any] | None:
        try:
            raw = statefs.read_text(self.done)
            data = json.loads(raw) if raw else None
        except (OSError, ValueError, statefs.StateFileError):
            return None
        return data if isinstance(data, dict) else None

    def remove(self) -> None:
        for path in (self.meta, self.spool, self.exit, self.done, self.socket):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def read_exit(self) -> dict[str, Any] | None:
        try:
            raw = statefs.read_text(self.exit)
            data = json.loads(raw) if raw else None
        except (OSError, ValueError, statefs.StateFileError):
            return None
        return data if isinstance(data, dict) else None


def session_meta(session_id: str, spec: RunSpec, started_at: int) -> dict[str, Any]:
    """What a new gateway needs to list the session again (never the env: it may carry secrets)."""
    return {
        "version": META_VERSION,
        "sessionId": session_id,
        "command": spec.command,
        "cwd": spec.cwd,
        "scopeKey": spec.scope_key,
        "sessionKey": spec.session_key,
        "host": spec.host,
        "name": spec.name,
        "pty": spec.pty,
        "marker": spec.marker,
        "startedAt": started_at,
        "timeoutSec": spec.timeout_sec,
        "notifyOnExit": spec.notify_on_exit,
        "notifyOnExitEmptySuccess": spec.notify_on_exit_empty_success,
    }


class FrameSource:
    """Frames from a holder's socket (live) or from its spool file (a holder that is gone)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def next(self) -> tuple[int, bytes] | None:
        try:
            header = await self.reader.readexactly(HEADER.size)
            stream, size = HEADER.unpack(header)
            if size > MAX_FRAME:
                return None
            return stream, await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return None


class HolderProcess:
    """The ProcessHandle of a held session (live holder), or of one that ended while no gateway ran
    (`writer=None`: frames come from the spool, the exit from the exit file)."""

    def __init__(
        self,
        paths: HeldPaths,
        source: FrameSource,
        writer: asyncio.StreamWriter | None,
        *,
        pid: int | None,
        pty: bool,
        marker: str,
    ) -> None:
        self.paths = paths
        self.pid = pid
        self.pty = pty
        self._marker = marker
        self._source = source
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._exit: asyncio.Future[tuple[int | None, str | None]] = self._loop.create_future()
        self.ended_at: int | None = None
        self._stdin_closed = writer is None
        self._closed = False
        self._detached = False
        self._queue: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self._pump = self._loop.create_task(self._read_frames())

    @property
    def live(self) -> bool:
        """A holder answers (not a replay of one that is gone)."""
        return self._writer is not None

    async def _read_frames(self) -> None:
        # Output EOF and the exit come in either order; the pump ends at EOF, the wait at the exit.
        eof = False
        try:
            while (frame := await self._source.next()) is not None:
                stream, data = frame
                if stream != CONTROL:
                    self._queue.put_nowait((STREAM_NAMES.get(stream, "stdout"), data))
                    continue
                try:
                    msg = json.loads(data)
                except ValueError:
                    continue
                if msg.get("type") == "hello":
                    self.pid = msg.get("pid") or self.pid
                elif msg.get("type") == "exit":
                    self._set_exit(msg)
                elif msg.get("type") == "eof" and not eof:
                    eof = True
                    self._queue.put_nowait(None)
                if eof and self._exit.done():
                    return
        finally:
            if not self._exit.done():
                # The holder went away without saying how the command ended: its exit file may know.
                self._set_exit(self.paths.read_exit() or {"code": None, "signal": "holder-lost"})
            if not eof:
                self._queue.put_nowait(None)

    def _set_exit(self, msg: dict[str, Any]) -> None:
        if self._exit.done():
            return
        code, sig = msg.get("code"), msg.get("signal")
        self.ended_at = msg.get("endedAt") if isinstance(msg.get("endedAt"), int) else None
        self._exit.set_result(
            (code if isinstance(code, int) else None, sig if isinstance(sig, str) else None)
        )

    async def wait(self) -> tuple[int | None, str | None]:
        return await asyncio.shield(self._exit)

    async def read(self) -> tuple[str, bytes] | None:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)
        return item

    @property
    def stdin_open(self) -> bool:
        return not self._stdin_closed and not self._closed

    def _send(self, msg: dict[str, Any]) -> None:
        if self._writer is None or self._writer.is_closing():
            raise BrokenPipeError("the session's holder is gone")
        self._writer.write(json.dumps(msg).encode() + b"\n")

    async def write(self, data: bytes) -> None:
        if not self.stdin_open:
            raise BrokenPipeError("stdin is closed")
        self._send({"op": "write", "data": base64.b64encode(data).decode()})
        assert self._writer is not None
        await self._writer.drain()

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        with contextlib.suppress(OSError):
            self._send({"op": "close-stdin"})
        self._stdin_closed = True

    def resize(self, cols: int, rows: int) -> None:
        if self.pty and not self._closed:
            with contextlib.suppress(OSError):
                self._send({"op": "resize", "cols": cols, "rows": rows})

    def signal_group(self, sig: int) -> None:
        if self.pid is not None and not self._exit.done():
            procs.signal_group(self.pid, sig)

    def stdio_holders(self) -> list[procs.ProcInfo]:
        return []  # the holder owns the pipes; it stops reading after a quiet spell past the exit

    async def terminate(self, grace: float = procs.KILL_GRACE_SEC) -> list[procs.ProcInfo]:
        if self.pid is None or (self._exit.done() and self._queue.empty() and self._pump.done()):
            return []
        return await procs.kill_tree(self.pid, marker=self._marker, grace=grace)

    def collected(self, outcome: dict[str, Any]) -> None:
        """The manager recorded the end (and reported it): say so on disk, for the next gateway."""
        with contextlib.suppress(OSError, statefs.StateFileError):
            statefs.atomic_write(self.paths.done, json.dumps(outcome))

    def forget(self) -> None:
        """The session's row is gone (cleanup, `process remove`): so are its files."""
        self.paths.remove()

    def close(self) -> None:
        """The manager recorded the end: the holder may stop (its files stay while the session is listed,
        so a restarted gateway lists it too)."""
        if self._closed or self._detached:
            return
        self._closed = True
        self._stdin_closed = True
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._send({"op": "close"})
            self._writer.close()
        if not self._pump.done():
            self._pump.cancel()

    def detach(self) -> None:
        """Leave the session running under its holder (a gateway that stops without killing it)."""
        self._detached = True
        if self._writer is not None:
            self._writer.close()
        self._pump.cancel()


class HolderLauncher:
    """Starts each command under a holder; `fallback` (a LocalLauncher) when a socket path would be too
    long for this state dir."""

    def __init__(self, directory: Path, fallback: Launcher, spool_cap: int = 64 * 1024 * 1024) -> None:
        self.directory = directory
        self.fallback = fallback
        self.spool_cap = spool_cap
        self._spare: asyncio.Future[Spare] | None = None

    async def _take_spare(self) -> Spare:
        """The holder started ahead (or a new one), and the next spare started in the background."""
        spare, self._spare = self._spare, None
        if spare is not None:
            try:
                ready: Spare | None = await spare
            except OSError:
                ready = None
            if ready is not None and ready.proc.returncode is None:
                self._spare = asyncio.ensure_future(_new_holder())
                return ready
        self._spare = asyncio.ensure_future(_new_holder())
        return await _new_holder()

    async def close(self) -> None:
        """The unused spare goes (its stdin closes: it exits without starting anything)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                unused = await spare
                unused.discard()
                await unused.proc.wait()

    def paths(self, session_id: str) -> HeldPaths:
        return HeldPaths(self.directory, session_id)

    def never_started(self, session_id: str) -> bool:
        """No holder ever ran this session's command: no files, or a description written before the
        holder started with no pid added, no exit written and no holder answering."""
        paths = self.paths(session_id)
        try:
            meta = json.loads(statefs.read_text(paths.meta) or "null")
        except (OSError, ValueError, statefs.StateFileError):
            return False  # unreadable: unknown
        if meta is None:
            return True
        if not isinstance(meta, dict) or "pid" in meta or paths.exit.exists():
            return False
        return not socket_is_live(paths.socket)

    async def spawn(self, spec: RunSpec) -> Any:
        session_id = spec.marker.rsplit("-", 1)[0]
        paths = self.paths(session_id)
        if not session_id or len(os.fsencode(paths.socket)) > SUN_PATH_MAX:
            return await self.fallback.spawn(spec)
        statefs.ensure_private_dir(self.directory)
        paths.remove()
        statefs.atomic_write(paths.meta, json.dumps(session_meta(session_id, spec, _now_ms())))
        env = dict(os.environ if spec.env is None else spec.env)
        env[procs.MARKER_ENV] = spec.marker
        if spec.pty:
            env.setdefault("TERM", DEFAULT_TERM)
        holder_spec = {
            "argv": spec.resolved_argv(),
            "env": env,
            "cwd": spec.cwd or os.getcwd(),
            "pty": spec.pty,
            "cols": spec.cols,
            "rows": spec.rows,
            "stdin": spec.wants_stdin(),
            "spool": str(paths.spool),
            "exit": str(paths.exit),
            "socket": str(paths.socket),
            "spoolCap": self.spool_cap,
        }
        try:
            ready = await _start_holder(await self._take_spare(), holder_spec, spec.pass_fds)
            reader, writer = await asyncio.open_unix_connection(str(paths.socket), limit=MAX_FRAME * 2)
        except BaseException:
            paths.remove()
            raise
        writer.write(b'{"op":"attach"}\n')
        meta = session_meta(session_id, spec, _now_ms()) | {"pid": int(ready["pid"])}
        statefs.atomic_write(paths.meta, json.dumps(meta))
        return HolderProcess(
            paths, FrameSource(reader), writer, pid=int(ready["pid"]), pty=spec.pty, marker=spec.marker
        )


@dataclass
class Spare:
    """A holder started ahead of need, waiting for its spec on `sock` (its stdin): Python's start is most
    of its cost. A socket, not a pipe, so the fds the command needs travel with the spec (SCM_RIGHTS)."""

    proc: asyncio.subprocess.Process
    sock: socket.socket

    def discard(self) -> None:
        self.sock.close()  # EOF: the spare exits without starting anything


async def _new_holder() -> Spare:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            HOLDER_MAIN,
            stdin=theirs.fileno(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return Spare(proc, ours)


async def _start_holder(spare: Spare, holder_spec: dict[str, Any], fds: tuple[int, ...]) -> dict[str, Any]:
    proc = spare.proc
    assert proc.stdout is not None
    try:
        data = json.dumps(holder_spec | {"passFds": list(fds)}).encode() + b"\n"
        # A fresh socketpair's buffer takes the spec whole (at most a few hundred KiB), so this never waits.
        spare.sock.setblocking(True)
        sent = socket.send_fds(spare.sock, [data], list(fds)) if fds else spare.sock.send(data)
        if sent < len(data):
            spare.sock.sendall(data[sent:])
        spare.sock.close()
        line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_SEC)
    except BaseException:
        spare.discard()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    finally:
        # The first process exits at once (the holder lives on, detached): reap it off the hot path.
        _reapers.add(reaper := asyncio.ensure_future(proc.wait()))
        reaper.add_done_callback(_reapers.discard)
    try:
        ready = json.loads(line)
    except ValueError:
        raise OSError("the session holder did not start") from None
    if "error" in ready:
        raise OSError(f"the session holder could not start the command: {ready['error']}")
    return ready


_reapers: set[asyncio.Future[int]] = set()


def _now_ms() -> int:
    return int(time.time() * 1000)
