"""What the attack tests share: a real gateway in the test's state dir, an allowlist, one exec call."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.approvals.store import ApprovalsStore
from tests.helpers.gateway import claim_state, connect, gateway, write_config

ALLOWLIST = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'


async def attempt(
    state: Path,
    command: str,
    *,
    allow: list[tuple[str, str | None]] = (),  # type: ignore[assignment]
    config: str = ALLOWLIST,
    agent: str = "main",
    **params: Any,
) -> dict[str, Any]:
    """Run `command` as agent `agent` with only `allow` on its allowlist; the exec result's details."""
    claim_state(state)  # the operator's CLI, before it writes a config there (recorded when new or empty)
    write_config(state, config)
    store = ApprovalsStore(state / "exec-approvals.json")
    for pattern, arg_pattern in allow:
        store.add_allowlist(agent, pattern, arg_pattern=arg_pattern)
    async with gateway(state):
        client = await connect(state)
        try:
            result = await client.request("exec", {"command": command, "agentId": agent, **params})
        finally:
            await client.close()
    details: dict[str, Any] = result["details"]
    details["_text"] = result["text"]
    return details


def refused(details: dict[str, Any]) -> bool:
    """Nothing ran: the call asks (no approver is attached) or is denied."""
    return details["status"] in ("approval-pending", "denied")


def tool(path: Path, body: str = "#!/bin/sh\necho tool\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    os.chmod(path, 0o755)
    return path
