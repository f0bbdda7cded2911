"""Under load (issue 37): 16 agents on a real daemon, a `kill -9` midway; restart outage, adoption, memory.

Phase 1, the mix: 16 agent connections (each its own session key) for `--duration` seconds run foreground
commands (`echo <token>`: the token must come back exactly once), asks (`ask=always`) that an operator
client approves or denies (a denied one must not run, an allowed one runs once), background sessions of
50 lines read back with poll/log (in order, none lost, across the crash too), `process list` (timed: p50
per 30 s window against the finished sessions retained) and `events`. At half time the daemon is SIGKILLed
and a new one started at once (as systemd would); agents reconnect. Reported: the restart outage (new
daemon spawned → `status` answered), its adoption time, gateway RSS sampled every 5 s, list p50 early vs
late, and every correctness count.

Phase 2, kept sessions at scale: `--kept` background sessions (most finished, `--kept-live` still
running), a `kill -9`, a new daemon: time until its socket answers `status`, and until `status` says the
adoption is done.

Usage: .venv/bin/python bench/bench_load.py [--duration SEC (60; the issue's run: 480)] [--kept N (10000)]
       [--kept-live N (1000)] [--agents N (16)]; scripts/bench.sh runs it with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_gateway import pct  # noqa: E402
from bench.bench_scale import rss_kib  # noqa: E402
from bench.table import ratio, record  # noqa: E402
from engine.protocol.client import ControlClient  # noqa: E402

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
BG_LINES = 50


class Daemon:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.proc: subprocess.Popen[bytes] | None = None
        self.spawned = 0.0

    def start(self) -> None:
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(self.state), "PYTHONPATH": str(REPO)}
        log = open(self.state.parent / "gateway.log", "ab")  # noqa: SIM115 - the child holds it
        self.spawned = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "gateway", "run"],
            env=env,
            cwd=str(REPO),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


async def dial(state: Path, name: str, *, operator: bool, timeout: float = 60) -> ControlClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await ControlClient.connect(
                state, client="bench", name=name, autostart=False, operator=operator
            )
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.005)


async def answered(state: Path, since: float) -> tuple[float, ControlClient]:
    """Seconds from `since` until the new daemon answers `status`."""
    client = await dial(state, "probe", operator=True)
    await client.request("status")
    return time.monotonic() - since, client


async def adopted(client: ControlClient, since: float) -> tuple[float, dict[str, Any]]:
    while True:
        status = await client.request("status")
        adoption = status.get("adoption") or {}
        if not adoption or adoption.get("done"):
            return time.monotonic() - since, adoption
        await asyncio.sleep(0.01)


class Tally:
    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0  # failed requests (the outage)
        self.wrong = 0  # correctness failures: a token missing, twice, or another agent's
        self.denied_ran = 0
        self.allowed_runs = 0
        self.bg_ok = 0
        self.bg_bad = 0
        self.events = 0
        self.lists: list[tuple[float, float]] = []  # (time since start, seconds)
        self.notes: list[str] = []


class Operator:
    """Approves asks whose command says `allow`, denies the others."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.stop = False
        self.deciding: set[asyncio.Future[None]] = set()

    async def run(self) -> None:
        while not self.stop:
            try:
                client = await dial(self.state, "operator", operator=True)
                await client.subscribe(["approvals"])
                await client.request("approvals.attach")
                for ask in await client.pending_approvals():
                    await self._decide(client, ask)
                async for event in client.events():
                    if event.event == "approval.requested":
                        self.deciding.add(asyncio.ensure_future(self._decide(client, event.data)))
            except (ConnectionError, OSError, Exception):
                await asyncio.sleep(0.02)

    @staticmethod
    async def _decide(client: ControlClient, ask: dict[str, Any]) -> None:
        decision = "allow-once" if "allow" in str(ask.get("command")) else "deny"
        with contextlib.suppress(Exception):
            await client.request("approve", {"id": ask["id"], "decision": decision})


