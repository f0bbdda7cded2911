"""Gateway benchmarks: exec `true` over a kept control connection vs subprocess.run; approval round trips.

Runs a real `exechost gateway run` daemon in a throwaway state dir. Baselines share the run.
Usage: .venv/bin/python bench/bench_gateway.py [--runs N] [--approvals N]
       [--host-view bwrap|bwrap-per-run|none|all]
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

from bench.table import ratio, record  # noqa: E402
from bench.table import record as table_record  # noqa: E402
from engine.approvals.room import MAX_PENDING, MAX_PENDING_PER_AGENT  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
ASK_ALWAYS = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "always"\n'


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def line(label: str, samples: list[float]) -> str:
    return f"{label:<58} p50 {pct(samples, 0.5):7.2f} ms   p90 {pct(samples, 0.9):7.2f} ms   n={len(samples)}"


ECHO = """
import asyncio, sys
async def main():
    async def serve(r, w):
        while line := await r.readline():
            w.write(line)
            await w.drain()
    server = await asyncio.start_unix_server(serve, sys.argv[1])
    print("ready", flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


async def raw_hops(root: Path, runs: int, concurrent: int) -> tuple[list[float], float]:
    """The floor of one hop: a JSON-sized line to another asyncio process over a Unix socket and back (p50
    samples), and how many such round trips per second `concurrent` clients get through it."""
    path = str(root / "echo.sock")
    proc = subprocess.Popen([sys.executable, "-c", ECHO, path], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        reader, writer = await asyncio.open_unix_connection(path)
        message = b'{"id": 1, "method": "status", "params": {}}\n'
        samples = []
        for _ in range(runs + 20):
            t0 = time.perf_counter()
            writer.write(message)
            await reader.readline()
            samples.append(time.perf_counter() - t0)
        writer.close()
        conns = [await asyncio.open_unix_connection(path) for _ in range(8)]

        async def one(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
            for _ in range(n):
                w.write(message)
                await r.readline()

        t0 = time.perf_counter()
        per = concurrent // len(conns)
        await asyncio.gather(*(one(r, w, per) for r, w in conns))
        rate = per * len(conns) / (time.perf_counter() - t0)
        for _, w in conns:
            w.close()
        return samples[20:], rate
    finally:
        proc.terminate()
        proc.wait()


def spawn_floor(runs: int) -> list[float]:
    """fork/exec `true` and reap its exit status with nothing else: posix_spawn + waitpid."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        os.waitpid(pid, 0)
        out.append(time.perf_counter() - t0)
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own CPU, CPU of reaped children) of `pid`, from /proc: utime+stime and cutime+cstime."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK


def run_queue_wait(pid: int) -> float:
    """Seconds `pid`'s threads have spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat, field
    2): the wait a loaded machine adds to each wake-up, which the CPU figures do not show."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def daemons_of(state: Path, gateway: int) -> list[int]:
    """The session host(s) serving `state`: processes other than the gateway whose environment names it
    (a session host is started detached, so it is not the gateway's child). Not the host view's keeper
    (it idles, and is re-made whenever the host's mount table changes)."""
    marker = f"OPENCLAW_STATE_DIR={state}\0".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in (gateway, os.getpid()):
            try:
                keeper = b"exechost-hostenter\0keep" in (entry / "cmdline").read_bytes()
                if marker in (entry / "environ").read_bytes() and not keeper:
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def start_daemon(
    state: Path, config: str, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    (state / "config.toml").write_text(config)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO), **(extra_env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "runner", "gateway", "run"],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def connect(state: Path, name: str) -> ControlClient:
    deadline = time.monotonic() + 20
    while True:
        try:
            return await ControlClient.connect(
                state, client="bench", name=name, autostart=False, operator=True
            )
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# --host-view: "bwrap" the host view as it runs (kept, entered per run: engine.commands.hostkeeper),
# "bwrap-per-run" a bwrap of its own for every run (as before issue 31: the helper hidden), "none" no view.
HOST_VIEWS: dict[str, tuple[str, dict[str, str]]] = {
    "bwrap": ("bwrap", {}),
    "bwrap-per-run": ("bwrap", {"EXECHOST_HOSTENTER": ""}),
    "none": ("none", {}),
}


async def bench_exec(state: Path, runs: int, host_view: str = "bwrap") -> None:
    # hostView: the state-dir-hiding view every gateway-host run starts in (engine.commands.hostview);
    # `--host-view all` measures each in turn, each against its baselines taken right after it.
    mode, extra_env = HOST_VIEWS[host_view]
    tag = "" if host_view == "bwrap" else f" [hostView {host_view}]"

    def record(metric: str, *rest: str) -> None:
        table_record(metric + tag, *rest)

    print(f"-- hostView = {host_view}")
    proc = start_daemon(state, FULL + f'hostView = "{mode}"\n', extra_env)
    try:
        client = await connect(state, "exec")
        for _ in range(20):
            await client.request("exec", {"command": "true"})
        gateway: list[float] = []
        hosts = daemons_of(state, proc.pid)  # the session host(s), started by the warm-up
        before = {pid: cpu_seconds(pid) for pid in (proc.pid, *hosts)}
        waited = {pid: run_queue_wait(pid) for pid in (os.getpid(), proc.pid, *hosts)}
        client_cpu = time.process_time()
        for _ in range(runs):
            t0 = time.perf_counter()
            result = await client.request("exec", {"command": "true"})
            gateway.append(time.perf_counter() - t0)
            assert result["details"]["status"] == "completed", result
        client_cpu = time.process_time() - client_cpu
        after = {pid: cpu_seconds(pid) for pid in before}
        waited = {pid: (run_queue_wait(pid) - w) * 1000 / runs for pid, w in waited.items()}
        status: list[float] = []
        for _ in range(runs):
            t0 = time.perf_counter()
            await client.request("status")
            status.append(time.perf_counter() - t0)
        await client.close()
    finally:
        proc.terminate()
        proc.wait()
    argv: list[float] = []
    shell: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(["true"], check=True)
        argv.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        shell.append(time.perf_counter() - t0)
    echo, _ = await raw_hops(state, runs, 256)
    spawn = spawn_floor(runs)
    own = {pid: (after[pid][0] - before[pid][0]) * 1000 / runs for pid in before}
    kids = sum(after[pid][1] - before[pid][1] for pid in before) * 1000 / runs  # reaped: sh + true
    t0, c0, w0 = time.process_time(), os.times(), run_queue_wait(os.getpid())
    for _ in range(runs):
        subprocess.run(["true"], check=True)
    c1 = os.times()
    run_wait = (run_queue_wait(os.getpid()) - w0) * 1000 / runs
    run_cpu = (time.process_time() - t0) * 1000 / runs
    child_cpu = (c1.children_user + c1.children_system - c0.children_user - c0.children_system) * 1000 / runs
    hosts_cpu = sum(v for pid, v in own.items() if pid != proc.pid)
    print(
        f"CPU per exec ({_TICK} Hz ticks): client {client_cpu * 1000 / runs:.2f} ms, gateway "
        f"{own[proc.pid]:.2f} ms, session host {hosts_cpu:.2f} ms, the command (sh + true) {kids:.2f} ms | "
        f"subprocess.run: parent {run_cpu:.2f} ms, `true` {child_cpu:.2f} ms"
    )
    hosts_wait = sum(v for pid, v in waited.items() if pid not in (os.getpid(), proc.pid))
    print(
        f"run-queue wait per exec (schedstat): client {waited[os.getpid()]:.2f} ms, gateway "
        f"{waited[proc.pid]:.2f} ms, session host {hosts_wait:.2f} ms (the command's own: not counted) | "
        f"subprocess.run's parent {run_wait:.2f} ms"
    )
    print(line("baseline subprocess.run(['true'])", argv))
    print(line("baseline subprocess.run(['/bin/sh', '-c', 'true'])", shell))
    print(line("control round trip only (`status`)", status))
    print(line("exechost exec `true` (policy + env + spawn + EOF + exit)", gateway))
    # Hop by hop, same run: client -> gateway and gateway -> session host are one Unix-socket round trip
    # each (floor: `echo`), the command one fork/exec/exit (floor: `spawn`); the rest is exechost's Python.
    print(line("floor: one Unix-socket round trip between asyncio processes", echo))
    print(line("floor: posix_spawn('true') + waitpid", spawn))
    floor = 2 * pct(echo, 0.5) + pct(spawn, 0.5)
    print(f"{'floor of an exec (2 socket hops + spawn)':<58} {floor:7.2f} ms")
    record(
        "exec `true` over a kept control connection p50 (vs subprocess.run)",
        f"{pct(gateway, 0.5):.2f} ms",
        f"{pct(argv, 0.5):.2f} ms",
        ratio(pct(gateway, 0.5), pct(argv, 0.5)),
        "≤ 1.2 ms and ≤ 1.6×",
    )
    record(
        "exec `true` over a kept connection p50 (vs its floor: 2 raw socket hops + posix_spawn)",
        f"{pct(gateway, 0.5):.2f} ms",
        f"{floor:.2f} ms",
        ratio(pct(gateway, 0.5), floor),
    )
    record(
        "  CPU per exec: client + gateway + session host + command (vs subprocess.run parent + child)",
        f"{client_cpu * 1000 / runs:.2f} + {own[proc.pid]:.2f} + {hosts_cpu:.2f} + {kids:.2f} ms",
        f"{run_cpu:.2f} + {child_cpu:.2f} ms",
        ratio(client_cpu * 1000 / runs + own[proc.pid] + hosts_cpu + kids, run_cpu + child_cpu),
    )
    record(
        "  run-queue wait per exec: client + gateway + session host (schedstat, mean; vs subprocess.run)",
        f"{waited[os.getpid()]:.2f} + {waited[proc.pid]:.2f} + {hosts_wait:.2f} ms",
        f"{run_wait:.2f} ms (subprocess.run's parent)",
    )
    record(
        "  hop client → gateway → client: `status` p50 (vs a raw asyncio Unix-socket echo)",
        f"{pct(status, 0.5):.2f} ms ({len(status) / sum(status):,.0f}/s)",
        f"{pct(echo, 0.5):.2f} ms",
        ratio(pct(status, 0.5), pct(echo, 0.5)),
    )
    record(
        "  hop fork/exec/exit: subprocess.run(['true']) p50 (vs posix_spawn + waitpid)",
        f"{pct(argv, 0.5):.2f} ms",
        f"{pct(spawn, 0.5):.2f} ms",
        ratio(pct(argv, 0.5), pct(spawn, 0.5)),
    )


def fsync_once(fd: int) -> float:
    """One durable append where the gateway keeps its journals (a line written, fsync): a deny is on disk
    twice before the agent hears it (the ask in the pending journal, the decision in the history)."""
    t0 = time.perf_counter()
    os.write(fd, b'{"probe": "an ask or a decision, about this long"}\n')
    os.fsync(fd)
    return time.perf_counter() - t0


async def bench_approvals(state: Path, count: int) -> None:
    proc = start_daemon(state, ASK_ALWAYS)
    try:
        approver = await connect(state, "approver")
        await approver.request("approvals.attach")
        decision = {"value": "deny"}

        inflight: set[asyncio.Future[dict]] = set()

        def on_event(ev: object) -> None:
            name, data = ev  # type: ignore[misc]
            if name == "approval.requested":
                task = asyncio.ensure_future(
                    approver.request("approve", {"id": data["id"], "decision": decision["value"]})
                )
                inflight.add(task)
                task.add_done_callback(inflight.discard)

        approver.add_listener(on_event)
        agent = await connect(state, "agent")
        # Same run, same gateway: an ask's floor is two control round trips (agent's exec, approver's
        # approve); its throughput's, `status` round trips at the same concurrency.
        status_rt: list[float] = []
        for _ in range(count):
            t0 = time.perf_counter()
            await agent.request("status")
            status_rt.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        burst0 = min(count, MAX_PENDING)
        await asyncio.gather(*(agent.request("status") for _ in range(burst0)))
        status_rate = burst0 / (time.perf_counter() - t0)
        for i in range(20):
            await agent.request("exec", {"command": f"true warm-{i}"})
        # Round trip: agent exec → gateway policy → approval.requested → approver → approve → agent result.
        denied: list[float] = []
        synced: list[float] = []  # interleaved: the disk's fsync at the same moments (it varies a lot)
        probe = os.open(state / "fsync-probe.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for i in range(count):
                t0 = time.perf_counter()
                result = await agent.request("exec", {"command": f"true rt-{i}"})
                denied.append(time.perf_counter() - t0)
                assert result["details"]["status"] == "denied", result
                synced.append(fsync_once(probe))
        finally:
            os.close(probe)
        decision["value"] = "allow-once"
        allowed: list[float] = []
        for i in range(count // 4):
            t0 = time.perf_counter()
            result = await agent.request("exec", {"command": f"true ok-{i}"})
            allowed.append(time.perf_counter() - t0)
            assert result["details"]["status"] == "completed", result
        decision["value"] = "deny"
        # The burst fills the approval queue exactly: at most MAX_PENDING asks wait at once, and at most
        # MAX_PENDING_PER_AGENT of them from one agent (issue 9 item 14), so it comes from several agents.
        burst = min(count, MAX_PENDING)
        agents = -(-burst // MAX_PENDING_PER_AGENT)
        t0 = time.perf_counter()
        results = await asyncio.gather(
            *(
                agent.request("exec", {"command": f"true burst-{i}", "agentId": f"b{i % agents}"})
                for i in range(burst)
            )
        )
        elapsed = time.perf_counter() - t0
        assert all(r["details"]["status"] == "denied" for r in results)
        await agent.close()
        await approver.close()
    finally:
        proc.terminate()
        proc.wait()
    print(line("approval round trip (ask=always, auto-deny: no spawn)", denied))
    print(line("approval round trip + run (auto allow-once, spawns `true`)", allowed))
    label = f"approval throughput, {burst} concurrent asks ({agents} agents)"
    print(f"{label:<58} {burst / elapsed:7.0f} approvals/s")
    print(line("floor: `status` round trip on the same connection", status_rt))
    print(f"{f'floor: `status` throughput, {burst} concurrent':<58} {status_rate:7.0f} requests/s")
    two = 2 * pct(status_rt, 0.5)
    print(line("floor: one journal append + fsync, same filesystem", synced))
    floor = two + 2 * pct(synced, 0.5)
    print(f"{'floor of an ask (2 `status` round trips + 2 fsyncs)':<58} {floor:7.2f} ms")
    record(
        "approval round trip p50 (auto-deny; vs its floor: two `status` round trips + two fsyncs)",
        f"{pct(denied, 0.5):.2f} ms",
        f"{floor:.2f} ms",
        ratio(pct(denied, 0.5), floor),
    )
    record(
        "approval round trip p50 (auto-deny; vs two `status` round trips)",
        f"{pct(denied, 0.5):.2f} ms",
        f"{two:.2f} ms",
        ratio(pct(denied, 0.5), two),
        "≤ 1 ms",
    )
    record(
        f"approval throughput ({burst} concurrent asks; vs `status` at the same concurrency)",
        f"{burst / elapsed:,.0f}/s",
        f"{status_rate:,.0f}/s",
        ratio(burst / elapsed, status_rate),
        "≥ 3,000/s",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--approvals", type=int, default=1000)
    parser.add_argument("--host-view", choices=(*HOST_VIEWS, "all"), default="bwrap")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehb-", dir="/tmp"))
    try:
        for name in ("a", "b"):
            (root / name).mkdir(mode=0o700)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        print(f"hostView = {args.host_view}")
        for view in HOST_VIEWS if args.host_view == "all" else (args.host_view,):
            state = root / f"a-{view}"
            state.mkdir(mode=0o700)
            asyncio.run(bench_exec(state, args.runs, view))
        if args.approvals > 0:
            asyncio.run(bench_approvals(root / "b", args.approvals))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
