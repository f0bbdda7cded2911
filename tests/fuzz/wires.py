"""Fuzz the three wires against real daemons (issue 35): the gateway's control socket, `node serve --stdio`
and exec-approvals.sock. Run by scripts/fuzz.sh; exits 1 on any finding: a daemon that died, a daemon that
stopped answering, a request left unanswered, a traceback in a log, or memory past the bound.

    python -m tests.fuzz.wires [--minutes N] [--wire control|node|approvals] [--seed S] [--max-rss-mb M]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.approvals.socket.wire import MAX_FRAME_BYTES as APPROVALS_MAX
from engine.approvals.socket.wire import sign
from engine.approvals.store import ApprovalsStore
from engine.protocol.client import ControlClient
from engine.protocol.frames import (
    MAX_FRAME_BYTES,
    OPERATOR_TOKEN_NAME,
    ProtocolError,
    Request,
    decode_frame,
    read_token,
    socket_path,
)
from engine.protocol.methods import Method
from tests.fuzz.values import REPO, Values, dumps, keys_from, mutate
from tests.helpers.daemon import Daemon

CONFIG = '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
# Verbs left out: `shutdown` ends the daemon on purpose; browsers and sandbox recreation start containers
# on the shared Docker engine (slow, and not the wire under test).
SKIPPED = {
    Method.SHUTDOWN,
    Method.BROWSER,
    Method.BROWSER_START,
    Method.SANDBOX_RECREATE,
    Method.SANDBOX_PRUNE,
}
METHODS = [m.value for m in Method if m not in SKIPPED]
# Answered only once a human (or the ask's expiry) decides: left waiting when the fuzzer hangs up is not a
# hang. Everything else must answer within ANSWER_S.
WAITS_FOR_A_HUMAN = {Method.EXEC.value, Method.APPROVALS_RELAY.value, Method.PROCESS.value}
NODE_METHODS = (
    "ping",
    "system.run",
    "system.which",
    "process",
    "sessions.list",
    "sessions.output",
    "sessions.watch",
    "sessions.unwatch",
    "sandbox.list",
    "sandbox.explain",
    "nope",
)
ANSWER_S = 30.0
PROBE_EVERY_S = 15.0
LOG_MARKS = ("Traceback", "never retrieved", "Unhandled exception", "Exception in callback")


@dataclass
class Stats:
    wire: str
    frames: int = 0
    connections: int = 0
    answers: int = 0
    left_waiting: int = 0  # exec/relay requests still waiting for a human when the connection closed
    refused: Counter[str] = field(default_factory=Counter)  # error codes the daemon answered with
    max_rss_kb: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def find(self, what: str, frame: bytes | None = None) -> None:
        text = what if frame is None else f"{what}: {frame[:3000]!r}"
        if len(self.findings) < 200:
            self.findings.append(text)
        print(f"[{self.wire}] FINDING {text}", file=sys.stderr, flush=True)

    def rss(self, name: str, pid: int) -> None:
        kb = vm_hwm(pid)
        if kb:
            self.max_rss_kb[name] = max(self.max_rss_kb.get(name, 0), kb)


def vm_hwm(pid: int) -> int:
    """Peak resident set of a live process, in KiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def log_findings(stats: Stats, name: str, text: str) -> None:
    for mark in LOG_MARKS:
        count = text.count(mark)
        if count:
            at = text.index(mark)
            stats.find(f"{count}× {mark!r} in the {name} log, first: {text[max(0, at - 300) : at + 1500]}")


# ---- control socket -------------------------------------------------------------------------------------


