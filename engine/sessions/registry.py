"""The session registry: adjective-noun ids, scope checks, and the TTL sweep of finished sessions."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.sessions.launcher import ProcessHandle, RunSpec
from engine.sessions.output import SessionOutput
from engine.sessions.pty import TerminalWatcher

CLEANUP_MS_DEFAULT = 30 * 60 * 1000
CLEANUP_MS_MIN = 60 * 1000
CLEANUP_MS_MAX = 3 * 60 * 60 * 1000

_ADJECTIVES = (  # noqa: SIM905
    "amber brave brisk calm clever cosmic crisp dapper eager fair fancy fresh gentle glad golden "
    "grand happy hazy keen kind lively lucid mellow merry mild misty neat nimble noble plucky "
    "polite proud quick quiet rapid rosy rustic shy silent sleek smooth snowy solar spry steady "
    "sunny swift tender tidy vivid warm wild wise witty young zesty"
).split()
_NOUNS = (  # noqa: SIM905
    "acorn anchor aspen badger basil beacon breeze brook cedar cloud comet coral crane creek dawn "
    "delta dune ember falcon fern fjord forest fox garden glade gulf harbor hawk heron island "
    "lagoon lake lark maple meadow mesa moss nebula oak orbit otter pebble pine prairie quartz reef "
    "river sage shore sparrow spruce summit thicket tide valley willow wren"
).split()
_SUFFIX_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
RECENTLY_DROPPED = 1024  # ids kept out of reuse after their session is dropped (see Registry._dropped)


def clamp_cleanup_ms(value: int | float | None) -> int:
    if value is None:
        return CLEANUP_MS_DEFAULT
    return int(min(CLEANUP_MS_MAX, max(CLEANUP_MS_MIN, value)))


def _base36(n: int) -> str:
    out = ""
    while True:
        n, rem = divmod(n, 36)
        out = _SUFFIX_CHARS[rem] + out
        if not n:
            return out


def make_slug(taken: Callable[[str], bool]) -> str:
    """`calm-gulf`; on collision `-2..-12`, then three words, then a random suffix, then the time."""
    base = f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}"
    if not taken(base):
        return base
    for n in range(2, 13):
        candidate = f"{base}-{n}"
        if not taken(candidate):
            return candidate
    three = f"{base}-{secrets.choice(_NOUNS)}"
    if not taken(three):
        return three
    suffixed = f"{three}-{''.join(secrets.choice(_SUFFIX_CHARS) for _ in range(3))}"
    if not taken(suffixed):
        return suffixed
    return f"{suffixed}-{_base36(time.time_ns() // 1_000_000)}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(eq=False)
class Session:
    """One command's state. Exit fields stay None until the output has been read to EOF."""

    id: str
    spec: RunSpec
    cwd: str
    output: SessionOutput  # bytes, offsets, the decoder and the text views: the one owner
    handle: ProcessHandle | None = None
    pid: int | None = None
    pty: bool = False
    started_at: int = field(default_factory=now_ms)
    ended_at: int | None = None
    backgrounded: bool = False
    retained: bool = False  # finished in the foreground but kept (output overflowed, `log` must work)
    exited: bool = False
    exit_code: int | None = None
    exit_signal: str | None = None
    timed_out: bool = False
    killed: bool = False
    error: str | None = None
    notified: bool = False
    stray: list[dict[str, Any]] = field(default_factory=list)
    empty_polls: int = 0
    terminal: TerminalWatcher | None = None
    activity: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    kill_task: asyncio.Task[Any] | None = None
    counted_in: Registry | None = field(default=None, repr=False)  # whose counters include this session

    def __setattr__(self, name: str, value: Any) -> None:
        # The registry keeps running/shown counters so `status` is flat in the session count; the three
        # fields they depend on report each change to it.
        registry = self.__dict__.get("counted_in") if name in _COUNTED_FIELDS else None
        if registry is None:
            object.__setattr__(self, name, value)
            return
        registry._count(self, -1)
        object.__setattr__(self, name, value)
        registry._count(self, 1)

    @property
    def command(self) -> str:
        return self.spec.command

    @property
    def scope_key(self) -> str:
        return self.spec.scope_key

    @property
    def instance(self) -> str:
        """What names this session alone for ever: its marker's nonce (`<id>-<nonce>`, kept by the session
        host across restarts). The id is reused once the session is gone; this never is."""
        marker, prefix = self.spec.marker, f"{self.id}-"
        return marker[len(prefix) :] if marker.startswith(prefix) else marker

    def is_run(self, run: Mapping[str, Any]) -> bool:
        """Whether this session is the run a record names (`instance`, `scopeKey`, as an approval keeps
        them): the same id is not enough, another agent's later session may hold it now."""
        instance = run.get("instance")
        return (
            isinstance(instance, str)
            and bool(instance)
            and instance == self.instance
            and run.get("scopeKey") == self.scope_key
        )

    @property
    def cursor_key_mode(self) -> str:
        return self.terminal.cursor_key_mode if self.terminal else "normal"

    @property
    def listed(self) -> bool:
        return self.backgrounded or self.retained

    @property
    def failure(self) -> str | None:
        """Why the command failed (the reference's failure texts), or None for `completed`."""
        if self.error is not None:
            return self.error
        if self.timed_out:
            seconds = self.spec.timeout_sec or 0
            shown = int(seconds) if float(seconds).is_integer() else seconds
            return (
                f"Command timed out after {shown} seconds. If this command is expected to take longer, "
                "re-run with a higher timeout (e.g., exec timeout=300). If it should keep running, start it "
                "with exec background=true or yieldMs so OpenClaw can register a pollable process session. "
                "Do not rely on shell backgrounding with a trailing &."
            )
        if self.exit_signal is not None:
            return f"Command aborted by signal {self.exit_signal}"
        if self.exit_code is None:
            return "Command aborted before exit code was captured"
        if self.exit_code == 127:
            return "Command not found"
        if self.exit_code == 126:
            return "Command not executable (permission denied)"
        return None

    @property
    def status(self) -> str:
        if not self.exited:
            return "running"
        if self.killed:
            return "killed"  # the operator or agent ended it: not a failure of the command
        return "failed" if self.failure is not None else "completed"

    @property
    def exit_label(self) -> str:
        if self.exit_signal is not None:
            return f"signal {self.exit_signal}"
        return f"code {self.exit_code if self.exit_code is not None else 0}"

    @property
    def name(self) -> str:
        return self.spec.name or derive_session_name(self.command)

    @property
    def stdin_writable(self) -> bool:
        return self.handle is not None and not self.exited and self.handle.stdin_open

    def to_dict(self) -> dict[str, Any]:
        end = self.ended_at if self.ended_at is not None else now_ms()
        return {
            "sessionId": self.id,
            "status": self.status,
            "pid": self.pid,
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "runtimeMs": max(0, end - self.started_at),
            "cwd": self.cwd,
            "command": self.command,
            "name": self.name,
            "tail": self.output.tail(),
            "truncated": self.output.truncated,
            "exitCode": self.exit_code,
            "exitSignal": self.exit_signal,
            "scopeKey": self.scope_key,
            "host": self.spec.host,
            "pty": self.pty,
            "backgrounded": self.backgrounded,
            "totalChars": self.output.total_chars,
            "strayProcesses": list(self.stray),
        }


