"""Fresh attacks, round 4 (attacker e): issue 27 classes 1 and 2 — ambient credentials and per-principal
limits — against the gateway socket, agent credentials, approvals and node links."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from engine.errors import ExecHostError
from engine.protocol.frames import RemoteError
from engine.sandbox import docker_ops
from engine.sandbox.egress.proxy import MAX_PER_SANDBOX, MAX_TOTAL
from runner.gateway import limits
from runner.gateway.server import MAX_IN_FLIGHT
from tests.attacks.harness import ALLOWLIST
from tests.attacks.rawclient import RawClient
from tests.helpers.gateway import REPO, cli, connect, gateway, listed, wait_until, write_config
from tests.helpers.sandbox import build_test_image
from tests.helpers.sshd import SshdNode


@pytest.fixture
def state(state_dir: Path) -> Path:
    return state_dir


async def test_one_agent_joins_one_ask_until_the_operator_cannot_list_pending(state: Path) -> None:
    """Class 3 (limits per principal). An agent asks the same question from thousands of session keys:
    every distinct key joins the one pending record (the per-agent cap of 32 counts records, not who
    joined them), and the record's `requesters` list goes whole into every `approvals.pending` answer.
    Past ~1 MiB one row no longer fits a frame: `approvals.attach` (a console becoming the approver) and
    `approvals.pending` both fail with `frame … exceeds the 1048576-byte cap`, so no console can attach
    or see any agent's asks; memory and the pending file (the whole list rewritten per join) grow too.
    Closed: a join is one more ask waiting, counted against the agent's cap (which counts requesters), so
    past it the join is refused; views carry a requester count and the first few requesters only."""
    from engine import principals
    from engine.approvals.request import SHOWN_REQUESTERS
    from engine.approvals.room import MAX_PENDING_PER_AGENT

    write_config(state, ALLOWLIST + listed("ops"))
    principals.mint(state, "ops")
    async with gateway(state) as server:
        agents = [await connect(state, f"a{i}", operator=False) for i in range(8)]
        other = await connect(state, "other", operator=False, agent="ops")
        op = await connect(state, "op")
        try:
            pad = "k" * 240
            refused = 0

            async def ask(i: int) -> None:
                nonlocal refused
                client = agents[i % len(agents)]
                try:
                    result = await client.request("exec", {"command": "echo hi", "sessionKey": f"{pad}{i}"})
                except RemoteError as exc:
                    assert "approvals waiting" in str(exc), exc
                    refused += 1
                    return
                assert result["details"]["status"] == "approval-pending"

            await asyncio.gather(*(ask(i) for i in range(4000)))
            assert refused == 4000 - MAX_PENDING_PER_AGENT
            (row,) = server.services.approvals.pending()
            assert len(row.requesters) == MAX_PENDING_PER_AGENT
            # Someone else's ask, which the operator must still be able to see and answer.
            await other.request("exec", {"command": "echo other", "sessionKey": "x"})
            await op.request("approvals.attach")
            pending = await op.pending_approvals()
            assert any(row["command"] == "echo other" for row in pending)
            assert len(json.dumps(pending)) < 1 << 20
            mine = next(row for row in pending if row["command"] == "echo hi")
            assert mine["requesterCount"] == MAX_PENDING_PER_AGENT
            assert len(mine["requesters"]) == SHOWN_REQUESTERS
        finally:
            await op.close()
            await other.close()
            for client in agents:
                await client.close()


FULL_GATEWAY = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'
NODE_EXEC = '[tools.exec]\nhost = "node"\nnode = "alpha"\nsecurity = "full"\nask = "off"\n'


async def test_node_sessions_count_against_the_agent(state: Path, sshd_nodes: list[SshdNode]) -> None:
    """Class 3. The per-agent session and output caps live in the gateway's SessionManager (Quota); the
    node's SessionManager has none, and the gateway counts nothing for host=node runs. An agent allowed
    on a node keeps as many background sessions there as it likes (each with its own 64 MiB log), so it
    exhausts the node's processes and disk that the other agents and the operator share."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    write_config(state, alpha.config_toml() + NODE_EXEC + "maxSessionsPerAgent = 2\n")
    async with gateway(state):
        agent = await connect(state, "agent", operator=False)
        try:
            for i in range(2):
                first = await agent.request("exec", {"command": f"sleep 300 # {i}", "background": True})
                assert first["details"]["status"] == "running"
            # The agent's third session: over its cap of 2, wherever it would run.
            with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
                await agent.request("exec", {"command": "sleep 300 # 3", "background": True})
        finally:
            await agent.close()


async def test_node_sessions_free_their_places(state: Path, sshd_nodes: list[SshdNode]) -> None:
    """The other side of the count above (runner/gateway/node_sessions.py): a foreground node run holds a
    place only while it runs, a removed node session frees its place, and a session the node no longer
    lists (its sweep dropped it) is found out when the agent reaches its cap, and frees its place too."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    write_config(state, alpha.config_toml() + NODE_EXEC + "maxSessionsPerAgent = 2\n")
    async with gateway(state) as server:
        hub = server.services.nodes
        agent = await connect(state, "agent", operator=False)
        try:
            first = await agent.request("exec", {"command": "sleep 300 # a", "background": True})
            for i in range(4):  # one place left: each foreground run takes it and gives it back
                ran = await agent.request("exec", {"command": f"echo fg{i}"})
                assert ran["details"]["status"] == "completed", ran
            second = await agent.request("exec", {"command": "sleep 300 # b", "background": True})
            assert hub.held.count("main") == 2
            with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
                await agent.request("exec", {"command": "echo over"})
            await agent.request("process", {"action": "remove", "sessionId": first["details"]["sessionId"]})
            assert hub.held.count("main") == 1
            third = await agent.request("exec", {"command": "sleep 300 # c", "background": True})
            assert third["details"]["status"] == "running", third
            # As if the node's sweep had dropped one: the place names a session the node does not list.
            places = hub.held._held["main"]
            places["node:alpha:swept-long-ago"] = places.pop(second["details"]["sessionId"])
            fourth = await agent.request("exec", {"command": "sleep 300 # d", "background": True})
            assert fourth["details"]["status"] == "running", fourth
            assert "node:alpha:swept-long-ago" not in hub.held._held["main"]
            for made in (third, fourth, second):
                await agent.request(
                    "process", {"action": "remove", "sessionId": made["details"]["sessionId"]}
                )
            assert hub.held.count("main") == 0
        finally:
            await agent.close()


# A peer on another Unix account (the strong setup): system python, raw frames, driven line by line.
UID_PEER = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def send(obj):
    f.write(json.dumps(obj).encode() + b"\n"); f.flush()
send({"type": "hello", "version": 1, "client": "peer", "token": ""})
print(f.readline().decode().strip(), flush=True)
n = 0
for line in sys.stdin:
    n += 1
    try:
        send({"type": "req", "id": n, "method": "exec", "params": {"command": line.strip()}})
        while True:
            got = f.readline()
            if not got:
                print(json.dumps({"closed": True}), flush=True)
                break
            frame = json.loads(got)
            if frame.get("type") == "res" or frame.get("type") == "error":
                print(json.dumps(frame), flush=True)
                break
    except OSError:
        print(json.dumps({"closed": True}), flush=True)
"""
PEER_UID = 4242


