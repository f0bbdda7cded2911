"""Console benchmarks: approval shown after reaching the gateway, and key press → repaint under output load.

Run: .venv/bin/python bench/bench_console.py [--sessions 100] [--rate 5000] [--seconds 60] [--approvals 40]
     [--presses 60]

Everything is real: a gateway daemon (subprocess, own state dir), the console app (Textual headless, with
every frame still rendered to terminal bytes so paint cost is counted), real background processes.
Baselines measured in the same run: a bare protocol subscriber for approvals, an idle console for keys.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from console.app import ConsoleApp
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import Event

PYTHON = os.path.realpath(sys.executable)

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\nbackgroundMs = 10\n'
# Each printer waits for the gate file, so all of them print at once however long spawning takes.
PRINTER = (
    "import os, sys, time\n"
    "rate, secs, gate = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]\n"
    "while not os.path.exists(gate): time.sleep(0.02)\n"
    "batch = max(1, rate // 100); end = time.time() + secs; n = 0; stop = gate + '.stop'\n"
    "while time.time() < end and not os.path.exists(stop):\n"
    "    sys.stdout.write(''.join(f'line {n + i} ' + 'x' * 40 + '\\n' for i in range(batch)))\n"
    "    sys.stdout.flush(); n += batch; time.sleep(0.01)\n"
)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(label: str, ms: list[float]) -> str:
    return (
        f"| {label} | {len(ms)} | {statistics.median(ms):.1f} | {pct(ms, 0.95):.1f} | {max(ms):.1f} |"
        if ms
        else f"| {label} | 0 | – | – | – |"
    )


def proc_cpu_s(pid: int | None) -> float:
    """utime + stime of another process (the gateway daemon), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def instrument_frames(app: ConsoleApp) -> list[float]:
    """Headless Textual skips writing frames; render each to terminal bytes anyway and stamp it."""
    frames: list[float] = []
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None and hasattr(renderable, "render_segments"):
            renderable.render_segments(app.console)
            frames.append(time.monotonic())
        original(screen, renderable)

    app._display = display  # type: ignore[method-assign]
    return frames


async def key_latencies(app: ConsoleApp, frames: list[float], presses: int) -> list[float]:
    """Alternate ↓/↑ in the focused list: key posted → the first frame painted after its handler ran."""
    out: list[float] = []
    table = app.focused
    assert table is not None
    for i in range(presses):
        before = getattr(table, "cursor_row", None)
        start = time.monotonic()
        app.simulate_key("down" if i % 2 == 0 else "up")
        handled = -1
        deadline = start + 5.0
        while time.monotonic() < deadline:
            if handled < 0 and getattr(table, "cursor_row", None) != before:
                handled = len(frames)
            if handled >= 0 and len(frames) > handled:
                out.append((frames[handled] - start) * 1000)
                break
            await asyncio.sleep(0.0005)
        await asyncio.sleep(0.05)
    return out


async def bench_approvals(state: Path, count: int) -> tuple[list[float], list[float]]:
    """ms from the gateway registering an approval (createdAtMs) to: a bare subscriber / the painted row."""
    raw: list[float] = []
    app = ConsoleApp(state, bell=False, clock=False, host_approval_socket=False)
    async with app.run_test(size=(140, 40)) as pilot:
        while not app.link.connected.is_set():
            await pilot.pause(0.05)
        watcher = await ControlClient.connect(state, client="bench-watch", operator=True)
        received: dict[str, float] = {}

        def on_event(ev: Event) -> None:
            if ev.event == "approval.requested":
                received.setdefault(ev.data["id"], time.time())

        watcher.add_listener(on_event)
        await watcher.subscribe(["approvals"])
        agent = await ControlClient.connect(state, client="bench-agent")
        shown: list[float] = []
        for i in range(count):
            task = asyncio.ensure_future(
                agent.request(
                    "exec", {"command": f"echo bench-{i}", "agentId": "main", "sessionKey": "agent:bench"}
                )
            )
            while not app.inbox.rows() or not app.shown_at.keys() & {r.key for r in app.inbox.rows()}:
                if task.done():  # the exec failed instead of asking: say so rather than wait forever
                    raise RuntimeError(f"exec did not ask for approval: {task.result()}")
                await asyncio.sleep(0.001)
            item = app.inbox.rows()[0]
            created = item.created_ms / 1000
            shown.append((app.shown_at[item.key] - created) * 1000)
            if item.key in received:
                raw.append((received[item.key] - created) * 1000)
            await pilot.press("d")
            await task
            await asyncio.sleep(0.02)
        await agent.close()
        await watcher.close()
    return raw, shown


