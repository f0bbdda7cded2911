"""`exechost console` in this terminal: the console app, or the demo's (console/demo.py builds on the app,
so the choice between them is made here, above both)."""

from __future__ import annotations

import signal
from pathlib import Path

from console.app import ConsoleApp


def run_console(
    state: Path | None = None,
    *,
    config_path: str | None = None,
    demo: bool = False,
    web_tab: bool = False,
    demo_root: Path | None = None,
) -> int:
    """Entry point used by `exechost console`. `demo_root`: a browser tab of `--demo --web`, joining the
    demo its server prepared (whose process runs the agent and removes everything on quit)."""
    if demo_root is not None:
        from console.demo import DemoConsoleApp
        from console.demo_tour import Demo, prepare_env

        tab = Demo(demo_root)
        prepare_env(tab)
        app: ConsoleApp = DemoConsoleApp(tab, run_agent=False)
        app.quiet_socket_busy = True
        app.run()
        return 0
    if demo:
        from console.demo import DemoConsoleApp
        from console.demo_tour import finish_demo, prepare_demo

        made = prepare_demo()
        app = DemoConsoleApp(made)
        # A closed terminal or a kill quits like `q`: the demo's gateway, sessions and files go with it.
        for sig in (signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, lambda _sig, _frame: app.exit())
        try:
            app.run()
        finally:
            finish_demo(made)
        return 0
    app = ConsoleApp(state, config_path=config_path)
    app.quiet_socket_busy = web_tab
    app.run()
    return 0
