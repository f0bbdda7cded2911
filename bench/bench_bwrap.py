"""The bubblewrap backend (issue 28): a new scope's first command against a bare `bwrap … true` with the same
argv, a warm `true` in an existing sandbox (back to back, and with its slots refilled between commands as
between an agent's turns, against the login shell it runs under alone), and 100 session-scope sandboxes at
once (all start? memory each), and what the landlock layer adds (the same bare, cold and warm runs with
`landlock = false`, interleaved with it on). The same exec through a real gateway: bench_bwrap_gateway.py.

Run: .venv/bin/python bench/bench_bwrap.py [--cold N] [--warm N] [--baseline N] [--many N] [--landlock-only]
Uses a throwaway state dir and ends every sandbox it made.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record

LOOP = 200  # login shells per timed run in the landlock per-command row
ORDER = ("on", "off", "off", "on")  # landlock rows alternate ABBA: neither goes first after a removal


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def report(name: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(
        f"{name:<48} n={len(ms):<4} p50={pct(ms, 50):8.2f} ms  p90={pct(ms, 90):8.2f} ms  "
        f"mean={statistics.fmean(ms):8.2f} ms"
    )


def _pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(root: int, parents: dict[int, int]) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return out


def _parents() -> dict[int, int]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    raw = fh.read()
                found[int(name)] = int(raw[raw.rfind(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return found


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", type=int, default=30)
    ap.add_argument("--warm", type=int, default=300)
    ap.add_argument("--baseline", type=int, default=30)
    ap.add_argument("--many", type=int, default=100)
    ap.add_argument("--landlock-only", action="store_true", help="only the landlock on/off comparison")
    args, _ = ap.parse_known_args()
    state = Path(tempfile.mkdtemp(prefix="eh-bwb-", dir="/tmp")) / "s"
    state.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)

    from engine.config.loader import load_config_text
    from engine.sandbox import (
        SandboxManager,
        bwrap,
        bwraprecords,
        bwrapview,
        landlock,
        prepare_exec,
        seccomp,
        slots,
    )
    from engine.sandbox import supervisor as sv
    from engine.sandbox.settings import layout, resolve_settings
    from engine.sessions import RunSpec

    config = load_config_text(
        '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n'
    )
    mgr = SandboxManager()

    async def run_true(sx: object) -> None:
        handle = await sx.launcher.spawn(RunSpec(command="true", cwd=sx.cwd, env={}))  # type: ignore[attr-defined]
        while await handle.read() is not None:
            pass
        await handle.wait()
        handle.close()

    async def measure(config: object, label: str) -> tuple[list[float], ...]:
        """(bare bwrap, cold, warm back to back, warm with ready slots, the login shell alone) for one
        system view."""
        settings = resolve_settings(config, "main")
        lay = layout(settings, "main", f"bench-baseline-{label}")
        os.makedirs(lay.workspace_dir, exist_ok=True)
        sv.ensure_bin_dir()
        sv.Channel(lay.name).prepare()
        true = ["/bin/true"] if settings.bwrap_rootfs is None else [sv.BUSYBOX, "true"]
        bare: list[float] = []
        for _ in range(args.baseline):
            fd = seccomp.seccomp_fd()
            how = bwrapview.plan(
                settings, lay, bwrap=bwrapview.find_bwrap(), env={}, seccomp=fd, command=true
            )
            t0 = time.perf_counter()
            subprocess.run(how.argv, pass_fds=(fd,), env=how.env, check=True)
            bare.append(time.perf_counter() - t0)
            os.close(fd)
        await prepare_exec(config, "main", f"warm-up-{label}", None, manager=mgr)  # imports, seccomp, bin dir
        cold: list[float] = []
        for _ in range(args.cold):
            key = f"cold-{secrets.token_hex(4)}"
            t0 = time.perf_counter()
            sx = await prepare_exec(config, "main", key, None, manager=mgr)
            await run_true(sx)
            cold.append(time.perf_counter() - t0)
            # Gone before the next: running scopes reserve their tmpfs, and a host's RAM caps how many.
            await mgr.settle()
            await asyncio.to_thread(mgr.remove_runtime, sx.container)
        sx = await prepare_exec(config, "main", f"warm-{label}", None, manager=mgr)
        for _ in range(20):
            await run_true(sx)
        pool = slots.pool_for(sv.Channel(sx.container))
        taken = slots.SlotPool.take
        ready_at_take: list[int] = []

        def counting_take(self: slots.SlotPool, script: str, want_stdin: bool) -> slots.Slot | None:
            ready_at_take.append(self.counts[0])
            return taken(self, script, want_stdin)

        slots.SlotPool.take = counting_take  # type: ignore[method-assign]
        warm: list[float] = []
        try:
            for _ in range(args.warm):
                t0 = time.perf_counter()
                sx = await prepare_exec(config, "main", f"warm-{label}", None, manager=mgr)
                await run_true(sx)
                warm.append(time.perf_counter() - t0)
        finally:
            slots.SlotPool.take = taken  # type: ignore[method-assign]
        hits = sum(1 for n in ready_at_take if n > 0)
        # As an agent's commands come, a model turn apart: every slot refilled before the next (the wait
        # is not timed). The back-to-back row above also times commands whose slot was still starting.
        spaced: list[float] = []
        for _ in range(args.warm):
            while pool.counts != (slots.TARGET, 0):
                await asyncio.sleep(0.001)
            t0 = time.perf_counter()
            sx = await prepare_exec(config, "main", f"warm-{label}", None, manager=mgr)
            await run_true(sx)
            spaced.append(time.perf_counter() - t0)
        bwrap.remove_all()
        # The warm rows' floor in this view: the login shell a command runs under, alone, no sandbox.
        bb = sv.find_static_busybox() or sv.BUSYBOX
        login = ["/bin/sh", "-lc", "true"] if settings.bwrap_rootfs is None else [bb, "sh", "-lc", "true"]
        floor: list[float] = []
        for _ in range(args.warm):
            t0 = time.perf_counter()
            subprocess.run(login, check=True, env={"HOME": "/nonexistent"})
            floor.append(time.perf_counter() - t0)
        report(f"[{label}] bare `bwrap … true` (same argv)", bare)
        report(f"[{label}] exechost cold: new scope's first `true`", cold)
        report(f"[{label}] exechost warm `true` back to back (prepare_exec + run)", warm)
        print(f"    {hits}/{len(ready_at_take)} back-to-back commands found a ready slot")
        report(f"[{label}] exechost warm `true`, slots refilled between (prepare_exec + run)", spaced)
        report(f"[{label}] the login shell alone: {' '.join(login)}", floor)
        return bare, cold, warm, spaced, floor

    async def landlock_cost() -> None:
        """Host view, landlock on against off in the same run, alternating run by run (a loaded machine
        drifts): a bare `bwrap … true` with and without the helper in front, a new scope's first command,
        and a warm `true` with slots refilled between."""
        off = load_config_text(
            '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n'
            "[agents.defaults.sandbox.bwrap]\nlandlock = false\n"
        )
        layer = landlock.status(True, build=True)
        if not layer.active:
            print(f"landlock: not measured ({layer.reason})")
            return
        both = {"on": config, "off": off}
        settings = resolve_settings(config, "main")
        lay = layout(settings, "main", "bench-landlock")
        os.makedirs(lay.workspace_dir, exist_ok=True)
        sv.ensure_bin_dir()
        bare: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.baseline * 2):
            which = ORDER[i % 4]
            fd = seccomp.seccomp_fd()
            how = bwrapview.plan(
                settings,
                lay,
                bwrap=bwrapview.find_bwrap(),
                env={},
                seccomp=fd,
                command=["/bin/true"],
                control=False,
                layer=layer if which == "on" else None,
            )
            t0 = time.perf_counter()
            subprocess.run(how.argv, pass_fds=(fd,), env=how.env, check=True)
            bare[which].append(time.perf_counter() - t0)
            os.close(fd)
        # What the domain costs each command: LOOP login shells (`sh -lc true`: an exec, ld.so, profile's
        # opens, each checked against the ruleset) in one sandbox, with the helper in front and without.
        body = "/bin/sh -lc true || exit 1; i=$((i+1))"
        loop = ["/bin/sh", "-c", f"i=0; while [ $i -lt {LOOP} ]; do {body}; done"]
        looped: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(max(4, args.baseline // 3) * 2):
            which = ORDER[i % 4]
            fd = seccomp.seccomp_fd()
            how = bwrapview.plan(
                settings,
                lay,
                bwrap=bwrapview.find_bwrap(),
                env={},
                seccomp=fd,
                command=loop,
                control=False,
                layer=layer if which == "on" else None,
            )
            t0 = time.perf_counter()
            subprocess.run(how.argv, pass_fds=(fd,), env=how.env, check=True)
            looped[which].append(time.perf_counter() - t0)
            os.close(fd)
        for cfg in both.values():
            await prepare_exec(cfg, "main", f"ll-warm-up-{secrets.token_hex(2)}", None, manager=mgr)
        cold: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.cold * 2):
            which = ORDER[i % 4]
            t0 = time.perf_counter()
            sx = await prepare_exec(both[which], "main", f"ll-cold-{secrets.token_hex(4)}", None, manager=mgr)
            await run_true(sx)
            cold[which].append(time.perf_counter() - t0)
            await mgr.settle()
            await asyncio.to_thread(mgr.remove_runtime, sx.container)
        pools = {}
        for which, cfg in both.items():
            sx = await prepare_exec(cfg, "main", f"ll-warm-{which}", None, manager=mgr)
            for _ in range(20):
                await run_true(sx)
            pools[which] = slots.pool_for(sv.Channel(sx.container))
        warm: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.warm * 2):
            which = ORDER[i % 4]
            while pools[which].counts != (slots.TARGET, 0):
                await asyncio.sleep(0.001)
            t0 = time.perf_counter()
            sx = await prepare_exec(both[which], "main", f"ll-warm-{which}", None, manager=mgr)
            await run_true(sx)
            warm[which].append(time.perf_counter() - t0)
        bwrap.remove_all()
        for name, samples in (
            ("bare `bwrap … true`", bare),
            ("cold first command", cold),
            ("warm `true`", warm),
        ):
            report(f"[landlock on] {name}", samples["on"])
            report(f"[landlock off] {name}", samples["off"])
            on, no = pct(samples["on"], 50) * 1000, pct(samples["off"], 50) * 1000
            record(
                f"bwrap landlock on, {name} p50, host /usr (vs landlock off)",
                f"{on:.2f} ms",
                f"{no:.2f} ms",
                ratio(on, no),
                "small against the run",
            )

        # The helper alone, outside any sandbox (its rules' paths that do not exist here are skipped):
        # LOOP × `exechost-landlock RULES -- /bin/true` against LOOP × `/bin/true`, each in one shell loop.
        rules = " ".join(shlex.quote(a) for a in how.ruleset.argv()[1:]) if how.ruleset else ""
        helper = f"{landlock.binary_path()} {rules} --"
        alone: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.baseline * 2):
            which = ORDER[i % 4]
            front = helper if which == "on" else ""
            script = f"i=0; while [ $i -lt {LOOP} ]; do {front} /bin/true || exit 1; i=$((i+1)); done"
            t0 = time.perf_counter()
            subprocess.run(["/bin/sh", "-c", script], check=True)
            alone[which].append(time.perf_counter() - t0)
        report(f"[landlock on] {LOOP} × helper + /bin/true, no sandbox", alone["on"])
        report(f"[landlock off] {LOOP} × /bin/true, no sandbox", alone["off"])
        on, no = (pct(alone[w], 50) / LOOP * 1e6 for w in ("on", "off"))
        record(
            "landlock helper's own cost: exec + ruleset before a command (p50 / "
            f"{LOOP} of `helper RULES -- /bin/true`, vs /bin/true alone)",
            f"{on:.0f} µs",
            f"{no:.0f} µs",
            ratio(on, no),
            "small against a cold start",
        )
        report(f"[landlock on] {LOOP} × `sh -lc true` in one sandbox", looped["on"])
        report(f"[landlock off] {LOOP} × `sh -lc true` in one sandbox", looped["off"])
        on, no = (pct(looped[w], 50) / LOOP * 1e6 for w in ("on", "off"))
        record(
            f"bwrap landlock on, per command in a sandbox ({LOOP} × `sh -lc true`, p50 / {LOOP}), host /usr "
            "(vs landlock off)",
            f"{on:.0f} µs",
            f"{no:.0f} µs",
            ratio(on, no),
            "small against the run",
        )

    if args.landlock_only:
        try:
            await landlock_cost()
        finally:
            bwrap.remove_all()
        return

    # A tree with no /bin/sh and no /etc/profile: commands run under the mounted static busybox, as in
    # Docker's busybox test image (bench_sandbox.py), so the two backends' warm rows compare like for like.
    tiny = state.parent / "rootfs"
    (tiny / "etc").mkdir(parents=True)
    small = load_config_text(
        '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n'
        f'[agents.defaults.sandbox.bwrap]\nrootfs = "{tiny}"\n'
    )
    try:
        bare, cold, warm, spaced, floor = await measure(config, "host /usr")
        bare_bb, cold_bb, warm_bb, spaced_bb, floor_bb = await measure(small, "busybox rootfs")
        await landlock_cost()
        # The warm rows' same-run baseline: the command alone, no sandbox (subprocess.run(['true'])).
        plain: list[float] = []
        for _ in range(len(warm)):
            t0 = time.perf_counter()
            subprocess.run(["true"], check=True)
            plain.append(time.perf_counter() - t0)

        # Small tmpfs mounts and four agents: each running sandbox reserves its tmpfs sizes against a
        # quarter of the host's RAM per agent (bwraplimits.check_memory_budget), which the defaults (832 MiB
        # each) would fill at a handful. What this row measures is starting many at once and their memory.
        many = load_config_text(
            '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n'
            '[agents.defaults.sandbox.docker]\ntmpfs = ["/tmp:size=8m", "/var/tmp:size=8m", "/run:size=8m"]\n'
        )

        async def one(i: int) -> None:
            sx = await prepare_exec(many, f"many{i % 4}", f"many-{i}", None, manager=mgr)
            await run_true(sx)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(args.many)), return_exceptions=True)
        many_s = time.perf_counter() - t0
        failed = [r for r in results if isinstance(r, BaseException)]
        await asyncio.sleep(1.0)  # each sandbox's ready slots settle (two idle shells each)
        parents = _parents()
        rows = bwraprecords.list_sandboxes()
        running = sum(1 for r in rows if r["running"])
        total_kib = sum(_pss_kib(pid) for r in rows for pid in _tree(int(r["pid"]), parents))
        per = total_kib / max(1, len(rows))
        procs = sum(len(_tree(int(r["pid"]), parents)) for r in rows) / max(1, len(rows))
    finally:
        bwrap.remove_all()

    print(
        f"{args.many} session sandboxes at once: {running} running, {len(failed)} failed, {many_s:.2f} s, "
        f"{per / 1024:.2f} MiB PSS each ({procs:.1f} processes: keeper, bwrap x2, supervisor, slots)"
    )
    if failed:
        print("first failure:", failed[0])

    def ms(samples: list[float]) -> float:
        return pct(samples, 50) * 1000

    views = (
        ("host /usr", bare, cold, warm, spaced, floor),
        ("busybox rootfs", bare_bb, cold_bb, warm_bb, spaced_bb, floor_bb),
    )
    for view, b, c, w, sp, fl in views:
        record(
            f"bwrap cold first command of a new scope p50, {view} (vs bare `bwrap … true`)",
            f"{ms(c):.2f} ms",
            f"{ms(b):.2f} ms",
            ratio(ms(c), ms(b)),
            "≤ 10 ms and ≤ 2×",
        )
        record(
            f"bwrap warm exec `true` p50, {view} (vs subprocess.run(['true']))",
            f"{ms(w):.2f} ms",
            f"{ms(plain):.2f} ms",
            ratio(ms(w), ms(plain)),
            "≤ 1.5 ms",
        )
        record(
            f"bwrap warm exec `true` p50, slots refilled between, {view} (vs the login shell alone)",
            f"{ms(sp):.2f} ms",
            f"{ms(fl):.2f} ms",
            ratio(ms(sp), ms(fl)),
            "≤ 1.5 ms",
        )
    record(
        f"bwrap {args.many} concurrent session sandboxes",
        f"{running}/{args.many} running, {per / 1024:.2f} MiB PSS each",
        "—",
        "—",
        "all start",
    )


if __name__ == "__main__":
    asyncio.run(main())
