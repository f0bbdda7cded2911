"""Attach a PTY session to the real terminal while Textual is suspended; ctrl+] detaches."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import termios
import threading
import tty
from pathlib import Path
from typing import Any

from engine.protocol.client import ControlClient
from engine.protocol.frames import Event, RemoteError
from engine.protocol.methods import EventName, Topic
from engine.protocol.requests import ProcessRequest, SessionsOutput, SessionsResize, Subscribe
from engine.termtext import TerminalFilter

DETACH = b"\x1d"  # ctrl+]
LEAVE = "\x1b[0m\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[?2004l\x1b[?1049l\x1b[?25h"


def attach_session(state: Path | None, session_id: str, row: dict[str, Any]) -> None:
    """Blocking: runs its own loop and connection in a thread (the app's loop is paused while suspended)."""
    errors: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(_attach(state, session_id, row))
        except BaseException as exc:  # reported after the terminal is restored
            errors.append(exc)

    thread = threading.Thread(target=main, name=f"attach-{session_id}", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


async def _attach(state: Path | None, session_id: str, row: dict[str, Any]) -> None:
    # As the operator, like the console it comes from: the operator may type into any session (an agent's
    # keys into a session started unasked are refused: engine.sessions.actions).
    client = await ControlClient.connect(
        state, client="console-attach", name="console attach", autostart=False, operator=True
    )
    scope = row.get("scopeKey")
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    # The agent's bytes reach the operator's own terminal: only what a full-screen program needs passes
    # (no OSC clipboard, title or link, no window operation, no C1 control: engine.termtext).
    screen = TerminalFilter()

    def show(text: str) -> None:
        os.write(sys.stdout.fileno(), screen.feed(text).encode("utf-8", "replace"))

    def on_event(ev: Event) -> None:
        if ev.data.get("sessionId") != session_id:
            return
        if ev.event == EventName.SESSION_OUTPUT and isinstance(ev.data.get("data"), str):
            show(ev.data["data"])
        elif ev.event == EventName.SESSION_EXITED:
            queue.put_nowait(None)

    client.add_listener(on_event)
    stdin = sys.stdin.fileno()
    saved = termios.tcgetattr(stdin)
    loop = asyncio.get_running_loop()
    try:
        # Raw first: a ^C typed while the tail is fetched goes to the program, never as SIGINT to the console.
        tty.setraw(stdin)
        await client.request(Subscribe(topics=[Topic.SESSIONS], follow=[session_id]))
        cols, rows = os.get_terminal_size(sys.stdout.fileno())
        with contextlib.suppress(RemoteError):
            await client.request(SessionsResize(session_id=session_id, cols=cols, rows=rows))
        os.write(
            sys.stdout.fileno(), f"\x1b[2J\x1b[H[attached to {session_id}; ctrl+] detaches]\r\n".encode()
        )
        with contextlib.suppress(RemoteError):
            tail = await client.request(SessionsOutput(session_id=session_id, limit=16384))
            show(str(tail.get("data") or ""))
        loop.add_reader(stdin, lambda: queue.put_nowait(os.read(stdin, 4096)))
        while (data := await queue.get()) is not None:
            detach = DETACH in data
            data = data.split(DETACH)[0]
            if data:
                key = scope if isinstance(scope, str) else None
                text = {"data": data.decode("utf-8", "replace")}
                write = ProcessRequest(action="write", session_id=session_id, session_key=key, args=text)
                await client.request(write)
            if detach:
                break
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(stdin)
        # modes the program set (mouse reports, bracketed paste, the alternate screen) end with the attach
        with contextlib.suppress(OSError):
            os.write(sys.stdout.fileno(), LEAVE.encode())
        termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        await client.close()
