"""exec-approvals.sock's `exec` frame decided as the gateway decides (fresh round 18 b): what it costs.

`LocalExecHost._decide` now reads the gateway's session-overrides.json (a table of 20 overrides) and the
live grants of exec-grants.json (20 grants) at each frame, and passes both to `evaluate`. The raw baseline,
measured interleaved in the same run: the same decision with neither read (an empty table, no grants), as
it was before; and the two reads alone (`_gateway_state`, one thread hop's work).
Usage: .venv/bin/python bench/bench_socket_decide.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from engine.approvals.grants import GRANTS_NAME, GrantLimits, GrantStore  # noqa: E402
from engine.policy import overridestable  # noqa: E402
from engine.tools import exec_host  # noqa: E402


def _state(root: Path) -> Path:
    """A state dir with a config, an overrides table and a grants file of 20 entries each."""
    state = root / "state"
    state.mkdir(mode=0o700)
    config = state / "config.toml"
    config.write_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n')
    config.chmod(0o600)
    rows = {f"agent:main:s{i}": {"security": "allowlist"} for i in range(20)}
    (state / overridestable.OVERRIDES_NAME).write_text(json.dumps({"version": 1, "overrides": rows}))
    grants = GrantStore(state / GRANTS_NAME)
    for i in range(20):
        grants.add("main", [f"/usr/bin/tool{i}"], f"tool{i}", GrantLimits(uses=5))
    return state


async def _frames(host: exec_host.LocalExecHost, cwd: str, n: int, *, now: bool) -> float:
    """µs per decision of `ls -la` (an allowlist miss: it would ask)."""
    t0 = time.perf_counter()
    for _ in range(n):
        got = await host._decide("ls -la", cwd, "main", None, "agent:main:b", use_grants=now)
        assert not isinstance(got, exec_host.ExecOutcome), got
    return (time.perf_counter() - t0) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ebs-", dir="/tmp"))
    try:
        state = _state(root)
        os.environ["OPENCLAW_STATE_DIR"] = str(state)
        host = exec_host.LocalExecHost(state / "config.toml", state / "exec-approvals.json")
        real_read = overridestable.read

        def none(path: Path) -> dict[str, Any]:
            return {}

        async def pair() -> tuple[float, float]:
            overridestable.read = none  # type: ignore[assignment]
            try:
                before = await _frames(host, str(REPO), 100, now=False)
            finally:
                overridestable.read = real_read  # type: ignore[assignment]
            return before, await _frames(host, str(REPO), 100, now=True)

        for run in range(args.runs):
            pairs = [asyncio.run(pair()) for _ in range(9)]
            before = statistics.median(b for b, _ in pairs)
            now = statistics.median(n for _, n in pairs)
            record(
                f"exec frame decided with the gateway's overrides and grants (run {run + 1})",
                f"{now:.0f} µs",
                f"{before:.0f} µs",
                ratio(now, before),
            )
            grants = GrantStore(state / GRANTS_NAME)
            t0 = time.perf_counter()
            for _ in range(2000):
                exec_host._gateway_state(grants, "main", "agent:main:b")
            reads = (time.perf_counter() - t0) / 2000 * 1e6
            record(f"the overrides table and live grants read (run {run + 1})", f"{reads:.0f} µs")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
