"""`exechost console --demo --web`: one demo for every browser tab. This process prepares it, runs the
scripted agent beside the web server, and removes everything when the server stops (Ctrl-C)."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import threading

from console.demo_tour import Demo, DemoAgent, finish_demo, prepare_demo
from console.web import serve


def tab_command(demo: Demo) -> str:
    """Each tab: a demo console on this demo's root, without an agent of its own (`-P`: see
    console.web.console_command)."""
    argv = [sys.executable, "-P", "-m", "runner", "console", "--web-tab", "--demo-root", str(demo.root)]
    return shlex.join(argv)


class AgentThread(threading.Thread):
    """The agent on its own event loop (the web server owns the main one), stopped on quit."""

    def __init__(self, demo: Demo) -> None:
        super().__init__(name="demo-agent", daemon=True)
        self.demo = demo
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task[None] | None = None

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.task = self.loop.create_task(DemoAgent(self.demo).run())
        with contextlib.suppress(BaseException):
            self.loop.run_until_complete(self.task)
        self.loop.close()

    def stop(self) -> None:
        if self.task is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.task.cancel)
        self.join(timeout=5)


def serve_demo(port: int | None) -> int:
    demo = prepare_demo()
    agent = AgentThread(demo)
    try:
        agent.start()
        return serve(demo.state, str(demo.config), port, command=tab_command(demo))
    finally:
        agent.stop()
        finish_demo(demo)