async def bench_keys(state: Path, sessions: int, rate: int, seconds: float, presses: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    app = ConsoleApp(state, bell=False, clock=False, host_approval_socket=False)
    async with app.run_test(size=(140, 40)) as pilot:
        frames = instrument_frames(app)
        while not app.link.connected.is_set():
            await pilot.pause(0.05)
        await pilot.press("2")
        await pilot.pause(0.3)
        agent = await ControlClient.connect(state, client="bench-agent")
        for i in range(3):  # something to move the cursor over, idle
            await agent.request(
                "exec",
                {
                    "command": f"{PYTHON} -c 'import time; time.sleep({30 + i})'",
                    "background": True,
                    "agentId": "main",
                    "sessionKey": "agent:bench",
                },
            )
        await pilot.pause(0.5)
        results["idle"] = await key_latencies(app, frames, presses)

        # synthetic: the console's own ingestion path at the full load, no gateway involved
        router = app.link.output
        app.sessions.select(app.sessions.order[0])
        await pilot.pause(0.2)
        stop = asyncio.Event()
        fed = [0]

        async def flood() -> None:
            line = "x" * 48 + "\n"
            chunk = line * (rate // 100)
            # every listed session gets output, so whichever the key presses select is live
            ids = list(app.sessions.order)
            ids += [f"synthetic-{i}" for i in range(max(0, sessions - len(ids)))]
            while not stop.is_set():
                for sid in ids:
                    router.feed(sid, chunk)
                fed[0] += len(ids) * (rate // 100)
                await asyncio.sleep(0.01)

        pushed_before = router.pushed  # the synthetic feed must not hide whether the gateway pushes
        flooder = asyncio.ensure_future(flood())
        t0 = time.monotonic()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        frames0 = len(frames)
        results["synthetic"] = await key_latencies(app, frames, presses)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.monotonic() - t0
        results["synthetic_frames"] = len(frames) - frames0
        stop.set()
        await flooder
        router.pushed = pushed_before
        results["synthetic_rate"] = fed[0] / wall
        results["synthetic_cpu"] = (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / wall
        results["synthetic_ms_per_frame"] = (
            results["synthetic_cpu"] * wall * 1000 / max(1, results["synthetic_frames"])
        )
        results["pane_lines"] = len(app.sessions.line_pane.lines)

        results["real"] = await real_load(app, pilot, agent, frames, state, sessions, rate, seconds, presses)
        results["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        results["pushed"] = router.pushed
        await agent.close()

    # The same load against a console that does not follow (protocol v1: every session's output pushed).
    app = ConsoleApp(state, bell=False, clock=False, host_approval_socket=False)
    app.link.use_follow = False
    async with app.run_test(size=(140, 40)) as pilot:
        frames = instrument_frames(app)
        while not app.link.connected.is_set():
            await pilot.pause(0.05)
        await pilot.press("2")
        await pilot.pause(0.5)
        agent = await ControlClient.connect(state, client="bench-agent")
        results["v1"] = await real_load(app, pilot, agent, frames, state, sessions, rate, seconds, presses)
        await agent.close()
    return results


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


async def real_load(
    app: ConsoleApp,
    pilot: Any,
    agent: ControlClient,
    frames: list[float],
    state: Path,
    sessions: int,
    rate: int,
    seconds: float,
    presses: int,
) -> dict[str, Any]:
    """N real background processes through the gateway, all printing at once while keys are pressed."""
    out: dict[str, Any] = {}
    # Outside the state dir: an operand there is exechost's own state, so the command would wait for a human
    # (the protection working as designed) and the bench would hang.
    work = state.parent / "work"
    work.mkdir(mode=0o700, exist_ok=True)
    script = work / "printer.py"
    script.write_text(PRINTER)
    gate = work / f"go-{time.monotonic_ns()}"
    started = time.monotonic()
    ids = []
    for _ in range(sessions):
        res = await agent.request(
            "exec",
            {
                "command": f"{PYTHON} {script} {rate} {seconds} {gate}",
                "background": True,
                "agentId": "main",
                "sessionKey": "agent:bench",
            },
        )
        ids.append(res["details"]["sessionId"])
    out["spawn_s"] = time.monotonic() - started
    gate.touch()
    await pilot.pause(1.0)
    app.sessions.refresh_sessions()
    await pilot.pause(0.5)
    rows = await agent.list_sessions()
    out["running"] = sum(1 for r in rows if r.get("sessionId") in ids and r.get("status") == "running")
    if not out["running"]:  # the load never came (e.g. the printers failed): a figure would be a lie
        tails = {str(r.get("tail") or "")[-200:] for r in rows if r.get("sessionId") in ids}
        raise SystemExit(f"bench_console: none of the {sessions} printers is running; their output: {tails}")
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    gw0 = proc_cpu_s(app.gateway_pid)
    busy0 = machine_busy()
    frames0 = len(frames)
    t0 = time.monotonic()
    out["keys"] = await key_latencies(app, frames, presses)
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    busy1 = machine_busy()
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    out["console_cpu"] = cpu / wall
    # Under contention the console gets what the printers leave it: its cost per painted frame says how
    # much work it does, whatever share of the CPU it got.
    out["frames_per_s"] = (len(frames) - frames0) / wall
    out["cpu_ms_per_frame"] = cpu * 1000 / max(1, len(frames) - frames0)
    out["gateway_cpu"] = (proc_cpu_s(app.gateway_pid) - gw0) / wall
    out["machine_busy"] = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) * (os.cpu_count() or 1)
    out["follows"] = app.link.follows
    (work / f"{gate.name}.stop").touch()  # the printers stop once the keys are measured
    while any(r.get("sessionId") in ids and r.get("status") == "running" for r in rows):
        await asyncio.sleep(0.5)  # let this batch finish before anything else is measured
        rows = await agent.list_sessions()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000, help="lines/s per session")
    parser.add_argument("--seconds", type=float, default=60.0, help="printers stop at the latest after this")
    parser.add_argument("--approvals", type=int, default=40)
    parser.add_argument("--presses", type=int, default=60)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    state = root / "s"
    state.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(state)
    os.environ["EXECHOST_CONFIG"] = str(state / "config.toml")
    (state / "config.toml").write_text(CONFIG)
    ApprovalsStore().add_allowlist("main", PYTHON)  # the load generators run without asking
    try:
        raw, shown = await bench_approvals(state, args.approvals)
        keys = await bench_keys(state, args.sessions, args.rate, args.seconds, args.presses)
    finally:
        await _shutdown(state)
        shutil.rmtree(root, ignore_errors=True)

    print(f"\nexechost console bench — {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print("\n| approval shown after reaching the gateway | n | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    print(summary("baseline: bare protocol subscriber receives the event", raw))
    print(summary("console: inbox row painted", shown))
    print("\n| key press → repaint | n | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    print(summary("baseline: idle console", keys["idle"]))
    synthetic = f"synthetic: {args.sessions} sessions × {args.rate} lines/s into the console"
    print(summary(synthetic, keys["synthetic"]))
    for key, label in (("real", "follows the visible session"), ("v1", "every session pushed (v1)")):
        print(
            summary(
                f"real: {args.sessions} background processes × {args.rate} lines/s via the gateway, "
                f"console {label}",
                keys[key]["keys"],
            )
        )
    print(
        f"\nsynthetic ingest: {keys['synthetic_rate']:,.0f} lines/s offered, console CPU "
        f"{keys['synthetic_cpu']:.2f} cores ({keys['synthetic_ms_per_frame']:.1f} ms per painted frame), "
        f"pane holds {keys['pane_lines']} lines (cap 5,000)"
    )
    for key in ("real", "v1"):
        r = keys[key]
        print(
            f"real load ({'follow' if r['follows'] else 'v1'}): spawned {args.sessions} sessions in "
            f"{r['spawn_s']:.1f} s, {r['running']} printing during the presses; CPU while measuring: "
            f"console {r['console_cpu']:.2f}, gateway {r['gateway_cpu']:.2f}, whole machine "
            f"{r['machine_busy']:.2f} of {os.cpu_count()} cores; console painted {r['frames_per_s']:.1f} "
            f"frames/s at {r['cpu_ms_per_frame']:.1f} ms CPU each"
        )
    print(f"console max RSS {keys['maxrss_mb']:.0f} MB; gateway pushes output: {keys['pushed']}")
    record(
        f"console key → paint p95, {args.sessions} sessions × {args.rate} lines/s (follow; vs idle console)",
        f"{pct(keys['real']['keys'], 0.95):.0f} ms",
        f"{pct(keys['idle'], 0.95):.0f} ms",
        ratio(pct(keys["real"]["keys"], 0.95), pct(keys["idle"], 0.95)),
        "≤ 100 ms",
    )


async def _shutdown(state: Path) -> None:
    try:
        client = await ControlClient.connect(state, client="bench", autostart=False, operator=True)
        await client.request("shutdown")
        await client.close()
    except Exception:  # already gone
        pass


if __name__ == "__main__":
    asyncio.run(main())