_COUNTED_FIELDS = frozenset({"exited", "backgrounded", "retained"})


def truncate_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit - 1
    head = (keep + 1) // 2
    return text[:head] + "…" + text[len(text) - (keep - head) :]


# A command that opens with shell syntax is named by its first words: `for i` says nothing of a loop.
_SHELL_WORDS = frozenset({"for", "while", "until", "if", "case", "select", "{", "!", "function", "time"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def derive_session_name(command: str) -> str:
    """The verb and its first non-flag argument, e.g. `npm run` for `npm --silent run build`; leading
    `VAR=value` words skipped; a loop, test or group by its first words (`for f in *.log; do gzip …`)."""
    words = command.strip().split()
    while len(words) > 1 and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return ""
    verb = words[0]
    if verb in _SHELL_WORDS or verb.startswith("("):
        return truncate_middle(" ".join(words), 48)
    arg = next((w for w in words[1:] if not w.startswith("-")), None)
    return truncate_middle(f"{verb} {arg}" if arg else verb, 48)


class Registry:
    """All sessions by id; scope filtering happens at lookup so other scopes read as not found."""

    def __init__(self, cleanup_ms: int | float | None = None) -> None:
        self.cleanup_ms = clamp_cleanup_ms(cleanup_ms)
        self._sessions: dict[str, Session] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.on_drop: Callable[[Session], None] | None = None
        self.reserved: Callable[[str], bool] = lambda _id: False  # ids of kept sessions not adopted yet
        # List order (newest first, then by id), kept as sessions come and go so that a page of `process
        # list` costs its own rows, not a sort of every session retained (issue 37).
        self._order: list[tuple[int, str]] = []
        self._scoped: dict[str, list[tuple[int, str]]] = {}
        self._scope_listed: dict[str, int] = {}  # listed sessions per scope (a scope's `total`)
        self._running = 0  # sessions not exited
        self._shown = 0  # sessions the operator's list shows: listed, or not exited (foreground runs)
        # Ids dropped lately are not handed out again at once: the session host forgets a finished session
        # a moment after we do (its FORGET rides behind the next frame), and a new session spawned under the
        # same name in that moment was refused there as a duplicate (~1 in 4,000 execs).
        self._dropped: dict[str, None] = {}

    def _count(self, session: Session, sign: int) -> None:
        if not session.exited:
            self._running += sign
        if session.listed or not session.exited:
            self._shown += sign
        if session.listed:
            key = session.scope_key
            self._scope_listed[key] = self._scope_listed.get(key, 0) + sign

    def listed_count(self, scope_key: str | None) -> int:
        """How many rows `process list` has for a scope (None: the operator's view): O(1)."""
        return self._shown if scope_key is None else self._scope_listed.get(scope_key, 0)

    def ordered(
        self, scope_key: str | None = None, after: tuple[int, str] | None = None
    ) -> Iterator[Session]:
        """Sessions in list order (of one scope, or all), from just after the key `after`."""
        keys = self._order if scope_key is None else self._scoped.get(scope_key, [])
        i = bisect.bisect_right(keys, after) if after is not None else 0
        while i < len(keys):
            session = self._sessions.get(keys[i][1])
            i += 1
            if session is not None:
                yield session

    def _index(self, session: Session, add: bool) -> None:
        key = (-session.started_at, session.id)
        for keys in (self._order, self._scoped.setdefault(session.scope_key, [])):
            if add:
                bisect.insort(keys, key)
                continue
            i = bisect.bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                del keys[i]
        if not add and not self._scoped.get(session.scope_key):
            self._scoped.pop(session.scope_key, None)

    def counts(self) -> tuple[int, int]:
        """(sessions the operator's list shows, running sessions), kept up to date: O(1)."""
        return self._shown, self._running

    def new_id(self) -> str:
        return make_slug(lambda s: s in self._sessions or s in self._dropped or self.reserved(s))

    def add(self, session: Session) -> None:
        replaced = self._sessions.get(session.id)
        if replaced is not None and replaced.counted_in is self:
            self._count(replaced, -1)
            replaced.counted_in = None
        if replaced is not None:
            self._index(replaced, False)
        self._sessions[session.id] = session
        self._index(session, True)
        session.counted_in = self
        self._count(session, 1)
        if self._sweeper is None or self._sweeper.done():
            with contextlib.suppress(RuntimeError):
                self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def get(self, session_id: str, scope_key: str | None = None) -> Session | None:
        session = self._sessions.get(session_id)
        if session is None or (scope_key is not None and session.scope_key != scope_key):
            return None
        return session

    def drop(self, session_id: str) -> Session | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._index(session, False)
            self._dropped[session_id] = None
            if len(self._dropped) > RECENTLY_DROPPED:
                del self._dropped[next(iter(self._dropped))]
        if session is not None and session.counted_in is self:
            self._count(session, -1)
            session.counted_in = None
        if session is not None and self.on_drop is not None:
            self.on_drop(session)
        return session

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def sweep(self, now: int | None = None) -> list[str]:
        """Drop finished sessions older than cleanup_ms; returns their ids."""
        cutoff = (now if now is not None else now_ms()) - self.cleanup_ms
        expired = [s.id for s in self._sessions.values() if s.ended_at is not None and s.ended_at < cutoff]
        for session_id in expired:
            self.drop(session_id)
        return expired

    async def _sweep_forever(self) -> None:
        interval = max(30.0, self.cleanup_ms / 6000)
        while self._sessions:
            await asyncio.sleep(interval)
            self.sweep()

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
