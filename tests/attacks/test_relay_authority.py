"""With the gateway up it is the only decider of an exec-approvals.sock ask; the console's own inbox (no
gateway) holds a yes to the socket token the ask proved. Variants of fresh round 18 b's relay findings."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from engine.approvals.socket.wire import request_decision
from engine.approvals.store import ApprovalsStore, generate_token
from tests.helpers.gateway import gateway, wait_until, write_config

ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


def _replace_socket_token(path: Path) -> None:
    """The operator replaces a leaked socket token in exec-approvals.json (by hand: no verb does it)."""
    data = json.loads(path.read_text())
    data["socket"]["token"] = generate_token()
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


async def test_a_request_frame_the_relay_refuses_is_denied_not_kept_in_the_consoles_inbox(
    state_dir: Path,
) -> None:
    """A NUL in a `request` frame's command makes `approvals.relay` fail: that failure is the gateway's
    answer (deny), never a turn to the console's inbox, where the gateway's proof of the token would not
    hold."""
    from console.app import ConsoleApp

    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    async with gateway(state_dir):
        app = ConsoleApp(state_dir, config_path=str(state_dir / "config.toml"), autostart=False, bell=False)
        async with app.run_test():
            await wait_until(lambda: app.link.connected.is_set() and app.socket_server is not None)
            body = {"command": "/usr/bin/touch /tmp/relay-nul\x00x"}
            sent = asyncio.ensure_future(request_decision(sock, token, body, timeout=60))
            kept = await wait_until(
                lambda: [r for r in app.inbox.rows() if r.source == "socket"] or sent.done()
            )
            if isinstance(kept, list):
                app.resolve(kept[0], "allow-once")
            answer = await sent
    assert (kept, answer) == (True, "deny")


async def test_the_consoles_own_inbox_denies_a_replaced_tokens_request_frame(state_dir: Path) -> None:
    """No gateway: the console answers a `request` frame itself, and a yes given after the socket token was
    replaced is a deny (the token is looked at again at the yes, as the gateway's relay does)."""
    from console.app import ConsoleApp

    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, leaked = store.socket_info()
    app = ConsoleApp(
        state_dir, config_path=str(state_dir / "config.toml"), connect=False, autostart=False, bell=False
    )
    async with app.run_test():
        await wait_until(lambda: app.socket_server is not None)
        body = {"command": "/usr/bin/touch /tmp/relay-old-token"}
        sent = asyncio.ensure_future(request_decision(sock, leaked, body, timeout=120))
        rows = await wait_until(lambda: app.inbox.rows())
        _replace_socket_token(state_dir / "exec-approvals.json")
        app.resolve(rows[0], "allow-always")
        answer = await sent
    assert answer == "deny"


async def test_the_consoles_own_inbox_still_answers_the_live_tokens_request_frame(state_dir: Path) -> None:
    """The other side: with the token unchanged, the operator's yes in the console's inbox stands."""
    from console.app import ConsoleApp

    write_config(state_dir, ALLOWLIST)
    store = ApprovalsStore(state_dir / "exec-approvals.json")
    sock, token = store.socket_info()
    app = ConsoleApp(
        state_dir, config_path=str(state_dir / "config.toml"), connect=False, autostart=False, bell=False
    )
    async with app.run_test():
        await wait_until(lambda: app.socket_server is not None)
        body = {"command": "/usr/bin/touch /tmp/relay-live-token"}
        sent = asyncio.ensure_future(request_decision(sock, token, body, timeout=120))
        rows = await wait_until(lambda: app.inbox.rows())
        app.resolve(rows[0], "allow-once")
        answer = await sent
    assert answer == "allow-once"
