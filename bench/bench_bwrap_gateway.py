"""bwrap sandbox warm `exec true` through a real gateway (issue 28's goal is measured there), over a kept
control connection: policy, the sandbox's prepare, a ready slot's go line, the session host taking the
command's streams (HOLD: a held sandbox session outlives the gateway), its output and exit relayed back.

Usage: .venv/bin/python bench/bench_bwrap_gateway.py [--runs N]
Two system views as bench_bwrap.py (host /usr, a busybox tree); commands issued back to back and 20 ms
apart (time for the slot refill, as between an agent's turns). Baseline in the same run: the same exec
with `host = "gateway"` (no sandbox), and subprocess.run(['true']).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_gateway import FULL, connect, pct, start_daemon  # noqa: E402
from bench.table import ratio, record  # noqa: E402

SANDBOX = (
    '[tools.exec]\nsecurity = "full"\nask = "off"\n'
    '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n'
)


async def timed_execs(state: Path, config: str, runs: int, gap: float) -> list[float]:
    proc = start_daemon(state, config)
    try:
        client = await connect(state, "bench")
        for _ in range(20):
            result = await client.request("exec", {"command": "true", "sessionKey": "bench"})
        if config != FULL:  # it did run sandboxed: the sandbox's hostname, not this machine's
            result = await client.request("exec", {"command": "uname -n", "sessionKey": "bench"})
            assert "sandbox" in str(result), result
        samples: list[float] = []
        for _ in range(runs):
            if gap:
                await asyncio.sleep(gap)
            t0 = time.perf_counter()
            result = await client.request("exec", {"command": "true", "sessionKey": "bench"})
            samples.append(time.perf_counter() - t0)
            assert result["details"]["status"] == "completed", result
        await client.close()
        return samples
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        # Sandboxes outlive their gateway (held sessions must): this state's go before its dir does.
        subprocess.run(
            [sys.executable, "-c", "from engine.sandbox import bwrap; bwrap.remove_all()"],
            env={**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)},
            cwd=str(REPO),
            check=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    args, _ = parser.parse_known_args()
    root = Path(tempfile.mkdtemp(prefix="ehbg-", dir="/tmp"))
    try:
        tiny = root / "rootfs"
        (tiny / "etc").mkdir(parents=True)
        views = {
            "host /usr": SANDBOX,
            "busybox rootfs": SANDBOX + f'[agents.defaults.sandbox.bwrap]\nrootfs = "{tiny}"\n',
            "no sandbox": FULL,
        }
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        got: dict[tuple[str, float], list[float]] = {}
        for i, (view, config) in enumerate(views.items()):
            for gap in (0.0, 0.02):
                state = root / f"s{i}-{int(gap * 1000)}"
                state.mkdir(mode=0o700)
                got[view, gap] = asyncio.run(timed_execs(state, config, args.runs, gap))
                s = sorted(got[view, gap])
                print(
                    f"[{view}] exec `true`, {'back to back' if not gap else '20 ms apart'}: "
                    f"p50 {pct(s, 0.5):.2f} ms, p90 {pct(s, 0.9):.2f} ms"
                )
        plain: list[float] = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run(["true"], check=True)
            plain.append(time.perf_counter() - t0)
        print(f"subprocess.run(['true']) p50 {pct(plain, 0.5):.2f} ms")
        base = pct(got["no sandbox", 0.02], 0.5)
        for view in ("host /usr", "busybox rootfs"):
            for gap in (0.0, 0.02):
                p50 = pct(got[view, gap], 0.5)
                record(
                    f"bwrap warm exec `true` through the gateway p50, {view}, "
                    f"{'back to back' if not gap else '20 ms apart'} (vs unsandboxed, 20 ms apart)",
                    f"{p50:.2f} ms",
                    f"{base:.2f} ms",
                    ratio(p50, base),
                    "≤ 1.5 ms",
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
