"""exec-approvals.sock hosted as the console hosts it, without the TUI: the same ApprovalSocketServer and
LocalExecHost, its asks relayed to the gateway (`approvals.relay`) with a short expiry so askFallback
answers them. `python -m tests.fuzz.approvals_host` runs until SIGTERM; the fuzzer's daemon for that wire."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest, RateLimit
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from engine.tools.exec_host import LocalExecHost

RELAY_MS = 300  # the ask expires at once: askFallback (deny) answers it


async def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    path, token = ApprovalsStore().socket_info()
    link = await ControlClient.connect(client="fuzz-host", name="fuzz-host", operator=True, autostart=False)

    async def decider(request: PromptRequest) -> str:
        params = {
            "id": request.id,
            "command": request.command,
            "cwd": request.cwd or "",
            "agentId": request.agent_id or "main",
            "security": request.security,
            "ask": request.ask,
            "resolvedPath": request.resolved_path,
            "allowedDecisions": list(request.allowed_decisions),
            "timeoutMs": RELAY_MS,
            "socketToken": request.token_id,  # as the console names it: a relay naming none is refused
        }
        try:
            answer = await link.request("approvals.relay", params)
        except RemoteError:
            return "deny"
        return str(answer.get("decision") or "deny")

    # The fuzzer is one pid: the per-peer rate limit would answer nearly everything RATE_LIMITED.
    server = ApprovalSocketServer(
        path, token, decider=decider, exec_handler=LocalExecHost(), rate_limit=RateLimit(burst=10**6)
    )
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await server.close()
    await link.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
