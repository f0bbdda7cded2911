"""`exechost console` in this terminal: the console app, or the demo's (console/demo.py builds on the app,
so the choice between them is made here, above both)."""

from __future__ import annotations

from pathlib import Path

from console.app import ConsoleApp


def run_console(
    state: Path | None = None, *, config_path: str | None = None, demo: bool = False, web_tab: bool = False
) -> int:
    """Entry point used by `exechost console`."""
    if demo:
        from console.demo import DemoConsoleApp, finish_demo, prepare_demo

        state, config_path = prepare_demo(state)
        app: ConsoleApp = DemoConsoleApp(state, config_path=config_path)
        try:
            app.run()
        finally:
            finish_demo(state)
        return 0
    app = ConsoleApp(state, config_path=config_path)
    app.quiet_socket_busy = web_tab
    app.run()
    return 0
