"""Shared helpers for the gateway tests: an in-process gateway, clients, config files, a wait_until."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from engine.protocol.client import ControlClient
from runner.gateway.server import GatewayServer

REPO = Path(__file__).resolve().parents[2]

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
# For [tools.exec] tests whose runs start in the checkout (the CLI's cwd): a checkout outside the home and
# the machine's /tmp (CI's) is a tree host runs see read-only, and a run there says so before its output
# (engine/commands/hostroots.py).
IN_CHECKOUT = f'hostWritable = ["{REPO}"]\n'


def listed(*agents: str) -> str:
    """`[[agents.list]]` entries with no overrides (the global policy) for `agents`: a minted credential
    connects only for an agent the config lists (engine.config.model.Config.admits)."""
    return "".join(f'\n[[agents.list]]\nid = "{agent}"\n' for agent in agents)


def list_agents(state: Path, *agents: str) -> None:
    """Add `listed(agents)` to the config a fixture wrote (the operator's edit; a gateway reloads it)."""
    if agents:
        path = state / "config.toml"
        write_config(state, (path.read_text() if path.exists() else "") + listed(*agents))


def claim_state(state: Path) -> None:
    """What the operator's CLI does before it writes a new state dir (engine.commands.gatewaydirs.claim):
    an empty or missing one is recorded, so a gateway adopts it with the config written after; an
    unrecorded dir already holding anything, a config too, is refused at start (fresh round 17 c)."""
    from engine.commands import gatewaydirs

    gatewaydirs.claim(os.environ["HOME"], str(state))


def write_config(state: Path, text: str) -> None:
    """The operator writes a state dir's config, as its CLI does: a new (missing or empty) dir is claimed
    first (claim_state), so the gateway started there adopts it; a dir that already holds anything
    unrecorded (what a host run planted) stays unclaimed and is refused at start (fresh round 17 c)."""
    path = state / "config.toml"
    if not path.exists():
        claim_state(state)
    path.write_text(text)
    os.chmod(path, 0o600)


@asynccontextmanager
async def gateway(state: Path, **kwargs: Any) -> AsyncIterator[GatewayServer]:
    """A real gateway on this test's loop, in the test's own state dir. EXECHOST_TEST_HOLD_SESSIONS=1 runs
    its gateway-host sessions in the session host, as the daemon does."""
    kwargs.setdefault("handshake_timeout", 0.5)
    server = GatewayServer(state, **kwargs)
    if os.environ.get("EXECHOST_TEST_HOLD_SESSIONS") == "1":
        server.services.hold_sessions()
    await server.start()
    stopper = asyncio.ensure_future(server.wait_stopped())  # honours `shutdown` like the daemon does
    try:
        yield server
    finally:
        await server.stop()
        stopper.cancel()


async def connect(state: Path, client: str = "test", **kwargs: Any) -> ControlClient:
    """A client with the operator role unless `operator=False` (an agent's connection)."""
    kwargs.setdefault("operator", True)
    return await ControlClient.connect(state, client=client, name=client, autostart=False, **kwargs)


# A timeout here only bounds how long a broken test hangs: on a loaded machine (CI's two cores, or many
# suites at once) an event that comes surely may come late, so every wait gets this much more patience.
PATIENCE = float(os.environ.get("EXECHOST_TEST_PATIENCE", "3"))


async def wait_until(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll `pred` (sync or async) until truthy; fail after `timeout` x PATIENCE (never asserts on times)."""
    deadline = time.monotonic() + timeout * PATIENCE
    while True:
        value = pred()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout * PATIENCE:g} s")
        await asyncio.sleep(interval)


def cli(
    state: Path, *args: str, timeout: float = 60, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `exechost ARGS` as a subprocess against `state`."""
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(REPO),
        input=input,
    )