class ControlFuzz:
    def __init__(self, state: Path, rng: random.Random, stats: Stats) -> None:
        self.state = state
        self.rng = rng
        self.stats = stats
        self.values = Values(rng, keys_from("runner/gateway/handlers/*.py", "engine/tools/exec_request.py"))
        self.token = read_token(state) or ""
        self.operator = read_token(state, OPERATOR_TOKEN_NAME) or ""

    def hello(self) -> tuple[bytes, bool]:
        """A hello line; True when it is meant to be refused or may be (then any error frame is fine)."""
        role = self.rng.random()
        frame: dict[str, Any] = {"type": "hello", "version": 1, "token": self.token, "client": "fuzz"}
        if role < 0.45:
            frame["operator"] = self.operator
        line = dumps(frame)
        if role > 0.9:
            return mutate(self.rng, line), True
        if role > 0.85:
            frame[self.rng.choice(("token", "operator", "credential", "client", "name"))] = (
                self.values.value()
            )
            return dumps(frame), True
        return line, False

    def request(self, rid: int) -> bytes:
        """A request of a random verb, sometimes mutated."""
        method = self.rng.choice(METHODS) if self.rng.random() < 0.97 else self.values.text()
        params = self.values.params()
        if method == Method.APPROVALS_RELAY.value:
            params.setdefault("timeoutMs", 200)  # the ask expires at once; askFallback answers
        frame: dict[str, Any] = {"type": "req", "id": rid if self.rng.random() < 0.8 else f"r{rid}"}
        frame["method"] = method
        frame["params"] = params
        line = dumps(frame)
        return mutate(self.rng, line) if self.rng.random() < 0.3 else line

    async def connection(self) -> None:
        stats = self.stats
        reader, writer = await asyncio.open_unix_connection(
            str(socket_path(self.state)), limit=4 * MAX_FRAME_BYTES
        )
        stats.connections += 1
        try:
            hello, refusable = self.hello()
            writer.write(hello + b"\n")
            stats.frames += 1
            first = await self._line(reader)
            if first is None:
                stats.find("hello left unanswered (connection closed or silent)", hello)
                return
            if first.get("type") == "error":
                stats.refused[f"hello:{first.get('code')}"] += 1
                if not refusable:
                    stats.find(f"sound hello refused: {first}", hello)
                return
            if first.get("type") != "welcome":
                stats.find(f"hello answered with {first}", hello)
                return
            await self._requests(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _line(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            data = await asyncio.wait_for(reader.readline(), ANSWER_S)
        except (TimeoutError, ConnectionError, ValueError):
            return None
        if not data:
            return None
        try:
            frame = json.loads(data)
        except ValueError:
            self.stats.find("the gateway sent a line that is not JSON", data)
            return {}
        return frame if isinstance(frame, dict) else {}

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stats = self.stats
        sent: dict[Any, tuple[str, bytes]] = {}  # id -> (method, line) of well-formed requests
        lines: list[bytes] = []
        for _ in range(self.rng.randint(1, 24)):
            rid = self.rng.randrange(1, 10**9)
            self.values.hostile = self.rng.random() < 0.25
            line = self.request(rid)
            with contextlib.suppress(ProtocolError):
                # What the gateway will take as a request, mutated or not, is a request it must answer
                # by id (or one that waits for a human, when its verb does).
                req = decode_frame(line)
                if isinstance(req, Request):
                    sent[req.id] = (req.method, line)
            lines.append(line)
        stats.frames += len(lines)
        try:
            for line in lines:
                writer.write(line + b"\n")
                await writer.drain()
        except ConnectionError:
            pass  # the gateway cut us off (too many malformed frames): its error frame says so, read below
        answered = 0
        closed_by = None
        data = b"-"
        deadline = time.monotonic() + ANSWER_S
        while answered < len(lines):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                data = await asyncio.wait_for(reader.readline(), left)
            except TimeoutError:
                data = b"-"
                break
            except (ConnectionError, ValueError) as exc:
                if closed_by is None:
                    stats.find(f"reading answers failed: {exc!r}")
                return
            if not data:
                break
            try:
                frame = json.loads(data)
            except ValueError:
                stats.find("the gateway sent a line that is not JSON", data)
                continue
            kind = frame.get("type")
            if kind == "error":
                closed_by = frame
                stats.refused[f"close:{frame.get('code')}"] += 1
                break
            if kind != "res":
                continue
            answered += 1
            stats.answers += 1
            if not frame.get("ok"):
                stats.refused[str((frame.get("error") or {}).get("code"))] += 1
                if (frame.get("error") or {}).get("code") == "internal":
                    method, line = sent.get(frame.get("id"), ("?", b""))
                    stats.find(f"`internal` answer to {method}: {frame['error'].get('message')}", line)
            else:
                self.values.remember(frame.get("result"))
            sent.pop(frame.get("id"), None)
        if closed_by is not None or answered >= len(lines):
            return
        if not data:
            stats.find(f"closed after {answered} of {len(lines)} answers without an error frame", lines[-1])
            return
        waiting = [m for m, _ in sent.values() if m in WAITS_FOR_A_HUMAN]
        missing = len(lines) - answered - len(waiting)
        stats.left_waiting += len(waiting)
        if missing > 0:
            others = [(m, ln) for m, ln in sent.values() if m not in WAITS_FOR_A_HUMAN]
            example = others[0][1] if others else b" / ".join(lines)
            stats.find(
                f"{missing} of {len(lines)} requests unanswered ({[m for m, _ in others][:5]})", example
            )


async def probe(state: Path, stats: Stats, daemon: Daemon) -> None:
    """The daemon is alive and answers a fresh client within ANSWER_S."""
    if daemon.proc is not None and daemon.proc.poll() is not None:
        stats.find(f"the gateway died (exit {daemon.proc.returncode})")
        raise SystemExit(1)
    try:
        client = await asyncio.wait_for(
            ControlClient.connect(state, client="probe", autostart=False, operator=True), ANSWER_S
        )
        try:
            await asyncio.wait_for(client.request("status"), ANSWER_S)
        finally:
            await client.close()
    except Exception as exc:
        stats.find(f"the gateway did not answer a status probe: {exc!r}")


async def fuzz_control(state: Path, seconds: float, rng: random.Random, stats: Stats, workers: int) -> None:
    daemon = Daemon(state).start()
    try:
        fuzz = ControlFuzz(state, rng, stats)
        end = time.monotonic() + seconds
        next_probe = time.monotonic()

        async def worker() -> None:
            while time.monotonic() < end:
                try:
                    await fuzz.connection()
                except (ConnectionError, OSError) as exc:
                    stats.find(f"connection failed: {exc!r}")
                    await asyncio.sleep(0.5)

        tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=1.0)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + PROBE_EVERY_S
                await probe(state, stats, daemon)
                stats.rss("gateway", daemon.pid)
        for t in tasks:
            t.result()
        await probe(state, stats, daemon)
        stats.rss("gateway", daemon.pid)
    finally:
        daemon.stop()
        log_findings(stats, "gateway", daemon.log.read_text(errors="replace"))


# ---- node wire ------------------------------------------------------------------------------------------


async def node_link(node_state: Path, rng: random.Random, values: Values, stats: Stats) -> None:
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(node_state), "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner",
        "node",
        "serve",
        "--stdio",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(node_state),
        limit=1 << 25,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stats.connections += 1
    stderr_task = asyncio.ensure_future(proc.stderr.read())
    try:
        hello = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not hello.startswith(b'{"type":"hello"'):
            stats.find(f"node serve did not say hello: {hello[:200]!r}")
            return
        lines: list[tuple[str | None, bytes]] = []  # (id when the node must answer it, line)
        for _ in range(rng.randint(1, 30)):
            rid = f"f{rng.randrange(10**9)}"
            values.hostile = rng.random() < 0.25
            frame: dict[str, Any] = {"type": "req", "id": rid, "method": rng.choice(NODE_METHODS)}
            params = values.params()
            if frame["method"] == "system.run" and rng.random() < 0.7:
                params["command"] = (
                    ["sh", "-c", values.command()] if rng.random() < 0.5 else [values.command()]
                )
            frame["params"] = params
            lines.append((rid, dumps(frame)))
        # A mutated line, or a response/event/hello the node cannot take, may make it hang up (requests in
        # flight are lost with the link, as the gateway is told): such a line goes last, once the others
        # are answered.
        last: tuple[str | None, bytes]
        if rng.random() < 0.8:
            ping = {"type": "req", "id": "last", "method": "ping", "params": values.params()}
            last = ("last", mutate(rng, dumps(ping)))
        else:
            last = (
                None,
                dumps({"type": rng.choice(("res", "event", "hello")), "id": "last", **values.params()}),
            )
        if not await node_exchange(proc, lines, stats):
            return
        if rng.random() < 0.5:
            await node_exchange(proc, [last], stats, may_hang_up=True)
        stats.rss("node", proc.pid)
    except (ConnectionError, BrokenPipeError):
        pass  # the node closed the link on a line it could not read
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()
        try:
            code = await asyncio.wait_for(proc.wait(), ANSWER_S)
        except TimeoutError:
            stats.find("node serve did not exit after its link closed")
            proc.kill()
            code = await proc.wait()
        err = await stderr_task
        if code != 0:
            stats.find(f"node serve exited {code}: {err[-2000:]!r}")
        log_findings(stats, "node serve", err.decode(errors="replace"))
        if err.strip():
            stats.refused["node-log-lines"] += err.count(b"\n")


async def node_exchange(
    proc: asyncio.subprocess.Process,
    lines: list[tuple[str | None, bytes]],
    stats: Stats,
    may_hang_up: bool = False,
) -> bool:
    """Send these lines, then read until every request is answered; False when the link closed (a finding
    unless `may_hang_up`: the last line was one the node may refuse to read)."""
    assert proc.stdin is not None and proc.stdout is not None
    waiting = {rid: line for rid, line in lines if rid is not None}
    for _, line in lines:
        proc.stdin.write(line + b"\n")
        stats.frames += 1
    await proc.stdin.drain()
    deadline = time.monotonic() + ANSWER_S
    while waiting:
        try:
            data = await asyncio.wait_for(proc.stdout.readline(), max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            stats.find(f"{len(waiting)} node requests unanswered", next(iter(waiting.values())))
            return False
        if not data:
            if not may_hang_up:
                stats.find(
                    f"the node hung up with {len(waiting)} requests unanswered", next(iter(waiting.values()))
                )
            return False
        try:
            answer = json.loads(data)
        except ValueError:
            stats.find("node serve sent a line that is not JSON", data)
            continue
        if answer.get("type") == "req":  # the node asks the gateway: the fuzzer is no approver
            reply = {"type": "res", "id": answer.get("id"), "ok": False, "error": {"code": "UNAVAILABLE"}}
            proc.stdin.write(json.dumps(reply).encode() + b"\n")
            continue
        if answer.get("type") != "res":
            continue
        stats.answers += 1
        error = answer.get("error") or {}
        stats.refused[str(error.get("code")) if not answer.get("ok") else "ok"] += 1
        if error.get("code") == "INTERNAL":
            stats.find(f"INTERNAL answer: {error.get('message')}", waiting.get(answer.get("id"), b""))
        waiting.pop(answer.get("id"), None)
        if may_hang_up:
            waiting.clear()  # a mutated line's id may have been mutated too: any answer answers it
    return True


async def fuzz_node(root: Path, seconds: float, rng: random.Random, stats: Stats, workers: int) -> None:
    node_state = root / "node"
    node_state.mkdir(mode=0o700)
    values = Values(rng, keys_from("runner/node/*.py", "engine/nodes/wire.py"))
    end = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < end:
            await node_link(node_state, rng, values, stats)

    await asyncio.gather(*(worker() for _ in range(workers)))


# ---- exec-approvals.sock --------------------------------------------------------------------------------


async def fuzz_approvals(state: Path, seconds: float, rng: random.Random, stats: Stats, workers: int) -> None:
    daemon = Daemon(state).start()
    log = state.parent / "approvals-host.log"
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    with open(log, "wb") as out:
        host = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.fuzz.approvals_host",
            stdout=asyncio.subprocess.PIPE,
            stderr=out,
            env=env,
        )
    assert host.stdout is not None
    try:
        if await asyncio.wait_for(host.stdout.readline(), 60) != b"ready\n":
            stats.find(f"the approvals host did not start: {log.read_text()[-2000:]}")
            return
        path, token = ApprovalsStore().socket_info()
        values = Values(rng, keys_from("engine/approvals/socket/*.py"))
        end = time.monotonic() + seconds
        next_probe = time.monotonic()

        async def worker() -> None:
            while time.monotonic() < end:
                await approvals_connection(path, token, rng, values, stats)

        tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=1.0)
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + PROBE_EVERY_S
                if host.returncode is not None:
                    stats.find(f"the approvals host died (exit {host.returncode})")
                    raise SystemExit(1)
                stats.rss("approvals-host", host.pid)
                stats.rss("gateway", daemon.pid)
                await probe(state, stats, daemon)
        for t in tasks:
            t.result()
        stats.rss("approvals-host", host.pid)
        stats.rss("gateway", daemon.pid)
    finally:
        if host.returncode is None:
            host.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(host.wait(), 30)
            except TimeoutError:
                stats.find("the approvals host did not stop on SIGTERM")
                host.kill()
        daemon.stop()
        log_findings(stats, "approvals host", log.read_text(errors="replace"))
        log_findings(stats, "gateway", daemon.log.read_text(errors="replace"))


