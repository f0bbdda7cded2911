"""Fresh round 14 b (issue 27 §1, ambient credentials and the operator's surfaces): the TUI console's
session panes, the web console's guard and the browser door, attacked by a hostile agent.

Each test states the attack in its docstring. A test marked xfail(strict) is an attack that works today;
the others are regression tests (attempts that failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import threading
from pathlib import Path
from typing import Any

import pyte

from console.app import ConsoleApp
from engine.approvals.store import ApprovalsStore
from tests.console.test_console import running_console, until
from tests.helpers.gateway import connect, gateway, wait_until, write_config

REPO = Path(__file__).resolve().parents[2]
ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'

# UTF-8 encoded C1 controls, written by printf as octal bytes so the command text itself stays ASCII:
# U+009B is CSI, U+009D is OSC and U+009C is ST — the 8-bit forms of ESC [, ESC ] and ESC \.
C1_CSI = r"\302\233"
C1_OSC = r"\302\235"
C1_ST = r"\302\234"


def _painted(app: ConsoleApp) -> str:
    """What Textual writes to the operator's terminal for the session line pane: the text of each rendered
    strip's segments (Textual's driver writes segment text as is, styles as SGR around it)."""
    pane = app.sessions.line_pane
    return "\n".join(
        "".join(seg.text for seg in pane.render_line(y)) for y in range(pane.scrollable_content_region.height)
    )


async def test_c1_controls_in_session_output_reach_the_operators_terminal(state_dir: Path) -> None:
    """The agent runs an allowlisted `printf` whose output holds `CSI 3;1H FAKE` and `OSC 2;… ST` in their
    one-character C1 forms. The console's session pane paints them verbatim; fed to a terminal model
    (pyte, the console's own), the cursor jumps to row 3 and the title (OSC 52 alike: the clipboard)
    changes: the agent draws on the operator's screen and writes the operator's clipboard."""
    async with running_console(state_dir) as (app, pilot, agent):
        ApprovalsStore().add_allowlist("main", "/usr/bin/printf")
        clip = f"{C1_OSC}52;c;cm0gLXJmIH4K{C1_ST}"  # OSC 52: the clipboard becomes `rm -rf ~`
        cmd = f"printf 'ok {C1_CSI}3;1HFAKE-APPROVE {C1_OSC}2;PWNED{C1_ST} {clip}end\\n'"
        res = await agent.request(
            "exec",
            {"command": cmd, "background": True, "agentId": "main", "sessionKey": "agent:main"},
        )
        sid = res["details"]["sessionId"]
        await pilot.press("2")
        await until(pilot, lambda: sid in app.sessions.sessions)
        app.sessions.select(sid)
        await until(pilot, lambda: any("end" in line for line in app.sessions.line_pane.text_lines()))
        await pilot.pause()
        painted = _painted(app)
        line = next(row for row in painted.splitlines() if "FAKE" in row)
        screen = pyte.Screen(200, 6)
        pyte.Stream(screen).feed(line)
        assert (screen.title, screen.display[2][:12]) != ("PWNED", "FAKE-APPROVE")
        assert "\x9b" not in painted and "\x9d" not in painted


# The operator's `t` in the Sessions tab: console.attach writes the session's output to the real terminal.
ATTACH_CHILD = """
import sys
from pathlib import Path
from console.attach import attach_session
attach_session(Path(sys.argv[1]), sys.argv[2], {"scopeKey": "agent:main"})
"""
OSC52 = b"\x1b]52;c;cm0gLXJmIH4K\x07"  # the operator's clipboard becomes `rm -rf ~` (base64)


async def _read_until(fd: int, wanted: bytes, limit: int = 1 << 20) -> bytes:
    """The PTY master's bytes until the regex `wanted` matches (or the child closes the terminal)."""
    seen = b""
    while not re.search(wanted, seen) and len(seen) < limit:
        readable, _, _ = await asyncio.to_thread(select.select, [fd], [], [], 30)
        if not readable:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


async def test_attaching_a_session_passes_osc52_to_the_operators_terminal(state_dir: Path) -> None:
    """The agent starts a PTY session that prints OSC 52 and waits. The operator takes it over (`t`); the
    attach writes the tail, escape and all, to the operator's terminal (a PTY here), which a terminal
    honouring OSC 52 (kitty, foot, wezterm, iTerm2, xterm with allowWindowOps) turns into a clipboard
    write: the operator's next paste is the agent's text."""
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        agent = await connect(state_dir, "agent")
        try:
            cmd = r"printf 'building...\033]52;c;cm0gLXJmIH4K\007\n'; exec cat"
            res = await agent.request(
                "exec",
                {
                    "command": cmd,
                    "pty": True,
                    "background": True,
                    "agentId": "main",
                    "sessionKey": "agent:main",
                },
            )
            sid = res["details"]["sessionId"]
            pid, master = pty.fork()
            if pid == 0:  # the operator's terminal: the child's stdin and stdout
                os.execve(
                    sys.executable,
                    [sys.executable, "-c", ATTACH_CHILD, str(state_dir), sid],
                    {**os.environ, "PYTHONPATH": str(REPO)},
                )
            try:
                seen = await _read_until(master, rb"building\.\.\.[^\n]*\n")  # the line, whole
                os.write(master, b"\x1d")  # ctrl+]: detach
                await asyncio.to_thread(_drain, master)
            finally:
                with contextlib.suppress(ChildProcessError):
                    await asyncio.to_thread(os.waitpid, pid, 0)
                os.close(master)
        finally:
            await agent.close()
    assert b"building..." in seen, seen  # the attach showed the session
    assert OSC52 not in seen, "the agent's OSC 52 reached the operator's terminal"


def _drain(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 65536):
            pass


class _Terminal:
    """The operator's terminal, as far as a test needs one: a PTY whose output a thread collects."""

    def __init__(self, argv: list[str], cols: int = 140, rows: int = 40) -> None:
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.execve(argv[0], argv, {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(REPO)})
        self.out = bytearray()
        self.grew = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.master, 65536):
                with self.grew:
                    self.out += chunk
                    self.grew.notify_all()
        with self.grew:
            self.out += b"\0<closed>"
            self.grew.notify_all()

    def _wait(self, wanted: bytes, start: int) -> int:
        with self.grew:
            while True:
                found = self.out.find(wanted, start)
                if found >= 0 or b"\0<closed>" in self.out:
                    return found
                if not self.grew.wait(30):  # a hang guard: 30 s without any output
                    return -1

    async def until(self, wanted: bytes, start: int = 0) -> int:
        """The offset of `wanted` in what the terminal has shown since `start` (-1: the program ended)."""
        return await asyncio.to_thread(self._wait, wanted, start)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            self.type(b"q")
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        with contextlib.suppress(ChildProcessError):
            await asyncio.to_thread(os.waitpid, self.pid, 0)
        os.close(self.master)


