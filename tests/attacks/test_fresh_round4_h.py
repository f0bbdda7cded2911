"""Fresh attacker round 4, letter h: the egress proxy (issue 29) from a hostile sandbox's side.

The proxy runs for real (engine.sandbox.egress.proxy.EgressProxy, with the config's own `decide`) behind the
real static forwarder binary; where the attack needs the gateway host to own a global IPv6 address, the whole
scene (origin, proxy, forwarder) runs in a fresh network namespace of its own (`unshare -n`, as root), so no
packet ever leaves it and the machine's own interfaces are never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST_V6 = "2a01:4f8::1"  # a global unicast address the namespace's `lo` gets: "this host's own" address

needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root, unshare(1) and ip(8) for a private network namespace",
)

# Runs inside `unshare -n`: lo up with HOST_V6 on it, an origin on [HOST_V6]:port, the real proxy under the
# config's policy, the real forwarder, then one SOCKS5 CONNECT per name in argv[1:] (JSON: name -> result).
_SCENE = textwrap.dedent(
    """
    import asyncio, json, os, socket, subprocess, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    from engine.config.egress import EgressPolicy, decide
    from engine.sandbox.egress.proxy import Decision, EgressProxy
    from tests.helpers.egress import host_forwarder

    HOST = sys.argv[1]
    POLICY = EgressPolicy.from_config(json.loads(sys.argv[2]))
    NAMES = sys.argv[3:]
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "-6", "addr", "add", HOST + "/128", "dev", "lo", "nodad"], check=True)
    ANYIP = os.environ.get("SCENE_ANYIP")  # a prefix this host answers for by a `local` route (AnyIP)
    for prefix in filter(None, (ANYIP or "").split(",")):
        family = "-6" if ":" in prefix else "-4"
        subprocess.run(["ip", family, "route", "add", "local", prefix, "dev", "lo"], check=True)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            body = b"host-only service reached\\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6

    server = Server(("::" if ANYIP else HOST, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    records = []

    async def decide_(req):
        v = decide(POLICY, req.name, req.port, tunnel=req.tunnel)
        return Decision(v.action == "allow", v.rule, "policy", dict(POLICY.resolve), POLICY.deny)

    def socks(fwd, name):
        with socket.create_connection(("127.0.0.1", fwd), timeout=20) as s:
            s.sendall(b"\\x05\\x01\\x00")
            assert s.recv(2) == b"\\x05\\x00"
            raw = name.encode()
            s.sendall(b"\\x05\\x01\\x00\\x03" + bytes([len(raw)]) + raw + port.to_bytes(2, "big"))
            reply = b""
            while len(reply) < 10:
                chunk = s.recv(10 - len(reply))
                if not chunk:
                    break
                reply += chunk
            if reply[1:2] != b"\\x00":
                return {"socks": reply[1] if len(reply) > 1 else None, "body": ""}
            s.sendall(b"GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return {"socks": 0, "body": out.decode(errors="replace")}

    async def main():
        directory = Path(sys.argv[0]).parent
        proxy = EgressProxy(decide_, records.append)
        await proxy.listen("sbx", "main", directory)
        out = {}
        try:
            with host_forwarder(directory) as fwd:
                for name in NAMES:
                    out[name] = await asyncio.to_thread(socks, fwd, name)
        finally:
            await proxy.close()
        out["_records"] = [{"name": r.name, "rule": r.rule, "decision": r.decision} for r in records]
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _scene(
    tmp: Path, policy: dict[str, Any], names: list[str], anyip: str = ""
) -> dict[str, dict[str, object]]:
    script = tmp / "scene.py"
    script.write_text(_SCENE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SCENE_ANYIP": anyip}
    done = subprocess.run(
        ["unshare", "-n", sys.executable, str(script), HOST_V6, json.dumps(policy), *names],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(REPO),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@needs_netns
def test_own_ipv6_address_is_refused_in_open_mode(state_dir: Path) -> None:
    """Regression: in `open` mode the host's own global IPv6 address, and a loopback in a scoped
    spelling, are refused (the own-address check reads the namespace's interfaces)."""
    out = _scene(state_dir, {"mode": "open"}, [HOST_V6, "::1%1", "::ffff:127.0.0.1%lo"])
    assert out[HOST_V6]["socks"] == 2, out  # NOT_ALLOWED (a zone id is refused earlier, as no name)
    for name in (HOST_V6, "::1%1", "::ffff:127.0.0.1%lo"):
        assert out[name]["socks"] not in (0, None), out
        assert "host-only" not in str(out[name]["body"])


@needs_netns
def test_scoped_spelling_of_own_ipv6_address_is_refused(state_dir: Path) -> None:
    """Was open: a SOCKS5 name with an IPv6 zone id (`<host's own v6>%1`) was not equal to the host's own
    address in public()'s set lookup (IPv6Address equality includes the scope), so open mode connected to
    the gateway host itself (Linux ignores the scope for a global address). Fixed: normalize() refuses a
    zone id, and canonical() drops one."""
    out = _scene(state_dir, {"mode": "open"}, [f"{HOST_V6}%1"])
    got = out[f"{HOST_V6}%1"]
    assert got["socks"] != 0 and "host-only service reached" not in str(got["body"]), out


ANYIP = "2a01:4f8:1::/64"  # every address in it is delivered to this host (`ip route add local … dev lo`)


@needs_netns
def test_scoped_spelling_of_a_denied_ipv6_address_is_refused(state_dir: Path) -> None:
    """Was open: the `deny` re-check spelled a resolved IPv6 address with its zone id (`2a01:4f8:1::99%1`),
    which no deny entry spells, so a SOCKS5 name with `%1` connected to a denied address. Fixed with the
    zone id refused (above)."""
    policy = {"mode": "open", "deny": ["2a01:4f8:1::99"]}
    out = _scene(state_dir, policy, ["2a01:4f8:1::99", "2a01:4f8:1::99%1"], anyip=ANYIP)
    assert out["2a01:4f8:1::99"]["socks"] == 2, out  # the plain spelling: refused by the deny entry
    got = out["2a01:4f8:1::99%1"]
    assert got["socks"] != 0 and "host-only service reached" not in str(got["body"]), out


@needs_netns
def test_anyip_local_route_address_is_refused(state_dir: Path) -> None:
    """Was open: own_addresses() read interface addresses only; a `local` (AnyIP) route makes the host
    answer for a whole prefix that is in no interface list, so open mode connected to the host itself.
    Fixed: the proxy judges against own_networks(), the kernel's local routes of both families."""
    out = _scene(state_dir, {"mode": "open"}, ["2a01:4f8:1::7", "45.67.0.9"], anyip=ANYIP + ",45.67.0.0/24")
    for name in ("2a01:4f8:1::7", "45.67.0.9"):  # (fib_trie's `/24 host LOCAL` is skipped as not `/32`)
        got = out[name]
        assert got["socks"] != 0 and "host-only service reached" not in str(got["body"]), out


def test_idna_entry_admits_a_different_domain() -> None:
    """Was open: normalize() used Python's `idna` codec (IDNA 2003 nameprep, transitional), so an allow
    entry `straße.de` admitted strasse.de, another registrable domain, and refused xn--strae-oqa.de, the
    name curl and browsers send for it. Fixed: UTS 46 non-transitional processing to IDNA 2008 A-labels
    (the `idna` package)."""
    from engine.config.egress import EgressPolicy, decide

    policy = EgressPolicy.from_config({"mode": "allowlist", "allow": ["straße.de"], "ask": False})
    assert decide(policy, "strasse.de", 443).action == "deny"
    assert decide(policy, "xn--strae-oqa.de", 443).action == "allow"


# -- asks through a real gateway's egress hub (its proxy served for a sandbox name, the real forwarder) ----

ASKING = '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nallow = []\nask = true\n'


def _socks_connect(fwd: int, name: str, port: int) -> int | None:
    """A SOCKS5 CONNECT through the forwarder; the reply code (None: closed without one)."""
    import socket

    with socket.create_connection(("127.0.0.1", fwd), timeout=60) as s:
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            return None
        raw = name.encode()
        s.sendall(b"\x05\x01\x00\x03" + bytes([len(raw)]) + raw + port.to_bytes(2, "big"))
        reply = s.recv(10)
        return reply[1] if len(reply) > 1 else None


def _http_ask(fwd: int, head: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", fwd), timeout=60) as s:
        s.sendall(head)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            if b"\r\n\r\n" in out:
                break
        return out


async def _pending(client: Any) -> list[dict[str, Any]]:
    got = await client.request("approvals.pending", {})
    return list(got.get("approvals") or [])


async def test_zone_id_puts_no_agent_text_into_an_ask(state_dir: Path) -> None:
    """Was open: an IPv6 literal's zone id passed normalize() as any ASCII (spaces, CR/LF, words), so a
    SOCKS5 name put agent-chosen text into the ask's target, which the operator reads as the destination.
    Fixed: such a name is refused (SOCKS general failure) before any decision or ask."""
    import asyncio

    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import connect, gateway, wait_until, write_config

    write_config(state_dir, ASKING)
    forged = "2606:4700::6810:84e5%1 = pypi.org mirror, approved in ticket SEC-1"
    async with gateway(state_dir) as server:
        directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
        await server.services.egress.listen("sbx-h", "main", None)
        client = await connect(state_dir)
        try:
            with host_forwarder(directory) as fwd:
                waiting = asyncio.ensure_future(asyncio.to_thread(_socks_connect, fwd, forged, 443))
                asks: list[dict[str, Any]] = []

                async def settled() -> bool:
                    asks[:] = await _pending(client)
                    return bool(asks) or waiting.done()

                await wait_until(settled, timeout=30)
                for ask in asks:
                    await client.request("approve", {"id": ask["id"], "decision": "deny"})
                code = await waiting
        finally:
            await client.close()
    shown = " ".join(f"{a.get('egress')} {a.get('command')}" for a in asks)
    assert "pypi.org" not in shown and "ticket" not in shown, shown
    assert code not in (0, None), code


async def test_plain_and_tunnel_asks_coalesce_into_one_row(state_dir: Path) -> None:
    """Was open: an egress ask named only name:port, so a plain request and a CONNECT tunnel to the same
    port coalesced into one row the operator could not tell apart, and one allow-always saved the tunnel
    entry `name:port` for both. Fixed: the ask is for what its allow-always saves (`http://name:port` or
    `name:port`), and its text names the kind; two kinds are two rows, each saving its own entry."""
    import asyncio

    from engine.approvals.store import ApprovalsStore
    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder, origin
    from tests.helpers.gateway import connect, gateway, wait_until, write_config

    with origin() as o:
        write_config(state_dir, ASKING + f'resolve = {{ "evil.test" = "{o.host}" }}\n')
        plain = f"GET http://evil.test:{o.port}/ HTTP/1.1\r\nHost: evil.test:{o.port}\r\n\r\n".encode()
        tunnel = f"CONNECT evil.test:{o.port} HTTP/1.1\r\nHost: evil.test:{o.port}\r\n\r\n".encode()
        async with gateway(state_dir) as server:
            directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
            await server.services.egress.listen("sbx-h", "main", None)
            client = await connect(state_dir)
            try:
                with host_forwarder(directory) as fwd:
                    a = asyncio.ensure_future(asyncio.to_thread(_http_ask, fwd, plain))
                    b = asyncio.ensure_future(asyncio.to_thread(_http_ask, fwd, tunnel))

                    async def both() -> list[dict[str, Any]] | None:
                        rows = await _pending(client)
                        return rows if sum(int(r.get("count") or 1) for r in rows) >= 2 else None

                    rows = await wait_until(both, timeout=30)
                    for row in rows:
                        await client.request("approve", {"id": row["id"], "decision": "allow-always"})
                    answers = await asyncio.gather(a, b)
            finally:
                await client.close()
    saved = ApprovalsStore(state_dir / "exec-approvals.json").egress_allow("main")
    assert all(x.startswith(b"HTTP/1.1 200") for x in answers), answers
    assert len(rows) == 2, (rows[0].get("egress"), rows[0].get("count"), saved)
    entries = {f"evil.test:{o.port}", f"http://evil.test:{o.port}"}
    assert {r["egress"] for r in rows} == entries and set(saved) == entries, (rows, saved)
    kinds = sorted(str(r["command"]).rsplit("[", 1)[-1] for r in rows)
    assert kinds == ["plain http]", "tunnel: CONNECT/SOCKS5]"], rows


async def test_bad_heads_rotate_the_egress_history_away(state_dir: Path) -> None:
    import asyncio

    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nask = false\n')
    bad = b"GET http://x.test/ HTTP/1.1\r\nHost: " + b"\xa0" * 60000 + b"\r\n\r\n"
    async with gateway(state_dir) as server:
        directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
        await server.services.egress.listen("sbx-h", "main", None)
        client = await connect(state_dir)
        try:
            with host_forwarder(directory) as fwd:
                first = await asyncio.to_thread(_http_ask, fwd, b"CONNECT exfil.test:443 HTTP/1.1\r\n\r\n")
                assert first.startswith(b"HTTP/1.1 403"), first
                before = await client.request("sandbox.egress", {"limit": 1000})
                assert any(c["name"] == "exfil.test" for c in before["connections"])
                for _ in range(40):
                    answer = await asyncio.to_thread(_http_ask, fwd, bad)
                    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
                after = await client.request("sandbox.egress", {"limit": 1000})
        finally:
            await client.close()
    assert any(c["name"] == "exfil.test" for c in after["connections"]), len(after["connections"])


async def test_short_refusals_rotate_another_agents_history_away(state_dir: Path) -> None:
    """Was open: every connection's line went to one shared `history/egress.jsonl` (1 MiB, five files), so
    one agent's sandboxes, refused ~15,000 times with short lines (a loop of CONNECTs to names nobody
    allowed: each costs the agent nothing), rotated every other agent's connections out of the history and
    of `sandbox egress`: the exfiltration attempt another sandbox made is then gone. Fixed: each principal
    has a log and a bounded share of its own (history/egress/<principal>.jsonl, three files of 1 MiB); a
    flood rotates the flooder's own lines only. The flood goes through the hub's own record path (what the
    proxy calls once per connection), as many times as the refused connections would."""
    import asyncio

    from engine.sandbox.egress import forwarder
    from engine.sandbox.egress.log import KEEP_FILES, ROTATE_BYTES
    from engine.sandbox.egress.proxy import Connection
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nask = false\n')
    async with gateway(state_dir) as server:
        hub = server.services.egress
        directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
        await hub.listen("sbx-h", "main", None)
        client = await connect(state_dir)
        try:
            with host_forwarder(directory) as fwd:
                first = await asyncio.to_thread(_http_ask, fwd, b"CONNECT exfil.test:443 HTTP/1.1\r\n\r\n")
                assert first.startswith(b"HTTP/1.1 403"), first
            flood = 0
            while flood * 200 < 6 * ROTATE_BYTES * KEEP_FILES:  # twice what the old shared log held
                for _ in range(500):
                    rule = "f.test:443 is not in the allowlist (ask = false)"
                    row = Connection("ops", "sbx-o", "f.test", 443, "CONNECT", "refused", rule, "policy")
                    hub.record(row)
                    flood += 1
                await hub.writer.barrier()
            mains = await client.request("sandbox.egress", {"agentId": "main", "limit": 1000})
            opss = await client.request("sandbox.egress", {"agentId": "ops", "limit": 1000})
        finally:
            await client.close()
    names = [(c["agentId"], c["name"]) for c in mains["connections"]]
    assert ("main", "exfil.test") in names, names
    assert len(opss["connections"]) == 1000  # (the flooder's own lines are there, the newest of them)
    own = sorted((state_dir / "history" / "egress").glob("ops.jsonl*"))
    assert 0 < sum(p.stat().st_size for p in own) <= ROTATE_BYTES * KEEP_FILES, own
    lines = sum(len(p.read_bytes().splitlines()) for p in own)
    assert lines < flood  # the flooder's own oldest lines did rotate away


# Runs inside `unshare -n -m`: /etc/resolv.conf (in this mount namespace only) names a DNS server on the
# namespace's loopback that holds every query until told; a real gateway in open mode; the sandbox's
# CONNECTs name hosts whose lookups hang; then the operator asks for `sandbox egress` (a worker-thread read).
_DNS_SCENE = textwrap.dedent(
    """
    import asyncio, json, os, socket, subprocess, sys, tempfile, threading
    from pathlib import Path

    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    conf = Path(tempfile.mkdtemp()) / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\\noptions timeout:30 attempts:1\\n")
    subprocess.run(["mount", "--bind", str(conf), "/etc/resolv.conf"], check=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    held, names, release = [], set(), threading.Event()
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 53))

    def serve_dns():
        while True:
            data, peer = dns.recvfrom(4096)
            held.append((data, peer))
            names.add(data[12:60])
            if release.is_set():
                answer_all()

    def answer_all():
        while held:
            data, peer = held.pop()
            # NXDOMAIN: id, flags 0x8183, qd=1, the question echoed
            end = data.index(0, 12) + 5
            dns.sendto(data[:2] + b"\\x81\\x83\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00" + data[12:end], peer)

    threading.Thread(target=serve_dns, daemon=True).start()

    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import connect, gateway, write_config

    state = Path(os.environ["OPENCLAW_STATE_DIR"])
    write_config(state, '[agents.defaults.sandbox.egress]\\nmode = "open"\\n')

    def hang(fwd, i):
        with socket.create_connection(("127.0.0.1", fwd), timeout=120) as s:
            s.sendall(f"CONNECT slow{i}.example.com:443 HTTP/1.1\\r\\n\\r\\n".encode())
            return s.recv(100)

    async def main():
        out = {}
        async with gateway(state) as server:
            directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
            await server.services.egress.listen("sbx-h", "main", None)
            client = await connect(state)
            with host_forwarder(directory) as fwd:
                count = int(sys.argv[1])
                threads = [threading.Thread(target=hang, args=(fwd, i), daemon=True) for i in range(count)]
                for t in threads:
                    t.start()
                # the lookups that fill the loop's default executor have reached the DNS server
                while threads and len(names) < min(32, (os.cpu_count() or 1) + 4):
                    await asyncio.sleep(0.02)
                try:
                    got = await asyncio.wait_for(client.request("sandbox.egress", {"limit": 5}), 10)
                    out["operator"] = "answered" if "connections" in got else repr(got)
                except TimeoutError:
                    out["operator"] = "no answer within 10 s while the sandbox's lookups hang"
                release.set()
                answer_all()
                for t in threads:
                    t.join()
            await client.close()
        print(json.dumps(out))

    asyncio.run(main())
    """
)


@needs_netns
def test_hanging_lookups_stall_the_gateways_worker_threads(state_dir: Path) -> None:
    assert _dns_scene(state_dir, 40)["operator"] == "answered"


@needs_netns
def test_operator_answered_in_the_dns_scene_without_hanging_lookups(state_dir: Path) -> None:
    """The scene's control: with no lookups hanging the same request is answered."""
    assert _dns_scene(state_dir, 0)["operator"] == "answered"


def _dns_scene(state_dir: Path, hanging: int) -> dict[str, Any]:
    script = state_dir / "dns_scene.py"
    script.write_text(_DNS_SCENE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["unshare", "-n", "-m", sys.executable, str(script), str(hanging)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(REPO),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# -- attempts that did not work: kept as regression tests -----------------------------------------------


class _RawOrigin:
    """A loopback origin that answers one request (head + Content-Length body), half-closes, then keeps
    reading until the proxy closes: everything the proxy ever sent it is in `received`."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
                length = 0
                for line in head.split("\r\n"):
                    if line.startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                while len(data) < len(head) + 4 + length and (chunk := conn.recv(65536)):
                    data += chunk
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
                conn.shutdown(1)
                while chunk := conn.recv(65536):
                    data += chunk
                self.received.append(data)

    def close(self) -> None:
        self.sock.close()


async def _proxy_rig(directory: Path, policy_raw: dict[str, Any]) -> Any:
    from engine.config.egress import EgressPolicy, decide
    from engine.sandbox.egress.proxy import Decision, EgressProxy

    policy = EgressPolicy.from_config(policy_raw)
    records: list[Any] = []

    async def decide_(req: Any) -> Decision:
        v = decide(policy, req.name, req.port, tunnel=req.tunnel)
        return Decision(v.action == "allow", v.rule, "policy", dict(policy.resolve), policy.deny)

    proxy = EgressProxy(decide_, records.append)
    await proxy.listen("sbx-h", "main", directory)
    return proxy, records


def _exchange(fwd: int, data: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", fwd), timeout=30) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


ARABIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


async def test_smuggling_variants_never_reach_another_host(state_dir: Path) -> None:
    """Pipelined second request behind a Content-Length body (or after an Upgrade: websocket head, which
    is never forwarded), bare LF and obs-fold Host lines, a Host that
    differs only by case and trailing dot (same host: fine), a header name with a space, non-ASCII digits,
    userinfo and `%` in the authority: only the one request for the allowed name reaches the origin."""
    import asyncio

    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import wait_until

    o = _RawOrigin()
    try:
        raw = {
            "mode": "allowlist",
            "ask": False,
            "allow": [f"http://allowed.test:{o.port}"],
            "resolve": {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"},
        }
        proxy, _ = await _proxy_rig(state_dir, raw)
        base = f"http://allowed.test:{o.port}/"
        smuggled = f"GET http://other.test:{o.port}/x HTTP/1.1\r\nHost: other.test\r\n\r\n"
        attempts = {
            "pipelined": f"POST {base} HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\n\r\nabcd"
            + smuggled,
            "bare-lf": f"GET {base} HTTP/1.1\r\nHost: allowed.test\nX: y\r\n\r\n",
            "fold": f"GET {base} HTTP/1.1\r\nHost: allowed.test\r\n other.test\r\n\r\n",
            "case-dot": f"GET {base} HTTP/1.1\r\nHost: ALLOWED.test.\r\n\r\n",
            "space-name": f"GET {base} HTTP/1.1\r\nHost : other.test\r\n\r\n",
            "digits": f"GET http://allowed.test:{str(o.port).translate(ARABIC)}/ HTTP/1.1\r\n\r\n",
            "userinfo": f"GET http://allowed.test:{o.port}@other.test/ HTTP/1.1\r\n\r\n",
            "percent": f"GET http://other%2etest:{o.port}/ HTTP/1.1\r\n\r\n",
            "chunked": f"POST {base} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled,
            "upgrade": f"GET {base} HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\n"
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n" + smuggled,
        }
        with host_forwarder(state_dir) as fwd:
            answers = {
                k: await asyncio.to_thread(_exchange, fwd, v.encode("utf-8")) for k, v in attempts.items()
            }
        await proxy.close()
        await wait_until(lambda: len(o.received) >= 3)  # (the origin records once the proxy closed it)
    finally:
        o.close()
    ok = {k for k, v in answers.items() if v.startswith(b"HTTP/1.1 200")}
    assert ok == {"pipelined", "case-dot", "upgrade"}, {k: v[:60] for k, v in answers.items()}
    assert len(o.received) == 3
    assert all(b"other.test" not in r and b"upgrade" not in r.lower() for r in o.received), o.received
    assert all(r.count(b"HTTP/1.1\r\n") == 1 for r in o.received), o.received


async def test_address_spellings_and_handed_descriptors(state_dir: Path) -> None:
    """In `open` mode: loopback and private targets in every spelling tried (SOCKS IPv6 type, mapped,
    NAT64, compatible, 6to4, numeric and hex names) are refused; a Unix socket, a listening TCP socket
    or two descriptors handed to the proxy socket are dropped, and the proxy still serves afterwards."""
    import asyncio
    import ipaddress
    import socket

    from tests.helpers.egress import host_forwarder

    o = _RawOrigin()
    try:
        proxy, _ = await _proxy_rig(state_dir, {"mode": "open", "resolve": {"ok.test": "127.0.0.1"}})

        def socks(fwd: int, atyp: int, addr: bytes) -> int | None:
            with socket.create_connection(("127.0.0.1", fwd), timeout=30) as s:
                s.sendall(b"\x05\x01\x00")
                s.recv(2)
                s.sendall(b"\x05\x01\x00" + bytes([atyp]) + addr + o.port.to_bytes(2, "big"))
                reply = s.recv(10)
                return reply[1] if len(reply) > 1 else None

        def name(text: str) -> tuple[int, bytes]:
            return 3, bytes([len(text)]) + text.encode()

        tries = [
            (4, ipaddress.IPv6Address("::1").packed),
            (4, ipaddress.IPv6Address("::ffff:127.0.0.1").packed),
            (4, ipaddress.IPv6Address("64:ff9b::7f00:1").packed),
            (4, ipaddress.IPv6Address("::127.0.0.1").packed),
            (4, ipaddress.IPv6Address("2002:7f00:1::").packed),
            (1, bytes([169, 254, 169, 254])),
            name("127.1"),
            name("0x7f.0.0.1"),
            name("2130706433"),
            name("[::ffff:7f00:1]"),
            name("localhost"),
        ]

        def hand(path: Path, fds: list[int]) -> None:
            with socket.socket(socket.AF_UNIX) as u:
                u.connect(str(path))
                socket.send_fds(u, [b"\0"], fds)
                u.recv(1)

        with host_forwarder(state_dir) as fwd:
            codes = [await asyncio.to_thread(socks, fwd, atyp, addr) for atyp, addr in tries]
            a, b = socket.socketpair()
            lst = socket.socket()
            lst.bind(("127.0.0.1", 0))
            lst.listen(1)
            for fds in ([a.fileno()], [lst.fileno()], [lst.fileno(), a.fileno()]):
                await asyncio.to_thread(hand, state_dir / "proxy.sock", fds)
            for s in (a, b, lst):
                s.close()
            after = await asyncio.to_thread(
                _exchange, fwd, f"GET http://ok.test:{o.port}/ HTTP/1.1\r\n\r\n".encode()
            )
        await proxy.close()
    finally:
        o.close()
    assert all(c not in (0, None) for c in codes), codes
    assert after.startswith(b"HTTP/1.1 200"), after


async def test_agent_reads_the_withheld_addresses_back(state_dir: Path) -> None:
    import asyncio

    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import connect, gateway, write_config

    write_config(state_dir, '[agents.defaults.sandbox.egress]\nmode = "open"\n')
    async with gateway(state_dir) as server:
        directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
        await server.services.egress.listen("sbx-h", "main", None)
        agent = await connect(state_dir, operator=False)
        try:
            with host_forwarder(directory) as fwd:
                told = await asyncio.to_thread(_http_ask, fwd, b"CONNECT localhost:443 HTTP/1.1\r\n\r\n")
            assert told.startswith(b"HTTP/1.1 403") and b"127.0.0.1" not in told, told
            rows = (await agent.request("sandbox.egress", {"limit": 10}))["connections"]
        finally:
            await agent.close()
    seen = json.dumps(rows)
    assert rows and "127.0.0.1" not in seen, seen


async def test_pending_list_cuts_the_owner_of_an_asked_name(state_dir: Path) -> None:
    """Was open: `approvals pending` cut every ask to 100 characters from the left, so an egress ask for
    registry.npmjs.org.<padding>.example.net showed as `connect registry.npmjs.org.…`: the labels that say
    who owns the name (its right end) and the port were what was cut. Fixed: an egress ask is shown whole
    (any name fits), and cut in the middle past that."""
    import asyncio

    from engine.sandbox.egress import forwarder
    from tests.helpers.egress import host_forwarder
    from tests.helpers.gateway import cli, connect, gateway, wait_until, write_config

    write_config(state_dir, ASKING)
    pad = "cdn-mirror-secure-download-node-packages-official-endpoint-v2"
    name = f"registry.npmjs.org.{pad}.cache.example.net"
    async with gateway(state_dir) as server:
        directory = await asyncio.to_thread(forwarder.prepare_dir, "sbx-h")
        await server.services.egress.listen("sbx-h", "main", None)
        client = await connect(state_dir)
        try:
            with host_forwarder(directory) as fwd:
                waiting = asyncio.ensure_future(asyncio.to_thread(_socks_connect, fwd, name, 443))
                asks = await wait_until(lambda: _pending(client), timeout=30)
                shown = await asyncio.to_thread(cli, state_dir, "approvals", "pending")
                await client.request("approve", {"id": asks[0]["id"], "decision": "deny"})
                await waiting
        finally:
            await client.close()
    line = next(x for x in shown.stdout.splitlines() if asks[0]["slug"] in x)
    assert "example.net" in line and ":443" in line, line
