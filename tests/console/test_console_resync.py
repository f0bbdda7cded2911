"""An ask raised while the console is fetching its snapshot (after `pending`, before `sessions.list`) stays
in the inbox: the older snapshot must not wipe the row its event added (found by the web console test)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from console.app import ConsoleApp
from engine.protocol.client import ControlClient
from tests.helpers.gateway import ALLOWLIST, connect, gateway, wait_until, write_config


async def test_an_ask_between_the_snapshot_requests_keeps_its_row(state_dir: Path, monkeypatch: Any) -> None:
    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        asked: list[asyncio.Future[dict[str, Any]]] = []
        real = ControlClient.pending_approvals

        async def pending_then_ask(self: ControlClient) -> Any:
            snapshot = await real(self)  # taken before the ask exists
            if not asked:
                params = {"command": "echo raced", "agentId": "main", "sessionKey": "agent:main"}
                asked.append(asyncio.ensure_future(agent.request("exec", params)))
                await wait_until(lambda: server.services.approvals.pending())
                await asyncio.sleep(0.2)  # its event reaches the console before the snapshot is applied
            return snapshot

        monkeypatch.setattr(ControlClient, "pending_approvals", pending_then_ask)
        app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(140, 40)) as pilot:

            async def shown() -> bool:
                await pilot.pause()
                return app.link.connected.is_set() and len(app.inbox) == 1

            await wait_until(shown, timeout=20)
            await pilot.pause(0.3)
            assert len(app.inbox) == 1  # still there once everything queued has been handled
            row = app.inbox.rows()[0]
            assert row.view.get("command") == "echo raced"
            await operator_deny(state_dir, row.key)
        result = await asyncio.wait_for(asked[0], 20)
        assert result["details"]["status"] == "denied"
        await agent.close()


async def operator_deny(state: Path, approval_id: str) -> None:
    operator = await connect(state, "op")
    await operator.request("approve", {"id": approval_id, "decision": "deny"})
    await operator.close()


async def test_gateway_traffic_after_the_panes_are_gone_is_dropped(state_dir: Path) -> None:
    """Events kept arriving while the console shut down; one landed after its panes were removed and
    crashed the app with NoMatches (seen in bench/bench_console.py)."""
    from textual.widgets import TabbedContent

    from console.messages import GatewayEvent

    write_config(state_dir, ALLOWLIST)
    async with gateway(state_dir):
        app = ConsoleApp(state_dir, autostart=False, bell=False, clock=False)
        async with app.run_test(size=(140, 40)) as pilot:
            await wait_until(app.link.connected.is_set, timeout=20)
            await app.query_one(TabbedContent).remove()  # what shutdown does to the main screen
            await pilot.pause()
            row = {"sessionId": "late-one", "status": "exited", "command": "true", "scopeKey": "agent:main"}
            app.post_message(GatewayEvent.of("session.exited", {"session": row}))
            app.post_message(GatewayEvent.of("approval.resolved", {"id": "x", "decision": "deny"}))
            await pilot.pause(0.2)
            assert app.is_running and app._exception is None
