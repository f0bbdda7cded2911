"""Issue 37: a gateway starts without loading what only some gateways use. The browser stack (its
manager, door and CDP tool) and the operator's sandbox admin verbs are loaded on first use, not at start;
a gateway that then serves `status` and an `exec` still has not loaded them, and one that uses them does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.gateway import FULL, REPO, write_config

LAZY = (
    "engine.sandbox.browser",
    "engine.tools.browser",
    "runner.gateway.browser_proxy",
    "engine.sandbox.admin",
)

PROBE = """
import asyncio, json, sys
from pathlib import Path
from tests.helpers.gateway import connect, gateway

LAZY = %r

def loaded():
    # A module lazymod.lazy() registered stays a _LazyModule until its first attribute access.
    return {name: type(sys.modules[name]).__name__ != "_LazyModule" for name in LAZY if name in sys.modules}

async def main():
    state = Path(sys.argv[1])
    report = {}
    async with gateway(state) as server:
        client = await connect(state)
        await client.request("status")
        result = await client.request("exec", {"command": "echo served"})
        report["exec"] = result["details"]["status"]
        report["after_start"] = loaded()
        report["third_party"] = sorted(m for m in ("docker", "playwright") if m in sys.modules)
        hub = server.services.browsers
        report["made"] = [type(hub.tool).__name__, type(hub.proxy).__name__, type(hub.manager).__name__]
        report["after_use"] = loaded()
        await client.close()
    print(json.dumps(report))

asyncio.run(main())
"""


def test_browser_and_sandbox_admin_modules_load_on_first_use(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE % (LAZY,), str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exec"] == "completed"
    assert report["after_start"] == {name: False for name in LAZY}  # registered, not run
    assert report["third_party"] == []
    assert report["made"] == ["BrowserTool", "BrowserProxy", "BrowserManager"]
    browser_stack = {name: True for name in LAZY if name != "engine.sandbox.admin"}
    assert report["after_use"] == {**browser_stack, "engine.sandbox.admin": False}
