"""A gateway start that fails leaves nothing process-wide: the sandbox manager serves every gateway (and
every test) of the process, and a session host left on it is a link of a loop that may be gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.sandbox import default_manager
from runner.gateway.server import GatewayBusy, GatewayServer
from tests.helpers.gateway import gateway, write_config


async def test_a_refused_start_leaves_no_session_host_on_the_shared_sandbox_manager(state_dir: Path) -> None:
    write_config(state_dir, "")
    async with gateway(state_dir):
        second = GatewayServer(state_dir, handshake_timeout=0.5)
        second.services.hold_sessions()
        assert default_manager().session_host is second.services.holders
        with pytest.raises(GatewayBusy):
            await second.start()  # the first holds the state dir
        # Left there, the next gateway's sandbox (another test's, another loop's) would use this link:
        # "The future belongs to a different loop" (fresh round 4 g, r3 and r5).
        assert default_manager().session_host is None