async def agent(state: Path, n: int, until: float, tally: Tally, started: float) -> None:
    rng = random.Random(n)
    key = f"load-{n}"
    client: ControlClient | None = None
    seq = 0
    while time.monotonic() < until:
        try:
            if client is None or client.closed:
                client = await dial(state, f"agent-{n}", operator=False)
            seq += 1
            token = f"t{n}x{seq}"
            roll = rng.random()
            tally.requests += 1
            if roll < 0.5:
                res = await client.request("exec", {"command": f"echo {token}", "sessionKey": key})
                out = str(res["details"].get("aggregated", ""))
                if out.split() != [token]:
                    tally.wrong += 1
                    tally.notes.append(f"fg {token}: {out[:80]!r}")
            elif roll < 0.6:
                allow = rng.random() < 0.5
                word = "allow" if allow else "deny"
                res = await client.request(
                    "exec", {"command": f"echo {word} {token}", "sessionKey": key, "ask": "always"}
                )
                status = res["details"].get("status")
                out = str(res["details"].get("aggregated", ""))
                if allow:
                    tally.allowed_runs += 1
                    if status != "completed" or out.split() != [word, token]:
                        tally.wrong += 1
                        tally.notes.append(f"allow {token}: {status} {out[:80]!r}")
                elif status != "denied" or token in out:
                    tally.denied_ran += 1
            elif roll < 0.7:
                await background(client, key, token, tally)
            elif roll < 0.9:
                t0 = time.perf_counter()
                res = await client.request("process", {"action": "list", "sessionKey": key})
                tally.lists.append((time.monotonic() - started, time.perf_counter() - t0))
                for row in res["details"].get("sessions", []):
                    if f"t{n}x" not in str(row.get("command", "")):
                        tally.wrong += 1
                        tally.notes.append(f"list of {key} shows {row.get('command')!r}")
            else:
                res = await client.request("events", {"sessionKey": key, "drain": True})
                for text in res.get("events", []) or []:
                    tally.events += 1
                    if f"t{n}x" not in str(text) and "Exec" not in str(text):
                        tally.wrong += 1
        except (ConnectionError, OSError) as exc:
            tally.errors += 1
            client = None
            tally.notes.append(f"agent {n}: {type(exc).__name__}: {str(exc)[:80]}")
            await asyncio.sleep(0.02)
        except Exception as exc:
            tally.errors += 1
            tally.notes.append(f"agent {n}: {type(exc).__name__}: {str(exc)[:120]}")
            await asyncio.sleep(0.02)
    if client is not None:
        await client.close()


async def background(client: ControlClient, key: str, token: str, tally: Tally) -> None:
    cmd = f"for i in $(seq 1 {BG_LINES}); do echo {token}-$i; sleep 0.01; done"
    res = await client.request("exec", {"command": cmd, "sessionKey": key, "background": True})
    sid = res["details"]["sessionId"]
    while True:
        out = await client.request(
            "process", {"action": "poll", "sessionId": sid, "sessionKey": key, "timeout": 2000}
        )
        if out["details"].get("status") != "running":
            break
    log = await client.request("process", {"action": "log", "sessionId": sid, "sessionKey": key})
    want = [f"{token}-{i}" for i in range(1, BG_LINES + 1)]
    if log["text"].split() == want:
        tally.bg_ok += 1
    else:
        tally.bg_bad += 1
        end = {k: out["details"].get(k) for k in ("status", "exitCode", "exitSignal")}
        tally.notes.append(f"bg {token} ({sid}, {end}, {out['text'][-160:]!r}): {log['text'][-120:]!r}")


async def sample_rss(daemon: Daemon, until: float, started: float, out: list[tuple[float, int]]) -> None:
    while time.monotonic() < until:
        with contextlib.suppress(OSError, AssertionError):
            out.append((time.monotonic() - started, rss_kib(daemon.pid)))
        await asyncio.sleep(5)


