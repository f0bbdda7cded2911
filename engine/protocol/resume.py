"""A caller whose gateway went away while its call waited for a human: reconnect and keep waiting.

The next gateway restores the ask (engine.approvals.durable) and runs it detached when approved; the
caller follows it through `approvals.status` until the ask is settled and its run has ended, and gets a
result shaped like the one the call would have returned.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from engine.protocol.client import ControlClient
from engine.protocol.frames import GatewayUnavailable, RemoteError
from engine.protocol.methods import RunStatus
from engine.protocol.requests import ApprovalsStatus
from engine.protocol.stopped import GatewayStopped

POLL_S = 0.5
# How long after an ask's expiry a caller keeps trying to reach a gateway (one that restarts must
# still apply askFallback and report it).
GIVE_UP_AFTER_EXPIRY_MS = 120_000
ENDED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.DENIED)


def settled(out: dict[str, Any]) -> dict[str, Any] | None:
    """The call's result from an `approvals.status` answer, or None while it is still in flight."""
    details = out.get("details") or {}
    approval = details.get("approval") or {}
    run = details.get("run") or {}
    state = str(details.get("status") or "")
    if state == RunStatus.APPROVAL_PENDING:
        return None
    approval_id = str(approval.get("id") or "")
    command = str(approval.get("command") or "")
    if run.get("status") == RunStatus.DENIED or (state == "approval-deny" and not run):
        reason = str(run.get("reason") or "user-denied")
        text = f"Exec denied (gateway id={approval_id}, {reason}): {command}"
        return {"text": text, "details": {"status": "denied", "reason": reason, "approvalId": approval_id}}
    if run.get("exitCode") is None and run.get("status") not in ENDED:
        return None  # approved and running (or about to): keep following
    sid = run.get("sessionId")
    note = f"(ran as session {sid} after the gateway came back; full output: exechost process log {sid})"
    tail = str(run.get("tail") or "")
    return {
        "text": f"{tail}\n{note}" if tail else note,
        "details": {
            "status": run.get("status"),
            "exitCode": run.get("exitCode"),
            "sessionId": sid,
            "approvalId": approval_id,
        },
    }


async def follow_approval(
    open_client: Callable[[], Awaitable[ControlClient]],
    waiting: dict[str, Any],
    agent_id: str,
    *,
    poll_s: float = POLL_S,
    owns_client: bool = True,
    on_stopped: Callable[[GatewayStopped], None] | None = None,
) -> dict[str, Any]:
    """Poll `approvals.status` for the ask in `waiting` (the `exec.waiting` event's data), reconnecting as
    often as needed, until it is settled. Raises GatewayUnavailable when no gateway came back in time.
    `owns_client=False`: `open_client` hands out a shared connection, left open. The operator's stop
    (engine.protocol.stopped) is waited out like any absence; `on_stopped` hears of it once."""
    approval_id = str(waiting.get("approvalId") or "")
    give_up_ms = int(waiting.get("expiresAtMs") or 0) + GIVE_UP_AFTER_EXPIRY_MS
    client: ControlClient | None = None
    try:
        while True:
            try:
                if client is None or client.closed:
                    client = await open_client()
                # The connection is the agent (issue 18): an agentId is only ever the caller's own.
                # The session: this caller's own run, when others share the ask.
                key = str(waiting["sessionKey"]) if waiting.get("sessionKey") else None
                ask = ApprovalsStatus(approval_id=approval_id, agent_id=agent_id or None, session_key=key)
                out = await client.request(ask)
            except (GatewayUnavailable, ConnectionError, OSError) as exc:
                client = None
                if isinstance(exc, GatewayStopped) and on_stopped is not None:
                    on_stopped(exc)
                    on_stopped = None
                if time.time() * 1000 > give_up_ms:
                    raise GatewayUnavailable(
                        f"no gateway came back for approval {approval_id[:8]}: {exc}"
                    ) from None
                await asyncio.sleep(poll_s)
                continue
            except RemoteError as exc:
                raise GatewayUnavailable(
                    f"approval {approval_id[:8]} was lost with the gateway: {exc}"
                ) from None
            result = settled(out)
            if result is not None:
                return result
            await asyncio.sleep(poll_s)
    finally:
        if client is not None and owns_client:
            await client.close()
