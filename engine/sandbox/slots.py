"""Ready command slots, so a warm sandbox exec costs the container one exec and the host two writes.

A slot is an exec dir prepared ahead of a command: its FIFOs made and opened on both sides, its spec file
created, and a process (supervisor.SLOT_SH) already started in a session of its own, holding the streams
and waiting for the host's go line. Taking a slot fills the spec and writes the go line; the waiting shell
sources the spec, which execs the login shell exactly as a command started from scratch does. Each
container keeps TARGET slots (per event loop: the loop watches their fds), refilled off the request path
after each take, and dropped after IDLE_SEC without a command.

Everything in a slot dir is the container's to tamper with. The host keeps the fds it opened at preparation
(type-checked; never re-opened by name), fills the spec through the fd of the file it created, checks before
use that the slot dir and spec are still what it made and where the container will look for them, writes
the go line without blocking, and reads nothing but short status lines. A slot that looks wrong in any way
is discarded, and the command takes another one or a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time

from engine.sandbox import supervisor as sv

log = logging.getLogger(__name__)

TARGET = 2  # slots kept per container: two idle processes in it and seven fds here, each
# The refill after a take waits this long: most commands are done by then, so preparing the next slot (two
# forks and two execs in the container) does not compete with them for the CPU.
FILL_DELAY_SEC = 0.005
IDLE_SEC = 600.0
# Across all containers of this process: idle slots hold seven fds here each, and a gateway serving many
# containers must not run into its fd limit for them (beyond this, commands take fresh slots).
MAX_IDLE = 48
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class Slot:
    """One prepared exec dir and the host's ends of its FIFOs; `pid` once its process said it is ready.

    Construction does blocking filesystem work (mkdir and mkfifo can take a millisecond): the pool runs it
    on a worker thread."""

    def __init__(self, channel: sv.Channel) -> None:
        self.ctl = str(channel.path)
        self.exec_id, self.xfd, self.efd = channel.new_exec_dir()
        self.out = self.err = self.rc = self.stdin = self.spec = -1
        self.placeholders: list[int] = []
        self.pid: int | None = None
        self.rc_buf = b""
        self.dead = False
        try:
            owner = channel.owner()
            # stdin always: the go line goes into it, ahead of anything the command reads from it.
            ends = sv.make_fifos(channel, self.efd, stdin=True)
            assert ends.stdin is not None
            self.out, self.err, self.rc, self.stdin = ends.out, ends.err, ends.rc, ends.stdin
            self.placeholders = ends.placeholders
            self.spec = os.open("spec", _CREATE, 0o600, dir_fd=self.efd)  # filled at go, through this fd
            if owner is not None:
                os.fchown(self.spec, *owner)
            self.ids = (_ident(os.fstat(self.xfd)), _ident(os.fstat(self.efd)), _ident(os.fstat(self.spec)))
            channel.send(f"slot {self.exec_id}")
        except BaseException:
            self.discard()
            raise

    # -- status while idle ------------------------------------------------------------------------
    def status_lines(self, data: bytes) -> list[list[str]]:
        self.rc_buf = (self.rc_buf + data)[-512:]
        lines = []
        while b"\n" in self.rc_buf:
            line, self.rc_buf = self.rc_buf.split(b"\n", 1)
            lines.append(line.decode("ascii", "replace").split())
        return lines

    def note(self, words: list[str]) -> None:
        """A status line before the slot is taken: its pid (ready), or anything else (it is broken)."""
        if len(words) == 2 and words[0] == "pid" and words[1].isdigit() and self.pid is None:
            self.pid = int(words[1])
            self.close_placeholders()
        else:
            self.dead = True  # an exit before any command ran, or lines nobody should write

    def close_placeholders(self) -> None:
        for fd in self.placeholders:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.placeholders.clear()

    def usable(self) -> bool:
        """Still where and what the container's side will use, and by the status FIFO, its process neither
        exited nor said anything but its pid (a slot still starting may be taken: it runs once up)."""
        if not self.dead and not self.in_place():
            self.dead = True
        while not self.dead and self.read_status():
            pass
        return not self.dead

    def read_status(self) -> bool:
        """Take what the slot's process said on its status FIFO (its pid, or its end); False when nothing
        more is waiting there."""
        try:
            data = os.read(self.rc, 256)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self.dead = True
        for words in self.status_lines(data):
            self.note(words)
        return True

    def in_place(self) -> bool:
        """x, x/<id> and x/<id>/spec are still the dirs and file we made (the slot's process reads the
        spec by that path), none of them swapped or linked. Only stats, none following a link."""
        try:
            dfd = sv._open_dir(self.ctl)
            try:
                x = os.stat("x", dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(dfd)
            mine = os.stat(self.exec_id, dir_fd=self.xfd, follow_symlinks=False)
            spec = os.stat("spec", dir_fd=self.efd, follow_symlinks=False)
        except OSError:
            return False
        return (_ident(x), _ident(mine), _ident(spec)) == self.ids

    # -- use --------------------------------------------------------------------------------------
    def go_with(self, script: str, want_stdin: bool) -> None:
        """Fill the spec and write the go line into the in FIFO, ahead of anything the command reads from it:
        "in" (the command's stdin is the rest of that FIFO) or "null" (its stdin is /dev/null)."""
        data = script.encode()
        offset = 0
        while offset < len(data):
            offset += os.pwrite(self.spec, data[offset:], offset)
        os.close(self.spec)
        self.spec = -1
        line = b"in\n" if want_stdin else b"null\n"
        if os.write(self.stdin, line) != len(line):
            raise BlockingIOError("slot in FIFO is full")  # non-blocking: one the container filled refuses

    def handed_over(self) -> None:
        """Its fds are the command's now (launcher.SupervisedProcess): this object closes nothing."""
        self.placeholders = []
        self.out = self.err = self.rc = self.stdin = self.spec = self.efd = self.xfd = -1

    def discard(self) -> None:
        """Close our ends (the waiting process sees EOF on in and leaves) and remove the dir."""
        self.dead = True
        self.close_placeholders()
        for fd in (self.out, self.err, self.rc, self.stdin, self.spec):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.out = self.err = self.rc = self.stdin = self.spec = -1
        if self.efd >= 0:
            janitor.remove(self.exec_id, self.xfd, self.efd)
            self.efd = self.xfd = -1


class SlotPool:
    """A container's slots on one event loop: `pending` until their process reports, then `ready`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, channel: sv.Channel) -> None:
        self._loop = loop
        self._channel = channel
        self._pending: list[Slot] = []
        self._ready: list[Slot] = []
        self._preparing = 0  # on a worker thread
        self._last_take = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._fill_timer: asyncio.TimerHandle | None = None
        self.closed = False

    @property
    def counts(self) -> tuple[int, int]:
        """(ready, pending): for tests and diagnostics."""
        return len(self._ready), len(self._pending) + self._preparing

    def take(self, script: str, want_stdin: bool) -> Slot | None:
        """A slot already given its command (a ready one first); None when none is left."""
        self._last_take = time.monotonic()
        self.fill_later()
        for group in (self._ready, self._pending):
            while group:
                slot = group.pop(0)
                self._loop.remove_reader(slot.rc)
                if not slot.usable():
                    log.debug("sandbox slot %s discarded: moved, changed or ended", slot.exec_id)
                else:
                    try:
                        slot.go_with(script, want_stdin)
                        return slot
                    except OSError as exc:
                        log.debug("sandbox slot %s discarded: refused its command (%s)", slot.exec_id, exc)
                slot.discard()
        return None

    async def fresh(self, script: str, want_stdin: bool) -> Slot:
        """A slot made for this command now (none was left), on a worker thread."""
        future = self._loop.run_in_executor(None, Slot, self._channel)
        try:
            slot = await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(_discard_result)  # the thread still finishes it: nobody will use it
            raise
        try:
            slot.go_with(script, want_stdin)
        except BaseException:
            slot.discard()
            raise
        return slot

    def fill_later(self) -> None:
        if self._fill_timer is None and not self.closed:
            self._fill_timer = self._loop.call_later(FILL_DELAY_SEC, self.fill)

    def fill(self) -> None:
        """Prepare slots up to TARGET on worker threads. A failure is not retried until the next take."""
        self._fill_timer = None
        if self.closed or self._loop.is_closed():
            return
        while len(self._ready) + len(self._pending) + self._preparing < TARGET and _idle_total() < MAX_IDLE:
            try:
                future = self._loop.run_in_executor(None, Slot, self._channel)
            except RuntimeError:  # the loop is shutting down its executor: no more slots
                return
            self._preparing += 1
            future.add_done_callback(self._prepared)
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_later(IDLE_SEC, self._idle_check)

    def _prepared(self, future: asyncio.Future[Slot]) -> None:
        self._preparing -= 1
        try:
            slot = future.result()
        except (OSError, sv.SupervisorUnavailable) as exc:
            log.debug("sandbox slot for %s not prepared: %s", self._channel.name, exc)
            return
        if self.closed or self._loop.is_closed():
            slot.discard()
            return
        self._pending.append(slot)
        self._loop.add_reader(slot.rc, self._idle_status, slot)

    def _idle_status(self, slot: Slot) -> None:
        """A status line (or EOF) from a slot not yet taken: its pid makes it ready, anything else ends it."""
        if not slot.read_status():
            return
        if slot.dead:
            log.debug("sandbox slot %s discarded: its process ended or wrote more than its pid", slot.exec_id)
            self._loop.remove_reader(slot.rc)
            for group in (self._pending, self._ready):
                if slot in group:
                    group.remove(slot)
            slot.discard()
        elif slot.pid is not None and slot in self._pending:
            self._pending.remove(slot)
            self._ready.append(slot)

    def _idle_check(self) -> None:
        self._idle_timer = None
        idle = time.monotonic() - self._last_take
        if idle >= IDLE_SEC:
            self.drop()
        elif not self.closed:
            self._idle_timer = self._loop.call_later(IDLE_SEC - idle, self._idle_check)

    def drop(self) -> None:
        """Discard every slot not taken: their processes leave (a later take refills)."""
        for slot in [*self._pending, *self._ready]:
            if not self._loop.is_closed():
                self._loop.remove_reader(slot.rc)
            slot.discard()
        self._pending.clear()
        self._ready.clear()

    def close(self) -> None:
        self.closed = True
        for timer in (self._idle_timer, self._fill_timer):
            if timer is not None:
                timer.cancel()
        self._idle_timer = self._fill_timer = None
        self.drop()


def _idle_total() -> int:
    return sum(sum(pool.counts) for pools in _pools.values() for pool in pools.values())


def _discard_result(future: asyncio.Future[Slot]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().discard()


class _Janitor:
    """Removes exec dirs on a thread of its own: an rmdir can cost a millisecond (a journalled block
    free), and nobody waits for it. Dirs still queued at exit stay until the supervisor's next start."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, int, int]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def remove(self, exec_id: str, xfd: int, efd: int) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sandbox-janitor", daemon=True)
                self._thread.start()
        self._queue.put((exec_id, xfd, efd))

    def _run(self) -> None:
        while True:
            exec_id, xfd, efd = self._queue.get()
            try:
                sv.remove_exec_dir(exec_id, xfd, efd)
            except Exception:  # one odd dir must not stop the rest
                log.exception("removing sandbox exec dir %s failed", exec_id)


janitor = _Janitor()
_pools: dict[asyncio.AbstractEventLoop, dict[str, SlotPool]] = {}


def pool_for(channel: sv.Channel) -> SlotPool:
    """The running loop's pool for this container (by control dir: a test may switch state dirs)."""
    loop = asyncio.get_running_loop()
    if len(_pools) > 1 or loop not in _pools:
        for other in [lp for lp in _pools if lp.is_closed()]:
            # A finished loop (a test's, an asyncio.run's): its slots can never be taken; free them.
            for pool in _pools.pop(other).values():
                pool.close()
    pools = _pools.setdefault(loop, {})
    key = str(channel.path)
    found = pools.get(key)
    if found is not None and not found.closed:
        return found
    pool = pools[key] = SlotPool(loop, channel)
    return pool