def approvals_frame(token: str, rng: random.Random, values: Values) -> bytes:
    r = rng.random()
    if r < 0.4:
        request = {"command": values.command(), **values.params()}
        frame: dict[str, Any] = {
            "type": "request",
            "id": values.text() if rng.random() < 0.2 else f"q{rng.randrange(10**9)}",
            "token": token if rng.random() < 0.8 else values.text(),
            "request": request,
        }
    else:
        body: dict[str, Any] = {"command": [values.command()] if rng.random() < 0.5 else values.value()}
        body.update(values.params())
        if rng.random() < 0.3:
            body["timeoutMs"] = rng.choice((1, 500, 10**30, float("inf"), float("nan"), -5))
        request_json = dumps(body).decode()
        if rng.random() < 0.2:
            request_json = mutate(rng, request_json.encode()).decode("utf-8", "surrogateescape")
        nonce = rng.randbytes(16).hex()
        ts = int(time.time() * 1000)
        try:
            mac = sign(token, nonce, ts, request_json)
        except UnicodeEncodeError:
            mac = "00"
        frame = {"type": "exec", "id": f"e{rng.randrange(10**9)}", "nonce": nonce, "ts": ts, "hmac": mac}
        frame["requestJson"] = request_json
    line = dumps(frame)
    if rng.random() < 0.3:
        line = mutate(rng, line)
    return line