def uid_config(sock: Path, mapped: bool) -> str:
    agents = f'[[agents.list]]\nid = "ops"\nuid = {PEER_UID}\n' if mapped else ""
    return (
        f'[gateway]\nagentGroup = "nogroup"\nagentSocket = "{sock}"\n'
        + '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
        + agents
    )


async def test_unmapped_account_keeps_acting_after_revoke(state: Path) -> None:
    """Class 1 (a credential that no longer holds still acts). In the strong setup an agent's Unix account
    is its credential; the operator cuts it off by removing its `[[agents.list]]` entry. The mapping is
    read only at the handshake, and `agents.revoke` / `agents.refresh` drop only connections that proved
    a minted credential (Connection.credential), never a uid-mapped one: the account's open connection
    keeps running commands as `ops` until the gateway restarts."""
    import grp

    sock_dir = Path(tempfile.mkdtemp(prefix="e4a-", dir="/tmp"))
    sock = sock_dir / "ag" / "agents.sock"
    script = sock_dir / "peer.py"
    script.write_text(UID_PEER)
    script.chmod(0o644)
    sock_dir.chmod(0o755)
    write_config(state, uid_config(sock, mapped=True))
    gid = grp.getgrnam("nogroup").gr_gid
    async with gateway(state):
        peer = await asyncio.create_subprocess_exec(
            "/usr/bin/python3",
            str(script),
            str(sock),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            user=PEER_UID,
            group=gid,
            extra_groups=[gid],
            cwd="/",
        )
        assert peer.stdin is not None and peer.stdout is not None

        async def run(command: str) -> dict:
            assert peer.stdin is not None and peer.stdout is not None
            peer.stdin.write(command.encode() + b"\n")
            await peer.stdin.drain()
            return json.loads(await asyncio.wait_for(peer.stdout.readline(), 60))

        op = await connect(state, "op")
        try:
            welcome = json.loads(await asyncio.wait_for(peer.stdout.readline(), 30))
            assert welcome.get("agent") == "ops", welcome
            first = await run("echo before")
            assert first.get("ok") and first["result"]["details"]["status"] == "completed", first
            # The operator cuts the account off: its entry goes, then revoke and refresh.
            write_config(state, uid_config(sock, mapped=False))
            await op.request("agents.revoke", {"agent": "ops"})
            await op.request("agents.refresh", {})
            after = await run("echo after")
            ran = after.get("ok") and after["result"]["details"].get("status") == "completed"
            assert not ran, f"the unmapped account still ran a command: {after}"
        finally:
            await op.close()
            if peer.returncode is None:
                peer.kill()
            await peer.wait()
            shutil.rmtree(sock_dir, ignore_errors=True)


async def test_rotated_credential_still_acts_until_the_refresh(state: Path) -> None:
    """Class 1 (a revoked credential still acts). `agents revoke` stops reading the agent's connections
    before the file goes; `agents add --rotate` does it the other way round (runner/cli/agents.py
    cmd_add: `principals.mint` — the old token no longer on disk — then `_refresh()`, a second client
    that must start, connect and handshake, and whose failure is swallowed). Here the rotate's first step
    is done as the CLI does it; the old connection's next request is then acted upon.
    Closed: with a gateway running, `--rotate` is the gateway's verb `agents.rotate`, in revoke's order."""
    from engine import principals

    write_config(state, FULL_GATEWAY + listed("ops"))
    principals.mint(state, "ops")
    async with gateway(state):
        old = await connect(state, "ops", operator=False, agent="ops")
        try:
            assert (await old.request("exec", {"command": "echo before"}))["details"]["status"] == "completed"
            # `agents add ops --rotate`: with a gateway running it is the gateway's verb (stop, mint, drop),
            # so there is no moment where the new credential exists and the old connection is still read.
            rotated = await asyncio.to_thread(cli, state, "agents", "add", "ops", "--rotate", "--json")
            assert rotated.returncode == 0, rotated.stderr
            assert json.loads(rotated.stdout)["details"]["dropped"] == 1
            try:
                result = await old.request("exec", {"command": "echo after"})
            except (ExecHostError, ConnectionError, OSError):
                result = None  # refused or cut off: not acted upon
            assert result is None or result["details"]["status"] != "completed", result
        finally:
            await old.close()