async def mix(state: Path, duration: float, agents: int) -> None:
    daemon = Daemon(state)
    daemon.start()
    probe = await dial(state, "probe", operator=True)
    await probe.close()
    started = time.monotonic()
    until = started + duration
    tally = Tally()
    rss: list[tuple[float, int]] = []
    operator = Operator(state)
    op_task = asyncio.ensure_future(operator.run())
    sampler = asyncio.ensure_future(sample_rss(daemon, until, started, rss))
    tasks = [asyncio.ensure_future(agent(state, n, until, tally, started)) for n in range(agents)]
    await asyncio.sleep(duration / 2)
    daemon.kill()
    killed = time.monotonic()
    daemon.start()
    outage, client = await answered(state, daemon.spawned)
    adopt_s, adoption = await adopted(client, daemon.spawned)
    await client.close()
    since_kill = time.monotonic() - killed
    await asyncio.gather(*tasks)
    operator.stop = True
    op_task.cancel()
    sampler.cancel()
    with contextlib.suppress(BaseException):
        await op_task
    final = await dial(state, "final", operator=True)
    status = await final.request("status")
    await final.close()
    daemon_rss = rss_kib(daemon.pid)
    daemon.kill()
    window = 30.0
    early = [s for t, s in tally.lists if t < window]
    late = [s for t, s in tally.lists if t > duration - window]
    print(
        f"mix: {duration:.0f} s, {agents} agents, {tally.requests} requests ({tally.errors} failed, "
        f"kill -9 at {duration / 2:.0f} s)"
    )
    print(
        f"  correctness: wrong {tally.wrong}, denied that ran {tally.denied_ran}, allowed asks "
        f"{tally.allowed_runs}, background ok {tally.bg_ok} bad {tally.bg_bad}, events {tally.events}"
    )
    for note in tally.notes[:12]:
        print("   ", note)
    print(
        f"  restart: new daemon answered status {outage * 1000:.0f} ms after spawn; adoption of "
        f"{adoption.get('total', 0)} done {adopt_s * 1000:.0f} ms after spawn "
        f"(its own clock {adoption.get('elapsedMs', 0):.0f} ms); first answer {since_kill * 1000:.0f} ms "
        "after the kill incl. adoption"
    )
    print(
        "  RSS MiB over time: "
        + ", ".join(f"{t:.0f}s {kib / 1024:.0f}" for t, kib in rss)
        + f", end {daemon_rss / 1024:.0f}"
    )
    print(f"  sessions listed at the end {status.get('sessions')}")
    if early and late:
        print(
            f"  process list p50: first {window:.0f} s {pct(early, 0.5):.2f} ms, last {window:.0f} s "
            f"{pct(late, 0.5):.2f} ms (n={len(early)}/{len(late)})"
        )
    record(
        f"load mix {duration:.0f} s: restart outage (spawn → status)",
        f"{outage * 1000:.0f} ms",
        goal="≤ 500 ms",
    )
    record(
        f"load mix {duration:.0f} s: adoption done after spawn ({adoption.get('total', 0)} kept)",
        f"{adopt_s * 1000:.0f} ms",
    )
    if rss:
        record(
            f"load mix {duration:.0f} s: gateway RSS start → end",
            f"{rss[0][1] / 1024:.0f} → {daemon_rss / 1024:.0f} MiB",
            goal="≤ 150 MiB at 30 min",
        )
    if early and late:
        record(
            f"load mix {duration:.0f} s: process list p50 first → last 30 s",
            f"{pct(early, 0.5):.2f} → {pct(late, 0.5):.2f} ms",
            goal="flat",
        )
    record(
        f"load mix {duration:.0f} s: wrong / denied ran / bg bad",
        f"{tally.wrong} / {tally.denied_ran} / {tally.bg_bad} of {tally.requests}",
        goal="0 / 0 / 0",
    )


