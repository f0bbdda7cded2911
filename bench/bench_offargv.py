"""What carrying a command's text off the argv costs a spawn (engine.commands.offargv): `sh -c TEXT` against
`sh -c STUB` with TEXT in the environment, for a short command and one of 16 KiB, three interleaved rounds."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import compared, interleaved, spawn_ms
from engine.commands.offargv import carried
from engine.sessions import launcher
from engine.sessions.launcher import LocalLauncher, RunSpec

RUNS = 200


def launcher_ms(command: str, runs: int, *, off: bool) -> float:
    """Median ms of LocalLauncher.spawn + wait of `command` (its session's path), with the text carried
    off the argv (`off`) or left on it as before (carried swapped for the identity)."""
    before = launcher.carried
    if not off:
        launcher.carried = lambda argv, env: (list(argv), dict(env))  # type: ignore[assignment]

    async def go() -> float:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            proc = await LocalLauncher().spawn(RunSpec(command=command, env={"PATH": "/usr/bin:/bin"}))
            while await proc.read() is not None:
                pass
            await proc.wait()
            proc.close()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    try:
        return asyncio.run(go())
    finally:
        launcher.carried = before


def main() -> None:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    for label, text in (("short", "x=1; [ $x = 1 ]"), ("16 KiB", ": " + "a" * 16384 + "; true")):
        plain = ["/bin/sh", "-c", text]
        argv, env = carried(plain, base)
        res = interleaved(
            {
                "stub": lambda argv=argv, env=env: spawn_ms(argv, RUNS, env=env),
                "argv": lambda plain=plain: spawn_ms(plain, RUNS, env=base),
            }
        )
        compared(f"spawn of sh -c, text off the argv ({label})", res, "stub", "argv")
    text = "echo hi; x=1"
    res = interleaved(
        {
            "off": lambda: launcher_ms(text, RUNS // 2, off=True),
            "on": lambda: launcher_ms(text, RUNS // 2, off=False),
        }
    )
    compared("LocalLauncher spawn + wait, text off the argv / on it", res, "off", "on")


if __name__ == "__main__":
    main()
