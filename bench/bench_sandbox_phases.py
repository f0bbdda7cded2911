"""Where a warm sandbox `true` spends its time, phase by phase, to find the floor of issue 19's goal.

Run: .venv/bin/python bench/bench_sandbox_phases.py [--n 300] [--target N] [--exec-less]
Back-to-back warm `true` through the launcher (as bench_sandbox's "launcher spawn only" row), each command
timed at its steps by wrappers around the engine's own functions: the host's work before the go line, the
go line's write, the container's part (the slot's shell reads the go line, sources the spec, execs the
login shell, which runs `true` and exits: the streams' EOF), the exit status line (written by the slot's
waiting supervisor fork once it reaps the shell), and the host's part after it. Phases are medians over the
commands that found a ready slot; the others (slot still starting, none: the refill did not keep up) are
counted apart. CPU per command: the container's (cgroup, via the Engine API) and this process's.

`--exec-less` is an experiment, not the engine's semantics: the spec runs the command in the slot's own
shell (`eval`) instead of exec'ing `/bin/sh -lc` — what the one exec on a warm command's path costs.
`--target N` overrides the ready slots kept per container (engine.sandbox.slots.TARGET).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_sandbox import IMAGE, container_cpu_ns, container_floors

LABEL_VALUE = f"bench-phases-{os.getpid()}"
PHASES = (
    ("host: before the go line", "t0", "go0"),
    ("host: spec and go line written", "go0", "go1"),
    ("container: go line to the command's end seen", "go1", "end"),
    ("  of it, the streams' EOF", "go1", "eof"),
    ("  of it, the exit status line", "go1", "exit"),
    ("host: end seen to wait() returned", "end", "done"),
)


def exec_less_spec(
    command: str,
    cwd: str,
    env: Mapping[str, str],
    path_prepend: str | None,
    shell: str,
    *,
    busybox: str = "",
) -> str:
    """The experiment's spec: cd, exports, then the command in the sourcing shell (no login shell exec)."""
    lines = [f"cd {shlex.quote(cwd)} || exit 126"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    if path_prepend:
        lines.append(f'export PATH={shlex.quote(path_prepend)}:"$PATH"')
    lines.append(f"eval {shlex.quote(command)}")
    return "\n".join(lines) + "\n"


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--target", type=int, default=0, help="ready slots per container (0: the engine's)")
    ap.add_argument("--exec-less", action="store_true", help="experiment: no exec per command (see above)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="eh-bench-", dir="/tmp")
    os.environ["OPENCLAW_STATE_DIR"] = os.path.join(root, "s")

    from engine.config.loader import load_config_text
    from engine.sandbox import SandboxManager, docker_ops, launcher, prepare_exec, slots
    from engine.sandbox import supervisor as sv
    from engine.sessions import RunSpec

    if args.target:
        slots.TARGET = args.target
    if args.exec_less:
        sv.spec_script = exec_less_spec  # launcher calls it through the module: the experiment's spec
    marks: dict[str, float] = {}

    def mark(key: str) -> None:
        marks.setdefault(key, time.perf_counter())

    go_with, status_line, fresh = (
        slots.Slot.go_with,
        launcher.SupervisedProcess._status_line,
        slots.SlotPool.fresh,
    )

    def timed_go(self: slots.Slot, script: str, want_stdin: bool) -> None:
        mark("go0")
        if self.pid is None:
            mark("starting")
        go_with(self, script, want_stdin)
        mark("go1")

    def timed_status(self: launcher.SupervisedProcess, words: list[str]) -> None:
        if words and words[0] == "exit":
            mark("exit")
        status_line(self, words)

    async def timed_fresh(self: slots.SlotPool, script: str, want_stdin: bool) -> slots.Slot:
        mark("fresh")
        return await fresh(self, script, want_stdin)

    slots.Slot.go_with = timed_go  # type: ignore[method-assign]
    launcher.SupervisedProcess._status_line = timed_status  # type: ignore[method-assign]
    slots.SlotPool.fresh = timed_fresh  # type: ignore[method-assign]

    docker_ops.build_image([IMAGE], lambda _line: None)
    config = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    mgr = SandboxManager(extra_labels={"exechost.bench": LABEL_VALUE})
    try:
        sx: Any = await prepare_exec(config, "phases" + secrets.token_hex(3), "s", None, manager=mgr)

        async def run_true() -> None:
            mark("t0")
            handle = await sx.launcher.spawn(RunSpec(command="true", cwd=sx.cwd, env={}))
            while await handle.read() is not None:
                pass
            mark("eof")
            code = await handle.wait()
            mark("done")
            handle.close()
            assert code == (0, None), code

        for _ in range(20):  # warm up: the pool filled, the code paths hot
            await run_true()
            marks.clear()
        rows = []
        cpu0, here0, wall0 = container_cpu_ns(sx.container), time.process_time(), time.perf_counter()
        for _ in range(args.n):
            marks.clear()
            await run_true()
            rows.append(dict(marks, end=max(marks["eof"], marks["exit"])))
        wall_ms = (time.perf_counter() - wall0) * 1000 / args.n
        container_ms = (container_cpu_ns(sx.container) - cpu0) / 1e6 / args.n
        here_ms = (time.process_time() - here0) * 1000 / args.n
        floors = container_floors(sx.container, 300)
    finally:
        for c in docker_ops.list_sandboxes(f"exechost.bench={LABEL_VALUE}"):
            docker_ops.remove(c["Id"])

    def ms(row: dict[str, float], a: str, b: str) -> float:
        return (row[b] - row[a]) * 1000

    ready = [r for r in rows if "fresh" not in r and "starting" not in r]
    starting = [r for r in rows if "starting" in r and "fresh" not in r]
    made = [r for r in rows if "fresh" in r]
    mode = "exec-less experiment" if args.exec_less else "the engine's spec"
    print(
        f"# warm `true` phases, {mode}, {slots.TARGET} slots, {os.cpu_count()} CPUs, n={args.n} back to back"
    )
    p50 = statistics.median(ms(r, "t0", "done") for r in rows)
    print(f"all commands p50 {p50:.2f} ms, wall/command {wall_ms:.2f} ms")
    for label, group in (("ready slot", ready), ("slot still starting", starting), ("no slot (made)", made)):
        if group:
            p50 = statistics.median(ms(r, "t0", "done") for r in group)
            print(f"  {label:<22} n={len(group):<4} p50 {p50:.2f} ms")
    if ready:
        print("ready-slot commands, median per phase:")
        for label, a, b in PHASES:
            print(f"  {label:<46} {statistics.median(ms(r, a, b) for r in ready):6.3f} ms")
    print(f"CPU per command: container {container_ms:.2f} ms, this process {here_ms:.2f} ms (all threads)")
    print(
        f"in-container floors: fork+exec `/bin/sh -lc true` {floors['exec']:.2f} ms, "
        f"fork {floors['fork']:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