async def test_a_terminal_reply_the_agent_chose_is_typed_into_the_console(state_dir: Path) -> None:
    """The operator watches the agent's session in the Sessions tab while the agent's `touch` waits for
    approval. The session prints `OSC 2;q ST` then `CSI 21 t` (report the title) in their C1 forms; the
    console paints them to the terminal. The terminal (xterm with window ops allowed; the test plays its
    documented reply) answers `ESC ] l q ESC \\` on the console's stdin, which the console reads as the
    key `q`: it quits, and the agent's ask is left with no approver. Then the operator types `1` `d`
    (deny): whichever came first decides the ask."""
    write_config(state_dir, ALLOWLIST)
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", "/usr/bin/printf")
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent")
        term: _Terminal | None = None
        result: dict[str, Any] | None = None
        ask: asyncio.Future[dict[str, Any]] | None = None
        try:
            argv = [sys.executable, "-P", "-m", "runner", "console", "--state-dir", str(state_dir)]
            term = _Terminal(argv)
            await wait_until(server.services.has_approver, timeout=60)  # connected: asks wait for it
            mark = len(term.out)
            ask = asyncio.ensure_future(
                agent.request("exec", {"command": "touch x", "agentId": "main", "sessionKey": "agent:main"})
            )
            assert await term.until(b"Approvals (1)", mark) >= 0
            out = f"printf 'compiling {C1_OSC}2;q{C1_ST}{C1_CSI}21t done\\n'"
            await agent.request(
                "exec",
                {"command": out, "background": True, "agentId": "main", "sessionKey": "agent:main"},
            )
            mark = len(term.out)
            term.type(b"2")  # the operator looks at the agent's session
            assert await term.until(b"done", mark) >= 0
            # Closed so (session 11): the pane paints neither the title nor the report request
            # (engine.termtext), and a reply that reaches the console anyway (another program in the same
            # terminal asked) is read as a reply, never as keys (console/replies.py).
            painted = bytes(term.out[mark:])
            assert not any(s in painted for s in (b"\xc2\x9b", b"\xc2\x9d", b"\x1b[21t", b"]2;q")), painted
            mark = len(term.out)
            # The operator's `6` (History) and the terminal's answer, read by the console together.
            term.type(b"6\x1b]lq\x1b\\")
            await term.until(b"No decisions yet", mark)  # painted, or the console is gone
            mark = len(term.out)
            with contextlib.suppress(OSError):
                term.type(b"1")  # the operator: to the Approvals tab (its list takes focus a moment later)
            await term.until(b"[a] allow once", mark)  # shown, or the console is gone
            with contextlib.suppress(OSError):
                term.type(b"d")  # deny
            closed = asyncio.ensure_future(term.until(b"\0<closed>"))
            await asyncio.wait({ask, closed}, return_when=asyncio.FIRST_COMPLETED)
            result = ask.result() if ask.done() else None  # None: the console quit first
        finally:
            if term is not None:
                await term.close()
            await agent.close()
            if ask is not None:
                with contextlib.suppress(BaseException):
                    await ask  # still waiting when the console quit: closed with the connection
    assert result is not None, "the console quit before the operator's deny"
    assert result["details"]["status"] == "denied", result


def test_c1_controls_in_an_asks_command_are_shown_escaped() -> None:
    """Held (the contrast to the first test): what the operator approves by, the command of an ask, goes
    through engine.display.visible, an allow-list of what draws as itself: the C1 forms of CSI, OSC and ST
    are written as escapes, and the ask warns that the command holds control characters."""
    from engine.display import visible, warnings

    command = "ls \u009b3;1Hrm -rf ~ \u009d52;c;eA==\u009c"
    shown = visible(command)
    assert not any(0x80 <= ord(ch) <= 0x9F for ch in shown)
    assert "\\x9b" in shown and "\\x9d" in shown and "\\x9c" in shown
    assert any("control characters" in w for w in warnings(command))
