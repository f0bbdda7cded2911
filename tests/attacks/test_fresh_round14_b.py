"""Fresh round 14 b (issue 27 §1, ambient credentials and the operator's surfaces): the TUI console's
session panes, the web console's guard and the browser door, attacked by a hostile agent.

Each test states the attack in its docstring. A test marked xfail(strict) is an attack that works today;
the others are regression tests (attempts that failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import select
import sys
from pathlib import Path

import pyte

from console.app import ConsoleApp
from engine.approvals.store import ApprovalsStore
from tests.console.test_console import running_console, until
from tests.helpers.gateway import connect, gateway, write_config

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
        ready = await asyncio.to_thread(select.select, [fd], [], [], 30)
        if not ready[0]:
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
                    {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
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
