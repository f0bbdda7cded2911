"""Whose-is-it checks benchmark (fix T10): what the three new checks cost where they run.

1. An ask filed with its run's credential generation (`ApprovalManager.register(..., generation=)`) against
   the same ask unstamped (the raw baseline): one dict lookup per ask.
2. A node's session list read at link-up (`NodeSessions._read`, 1,000 rows) with the gateway's vouch (the
   key given to that node, the agent allowed there) against a vouch that takes every row.
3. An approval-socket `exec` frame's principal (`frame_agent`) against reading the frame's agentId.
4. (fix T10b) An approval-socket `request` frame, answered at once, through the real server (its principal
   read from the config on disk at each frame) against the same server believing the frame's agentId;
   and with the exec host's fingerprint of the command taken before the ask (an exec handler present)
   against the same frame with no exec handler (nothing to bind).
Usage: .venv/bin/python bench/bench_whose.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.table import ratio, record  # noqa: E402
from engine.approvals.pending import ApprovalManager  # noqa: E402
from engine.approvals.request import ApprovalRequest  # noqa: E402
from engine.approvals.socket.principal import frame_agent  # noqa: E402
from engine.approvals.socket.server import ApprovalSocketServer, PromptRequest, RateLimit  # noqa: E402
from engine.approvals.socket.wire import request_decision  # noqa: E402
from engine.config.model import Config  # noqa: E402
from engine.nodes.wire import Response  # noqa: E402
from engine.tools.exec_host import LocalExecHost  # noqa: E402
from runner.gateway.node_sessions import NodeSessions  # noqa: E402


async def _asks(n: int, stamped: bool) -> float:
    """µs per ask filed and denied (register + resolve), n distinct asks."""
    manager = ApprovalManager(max_per_agent=n + 1, max_total=n + 1)
    generation = manager.generations.current("ops") if stamped else None
    requests = [
        ApprovalRequest(command=f"make t{i}", cwd="/", host="gateway", agent_id="ops", session_key="k")
        for i in range(n)
    ]
    t0 = time.perf_counter()
    for request in requests:
        record_, _ = manager.register(request, generation=generation)
        manager.resolve(record_.id, "deny", "bench")
    return (time.perf_counter() - t0) / n * 1e6


class _Link:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    async def call(self, method: str, params: dict[str, Any], timeout: float = 0) -> Response:
        return Response("1", True, payload={"sessions": self.rows})


async def _read(rows: list[dict[str, Any]], vouched: bool, given: set[str]) -> float:
    """ms to read one node's session list of len(rows) rows."""
    config = Config(Path("/nonexistent"))

    def vouch(node: str, scope: str, agent: str) -> bool:
        return scope in given and config.may_use_node(agent, node)

    held = NodeSessions(vouch if vouched else (lambda node, scope, agent: True))
    t0 = time.perf_counter()
    await held._read("alpha", _Link(rows))  # type: ignore[arg-type]
    return (time.perf_counter() - t0) * 1000


def _frames(n: int, checked: bool) -> float:
    """ns per exec frame's principal."""
    config = Config(Path("/nonexistent"))
    t0 = time.perf_counter()
    for _ in range(n):
        if checked:
            frame_agent(config, "main")
        else:
            _ = "main"
    return (time.perf_counter() - t0) / n * 1e9


class _Believing(ApprovalSocketServer):
    """The server as it was before fix T10b: a request frame's agentId taken as it came, no config read."""

    async def _principal(self, named: object, key: object, kind: str) -> tuple[str, str | None]:
        return (named if isinstance(named, str) else "main"), (key if isinstance(key, str) else None)


async def _yes(request: PromptRequest) -> str:
    return "allow-once"


async def _requests(n: int, checked: bool, bound: bool = False) -> float:
    """µs per `request` frame answered at once, over the real socket, one connection each."""
    root = Path(tempfile.mkdtemp(prefix="ebw-", dir="/tmp"))
    try:
        config = root / "config.toml"
        config.write_text('[tools.exec]\nsecurity = "allowlist"\n\n[[agents.list]]\nid = "ops"\n')
        config.chmod(0o600)
        kind = ApprovalSocketServer if checked else _Believing
        path, token = root / "s" / "ea.sock", "b" * 32
        host = LocalExecHost(config, root / "s" / "exec-approvals.json") if bound else None
        server = kind(
            path,
            token,
            decider=_yes,
            exec_handler=host,
            rate_limit=RateLimit(burst=10**9),
            config_path=config,
        )
        async with server:
            body = {"command": "make test", "cwd": str(root), "agentId": "main", "sessionKey": "agent:main:b"}
            t0 = time.perf_counter()
            for i in range(n):
                assert await request_decision(path, token, body, request_id=f"r{i}") == "allow-once"
            return (time.perf_counter() - t0) / n * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = [
        {"sessionId": f"s{i}", "scopeKey": f"agent:a{i % 50}:k{i}", "backgrounded": True} for i in range(1000)
    ]
    given = {str(r["scopeKey"]) for r in rows[::2]}
    logging.disable(logging.WARNING)  # the ignored rows' log lines (16 a read at most) are not timed
    for run in range(args.runs):
        pairs = [(asyncio.run(_asks(2000, False)), asyncio.run(_asks(2000, True))) for _ in range(9)]
        plain = statistics.median(p for p, _ in pairs)
        stamped = statistics.median(s for _, s in pairs)
        record(
            f"ask filed+denied with its generation (run {run + 1})",
            f"{stamped:.1f} µs",
            f"{plain:.1f} µs",
            ratio(stamped, plain),
        )
        reads = [
            (asyncio.run(_read(rows, False, given)), asyncio.run(_read(rows, True, given))) for _ in range(9)
        ]
        takes_all = statistics.median(a for a, _ in reads)
        vouched = statistics.median(v for _, v in reads)
        record(
            f"node session list read, 1,000 rows, vouched (run {run + 1})",
            f"{vouched:.2f} ms",
            f"{takes_all:.2f} ms",
            ratio(vouched, takes_all),
        )
        bare = _frames(200_000, False)
        checked = _frames(200_000, True)
        record(
            f"exec frame principal (run {run + 1})",
            f"{checked:.0f} ns",
            f"{bare:.0f} ns",
            ratio(checked, bare),
        )
        frames = [(asyncio.run(_requests(200, False)), asyncio.run(_requests(200, True))) for _ in range(9)]
        believed = statistics.median(b for b, _ in frames)
        principal = statistics.median(p for _, p in frames)
        record(
            f"request frame on exec-approvals.sock, its principal from the config (run {run + 1})",
            f"{principal:.0f} µs",
            f"{believed:.0f} µs",
            ratio(principal, believed),
        )
        pairs = [
            (asyncio.run(_requests(100, True)), asyncio.run(_requests(100, True, True))) for _ in range(9)
        ]
        unbound = statistics.median(u for u, _ in pairs)
        fingerprinted = statistics.median(f for _, f in pairs)
        record(
            f"request frame on exec-approvals.sock, its content fingerprinted (run {run + 1})",
            f"{fingerprinted:.0f} µs",
            f"{unbound:.0f} µs",
            ratio(fingerprinted, unbound),
        )


if __name__ == "__main__":
    main()
