"""Issue 30 item 2: `gateway restart` with a broken config.toml keeps the running gateway (the last good
config) and says why; the console's header shows the whole cause when no gateway can start."""

from __future__ import annotations

import json
from pathlib import Path

from console.app import ConsoleApp
from tests.helpers.gateway import FULL, cli, wait_until, write_config

BROKEN = FULL + '[tools.exec\nsecurity = "full"\n'  # line 5: the table header lacks its `]`


def test_restart_with_a_broken_config_keeps_the_running_gateway(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    try:
        started = json.loads(cli(state_dir, "gateway", "start", "--json").stdout)["details"]["pid"]
        write_config(state_dir, BROKEN)
        refused = cli(state_dir, "gateway", "restart")
        assert refused.returncode == 1 and refused.stdout == ""
        config = state_dir / "config.toml"
        assert refused.stderr.startswith(f"exechost: gateway restart refused: {config}:5: invalid TOML: ")
        assert (
            f"the running gateway (pid {started}) keeps running on its last good config; fix the file, then "
            "run `exechost gateway restart` again\n"
        ) in refused.stderr
        status = json.loads(cli(state_dir, "gateway", "status", "--json").stdout)["details"]
        assert status["pid"] == started and "still running on the last good config" in status["configError"]
        ran = cli(state_dir, "exec", "--", "echo still-served")  # clients are served, not exit 69
        assert ran.returncode == 0 and ran.stdout.endswith("\nstill-served\n")  # after the config warning
        # Fixed: the restart goes ahead.
        write_config(state_dir, FULL)
        restarted = cli(state_dir, "gateway", "restart", "--json")
        assert restarted.returncode == 0, restarted.stderr
        assert json.loads(restarted.stdout)["details"]["pid"] != started
    finally:
        cli(state_dir, "gateway", "stop")
    # With no gateway running the refusal says so: none could start either.
    write_config(state_dir, BROKEN)
    refused = cli(state_dir, "gateway", "restart")
    assert refused.returncode == 1
    assert "no gateway is running, and none can start until it is fixed" in refused.stderr
    assert cli(state_dir, "gateway", "status").returncode == 1  # and none was started by trying


async def test_console_header_shows_why_no_gateway_can_start(state_dir: Path) -> None:
    write_config(state_dir, BROKEN)
    config = state_dir / "config.toml"
    app = ConsoleApp(state_dir, autostart=True, bell=False, clock=False)
    async with app.run_test(size=(140, 30)) as pilot:

        async def says_why() -> bool:
            await pilot.pause()
            return "invalid TOML" in str(app.sub_title)

        await wait_until(says_why, timeout=30)
        header = str(app.sub_title)
        assert header.startswith(f"gateway cannot start (retrying): {config}:5: invalid TOML: ")
        assert header.endswith(f"; see {state_dir / 'gateway.log'}")  # the whole cause, not cut at 80