async def test_one_agent_pins_tens_of_thousands_of_requests(state: Path) -> None:
    """Class 3 (counts bytes). `limits.Intake` charges a request its frame's length while it runs; a
    `process poll` of ~110 bytes waits up to 120 s, and the only other bound is 512 per connection
    (server.MAX_IN_FLIGHT) × 64 connections per agent. The frames total 3.5 MB, far under the 16 MiB
    budget, but 32,256 waiting tasks raised the gateway's RSS from 32 to 216 MB; eight agents together
    pin ~1.5 GB. A request must be charged what it holds while it waits (or in-flight requests capped
    per agent)."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        agent = await connect(state, "agent", operator=False)
        conns: list[RawClient] = []
        try:
            started = await agent.request("exec", {"command": "sleep 600", "background": True})
            sid = started["details"]["sessionId"]
            for _ in range(limits.MAX_PER_AGENT - 1):
                raw, first = await RawClient.open(state)
                assert first["type"] == "welcome", first
                conns.append(raw)
            total = len(conns) * MAX_IN_FLIGHT
            for raw in conns:
                for _ in range(MAX_IN_FLIGHT):
                    await raw.request("process", {"action": "poll", "sessionId": sid, "timeout": 120_000})

            def in_flight() -> int:
                return sum(len(c.tasks) for c in server.connections if not c.operator)

            def settled() -> bool:
                held = [c for c in server.connections if not c.operator]
                return in_flight() >= total or any(c.intake_full for c in held)

            with contextlib.suppress(AssertionError):  # a reader held back another way: count what runs
                await wait_until(settled, timeout=60)
            # 4,096 waiting requests is already ~23 MB of task state for one agent.
            assert in_flight() <= 4096, f"one agent holds {in_flight()} requests in flight"
            # The agent's own budget is spent until its polls end: the operator ends them.
            op = await connect(state, "op")
            await op.request("process", {"action": "kill", "sessionId": sid})
            await op.close()
        finally:
            for raw in conns:
                raw.close()
            await agent.close()


async def test_tokenless_peer_kills_the_web_console(state: Path) -> None:
    """Class 3 (an unauthenticated peer exhausts what the operator needs). Any local account can reach
    127.0.0.1: it needs no token to open TCP connections to the web console, and aiohttp accepts every
    one (the token is checked per request, after a connection is already held). With the usual 1024
    soft limit on descriptors, ~1,100 idle connections make accept() fail with EMFILE; asyncio logs it,
    the console's rich log handler imports its traceback module to format it, that open() fails with
    EMFILE as well, and the console process exits 1. The operator's URL then refuses connections, even
    after the peer has closed every socket."""
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}

    def usual_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runner",
        "console",
        "--web",
        env=env,
        cwd=str(REPO),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=usual_limit,
    )
    peers: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        url = line.split(": ", 1)[1].strip()
        port = int(urllib.parse.urlsplit(url).port or 0)

        def page_loads() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=10) as res:
                    return bool(res.status == 200)
            except OSError:
                return False

        await wait_until(lambda: asyncio.to_thread(page_loads), timeout=30)
        for _ in range(1100):  # no token: a request line that never ends
            try:
                peer = socket.create_connection(("127.0.0.1", port), timeout=2)
                peer.sendall(b"GET / HTTP/1.1\r\n")
            except OSError:
                break
            peers.append(peer)
        for peer in peers:
            peer.close()
        peers.clear()
        with contextlib.suppress(AssertionError):
            await wait_until(lambda: proc.returncode is not None or asyncio.to_thread(page_loads), timeout=30)
        assert proc.returncode is None, "the web console exited"
        assert await asyncio.to_thread(page_loads), "the operator's console URL no longer loads"
    finally:
        for peer in peers:
            peer.close()
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_one_agent_evicts_anothers_node_keys(state: Path, sshd_nodes: list[SshdNode]) -> None:
    """Class 3 (limits per principal). A node's later notices (a background session's exit) are accepted
    only under a session key the gateway gave that node (runner/gateway/node_keys.py), and the node keeps
    MAX_KEYS_PER_NODE = 1,024 keys, the oldest forgotten first — one pool for every agent. Agent main runs
    1,030 trivial commands on the node with distinct session keys: agent ops's key, given when its
    background run started, is forgotten, and when that run ends its `Exec finished … victim-done`
    notice is dropped as "never given". The share must be per agent (as the event queues are)."""
    from engine import principals

    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    write_config(state, alpha.config_toml() + NODE_EXEC + listed("ops"))
    principals.mint(state, "ops")
    gate = alpha.marks / "go"  # (outside the node's home: an overlay made for each run)
    async with gateway(state) as server:
        hub = server.services.nodes
        victim = await connect(state, "ops", operator=False, agent="ops")
        attackers = [await connect(state, f"m{i}", operator=False) for i in range(8)]
        try:
            cmd = f"while [ ! -e {gate} ]; do sleep 0.05; done; echo victim-done"
            started = await victim.request("exec", {"command": cmd, "background": True, "sessionKey": "v"})
            assert started["details"]["status"] == "running", started
            assert hub.keys.given("alpha", "agent:ops:v")

            async def flood(i: int) -> None:
                client = attackers[i % len(attackers)]
                await client.request("exec", {"command": "true", "sessionKey": f"k{i}"})

            # In waves under main's session cap: a run in flight on the node is one of its sessions.
            for wave in range(0, 1030, 32):
                await asyncio.gather(*(flood(i) for i in range(wave, min(wave + 32, 1030))))
            dropped = hub.dropped
            gate.touch()
            await wait_until(
                lambda: (
                    hub.dropped > dropped
                    or any("victim-done" in t for t in server.services.events.peek("agent:ops:v"))
                ),
                timeout=60,
            )
            notices = server.services.events.peek("agent:ops:v")
            assert any("victim-done" in text for text in notices), f"ops's notice was dropped: {notices}"
        finally:
            gate.touch()
            await victim.close()
            for c in attackers:
                await c.close()


async def test_one_agent_fills_the_override_table(state: Path) -> None:
    """Class 3. An agent may set, without the operator role, any override that only tightens
    (`/exec security=deny`) on any session key of its own, and each one is kept in the gateway's
    `overrides` dict for good: no count per agent, no bytes. 6,000 of them (240-character keys, ~150
    bytes a request) make `policy.overrides` exceed the 1 MiB frame, so the console's Policy pane says
    "policy unavailable" for every agent, and the gateway's memory grows with every request.
    Closed: an agent keeps at most MAX_OVERRIDES_PER_AGENT overrides (more are refused), and
    `policy.overrides` answers in pages of at most OVERRIDES_PAGE_BYTES."""
    write_config(state, ALLOWLIST)
    async with gateway(state) as server:
        agents = [await connect(state, f"a{i}", operator=False) for i in range(8)]
        op = await connect(state, "op")
        try:
            pad = "o" * 240

            refused = 0

            async def tighten(i: int) -> None:
                nonlocal refused
                client = agents[i % len(agents)]
                try:
                    await client.request(
                        "policy.override", {"sessionKey": f"{pad}{i}", "directive": "/exec security=deny"}
                    )
                except RemoteError as exc:
                    assert "the most one agent may keep" in str(exc), exc
                    refused += 1

            await asyncio.gather(*(tighten(i) for i in range(6000)))
            held = sum(1 for key in server.services.overrides if key.startswith("agent:main:"))
            assert held <= 1024, f"agent main keeps {held} session overrides"
            assert refused == 6000 - held
            seen: dict[str, object] = {}
            after = None
            while True:  # the operator pages through every override
                page = await op.request("policy.overrides", {} if after is None else {"after": after})
                assert len(json.dumps(page)) <= limits.OVERRIDES_PAGE_BYTES + 4096
                seen.update(page["overrides"])
                after = page["next"]
                if after is None:
                    break
            assert len(seen) == len(server.services.overrides)
        finally:
            await op.close()
            for client in agents:
                await client.close()


def _pids_cgroup(pid: int) -> Path:
    """The pids cgroup directory of a process (cgroup v1's pids hierarchy, else the v2 one)."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = right.split(" ")[:3]
        point = left.split(" ")[4]
        if fstype == "cgroup" and "pids" in options.split(","):
            mounts["pids"] = point
        elif fstype == "cgroup2":
            mounts.setdefault("", point)
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(",") and "pids" in mounts:
            return Path(mounts["pids"] + path)
    return Path(mounts[""] + Path(f"/proc/{pid}/cgroup").read_text().splitlines()[-1].split(":", 2)[2])


def _pids_caps(cgroup: Path, root: Path) -> dict[Path, int]:
    """Every numeric pids.max from `cgroup` up to (not including) the hierarchy's root."""
    caps = {}
    while cgroup != root and root in cgroup.parents:
        raw = (cgroup / "pids.max").read_text().strip() if (cgroup / "pids.max").exists() else "max"
        if raw.isdigit():
            caps[cgroup] = int(raw)
        cgroup = cgroup.parent
    return caps


async def test_docker_sandboxes_of_one_agent_share_a_pids_cap(state: Path) -> None:
    """Class 3 (sandbox pids). With `scope = "session"` every session key is a container of its own, and
    an agent picks its keys: no count of containers per agent, and each has its own `pidsLimit` (512)
    under Docker's `/docker` cgroup, whose pids.max is `max`. Background processes outlive the exec that
    started them, so 64 containers of one agent can hold 64 x 512 = 32,768 processes, this host's whole
    pid_max: every other agent, the operator and the gateway then fail to fork. The bwrap backend nests an
    agent's sandboxes under one owner cgroup capped at a quarter of pid_max; Docker's are not. Checked
    without forking: the agent's two containers must share an ancestor cgroup capped that way."""
    image = build_test_image()
    config = (
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\npool = 0\n'
    )
    write_config(state, config)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    try:
        async with gateway(state):
            agent = await connect(state, "agent", operator=False)
            try:
                for key in ("s1", "s2"):
                    ran = await agent.request("exec", {"command": "echo in", "sessionKey": key})
                    assert ran["details"]["status"] == "completed", ran
            finally:
                await agent.close()
        mine = docker_ops.list_sandboxes()
        assert len(mine) == 2
        groups = [
            _pids_cgroup(docker_ops.client().api.inspect_container(c["Id"])["State"]["Pid"]) for c in mine
        ]
        root = Path(os.path.commonpath([str(g) for g in groups]))
        while not (root / "cgroup.procs").exists() or (root.parent / "cgroup.procs").exists():
            root = root.parent  # the hierarchy's root: the top directory holding cgroup.procs
        shared = set(_pids_caps(groups[0], root).items()) & set(_pids_caps(groups[1], root).items())
        assert any(cap <= pid_max // 4 for _, cap in shared), f"no shared pids cap below {root}: {shared}"
        for container in mine:
            docker_ops.remove(container["Id"])
        assert not any(g.parent.exists() for g in groups), "an emptied owner group was left behind"
    finally:
        for container in docker_ops.list_sandboxes():
            docker_ops.remove(container["Id"])


async def test_backlog_cap_is_per_connection_not_per_agent(state: Path) -> None:
    """Class 3 (per principal, in bytes). Issue 27 §2's fix counts the bytes waiting for a client,
    responses included, and cuts the client off past MAX_BACKLOG_BYTES (16 MiB); reading pauses at 4 MiB,
    but requests already read still answer. A client that sends 19 `sessions.output` requests (111 bytes
    each, a 128 KiB window of its own `tr` session: ~786 KB escaped) in one write and never reads is
    left with ~15 MB queued, under the cut-off. The cap is per connection; an agent may hold 64
    connections, so one agent parks ~1 GB of the gateway's memory (16 here, ~240 MB)."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        agent = await connect(state, "agent", operator=False)
        raws: list[RawClient] = []
        try:
            made = await agent.request(
                "exec", {"command": "head -c 200000 /dev/zero | tr '\\0' '\\1'", "background": True}
            )
            sid = made["details"]["sessionId"]

            async def written() -> bool:
                got = await agent.request("sessions.output", {"sessionId": sid, "offset": 0, "limit": 131072})
                return len(got["data"]) >= 131072

            await wait_until(written, timeout=60)
            for _ in range(16):
                raw, first = await RawClient.open(state)
                assert first["type"] == "welcome", first
                raws.append(raw)
            lines = b"".join(
                json.dumps(
                    {
                        "type": "req",
                        "id": i,
                        "method": "sessions.output",
                        "params": {"sessionId": sid, "offset": 0, "limit": 131072},
                    }
                ).encode()
                + b"\n"
                for i in range(19)
            )
            for raw in raws:
                raw.writer.write(lines)
                await raw.writer.drain()
            held = [c for c in server.connections if not c.operator and c.client == "raw"]

            def total() -> int:
                return sum(c.backlog() for c in held if not c.closed)

            def settled() -> bool:
                paused = all(c.closed or c.reading_paused for c in held)
                return paused or total() > 4 * limits.MAX_BACKLOG_BYTES

            with contextlib.suppress(AssertionError):  # held back some other way: measure what waits
                await wait_until(settled, timeout=60)
            queued = total()
            assert queued <= 4 * limits.MAX_BACKLOG_BYTES, f"one agent's connections hold {queued >> 20} MiB"
        finally:
            for raw in raws:
                raw.close()
            await agent.close()


async def test_anonymous_none_leaves_live_bare_token_connections(state: Path) -> None:
    """Class 1 (an identity that no longer holds still acts). docs/SECURITY.md gives the operator
    `[gateway] anonymous = "none"` so that "an agent without its credential is nobody". An agent that
    read gateway.json and connected as `main` before the operator flipped it keeps that connection:
    the switch, like the uid mapping, is consulted only when a connection says hello, and neither
    `agents.refresh` nor anything else re-decides live connections."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state):
        bare = await connect(state, "bare", operator=False)
        op = await connect(state, "op")
        try:
            assert (await bare.request("exec", {"command": "echo before"}))["details"][
                "status"
            ] == "completed"
            write_config(state, '[gateway]\nanonymous = "none"\n' + FULL_GATEWAY)
            with pytest.raises(ExecHostError, match="present an agent credential"):
                await connect(state, "late", operator=False)  # a new one is refused: the switch is on
            await op.request("agents.refresh", {})
            try:
                result = await bare.request("exec", {"command": "echo after"})
            except (ExecHostError, ConnectionError, OSError):
                result = None
            assert result is None or result["details"]["status"] != "completed", result
        finally:
            await op.close()
            await bare.close()


async def test_config_edit_alone_re_decides_live_connections(state: Path) -> None:
    """Class 1, the same as above with no `agents.refresh`: the edit itself is enough. The request that
    makes the gateway reload its config is checked under the new config before it is acted upon, and the
    reload re-decides every other live connection (the second one never sends anything)."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        bare = await connect(state, "bare", operator=False)
        idle = await connect(state, "idle", operator=False)
        op = await connect(state, "op")
        try:
            assert (await bare.request("exec", {"command": "echo before"}))["details"][
                "status"
            ] == "completed"
            write_config(state, '[gateway]\nanonymous = "none"\n' + FULL_GATEWAY)
            try:
                result = await bare.request("exec", {"command": "echo after"})
            except (ExecHostError, ConnectionError, OSError):
                result = None
            assert result is None or result["details"]["status"] != "completed", result
            await wait_until(lambda: [c.client for c in server.connections] == ["op"], timeout=10)
            assert (await op.request("status"))["pid"] == os.getpid()  # the operator is still itself
        finally:
            await op.close()
            await idle.close()
            await bare.close()


async def test_revoked_agents_asks_still_run_when_approved(state: Path) -> None:
    """Class 1 (a revoked credential still acts). What a revoked agent sent before the revoke and that
    waits for a human is kept: its asks stay pending under its name, and with no approver attached the
    exec answered `approval-pending` and left a detached run behind. The operator who revoked `ops` later
    works through the inbox and allows the row: the command runs as ops, after ops's revoke."""
    from engine import principals

    write_config(state, ALLOWLIST + listed("ops"))
    principals.mint(state, "ops")
    marker = state.parent / "ran-after-revoke"
    async with gateway(state) as server:
        ops = await connect(state, "ops", operator=False, agent="ops")
        op = await connect(state, "op")
        try:
            asked = await ops.request("exec", {"command": f"touch {marker}"})
            assert asked["details"]["status"] == "approval-pending", asked
            revoked = await op.request("agents.revoke", {"agent": "ops"})
            assert revoked["revoked"] is True
            pending = [row for row in await op.pending_approvals() if row.get("agentId") == "ops"]
            for row in pending:  # the operator works through the inbox
                await op.request("approve", {"id": row["id"], "decision": "allow-once"})
            with contextlib.suppress(AssertionError):
                await wait_until(lambda: marker.exists(), timeout=10)
            assert not pending and not marker.exists(), "a revoked agent's ask was still approvable and ran"
            assert server.services.approvals.pending() == []
        finally:
            await op.close()
            await ops.close()


async def test_one_agent_holds_every_egress_slot(state: Path) -> None:
    """Class 3 (proxy connections). An agent names as many session scopes as it likes, so it has as many
    sandboxes, and each gets 256 proxy connections; the proxy's 1,024 are shared by every agent. Four of
    one agent's sandboxes open 256 connections each and send nothing (a request head
    may take 30 s; they reconnect when dropped): agent ops's sandbox is then closed unread, so its
    request is closed unanswered instead of getting the proxy's own refusal. The sandboxes' listeners are
    made as the sandbox manager makes them (EgressProxy.listen); each connection is handed over as the
    forwarder in a sandbox hands it (one NUL byte and the TCP socket's descriptor).
    Closed: a principal holds at most its maxConnections + UNREAD_HEADROOM from accept to close (and never
    more than MAX_PER_PRINCIPAL, whatever its maxConnections says); main still gets every one of those."""
    from engine.config.egress import MAX_CONNECTIONS
    from engine.sandbox.egress.proxy import MAX_PER_PRINCIPAL, UNREAD_HEADROOM

    write_config(state, FULL_GATEWAY + '[agents.defaults.sandbox.egress]\nmode = "allowlist"\nask = false\n')
    async with gateway(state) as server:
        proxy = server.services.egress.proxy
        dirs = []
        for i, agent in enumerate(["main"] * 4 + ["ops"]):
            directory = state.parent / f"sbx{i}"
            directory.mkdir(mode=0o700)
            await proxy.listen(f"sbx{i}", agent, directory)
            dirs.append(directory)
        held: list[socket.socket] = []
        tcp = socket.create_server(("127.0.0.1", 0))

        def handoff(directory: Path) -> socket.socket:
            """What the forwarder in a sandbox does for one connection: the TCP socket, as an fd."""
            client = socket.create_connection(tcp.getsockname())
            server_end, _ = tcp.accept()
            with socket.socket(socket.AF_UNIX) as unix:
                unix.connect(str(directory / "proxy.sock"))
                socket.send_fds(unix, [b"\0"], [server_end.fileno()])
            server_end.close()
            return client

        try:
            for directory in dirs[:4]:  # agent main: 256 silent connections from each of four sandboxes
                for _ in range(MAX_PER_SANDBOX):
                    held.append(handoff(directory))
            # main's share is full (the rest of its 1,024 are closed unread), and no more than its share
            share = MAX_CONNECTIONS + UNREAD_HEADROOM
            await wait_until(lambda: proxy.open.get("main", 0) >= share, timeout=60)
            assert proxy.open["main"] == share <= MAX_PER_PRINCIPAL < MAX_TOTAL

            def ask_as_ops() -> bytes:
                with handoff(dirs[4]) as sock:
                    sock.settimeout(20)
                    sock.sendall(b"GET http://blocked.example/ HTTP/1.1\r\nHost: blocked.example\r\n\r\n")
                    try:
                        return sock.recv(4096)
                    except (TimeoutError, ConnectionResetError):  # closed unread
                        return b""

            answer = await asyncio.to_thread(ask_as_ops)
            assert answer.startswith(b"HTTP/1."), f"ops's sandbox got no answer: {answer!r}"
        finally:
            for sock in held:
                sock.close()
            tcp.close()


async def test_deciding_a_joined_ask_rewrites_it_once_per_requester(state: Path) -> None:
    """Class 3 (counts bytes). The same join as above, then the operator denies the ask by its id (it
    need not list the inbox). Each joined requester's run is noted on the record and each note makes the
    pending store write the record's whole state, every requester included: O(n²) bytes, ~300 MiB for
    this one decision at 2,000 (the process's own write count), ~645 MiB and ~40 s at 4,000, during which
    every principal's asks wait on the same durable writer. At 4,000 the resolved line (1.4 MB) was also
    rotated out behind the 4,000 run lines, and `approvals.history` answered with no row for it at all.
    Closed: joins past the agent's cap (which counts requesters) are refused, so a record's size and the
    number of its runs are bounded; the decision line carries a count and the first few requesters."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        agents = [await connect(state, f"a{i}", operator=False) for i in range(8)]
        op = await connect(state, "op")
        try:
            pad = "k" * 240
            ids: set[str] = set()

            async def ask(i: int) -> None:
                with contextlib.suppress(RemoteError):  # past the agent's cap: refused
                    result = await agents[i % len(agents)].request(
                        "exec", {"command": "echo hi", "sessionKey": f"{pad}{i}"}
                    )
                    ids.add(result["details"]["approvalId"])

            await asyncio.gather(*(ask(i) for i in range(2000)))
            assert len(ids) == 1
            before = _written()
            await op.request("approve", {"id": ids.pop(), "decision": "deny"})
            history = await op.request("approvals.history", {})
            written = _written() - before
            assert written < 64 << 20, f"one decision wrote {written >> 20} MiB"
            assert any(row.get("status") == "deny" for row in history["approvals"]), history
        finally:
            await op.close()
            for client in agents:
                await client.close()


async def test_agent_chooses_to_erase_the_decision_on_its_ask(state: Path) -> None:
    """Class 3, and "nothing is lost". `encode_entry` cuts only the command when a line is too long;
    the requesters it cannot cut are the agent's to grow. 700 session keys joined to one ask make its
    resolved line ~250 KiB, which the decision log writes and its reader then skips (`len(raw) >
    MAX_LINE_BYTES`): the operator denies the ask, and `approvals.history` has no row for it.
    Closed: joins are capped per agent, the decision line carries at most a few requesters, and
    `encode_entry` always makes a line the reader keeps (test_history_line_is_never_dropped)."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        agents = [await connect(state, f"a{i}", operator=False) for i in range(8)]
        op = await connect(state, "op")
        try:
            pad = "k" * 240
            ids: set[str] = set()

            async def ask(i: int) -> None:
                with contextlib.suppress(RemoteError):  # past the agent's cap: refused
                    got = await agents[i % 8].request(
                        "exec", {"command": "echo hi", "sessionKey": f"{pad}{i}"}
                    )
                    ids.add(got["details"]["approvalId"])

            await asyncio.gather(*(ask(i) for i in range(700)))
            assert len(ids) == 1
            approval = ids.pop()
            await op.request("approve", {"id": approval, "decision": "deny", "reason": "no"})
            history = await op.request("approvals.history", {})
            assert any(row["id"] == approval for row in history["approvals"]), history
        finally:
            await op.close()
            for client in agents:
                await client.close()


async def test_event_spool_share_counts_characters_not_bytes(state: Path) -> None:
    """Class 3 (counts bytes). `EventSpool.save` keeps events.json under 512 KiB by trimming the owner
    that holds the most, but counts what each holds with `len(text)` (characters) while the cap is on the
    UTF-8 bytes. An agent's command output is the tail of its `Exec finished` notice; in 4-byte
    characters it costs four times its count. Agent ops has 120,000 ASCII characters undelivered (three
    keys of 100 events); agent main adds ~101,000 characters of emoji (~404 KB): over the cap, the owner
    with more characters is ops, so ops's oldest events leave the disk (a crash then loses them) while
    main's larger share stays."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        agent = await connect(state, "agent", operator=False)
        try:
            made = await agent.request(
                "exec",
                {"command": "sleep 0.2; printf '\\360\\237\\230\\200%.0s' $(seq 400)", "background": True},
            )
            sid = made["details"]["sessionId"]
            await wait_until(lambda: server.services.events.peek("agent:main"), timeout=30)
            notice = server.services.events.peek("agent:main")[-1]
            assert "\U0001f600" * 100 in notice, notice  # the agent's output is its notice's tail
            await agent.request("process", {"action": "remove", "sessionId": sid})
            events = server.services.events
            for k in range(3):
                for n in range(100):
                    events.enqueue(
                        f"agent:ops:k{k}", f"Exec finished (gateway id=x{n}, code 0)\n" + "o" * 360
                    )
            for n in range(253):
                events.enqueue(f"agent:main:e{n // 100}", "\U0001f600" * 400)
            spooled = json.loads((state / "events.json").read_text())["queues"]
            ops_kept = sum(len(v) for k, v in spooled.items() if k.startswith("agent:ops:"))
            assert ops_kept == 300, f"ops kept {ops_kept} of its 300 events on disk"
        finally:
            await agent.close()


async def test_one_agent_queues_everyone_behind_its_checks(state: Path) -> None:
    """Class 3 (a shared resource with no per-principal share). `policy.check` (and `exec`) decide in
    `asyncio.to_thread`, and deciding `sh big.sh` digests the agent-writable script (up to 64 MiB, ~0.14 s
    here). Those jobs, every other agent's decisions and an agent credential's lookup at the handshake
    all wait in the one default executor, first come first served. One agent's 40 checks put another
    agent's trivial exec behind ~34 of them (6 s measured); the agent may keep 32,256 requests in flight,
    so the others wait tens of minutes, and a credentialed client's hello times out meanwhile."""
    workspace = state.parent / "ws"
    workspace.mkdir()
    (workspace / "big.sh").write_bytes(b"echo hi\n" + b"#" * (60 << 20) + b"\n")
    write_config(state, ALLOWLIST)
    async with gateway(state) as server:
        greedy = await connect(state, "greedy", operator=False)
        other = await connect(state, "other", operator=False)
        answered: list[str] = []
        try:

            async def check() -> None:
                await greedy.request("policy.check", {"command": "sh big.sh", "cwd": str(workspace)})
                answered.append("greedy")

            checks = [asyncio.ensure_future(check()) for _ in range(40)]
            await wait_until(
                lambda: sum(len(c.tasks) for c in server.connections if c.name == "greedy") >= 40
            )
            await other.request("exec", {"command": "echo hi", "cwd": str(workspace)})
            answered.append("other")
            await asyncio.gather(*checks)
            ahead = answered.index("other")
            assert ahead < 20, f"another agent's exec waited behind {ahead} of one agent's checks"
        finally:
            await greedy.close()
            await other.close()
            (workspace / "big.sh").unlink()


async def test_half_sent_frames_park_megabytes_uncounted(state: Path) -> None:
    """Class 3 (counts bytes). The intake counts a request once its line is complete; until then the
    stream keeps what arrived (readuntil with a 1 MiB + 1 limit), and after the hello nothing times a
    frame out. An agent opens 63 connections and sends each `{"type":"req",…` of 1 MiB less 200 bytes,
    no newline, then waits: the gateway holds 63 MiB of its bytes indefinitely (RSS 31 → 98 MB measured),
    4x the agent's whole 16 MiB request budget; 16 more connections per account may do the same before
    their hello (5 s each)."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        raws: list[RawClient] = []
        try:
            for _ in range(limits.MAX_PER_AGENT - 1):
                raw, first = await RawClient.open(state)
                assert first["type"] == "welcome", first
                raws.append(raw)
            blob = b'{"type":"req","id":1,"method":"status","params":{"x":"' + b"a" * ((1 << 20) - 200)
            for raw in raws:
                raw.writer.write(blob)
                await raw.writer.drain()

            def parked() -> int:
                total = 0
                for conn in server.connections:
                    if not conn.operator:
                        stream = getattr(conn.writer.transport.get_protocol(), "_stream_reader", None)
                        total += len(getattr(stream, "_buffer", b""))
                return total

            with contextlib.suppress(AssertionError):  # refused or cut off: then nothing stays parked
                await wait_until(lambda: parked() >= len(raws) * ((1 << 20) - 200), timeout=30)
            held = parked()
            assert held <= limits.MAX_REQUEST_BYTES_PER_AGENT, f"one agent parks {held >> 20} MiB uncounted"
        finally:
            for raw in raws:
                raw.close()


async def test_tokenless_peers_hold_the_browser_door_open(state: Path) -> None:
    """Class 3 (an unauthenticated peer exhausts what everyone needs). Once any browser is used the
    gateway listens on 127.0.0.1 for CDP/noVNC (runner/gateway/browser_proxy.py); the token is checked
    in the request head, and a peer that sends no head is held until HEAD_TIMEOUT (10 s), without any
    cap on how many. Any local account (an agent's own account in the strong setup too) can reconnect
    faster than that: 2,000 here are 2,000 of the gateway's descriptors and tasks, and the gateway's
    descriptor table is the one its control socket, sessions and state files need."""
    write_config(state, FULL_GATEWAY)
    async with gateway(state) as server:
        door = server.services.browsers.proxy
        await door.start()  # what the first browser call does
        peers: list[asyncio.StreamWriter] = []
        try:
            for _ in range(2000):
                _reader, writer = await asyncio.open_connection("127.0.0.1", door.port)
                peers.append(writer)
            with contextlib.suppress(AssertionError):  # a door that caps them never gets there
                await wait_until(lambda: len(door._tasks) >= len(peers), timeout=8)
            held = len(door._tasks)
        finally:
            for peer in peers:
                peer.transport.abort()
        assert held <= 256, f"the door holds {held} tokenless connections"


async def test_a_door_token_gets_through_while_tokenless_peers_wait(state: Path) -> None:
    """The other side of the slots above (engine.preauth): 2,000 tokenless peers held open do not keep a
    client that shows a door's token out. Its connection sheds the oldest tokenless one, its head is read
    and its token found: the door answers 502 (the browser behind this real door and token was never
    started), not a close or a 403."""
    from runner.gateway.browser_proxy import BrowserProxy

    door = BrowserProxy()
    await door.start()
    peers: list[asyncio.StreamWriter] = []
    try:
        token = door.open("gone", str(state / "cdp.sock"), None, "0" * 64).token
        for _ in range(2000):
            _reader, writer = await asyncio.open_connection("127.0.0.1", door.port)
            peers.append(writer)
        reader, writer = await asyncio.open_connection("127.0.0.1", door.port)
        writer.write(f"GET /{token}/json/version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.readline(), 30)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 502"), answer
        assert len(door.preauth) <= door.preauth.slots
        assert door.preauth.shed_count >= 2000 - door.preauth.slots
    finally:
        for peer in peers:
            peer.transport.abort()
        await door.close()


async def test_join_flood_cuts_off_a_pausing_approver_by_frame_count(state: Path) -> None:
    """Class 3 (counts bytes). Every join of a coalesced ask broadcasts `approval.updated` (~110 bytes)
    to each approver, and approval events are never shed ("small and rare"). An agent makes them
    frequent: 6,500 asks of one question from fresh session keys while the console is busy for a moment
    (not reading). Past the 256 KiB written ahead the frames queue, and at SEND_QUEUE_FRAMES the console is
    cut off ("is not reading (532685 bytes wait for it)") — far under the 4 MiB pause and 16 MiB cut-off
    the byte caps promise — and its asks go two-phase until it reconnects.
    Closed: joins count against the agent's cap, one ask's queued `approval.updated` events are merged
    (the latest replaces one still waiting), and the send queue is capped in bytes, not frames."""
    from engine.approvals.room import MAX_PENDING_PER_AGENT
    from engine.protocol.frames import OPERATOR_TOKEN_NAME, ensure_token

    write_config(state, ALLOWLIST)
    async with gateway(state) as server:
        console, first = await RawClient.open(state, operator=ensure_token(state, OPERATOR_TOKEN_NAME))
        assert first["type"] == "welcome", first
        await console.request("approvals.attach", {})
        await wait_until(lambda: any(c.approver for c in server.connections))
        agents = [await connect(state, f"a{i}", operator=False) for i in range(16)]

        answered = 0

        async def ask(i: int) -> None:
            nonlocal answered
            with contextlib.suppress(ExecHostError, ConnectionError):
                await agents[i % 16].request("exec", {"command": "echo hi", "sessionKey": f"k{i}"})
            answered += 1

        asks = [asyncio.ensure_future(ask(i)) for i in range(6500)]
        try:

            def settled() -> bool:
                if not any(c.approver for c in server.connections):
                    return True  # cut off
                # every ask is refused (past the agent's cap) or waits on the one record
                waiting = sum(len(r.requesters) for r in server.services.approvals.pending())
                return waiting == MAX_PENDING_PER_AGENT and answered >= 6500 - MAX_PENDING_PER_AGENT

            await wait_until(settled, timeout=60)
            assert any(c.approver for c in server.connections), "the pausing approver was cut off"
        finally:
            for task in asks:
                task.cancel()
            console.close()
            for client in agents:
                await client.close()


def _written() -> int:
    """Bytes this process (the in-process gateway) has passed to write() so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


# ---- attempts that did not work: kept as regression tests ------------------------------------------------


async def test_look_alike_names_and_keys_reach_nothing_of_another_agent(state: Path) -> None:
    """Held. Agents `ops` and `ops.b` (a legal name that extends `ops`), and keys spelled so that a
    prefix check, a case fold or a strip would take them for ops's: none of them shows ops's session,
    drains its events, or counts against its quota."""
    from engine import principals

    write_config(state, FULL_GATEWAY + listed("ops", "ops.b"))
    principals.mint(state, "ops")
    principals.mint(state, "ops.b")
    async with gateway(state) as server:
        ops = await connect(state, "ops", operator=False, agent="ops")
        other = await connect(state, "ops.b", operator=False, agent="ops.b")
        bare = await connect(state, "bare", operator=False)
        try:
            started = await ops.request(
                "exec", {"command": "sleep 30", "background": True, "sessionKey": "v"}
            )
            sid = started["details"]["sessionId"]
            server.services.events.enqueue("agent:ops:v", "ops's own secret event")
            spellings = [
                "agent:ops:v",
                " agent:ops:v ",
                "AGENT:ops:v",
                "agent:ops",
                "agent:ops:",
                "agent:ops\n:v",
            ]
            for client in (other, bare):
                for key in spellings:
                    rows = await client.request("sessions.list", {"sessionKey": key})
                    assert all(row["sessionId"] != sid for row in rows["sessions"]), (client, key)
                    drained = await client.request("events", {"sessionKey": key, "drain": True})
                    assert not any("secret" in e["text"] for e in drained["events"]), (client, key)
                with pytest.raises(RemoteError, match="No session found"):
                    await client.request("sessions.output", {"sessionId": sid})
                for action in ("kill", "poll", "log", "write"):
                    tried = await client.request("process", {"action": action, "sessionId": sid, "data": "x"})
                    assert tried["details"]["status"] == "failed", (client, action, tried)
            assert server.services.events.peek("agent:ops:v") == ["ops's own secret event"]
            still = await ops.request("process", {"action": "poll", "sessionId": sid, "sessionKey": "v"})
            assert still["details"]["status"] == "running"
            await ops.request("process", {"action": "kill", "sessionId": sid, "sessionKey": "v"})
        finally:
            for client in (ops, other, bare):
                await client.close()


async def test_strong_setup_account_cannot_borrow_tokens_or_skip_the_group(state: Path) -> None:
    """Held. On the agents' socket the peer's account is its identity: a mapped account that presents
    the operator token (or any credential) is refused, and an account outside the agents' group cannot
    open the socket at all."""
    import grp

    sock_dir = Path(tempfile.mkdtemp(prefix="e4b-", dir="/tmp"))
    sock = sock_dir / "ag" / "agents.sock"
    sock_dir.chmod(0o755)
    write_config(state, uid_config(sock, mapped=True))
    gid = grp.getgrnam("nogroup").gr_gid
    probe = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\n"
        "except OSError as e:\n    print(json.dumps({'connect': e.errno})); sys.exit()\n"
        "s.sendall(json.dumps({'type': 'hello', 'version': 1, 'client': 'p', 'token': '',"
        " 'operator': sys.argv[2]}).encode() + b'\\n')\n"
        "print(s.makefile().readline().strip())\n"
    )
    try:
        async with gateway(state):
            operator_token = (state / "operator.json").read_text()
            borrowed = await asyncio.create_subprocess_exec(
                "/usr/bin/python3", "-c", probe, str(sock), "any-operator-token",
                stdout=asyncio.subprocess.PIPE, user=PEER_UID, group=gid, extra_groups=[gid], cwd="/",
            )  # fmt: skip
            out, _ = await borrowed.communicate()
            refused = json.loads(out)
            assert refused["type"] == "error" and "present no tokens" in refused["message"], refused
            assert "any-operator-token" not in operator_token
            outsider = await asyncio.create_subprocess_exec(
                "/usr/bin/python3", "-c", probe, str(sock), "",
                stdout=asyncio.subprocess.PIPE, user=PEER_UID + 1, group=PEER_UID + 1, extra_groups=[],
                cwd="/",
            )  # fmt: skip
            out, _ = await outsider.communicate()
            assert json.loads(out) == {"connect": 13}  # EACCES: the socket's directory admits the group only
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


async def test_session_cap_holds_across_session_keys_on_the_gateway(state: Path) -> None:
    """Held (the contrast to host=node above). On the gateway an agent's sessions are counted by owner,
    not by session key: spreading them over fresh keys does not get past maxSessionsPerAgent."""
    write_config(state, FULL_GATEWAY + "maxSessionsPerAgent = 2\n")
    async with gateway(state):
        agent = await connect(state, "agent", operator=False)
        try:
            for key in ("k1", "k2"):
                ran = await agent.request(
                    "exec", {"command": "sleep 30", "background": True, "sessionKey": key}
                )
                assert ran["details"]["status"] == "running"
            with pytest.raises(RemoteError, match="sessions, the most one agent may keep"):
                await agent.request("exec", {"command": "sleep 30", "background": True, "sessionKey": "k3"})
            for row in await agent.list_sessions():
                await agent.request("process", {"action": "kill", "sessionId": row["sessionId"]})
        finally:
            await agent.close()