async def kept(state: Path, count: int, live: int) -> None:
    daemon = Daemon(state)
    daemon.start()
    # The raw baseline: the same daemon with nothing kept (interpreter start and imports, the floor).
    base, first = await answered(state, daemon.spawned)
    await first.close()
    clients = [await dial(state, f"k{i}", operator=False) for i in range(8)]

    async def start(i: int) -> None:
        cmd = "sleep 600" if i < live else f"echo kept-{i}"
        await clients[i % len(clients)].request(
            "exec", {"command": cmd, "background": True, "sessionKey": "kept"}
        )

    t0 = time.monotonic()
    early: list[float] = []
    probe = await dial(state, "probe", operator=True)
    for i in range(0, count, 64):
        await asyncio.gather(*(start(j) for j in range(i, min(count, i + 64))))
        if not early and i + 64 >= min(count, 1000):  # `process list` with 1,000 retained, for comparison
            early = await list_times(probe)
    made = time.monotonic() - t0
    while (await probe.request("status"))["runningSessions"] > live:
        await asyncio.sleep(0.1)
    await probe.close()
    for client in clients:
        await client.close()
    daemon.kill()
    daemon.start()
    outage, client = await answered(state, daemon.spawned)
    adopt_s, adoption = await adopted(client, daemon.spawned)
    rss = rss_kib(daemon.pid)
    t1 = time.perf_counter()
    await client.request("process", {"action": "list", "sessionKey": "kept"})
    list_ms = (time.perf_counter() - t1) * 1000
    late = await list_times(client)
    running = (await client.request("status"))["runningSessions"]
    await client.close()
    daemon.kill()
    print(
        f"kept: {count} sessions ({live} running) made in {made:.1f} s; after kill -9 the new daemon "
        f"answered status {outage * 1000:.0f} ms after spawn, adoption done {adopt_s * 1000:.0f} ms after "
        f"spawn (its clock {adoption.get('elapsedMs', 0):.0f} ms, {adoption.get('adopted')} of "
        f"{adoption.get('total')}); RSS {rss / 1024:.0f} MiB; first full list {list_ms:.0f} ms"
    )
    record(
        f"kept {count} ({live} running): socket answers after spawn",
        f"{outage * 1000:.0f} ms",
        baseline=f"{base * 1000:.0f} ms (nothing kept)",
        ratio=ratio(outage, base),
        goal="≤ 500 ms",
    )
    print(
        f"  still running after adoption: {running} of {live}; process list (one scope, 200-row page) p50 "
        f"{pct(early, 0.5):.2f} ms at 1,000 retained, {pct(late, 0.5):.2f} ms at {count:,}"
    )
    record(
        f"process list p50, 200-row page: {count:,} retained vs 1,000",
        f"{pct(late, 0.5):.2f} ms",
        baseline=f"{pct(early, 0.5):.2f} ms",
        ratio=ratio(pct(late, 0.5), pct(early, 0.5)),
        goal="flat",
    )
    record(
        f"kept {count} ({live} running): adoption done after spawn",
        f"{adopt_s * 1000:.0f} ms",
        goal="≤ 2,000 ms",
    )


async def list_times(client: ControlClient, runs: int = 100) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await client.request("process", {"action": "list", "sessionKey": "kept"})
        out.append(time.perf_counter() - t0)
    return out


def stop_hosts(state: Path) -> None:
    """The session hosts and their commands outlive a kill -9 (that is their point): end them with the
    bench (every process of ours whose environment names this state dir)."""
    mark = f"OPENCLAW_STATE_DIR={state}".encode()
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if mark in (pid_dir / "environ").read_bytes().split(b"\0"):
                os.kill(int(pid_dir.name), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=float(os.environ.get("EXECHOST_LOAD_SEC", 60)))
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--kept", type=int, default=10_000)
    parser.add_argument("--kept-live", type=int, default=1_000)
    args, _ = parser.parse_known_args()
    for phase in ("mix", "kept"):
        root = Path(tempfile.mkdtemp(prefix="ehl-", dir="/tmp"))
        state = root / "s"
        state.mkdir(mode=0o700)
        (state / "config.toml").write_text(CONFIG)
        try:
            if phase == "mix" and args.duration > 0:
                asyncio.run(mix(state, args.duration, args.agents))
            elif phase == "kept" and args.kept > 0:
                asyncio.run(kept(state, args.kept, args.kept_live))
        finally:
            stop_hosts(state)
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
