"""`exechost console --demo`: the console on a throw-away demo (console/demo_tour.py) with a two-line hint
saying what to try next."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Footer, Static, TabbedContent

from console.app import ConsoleApp
from console.demo_tour import GRANT_COMMAND, OTHER_MIRROR, STALE_SCRIPT, Demo, DemoAgent
from console.screens.help import HelpScreen

# (a marker in the selected ask's command, the hint) — the ask the user is looking at decides the hint.
ASK_HINTS: tuple[tuple[str, str], ...] = (
    (
        GRANT_COMMAND,
        "This one repeats: press A, then 5 — a grant for 5 uses.\n"
        "Then watch them run out in Policy (4): the agent keeps running it; once used up, it asks again.",
    ),
    (
        "| head",
        "A pipeline: head is a safe bin (✓), ps misses the allowlist (✗) — the why is per segment.\n"
        "a allows once, d denies, D denies with a reason the agent reads.",
    ),
    (
        "<<'EOF'",
        "A heredoc: its body is shown apart as data; fed to python3 it is code, so it always asks.\n"
        "Allow always is not offered: a program read from stdin cannot be bound.",
    ),
    (
        "git diff",
        "git in the workspace: the agent set core.pager in .git/config, a program git would run.\n"
        "`git status` ran without an ask while the config was inert. a allows once, d denies.",
    ),
    (
        f"{OTHER_MIRROR}:",
        "An egress ask: pip in the sandbox wants a name its allowlist lacks (its connection waits).\n"
        "a lets this connection through, A adds the asked entry (http://name:port: plain requests only)\n"
        "to the agent's egress allowlist, d sends a 403.",
    ),
    (
        STALE_SCRIPT,
        "The agent rewrites this script while you decide: its content row shows the new digest.\n"
        "Then press a: the run is refused as approval-stale (History, 6, says which file changed).",
    ),
)
TOUR: tuple[tuple[str, str], ...] = (
    (
        "sessions",
        "Sessions: ↑/↓ picks one; the build's output scrolls. On the dashboard, t will take it over:\n"
        "Ctrl-C stops it, ctrl+] detaches (in a browser: s, then C-c). k kills a session.",
    ),
    (
        "policy",
        "Policy: each agent's effective policy and why; the grants table counts uses down.\n"
        "c checks any command against the policy without running it.",
    ),
    (
        "history",
        "History: every decision, who made it and what it led to (a stale run says which file\n"
        "changed). q quits: the demo's gateway, sessions and files go with it.",
    ),
)
IDLE = (
    "No ask waiting right now: the agent keeps working. 2 shows Sessions, 4 Policy, 6 History.\n"
    "? shows every key and this hint again; q quits and removes everything the demo made."
)


def hint_for(tab: str, selected_command: str | None) -> str:
    """The two lines the footer shows for what is on screen."""
    if tab == "approvals" and selected_command is not None:
        for marker, hint in ASK_HINTS:
            if marker in selected_command:
                return hint
        return (
            "Read the why (Segments, Content), then a allows once, A allows always, d denies.\n"
            "? shows every key and this hint again."
        )
    for name, hint in TOUR:
        if name == tab:
            return hint
    return IDLE


class DemoHelpScreen(HelpScreen):
    """The help screen with the tour's hint on top: `?` shows it again."""

    def __init__(self, hint: str) -> None:
        super().__init__()
        self.hint = hint

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Try next: ", "bold green"), self.hint), id="demo-help-hint")
        yield from super().compose()


class DemoConsoleApp(ConsoleApp):
    """The console plus the scripted agent (unless another process runs it: `--demo --web`)."""

    DEFAULT_CSS = """
    #demo-hint { height: 2; background: $boost; color: $text; padding: 0 1; }
    #demo-help-hint { dock: top; height: 3; padding: 0 2; background: $panel; }
    """

    def __init__(self, demo: Demo, *, run_agent: bool = True, **kwargs: Any) -> None:
        super().__init__(demo.state, config_path=str(demo.config), **kwargs)
        self.demo = demo
        self.run_agent = run_agent

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, Footer):  # the hint sits right above the footer's keys
                yield Static(id="demo-hint")
            yield widget

    async def on_mount(self) -> None:
        # Textual runs ConsoleApp.on_mount too (handlers are called down the MRO): don't call super().
        self.set_interval(0.5, self._while_mounted(self.show_hint))
        self.set_interval(1.0, self._while_mounted(self._policy_live))
        if self.run_agent:
            self.run_worker(self._agent(), group="demo", exit_on_error=False)

    @property
    def hint(self) -> str:
        tab = self.query_one(TabbedContent).active or "approvals"
        item = self.approvals.selected
        return hint_for(tab, str(item.view.get("command") or "") if item is not None else None)

    def show_hint(self) -> None:
        self.query_one("#demo-hint", Static).update(Text(self.hint))

    def _policy_live(self) -> None:
        """The grant's uses count down while the Policy tab is open."""
        if self.query_one(TabbedContent).active == "policy":
            self.refresh_policy()

    def action_help(self) -> None:
        self.push_screen(DemoHelpScreen(self.hint))

    async def _agent(self) -> None:
        await self.link.connected.wait()
        self.events_pane.feed("demo: a scripted agent works in a throw-away workspace; its asks wait in 1\n")
        await DemoAgent(self.demo, say=lambda text: self.events_pane.feed(f"demo agent {text}\n")).run()
