"""One results table for `scripts/bench.sh`: each bench records its rows, the script prints them together.

A bench records a row with `record(metric, exechost, baseline, goal)`; the row goes to the file named by
`$EXECHOST_BENCH_ROWS` (set by scripts/bench.sh) as one JSON line, and is printed as measured either way.
`python bench/table.py FILE` prints the collected rows as one Markdown table.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROWS_ENV = "EXECHOST_BENCH_ROWS"


def record(metric: str, exechost: str, baseline: str = "—", ratio: str = "—", goal: str = "—") -> None:
    row = {"metric": metric, "exechost": exechost, "baseline": baseline, "ratio": ratio, "goal": goal}
    print(f"  [{metric}] exechost {exechost} | baseline {baseline} | ratio {ratio} | goal {goal}", flush=True)
    target = os.environ.get(ROWS_ENV)
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


def ratio(exechost: float, baseline: float) -> str:
    return f"{exechost / baseline:.2f}×" if baseline else "—"


def scratch_state(prefix: str) -> Path:
    """A throwaway root in /tmp whose `s` is this process's state dir and `h` its HOME (0700 each), so a
    bench never touches the user's own; the caller removes the root."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    for name, env in (("s", "OPENCLAW_STATE_DIR"), ("h", "HOME")):
        (root / name).mkdir(mode=0o700)
        os.environ[env] = str(root / name)
    return root


def spawn_cost(argv: Sequence[str], fds: Sequence[int], runs: int) -> tuple[float, float]:
    """(wall p50 ms, children's CPU ms per run) of `runs` spawns of argv."""
    walls = []
    before = os.times()
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, pass_fds=fds)
        walls.append(time.perf_counter() - t0)
    after = os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return sorted(walls)[len(walls) // 2] * 1000, cpu * 1000 / runs


def render(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    head = ("metric", "exechost", "baseline", "ratio", "goal")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(row[key]) for key in head) + " |" for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(Path(sys.argv[1])))


def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over `rounds` of the µs one call takes, timed over `calls` calls."""
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - start) * 1e6 / calls)
    return statistics.median(out)


def spawn_ms(
    argv: Sequence[str],
    runs: int,
    fds: Sequence[int] = (),
    *,
    quiet: bool = False,
    env: Mapping[str, str] | None = None,
) -> float:
    """Median over `runs` of the ms one `argv` takes, spawned and waited for (`quiet`: its stderr dropped;
    `env`: its environment, else this process's)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        stderr = subprocess.DEVNULL if quiet else None
        subprocess.run(argv, check=True, pass_fds=fds, stderr=stderr, env=env)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def interleaved(ways: Mapping[str, Callable[[], float]], rounds: int = 3) -> dict[str, list[float]]:
    """Each way measured `rounds` times, interleaved: a change in the shared machine's load falls on all
    alike. Each figure is kept (the table gives all three)."""
    res: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, way in ways.items():
            res.setdefault(name, []).append(way())
    return res


def compared(metric: str, res: Mapping[str, list[float]], mine: str, base: str, unit: str = "ms") -> None:
    """One row: every round of `mine` and of `base`, and the ratio of their middle rounds."""

    def rounds(name: str) -> str:
        return " · ".join(f"{v:.2f}" for v in res[name]) + f" {unit}"

    middle = {name: statistics.median(res[name]) for name in (mine, base)}
    record(metric, rounds(mine), rounds(base), ratio(middle[mine], middle[base]))