async def approvals_connection(
    path: str, token: str, rng: random.Random, values: Values, stats: Stats
) -> None:
    values.hostile = rng.random() < 0.3
    line = approvals_frame(token, rng, values)
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=8 * APPROVALS_MAX)
    except OSError as exc:
        stats.find(f"connect failed: {exc!r}")
        await asyncio.sleep(0.5)
        return
    stats.connections += 1
    stats.frames += 1
    try:
        writer.write(line + b"\n")
        await writer.drain()
        writer.write_eof()
        data = await asyncio.wait_for(reader.readline(), ANSWER_S)
    except TimeoutError:
        stats.find("no answer within the deadline", line)
        return
    except ConnectionError as exc:
        stats.find(f"connection reset before an answer: {exc!r}", line)
        return
    finally:
        writer.close()
    if not data:
        stats.find("closed without an answer", line)
        return
    try:
        reply = json.loads(data)
    except ValueError:
        stats.find("answer is not JSON", data)
        return
    stats.answers += 1
    error = reply.get("error") if isinstance(reply.get("error"), dict) else {}
    code = (
        reply.get("code") or error.get("code") or reply.get("decision") or ("ok" if reply.get("ok") else "?")
    )
    stats.refused[str(code)] += 1
    if code == "INTERNAL" or error.get("reason") == "runtime-error":
        stats.find(f"internal failure: {reply}", line)


