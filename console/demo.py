"""`exechost console --demo`: a throw-away state dir and config, and a scripted agent showing every pane."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from console.app import ConsoleApp
from engine import principals, statefs
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable, RemoteError

DEMO_CONFIG = """\
# exechost demo profile: commands run on this machine (host=gateway) under an allowlist;
# anything not on it is asked in the console. The "ops" agent must ask every time.
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"
askFallback = "deny"
backgroundMs = 2000

[[agents.list]]
id = "ops"
tools.exec.ask = "always"
"""

BUILD_JOB = """\
#!/usr/bin/env python3
# demo: a background job that streams coloured progress for a while
import sys, time
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
for i in range(1, steps + 1):
    colour = 32 if i % 10 else 33
    print(f"\\x1b[{colour}m[build]\\x1b[0m step {i:3d}/{steps}  compiling module_{i:03d}.py", flush=True)
    if i % 25 == 0:
        print(f"\\x1b[36m[test]\\x1b[0m  {i} tests passed", flush=True)
    time.sleep(0.15)
print("\\x1b[1;32mBUILD OK\\x1b[0m")
"""

DASHBOARD = """\
#!/usr/bin/env python3
# demo: a full-screen-ish PTY program (cursor moves, colours, \\r redraws); q quits
import os, select, sys, time, termios, tty
fd = sys.stdin.fileno()
old = termios.tcgetattr(fd) if os.isatty(fd) else None
if old:
    tty.setcbreak(fd)
bars = [0, 15, 30, 45, 60]
names = ["cpu0", "cpu1", "disk", "net ", "mem "]
try:
    sys.stdout.write("\\x1b[2J\\x1b[?25l")
    tick = 0
    while True:
        sys.stdout.write("\\x1b[H\\x1b[1;36m exechost demo dashboard \\x1b[0m  (type q to quit)\\r\\n\\r\\n")
        for i, name in enumerate(names):
            bars[i] = (bars[i] + 3 + i) % 101
            filled = bars[i] * 40 // 100
            colour = 32 if bars[i] < 60 else 33 if bars[i] < 85 else 31
            bar = "\\x1b[" + str(colour) + "m" + "█" * filled + "\\x1b[0m" + "·" * (40 - filled)
            sys.stdout.write(f" {name} {bar} {bars[i]:3d}%\\x1b[K\\r\\n")
        sys.stdout.write(f"\\r\\n tick {tick}\\x1b[K")
        sys.stdout.flush()
        tick += 1
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready and os.read(fd, 64).strip().lower().startswith(b"q"):
            break
finally:
    sys.stdout.write("\\x1b[?25h\\r\\nbye\\r\\n")
    if old:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)
"""


def demo_state_dir() -> Path:
    """$OPENCLAW_STATE_DIR when set, else a fresh throw-away dir per run (short: Unix socket paths must
    stay under 107 bytes), so a demo never sees an earlier demo's sessions, approvals or allowlist."""
    given = os.environ.get("OPENCLAW_STATE_DIR", "").strip()
    if given:
        return Path(given)
    return Path(tempfile.mkdtemp(prefix="ehdemo-", dir="/tmp"))


def finish_demo(state: Path) -> None:
    """The demo's gateway stops when its console quits; a throw-away state dir goes with it."""

    throwaway = state.name.startswith("ehdemo-") and state.parent == Path("/tmp")

    async def stop() -> None:
        try:
            client = await ControlClient.connect(state, client="demo", autostart=False, operator=True)
        except (GatewayUnavailable, RemoteError, OSError):
            return
        with contextlib.suppress(RemoteError, ConnectionError):
            # A throw-away demo dir goes with its sessions; a kept one keeps them for the next gateway.
            await client.request("shutdown", {"killSessions": True} if throwaway else {})
            await asyncio.wait_for(client.wait_closed(), 5)
        await client.close()

    asyncio.run(stop())
    if throwaway:
        shutil.rmtree(state, ignore_errors=True)


