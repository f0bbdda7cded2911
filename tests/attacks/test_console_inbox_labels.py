"""With the gateway down, the console's own inbox shows an exec-approvals.sock `request` frame under the
policy this console applies to the socket's principal (LocalExecHost's decision), never the frame's own
`security` and `ask` labels, and offers only what that policy offers (fresh round 18 b, offline)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.approvals.socket.wire import request_decision
from engine.approvals.store import ApprovalsStore
from tests.helpers.gateway import wait_until, write_config

ALWAYS = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "always"\n'
DENY = '[tools.exec]\nhost = "gateway"\nsecurity = "deny"\nask = "on-miss"\n'
# What a hostile client with a leaked token would have the operator see and be offered.
CLAIMS = {"security": "full", "ask": "off", "allowedDecisions": ["allow-once", "allow-always", "deny"]}


async def test_the_inbox_shows_the_consoles_policy_not_the_frames_labels(state_dir: Path) -> None:
    """The frame says security=full ask=off; the console's policy says allowlist/always: the row says the
    policy's, offers no allow-always, and an allow-always given anyway answers allow-once."""
    from console.app import ConsoleApp

    write_config(state_dir, ALWAYS)
    sock, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
    app = ConsoleApp(
        state_dir, config_path=str(state_dir / "config.toml"), connect=False, autostart=False, bell=False
    )
    async with app.run_test():
        await wait_until(lambda: app.socket_server is not None)
        body = {"command": "/usr/bin/touch /tmp/inbox-labels", **CLAIMS}
        sent = asyncio.ensure_future(request_decision(sock, token, body, timeout=120))
        rows = await wait_until(lambda: app.inbox.rows())
        view = rows[0].view
        shown = (view["security"], view["ask"], view["allowedDecisions"])
        app.resolve(rows[0], "allow-always")
        answer = await sent
    assert shown == ("allowlist", "always", ["allow-once", "deny"])
    assert answer == "allow-once"


async def test_a_principal_the_policy_refuses_is_denied_without_a_row(state_dir: Path) -> None:
    """security=deny for the socket's principal: the frame's security=full shows nobody anything; deny."""
    from console.app import ConsoleApp

    write_config(state_dir, DENY)
    sock, token = ApprovalsStore(state_dir / "exec-approvals.json").socket_info()
    app = ConsoleApp(
        state_dir, config_path=str(state_dir / "config.toml"), connect=False, autostart=False, bell=False
    )
    async with app.run_test():
        await wait_until(lambda: app.socket_server is not None)
        body = {"command": "/usr/bin/touch /tmp/inbox-labels-deny", **CLAIMS}
        answer = await request_decision(sock, token, body, timeout=120)
        rows = app.inbox.rows()
    assert (answer, rows) == ("deny", [])
