"""`exechost exec -- true` as a whole process (interpreter start, imports, connect, exec, exit) against a
Python process that runs `true` with subprocess.run, both against the same running gateway, interleaved.

Usage: .venv/bin/python bench/bench_cli.py [--runs N] [--repeats N]
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

BASELINE = "import subprocess; subprocess.run(['true'], check=True)"


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def one_repeat(state: Path, runs: int, pycache: Path) -> tuple[float, float]:
    # An installed exechost has its bytecode cached; a shell with PYTHONDONTWRITEBYTECODE set would otherwise
    # time compiling every module on every run. The first (untimed) run fills the throwaway cache.
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    cli = [sys.executable, "-m", "runner", "exec", "--", "true"]
    base = [sys.executable, "-c", BASELINE]
    ours: list[float] = []
    theirs: list[float] = []
    timed(cli, env)
    for _ in range(runs):
        ours.append(timed(cli, env))
        theirs.append(timed(base, env))
    return pct(ours, 0.5), pct(theirs, 0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehc-", dir="/tmp"))
    state = root / "s"
    state.mkdir(mode=0o700)
    proc = start_daemon(state, FULL)
    try:
        asyncio.run(_wait(state))
        results = [one_repeat(state, args.runs, root / "pycache") for _ in range(args.repeats)]
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)
    for ours, theirs in results:
        print(f"exechost exec -- true p50 {ours:.1f} ms; python running true p50 {theirs:.1f} ms")
    record(
        "`exechost exec -- true` whole process, p50 (3 repeats)",
        " / ".join(f"{o:.0f} ms" for o, _ in results),
        " / ".join(f"{t:.0f} ms" for _, t in results),
        " / ".join(ratio(o, t) for o, t in results),
        "≤ 3×",
    )


async def _wait(state: Path) -> None:
    client = await connect(state, "warm")
    await client.close()


if __name__ == "__main__":
    main()