def prepare_demo(state: Path | None = None) -> tuple[Path, str]:
    """Create (or reuse) the demo state dir, config, scripts and allowlist; point the process at it."""
    state = state or demo_state_dir()
    statefs.ensure_private_dir(state)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    config = state / "config.toml"
    statefs.atomic_write(config, DEMO_CONFIG)
    os.environ["EXECHOST_CONFIG"] = str(config)
    bin_dir = statefs.ensure_private_dir(state / "demo-bin")
    for name, body in (("build-job", BUILD_JOB), ("dashboard", DASHBOARD)):
        statefs.atomic_write(bin_dir / name, body, mode=stat.S_IRWXU)
    store = ApprovalsStore(state / "exec-approvals.json")
    store.ensure()
    existing = {r.pattern for r in store.agent("main").allowlist}
    wanted = [str(bin_dir / "build-job"), str(bin_dir / "dashboard")]
    for exe in ("ls", "uname", "date", "echo", "printf"):
        path = shutil.which(exe)
        if path:
            wanted.append(os.path.realpath(path))
    for pattern in wanted:
        if pattern not in existing:
            store.add_allowlist("*", pattern, source="demo")
    return state, str(config)


def demo_steps(state: Path) -> list[tuple[float, str, dict[str, Any]]]:
    """(delay before, label, exec params): what the scripted agent does, in order."""
    bin_dir = state / "demo-bin"
    return [
        (0.5, "an allowlisted command runs at once", {"command": "uname -a", "agentId": "main"}),
        (
            0.8,
            "a background job streams output",
            {"command": f"{bin_dir / 'build-job'} 200", "background": True, "agentId": "main"},
        ),
        (
            0.8,
            "a PTY program (attach with t)",
            {"command": str(bin_dir / "dashboard"), "pty": True, "background": True, "agentId": "main"},
        ),
        (0.8, "an allowlist miss asks you", {"command": "ls -la /etc && id", "agentId": "main"}),
        (0.8, "ask=always asks every time", {"command": "date", "agentId": "ops"}),
    ]


async def run_demo_agent(state: Path, *, on_step: Any = None) -> None:
    """The scripted agent: its own control connection, like any agent using the CLI or MCP."""
    # Each agent proves who it is with its own credential (minted here, as `exechost agents add` would).
    clients: dict[str, ControlClient] = {}
    pending: set[asyncio.Task[Any]] = set()
    try:
        for delay, label, params in demo_steps(state):
            await asyncio.sleep(delay)
            if on_step is not None:
                on_step(label)
            agent = str(params["agentId"])
            if agent not in clients:
                if agent != principals.MAIN_AGENT and principals.read_token(state, agent) is None:
                    principals.mint(state, agent)
                clients[agent] = await ControlClient.connect(
                    state, client="demo-agent", name=f"demo agent {agent}", agent=agent
                )
            params = {**params, "sessionKey": f"agent:{agent}", "workdir": str(state)}
            task = asyncio.ensure_future(clients[agent].request("exec", params))
            pending.add(task)
        with contextlib.suppress(RemoteError, ConnectionError):
            await asyncio.gather(*pending, return_exceptions=True)
    finally:
        for client in clients.values():
            await client.close()


class DemoConsoleApp(ConsoleApp):
    """The console plus the scripted agent, started once the gateway link is up."""

    async def on_mount(self) -> None:
        # Textual runs ConsoleApp.on_mount too (handlers are called down the MRO): don't call super().
        self.run_worker(self._agent(), group="demo", exit_on_error=False)

    async def _agent(self) -> None:
        await self.link.connected.wait()
        assert self.state is not None
        self.events_pane.feed("demo: a scripted agent now submits five commands; watch every tab\n")
        await run_demo_agent(
            self.state, on_step=lambda label: self.events_pane.feed(f"demo agent: {label}\n")
        )
