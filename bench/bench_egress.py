"""Egress (issue 29): the proxy path a sandbox's request takes — the static forwarder on a loopback port, the
descriptor handed over the Unix socket, the decision, the splice relay — against the same request made
straight to the loopback origin, in the same run: a 100 MiB download (plain and through CONNECT), the added
latency of one small request, and 200 connections at once.

Run: .venv/bin/python bench/bench_egress.py [--mib 100] [--requests 300] [--concurrent 200]
The forwarder runs on the host's loopback (in a sandbox it is the same binary on the sandbox's loopback);
the origin is a separate Python process (http.server) so neither side shares this process's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record

ORIGIN = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
size = int(sys.argv[1])
big = b"x" * size
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = big if self.path == "/big" else b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
s.daemon_threads = True
s.request_queue_size = 1024
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _wait_port(port: int) -> None:
    for _ in range(1000):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.01)
    raise RuntimeError(f"nothing listens on {port}")


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of another process so far."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _curl(args: list[str], origin: int) -> tuple[float, float]:
    """(seconds, CPU seconds of everything involved: curl, the origin, this process with the proxy)."""
    before = os.times()
    origin_before = _cpu(origin)
    # The time is curl's own (connect to last byte): the fork and exec of curl, the same for both paths
    # and tens of ms on a busy box, would otherwise pull every ratio towards 100 %.
    how = ["-w", "%{time_total}"]
    done = subprocess.run(["curl", "-sS", "-o", "/dev/null", *how, *args], capture_output=True, check=False)
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    cpu = sum(after[i] - before[i] for i in range(4)) + _cpu(origin) - origin_before
    return float(done.stdout), cpu


def _request(port: int, target: str) -> float:
    """One small GET on a new connection (as clients behind a proxy make them); seconds."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: origin.test\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        raise RuntimeError(data[:200])
    return time.perf_counter() - start


async def _many(port: int, target: str, n: int) -> int:
    """n requests at once (all connected before any is answered); the number that failed."""

    async def one() -> bool:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {target} HTTP/1.1\r\nHost: origin.test\r\n\r\n".encode())
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), 60)
            writer.close()
            return b" 200 " in data.split(b"\r\n", 1)[0]
        except (OSError, TimeoutError):
            return False

    results = await asyncio.gather(*(one() for _ in range(n)))
    return sum(1 for ok in results if not ok)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--runs", type=int, default=9, help="downloads per path (median kept)")
    args = parser.parse_args()
    os.environ["OPENCLAW_STATE_DIR"] = tempfile.mkdtemp(prefix="exechost-bench-egress-")

    from engine.config.egress import EgressPolicy, decide
    from engine.sandbox.egress import forwarder
    from engine.sandbox.egress.proxy import Decision, EgressProxy, Request

    origin = subprocess.Popen(
        [sys.executable, "-c", ORIGIN, str(args.mib * 1024 * 1024)], stdout=subprocess.PIPE, text=True
    )
    assert origin.stdout is not None
    oport = int(origin.stdout.readline())
    policy = EgressPolicy.from_config(
        {"mode": "allowlist", "allow": [f"origin.test:{oport}"], "resolve": {"origin.test": "127.0.0.1"}}
    )
    records = 0

    def count(_conn: object) -> None:
        nonlocal records
        records += 1

    async def decide_it(req: Request) -> Decision:
        verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
        return Decision(verdict.action == "allow", verdict.rule, "policy", dict(policy.resolve))

    directory = Path(tempfile.mkdtemp(prefix="eg-"))
    loop = asyncio.new_event_loop()
    proxy_ready = threading.Event()
    proxy = EgressProxy(decide_it, count)

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(proxy.listen("bench", "main", directory))
        proxy_ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    proxy_ready.wait()
    binary = forwarder.ensure_binary()
    fport = _free_port()
    fwd = subprocess.Popen([str(binary), str(fport), str(directory / "proxy.sock")])
    try:
        _wait_port(fport)
        _wait_port(oport)
        url = f"http://origin.test:{oport}/big"
        direct = f"http://127.0.0.1:{oport}/big"
        via = f"http://127.0.0.1:{fport}"
        rows: dict[str, list[float]] = {"direct": [], "plain": [], "connect": []}
        cpu: dict[str, list[float]] = {"direct": [], "plain": [], "connect": []}
        paths = {"direct": [direct], "plain": ["-x", via, url], "connect": ["-p", "-x", via, url]}
        for _ in range(args.runs):  # interleaved, so a busy moment hits every path alike
            for name, curl_args in paths.items():
                seconds, used = _curl(curl_args, origin.pid)
                rows[name].append(seconds)
                cpu[name].append(used)
        # Medians of interleaved runs; the best runs and the CPU each path used are printed beside (on a
        # shared machine the CPU cost, which other load does not change, says what an idle one would do).
        median = {k: args.mib / statistics.median(v) for k, v in rows.items()}
        best = {k: args.mib / min(v) for k, v in rows.items()}
        cost = {k: statistics.median(v) for k, v in cpu.items()}
        print("  best (MiB/s): " + ", ".join(f"{k} {v:.0f}" for k, v in best.items()))
        for name in ("plain", "connect"):
            how = "CONNECT" if name == "connect" else "plain HTTP"
            record(
                f"egress {args.mib} MiB download, proxy ({how}) vs direct, median of {args.runs}",
                f"{median[name]:.0f} MiB/s",
                f"{median['direct']:.0f} MiB/s",
                f"{median[name] / median['direct'] * 100:.0f}%",
                "≥ 80%",
            )
            record(
                f"egress {args.mib} MiB download CPU (client + origin + proxy), {how} vs direct",
                f"{cost[name]:.2f} s",
                f"{cost['direct']:.2f} s",
                ratio(cost[name], cost["direct"]),
            )
        # Latency: alternate direct and proxied small requests; the added time per request.
        direct_s, proxied_s = [], []
        for _ in range(args.requests):
            direct_s.append(_request(oport, "/small"))
            proxied_s.append(_request(fport, f"http://origin.test:{oport}/small"))
        d50, p50 = pct(direct_s, 50) * 1000, pct(proxied_s, 50) * 1000
        record(
            "egress small request p50 (new connection), proxy vs direct",
            f"{p50:.2f} ms",
            f"{d50:.2f} ms",
            f"+{p50 - d50:.2f} ms",
            "≤ +1 ms",
        )
        failed = asyncio.run(_many(fport, f"http://origin.test:{oport}/small", args.concurrent))
        record(
            f"egress {args.concurrent} concurrent connections through one proxy: errors",
            str(failed),
            "—",
            "—",
            "0",
        )
    finally:
        fwd.kill()
        fwd.wait()
        origin.kill()
        origin.wait()
        asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