# ---- main -----------------------------------------------------------------------------------------------


def summary(stats: Stats) -> str:
    rss = ", ".join(f"{k} {v / 1024:.1f} MB" for k, v in sorted(stats.max_rss_kb.items())) or "n/a"
    minutes = stats.seconds / 60
    return (
        f"{stats.wire}: {minutes:.1f} min, {stats.frames} frames, {stats.connections} connections, "
        f"{stats.answers} answers, {stats.left_waiting} left waiting for a human, max RSS {rss}, "
        f"{len(stats.findings)} findings; answers by code: {dict(stats.refused.most_common(12))}"
    )


async def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"fuzz seed {seed} (replay with --seed {seed})", flush=True)
    failed = False
    results: list[dict[str, Any]] = []
    for wire in args.wire or ["control", "node", "approvals"]:
        rng = random.Random(f"{seed}:{wire}")
        root = Path(tempfile.mkdtemp(prefix="ehf-", dir="/tmp"))
        state = root / "s"
        state.mkdir(mode=0o700)
        (state / "config.toml").write_text(CONFIG)
        (state / "config.toml").chmod(0o600)
        os.environ["OPENCLAW_STATE_DIR"] = str(state)
        os.environ["HOME"] = str(root)
        os.environ["EXECHOST_HOST_HOME"] = str(root)
        stats = Stats(wire)
        started = time.monotonic()
        seconds = args.minutes * 60
        try:
            if wire == "control":
                await fuzz_control(state, seconds, rng, stats, args.workers)
            elif wire == "node":
                await fuzz_node(root, seconds, rng, stats, max(1, args.workers // 2))
            else:
                await fuzz_approvals(state, seconds, rng, stats, args.workers)
        except SystemExit:
            pass
        stats.seconds = time.monotonic() - started
        for name, kb in stats.max_rss_kb.items():
            if kb > args.max_rss_mb * 1024:
                stats.find(f"{name} peaked at {kb / 1024:.0f} MB (bound {args.max_rss_mb} MB)")
        print(summary(stats), flush=True)
        results.append(
            {**{k: v for k, v in vars(stats).items() if k != "refused"}, "codes": dict(stats.refused)}
        )
        failed = failed or bool(stats.findings)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"seed": seed, "wires": results}, indent=1) + "\n")
    print("FAIL" if failed else "OK: no crash, hang, unanswered request, traceback or memory past the bound")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="per wire (default 10)")
    parser.add_argument("--wire", action="append", choices=("control", "node", "approvals"))
    parser.add_argument("--seed", type=int)
    parser.add_argument("--workers", type=int, default=4, help="concurrent connections (node: half)")
    parser.add_argument("--max-rss-mb", type=int, default=256)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the state dirs and logs")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
