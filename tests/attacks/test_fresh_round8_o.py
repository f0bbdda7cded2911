"""Fresh round 8, attacker o: ambient authority, whose is it, limits per principal, crash at the worst
moment — against the gateway's sockets and principals, approvals and grants, sessions, nodes, egress.

Each test states the attack in its docstring. A test marked xfail(strict) is an attack that works today:
it asserts the safe outcome and fails until the hole is closed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from engine.approvals.store import ApprovalsStore
from engine.protocol.frames import OPERATOR_TOKEN_NAME, RemoteError, read_token
from tests.helpers.gateway import ALLOWLIST, connect, gateway, listed, wait_until, write_config

CURL = "/usr/bin/curl"


def _agents_socket_config(sock: Path, extra: str = "") -> str:
    return (
        '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nask = "on-miss"\n'
        f'[gateway]\nagentGroup = "root"\nagentSocket = "{sock}"\n' + extra
    )


async def _hello(path: Path, hello: dict[str, Any]) -> dict[str, Any]:
    """Connect to `path`, say `hello`, return the gateway's first frame (welcome or error)."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(json.dumps({"type": "hello", "version": 1, "client": "probe", **hello}).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
        return json.loads(line) if line else {"type": "eof"}
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


# ---- class 3: the gateway's own uid is one handshake budget, shared by the operator and every host command


@pytest.mark.skipif(not os.path.exists(CURL), reason="needs curl")
async def test_class3_allowlisted_curl_fills_the_operators_handshake_slots(state_dir: Path) -> None:
    """An agent whose allowlist has curl (a common entry: it runs no other program) runs
    `curl --unix-socket <agents.sock> telnet://x | curl … ` sixteen times over: curl's telnet connects and
    sends nothing until its stdin says something, so each connection sits in the handshake. The per-uid cap
    counts the gateway's own uid, which every host command of every agent runs as, and which the operator's
    console and CLI (and every credentialed agent's MCP server on the operator's account) connect as. With
    all 16 taken, `exechost approve` / a console (re)start / another agent gets `too many connections from
    uid 0 still saying hello`; re-run every handshake timeout (5 s), the agent keeps them out.
    Fixed: the handshake slots are counted per socket and uid (runner/gateway/server.py)."""
    sock = state_dir.parent / "ag" / "agents.sock"
    write_config(state_dir, _agents_socket_config(sock))
    ApprovalsStore(state_dir / "exec-approvals.json").add_allowlist("main", CURL)
    stage = f"{CURL} -s --unix-socket {sock} telnet://x/"
    command = " | ".join([stage] * 16)
    async with gateway(state_dir, handshake_timeout=60.0) as server:
        client = await connect(state_dir, operator=False)
        try:
            work = state_dir.parent / "w"
            work.mkdir()
            res = await client.request("exec", {"command": command, "background": True, "workdir": str(work)})
            # As root every directory is the gateway user's to write, so an unmodelled program asks; under
            # an ordinary account in a root-owned cwd it runs unasked. Either way: one plain approval.
            if res["details"]["status"] == "approval-pending":
                operator = await connect(state_dir)
                try:
                    await operator.request(
                        "approve", {"id": res["details"]["approvalId"], "decision": "allow-once"}
                    )
                finally:
                    await operator.close()
            uid = os.geteuid()
            # (the gateway's count of this uid's connections still saying hello, on either socket)
            await wait_until(lambda: _saying_hello(server, uid) >= 16, timeout=30)
            # The operator (or any client of the gateway's account) now tries to connect.
            first = await _hello(
                state_dir / "gateway.sock",
                {"token": read_token(state_dir), "operator": _operator_token(state_dir)},
            )
            assert first.get("type") == "welcome", first
        finally:
            await client.close()


def _saying_hello(server: Any, uid: int) -> int:
    return sum(
        n for key, n in server._handshaking.items() if (key[-1] if isinstance(key, tuple) else key) == uid
    )


def _operator_token(state: Path) -> str:
    return str(read_token(state, OPERATOR_TOKEN_NAME))


# ---- class 2: "this session only" on an ask that came from no session is every sessionless call's


async def test_class2_session_only_grant_on_a_sessionless_ask_covers_every_sessionless_call(
    state_dir: Path,
) -> None:
    """The operator answers an ask with allow-always limited to "this session only" (`approve --session`,
    the console's session checkbox), meaning: this conversation may repeat it. The asking call had no
    session key (an `exechost exec`, or an MCP server started without `--session`: every one of its calls),
    so the grant is stored with sessionKey "" — and "" is what every other sessionless call of that agent
    carries too: a new connection, tomorrow's conversation, a different MCP server of the same agent all
    run it unasked until the grant's time or uses run out. Fixed: such a limit is refused when the ask
    came from no session (`ApprovalManager.resolve`); a duration or a number of uses still works."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    work.mkdir()
    async with gateway(state_dir) as _server:
        first = await connect(state_dir, operator=False)
        try:
            res = await first.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
            assert res["details"]["status"] == "approval-pending", res
            operator = await connect(state_dir)
            try:
                try:
                    await operator.request(
                        "approve",
                        {
                            "id": res["details"]["approvalId"],
                            "decision": "allow-always",
                            "grant": {"sessionOnly": True},
                        },
                    )
                except RemoteError as exc:  # refused: no session to limit it to
                    assert "no session" in str(exc), exc
                else:

                    async def granted() -> Any:
                        got = await operator.request("approvals.grants", {})
                        return got if got["grants"] else None

                    grants = await wait_until(granted, timeout=30)
                    assert [g["sessionKey"] for g in grants["grants"]] == [""], grants  # the ownerless key
            finally:
                await operator.close()
        finally:
            await first.close()
        # Another connection, another "conversation", no session key either.
        second = await connect(state_dir, operator=False)
        try:
            again = await second.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
        finally:
            await second.close()
    assert again["details"]["status"] == "approval-pending", again  # not its session's grant


# ---- class 3: the egress proxy's DNS pool is one pool for every agent


async def test_class3_one_agents_hanging_lookups_refuse_another_agents_names(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agent evil's sandbox sends 64 requests for names in a zone whose authoritative server never answers
    (a name it registered; under `mode = "open"` every public name is admitted, and a wildcard allow such
    as `*.example-cdn.net` over a zone anyone can add names to does the same). Each lookup holds one of
    the gateway-wide 64 places until the system resolver gives up, long after the proxy's own 5 s timeout.
    Agent ops's sandbox then asks for its allowed registry: refused at once, with no lookup, because the
    cap and the 8 resolver threads count lookups, not principals. The DNS server cannot be reached here
    (no traffic leaves this machine), so `system_lookup` stands in for the system resolver: names in
    `.hang.test` wait as a silent server makes getaddrinfo wait; every other name answers at once.
    Fixed (prin28): each principal has its own lane of resolver threads and its own cap
    (`engine/sandbox/egress/addresses.py`, `tests/attacks/test_egress_fair.py`)."""
    from engine.sandbox.egress import addresses, forwarder
    from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
    from tests.helpers.egress import host_forwarder

    silent = __import__("threading").Event()
    real = addresses.system_lookup

    def lookup(name: str, port: int) -> list[tuple[Any, ...]]:
        if name.endswith(".hang.test"):
            silent.wait(60)  # a DNS server that never answers (the resolver's own retries, then a timeout)
            return []
        if name == "registry.ops.test":
            return [(2, 1, 6, "", ("127.0.0.1", port))]
        return real(name, port)

    monkeypatch.setattr(addresses, "system_lookup", lookup)
    records: list[Connection] = []

    async def decide(req: Request) -> Decision:
        return Decision(True, "mode open (every public name)")  # what `mode = "open"` decides

    proxy = EgressProxy(decide, records.append)
    dirs = {}
    for sandbox, agent in (("sb-evil", "evil"), ("sb-ops", "ops")):
        dirs[sandbox] = forwarder.socket_dir(sandbox)
        dirs[sandbox].mkdir(parents=True, mode=0o700)
        await proxy.listen(sandbox, agent, dirs[sandbox])
    writers: list[asyncio.StreamWriter] = []
    try:
        with host_forwarder(dirs["sb-evil"]) as evil_port, host_forwarder(dirs["sb-ops"]) as ops_port:
            for i in range(addresses.MAX_LOOKUPS_IN_FLIGHT):
                _r, w = await asyncio.open_connection("127.0.0.1", evil_port)
                w.write(f"GET http://n{i}.hang.test/ HTTP/1.1\r\nHost: n{i}.hang.test\r\n\r\n".encode())
                writers.append(w)
            await wait_until(lambda: addresses._in_flight >= addresses.MAX_LOOKUPS_IN_FLIGHT, timeout=30)
            reader, writer = await asyncio.open_connection("127.0.0.1", ops_port)
            writers.append(writer)
            writer.write(b"GET http://registry.ops.test/ HTTP/1.1\r\nHost: registry.ops.test\r\n\r\n")
            await writer.drain()
            await asyncio.wait_for(reader.read(), 30)
            ops = [r for r in records if r.agentId == "ops"]
            assert ops, records
            # ops's name was looked up (it answers 127.0.0.1, refused as not public): never refused unlooked.
            said = [f"{r.rule} {r.error or ''} {r.detail or ''}" for r in ops]
            assert not any("lookups are still waiting" in text for text in said), said
    finally:
        silent.set()
        for w in writers:
            w.close()
        await proxy.close()


# ---- class 1/7: an ask made with a credential that no longer holds


async def _ask_then_cut_off(state_dir: Path, verb: str) -> dict[str, Any]:
    """Agent ops (its own credential) asks for a command; the operator cuts the credential off with `verb`
    (agents.revoke or agents.rotate), then answers the ask allow-once. What became of the run."""
    from engine import principals

    write_config(state_dir, ALLOWLIST + listed("ops"))
    work = state_dir.parent / "w"
    work.mkdir()
    token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False, credential=token)
        operator = await connect(state_dir)
        try:
            res = await agent.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
            assert res["details"]["status"] == "approval-pending", res
            approval = res["details"]["approvalId"]
            await operator.request(verb, {"agent": "ops"})
            with contextlib.suppress(Exception):  # already settled (revoke denies it): nothing to answer
                await operator.request("approve", {"id": approval, "decision": "allow-once"})

            async def settled() -> Any:
                got = await operator.request("approvals.status", {"approvalId": approval})
                run = got["details"].get("run") or {}
                done = run.get("status") not in (None, "starting", "running")
                return got["details"] if done else None

            return dict(await wait_until(settled, timeout=30))
        finally:
            await operator.close()
            with contextlib.suppress(Exception):
                await agent.close()


async def test_revoked_credentials_pending_ask_never_runs(state_dir: Path) -> None:
    """Regression (held): a live revoke denies what the credential asked before it; approving it later
    runs nothing."""
    details = await _ask_then_cut_off(state_dir, "agents.revoke")
    assert details["run"]["status"] == "denied", details


async def test_class7_rotated_credentials_pending_ask_runs_live_but_not_after_a_restart(
    state_dir: Path,
) -> None:
    """The operator rotates ops's credential (`exechost agents add ops --rotate`) because it leaked: the
    holder of the leaked token had filed asks that look like ops's. `rotate_agent` stops and drops the old
    credential's connections but, unlike `revoke_agent`, never settles what that credential asked, so
    approving the row later runs it. Had the gateway restarted in between, the restore would have denied
    the same ask (`_holds`: a re-minted credential no longer holds): the outcome depends on whether a
    crash happened, and a credential that no longer holds still acts. Fixed: a rotation settles what the
    old credential asked (`ApprovalManager.revoke_credential`, runner/gateway/server.py)."""
    details = await _ask_then_cut_off(state_dir, "agents.rotate")
    assert details["run"]["status"] == "denied", details


async def test_rotated_credentials_pending_ask_is_denied_after_a_restart(state_dir: Path) -> None:
    """Regression (held), the contrast to the xfail above: with a restart between the ask and the rotation
    (the CLI re-mints on disk while no gateway runs), the restored ask is denied, approved or not."""
    from engine import principals

    write_config(state_dir, ALLOWLIST + listed("ops"))
    work = state_dir.parent / "w"
    work.mkdir()
    token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False, credential=token)
        try:
            res = await agent.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
            assert res["details"]["status"] == "approval-pending", res
            approval = res["details"]["approvalId"]
        finally:
            await agent.close()
    principals.mint(state_dir, "ops")  # `exechost agents add ops --rotate` with no gateway running
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            with contextlib.suppress(Exception):
                await operator.request("approve", {"id": approval, "decision": "allow-once"})

            async def settled() -> Any:
                got = await operator.request("approvals.status", {"approvalId": approval})
                run = got["details"].get("run") or {}
                return got["details"] if run.get("status") not in (None, "starting", "running") else None

            details = await wait_until(settled, timeout=30)
        finally:
            await operator.close()
    assert details["run"]["status"] == "denied", details


# ---- class 3: RAM a Docker sandbox can pin (tmpfs) is bounded for bwrap, not for Docker


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


async def test_class3_docker_sandbox_tmpfs_can_pin_the_hosts_ram(state_dir: Path) -> None:
    """The bwrap backend bounds what tmpfs a sandbox may pin (256 MiB per mount, and an agent's running
    sandboxes together a quarter of the host's RAM, checked before a start). The Docker backend, the
    default, creates `/tmp`, `/var/tmp` and `/run` as tmpfs with no size (the kernel's default: half of
    RAM each) in a container with no memory limit (`docker.memory` unset): `head -c 40G /dev/zero >
    /tmp/x` in an agent's sandbox takes the host's RAM, and killing processes frees none of it (tmpfs
    pages are not a process's). The test does not fill anything: it reads what the sandbox could pin —
    the sizes its writable tmpfs mounts report, bounded by the container's memory limit — and expects it
    within the bwrap backend's bound for one agent (a quarter of RAM)."""
    from engine.sandbox import docker_ops
    from tests.helpers.sandbox import build_test_image

    image = build_test_image()
    write_config(
        state_dir,
        '[tools.exec]\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\npool = 0\n',
    )
    probe = (
        "df -k /tmp /var/tmp /run /dev/shm | tail -n +2; "
        "echo LIMIT $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || "
        "cat /sys/fs/cgroup/memory.max 2>/dev/null)"
    )
    try:
        async with gateway(state_dir):
            client = await connect(state_dir, operator=False)
            try:
                res = await client.request("exec", {"command": probe})
            finally:
                await client.close()
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    text = res["text"]
    assert res["details"]["status"] == "completed", res
    sizes = [int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith(("tmpfs", "shm"))]
    assert len(sizes) == 4, text
    limit_words = [
        line.split()[1] for line in text.splitlines() if line.startswith("LIMIT ") and len(line.split()) > 1
    ]
    limit = int(limit_words[0]) if limit_words and limit_words[0].isdigit() else None
    pinnable = sum(sizes) if limit is None else min(sum(sizes), limit)
    assert pinnable <= _mem_total() // 4, (pinnable, _mem_total(), text)


# ---- class 7: the "starting" note of an approved run is not on disk, and the run starts anyway


def _fill(directory: Path) -> Path:
    """Take every free block of the filesystem `directory` is on (what an agent's sandbox does by writing
    into its workspace, which lives on the state dir's filesystem by default)."""
    filler = directory / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the state dir")
async def test_class7_full_disk_at_the_starting_note_then_power_loss_runs_an_allow_once_twice(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An allow-once ask is approved; the decision is on disk. The agent's sandbox fills the state dir's
    filesystem just then (its workspace is there by default) and frees it a moment later. `_starting`'s
    note (the run's session id, on disk *before* the spawn, so that a crash never runs it twice) fails with
    ENOSPC; GroupWriter logs the failure and releases the barrier as if it were written; the space is back,
    and the command is spawned. Power is lost right after the spawn, before the run's next note (the state
    dir is copied at that moment: what a power loss leaves on disk). The next gateway restores the ask as
    decided allow-once with no run, and runs the command a second time. Without the full disk the copy
    holds the `starting` note, and the restore refuses to run it again (engine.tools.resume).
    Fixed: `_starting` asks the journal whether the note reached the disk and refuses the run when it did
    not (engine/tools/exec.py); the command then runs nowhere, and the restore finds it settled."""
    import shutil
    import subprocess

    from engine.tools.exec import ExecTool

    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(state_dir)], check=True)
    work = state_dir.parent / "w"
    work.mkdir()
    marker = work / "ran"
    image = state_dir.parent / "s2"
    # the disk's image after power loss is the operator's state dir: recorded as its gateway would have
    # (engine.commands.gatewaydirs.adopt refuses an unrecorded one holding a gateway's files)
    from engine.commands import gatewaydirs

    gatewaydirs.record(os.environ["HOME"], str(image))
    starting_, run_ = ExecTool._starting, ExecTool._run
    armed = {"fill": True, "crash": True, "copied": False}

    async def starting(self: ExecTool, *args: Any, **kwargs: Any) -> tuple[str, str]:
        if not armed["fill"]:
            return await starting_(self, *args, **kwargs)
        armed["fill"] = False
        filler = _fill(state_dir)  # the agent's sandbox fills the disk: the note fails with ENOSPC
        try:
            return await starting_(self, *args, **kwargs)
        finally:
            filler.unlink()  # ...and frees it again: the holder file and the spawn go ahead

    async def run(self: ExecTool, *args: Any, **kwargs: Any) -> Any:
        result = await run_(self, *args, **kwargs)
        if armed["crash"]:
            armed["crash"] = False
            await wait_until(lambda: marker.exists() and marker.read_text().count("ran") == 1, timeout=30)
            # Power lost now, after the spawn and before the run's next note: the disk as it is.
            shutil.copytree(state_dir, image, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
            armed["copied"] = True
        return result

    monkeypatch.setattr(ExecTool, "_starting", starting)
    monkeypatch.setattr(ExecTool, "_run", run)
    command = f"/bin/sh -c 'echo ran >> {marker}; exec sleep 60'"
    try:
        write_config(state_dir, ALLOWLIST)
        async with gateway(state_dir):
            agent = await connect(state_dir, operator=False)
            operator = await connect(state_dir)
            try:
                res = await agent.request("exec", {"command": command, "workdir": str(work)})
                assert res["details"]["status"] == "approval-pending", res
                approval = res["details"]["approvalId"]
                await operator.request("approve", {"id": approval, "decision": "allow-once"})

                async def over() -> bool:  # copied after its spawn, or refused without one
                    got = await operator.request("approvals.status", {"approvalId": approval})
                    return armed["copied"] or (got["details"].get("run") or {}).get("status") == "failed"

                await wait_until(over, timeout=30)
                if not armed["copied"]:  # refused: power lost now, the disk as it is
                    shutil.copytree(state_dir, image, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
            finally:
                await operator.close()
                await agent.close()
    finally:
        subprocess.run(["umount", "-l", str(state_dir)], check=False)
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(image))
    async with gateway(image) as restarted:
        if any(r.id == approval for r in restarted.services.approvals.records()):  # restored: it may run
            operator = await connect(image)
            try:

                async def settled() -> bool:
                    got = await operator.request("approvals.status", {"approvalId": approval})
                    run = got["details"].get("run") or {}
                    again = marker.exists() and marker.read_text().count("ran") >= 2
                    return again or run.get("status") in ("denied", "failed", "completed")

                await wait_until(settled, timeout=30)
            finally:
                await operator.close()
    ran = marker.read_text().count("ran") if marker.exists() else 0
    assert ran <= 1, "the approved-once command ran twice"


# ---- class 3: processes of one agent's host commands are not capped per agent


@pytest.mark.skipif(not os.path.isdir("/sys/fs/cgroup/pids"), reason="needs the cgroup v1 pids hierarchy")
async def test_class3_host_commands_of_one_agent_have_no_process_share(state_dir: Path) -> None:
    """The bwrap backend puts each sandbox in a pids cgroup under its owner's, capped at a quarter of the
    host's pid_max, so no agent's fork bomb starves the rest. A host command (here an approved `cat`;
    an approved build, test run or script, or an allowlisted program, is the same) sits in the gateway's
    own pids cgroup, with no limit of its agent's: `:(){ :|:& };:` in any approved script takes every
    pid the gateway's account (or the machine) has, and the other agents' runs, the session host and
    the operator's console fail to fork. Nothing is forked here: the test reads which pids cgroup a
    host command is in and its limit, and expects an agent's share as the sandboxes have."""
    write_config(state_dir, ALLOWLIST)
    work = state_dir.parent / "w"
    work.mkdir()
    async with gateway(state_dir):
        client = await connect(state_dir, operator=False)
        operator = await connect(state_dir)
        try:
            res = await client.request(
                "exec", {"command": "/usr/bin/cat /proc/self/cgroup", "workdir": str(work)}
            )
            assert res["details"]["status"] == "approval-pending", res  # (a /proc operand asks)
            approval = res["details"]["approvalId"]
            await operator.request("approve", {"id": approval, "decision": "allow-once"})

            async def ran() -> Any:
                got = await operator.request("approvals.status", {"approvalId": approval})
                run = got["details"].get("run") or {}
                return run if run.get("status") == "completed" else None

            run = await wait_until(ran, timeout=30)
            text = str(run.get("tail") or "")
            import re

            found = re.search(r"\d+:pids:(\S+)", text)  # (the run's tail comes with its lines joined)
            assert found is not None, text
            line = found.group(0)
            group = Path("/sys/fs/cgroup/pids") / found.group(1).lstrip("/")
            with open("/proc/sys/kernel/pid_max") as f:
                share = int(f.read()) // 4
            caps = []
            for d in (group, *group.parents):  # the run's own group and every group above it may cap it
                if d == Path("/sys/fs/cgroup"):
                    break
                with contextlib.suppress(OSError, ValueError):
                    caps.append(int((d / "pids.max").read_text()))
            # (read while the gateway runs: it removes its agents' emptied host groups when it stops)
            assert caps and min(caps) <= share, (line, caps)
        finally:
            await operator.close()
            await client.close()


# ---- attempts that did not work (regressions kept)


async def test_a_node_run_cannot_reach_the_node_services_socket(state_dir: Path) -> None:
    """Regression (held): `node.sock` of `exechost node run` admits any peer of its uid without a token,
    and a peer there is a gateway link: it could send `system.run` as any agentId and answer the asks the
    node relays to its link. A node run is that uid; it does not reach the socket because it starts in
    the host view, where the node's state dir is an empty tmpfs. (A real node service on its own socket;
    the test speaks the node wire as the gateway would.)"""
    from runner.node.service import NodeService

    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    service = NodeService(state_dir)
    await service.start()
    try:
        reader, writer = await asyncio.open_unix_connection(str(state_dir / "node.sock"), limit=1 << 22)
        try:
            hello = json.loads(await reader.readline())
            assert hello["type"] == "hello"
            probe = f"ls -a {state_dir}; test -S {state_dir}/node.sock && echo REACHABLE || echo hidden"
            request = {
                "type": "req",
                "id": "1",
                "method": "system.run",
                "params": {
                    "command": ["sh", "-c", probe],
                    "rawCommand": probe,
                    "agentId": "evil",
                    "runId": "r1",
                },
            }
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            while True:
                frame = json.loads(await asyncio.wait_for(reader.readline(), 60))
                if frame.get("type") == "res" and frame.get("id") == "1":
                    break
        finally:
            writer.close()
    finally:
        await service.stop()
    assert frame["ok"], frame
    out = frame["payload"]["stdout"]
    assert "hidden" in out and "REACHABLE" not in out and "node.json" not in out, out


@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap")
async def test_two_agents_sessionless_calls_never_share_a_session_scoped_sandbox(state_dir: Path) -> None:
    """Regression (held): a sessionless call's session key is "" for every agent (the ownerless key the
    session-only grant above trips on). With scope = "session", a sandbox named after "" would be one
    sandbox for every agent; the sandbox layer maps "" to the agent's own main session key first, so agent
    ops's file is not in agent main's workspace."""
    from engine import principals

    write_config(
        state_dir,
        '[tools.exec]\nsecurity = "full"\nask = "off"\n'
        '[agents.defaults.sandbox]\nmode = "all"\nscope = "session"\nbackend = "bwrap"\n' + listed("ops"),
    )
    token = principals.mint(state_dir, "ops")
    async with gateway(state_dir):
        ops = await connect(state_dir, operator=False, credential=token)
        main = await connect(state_dir, operator=False)
        try:
            wrote = await ops.request(
                "exec", {"command": "echo ops-secret > /workspace/left-by-ops; echo ok"}
            )
            assert wrote["details"]["status"] == "completed", wrote
            read = await main.request("exec", {"command": "cat /workspace/left-by-ops 2>&1; echo done"})
        finally:
            await ops.close()
            await main.close()
    assert "ops-secret" not in read["text"], read


# ---- class 2: another agent's approval ids, seen through the prefix of one's own


async def test_class2_an_agents_approval_prefix_says_nothing_of_other_agents_asks(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`approvals.status` takes any unique prefix. An agent's prefix was resolved among every agent's asks
    (pending and decided), so its own id's one-character prefix answered "unknown" exactly when another
    agent had an ask starting with the same character: an oracle for other agents' pending asks and their
    ids, one hex digit at a time (with 32 asks an agent covers the alphabet). The ids are fixed here
    (uuid4 answers in turn) so the collision a 1-in-16 chance gives is there every run. Fixed: an agent's
    prefix is resolved among its own agent's approvals only (and in the decision history likewise)."""
    import uuid

    from engine import principals
    from engine.approvals import pending

    ids = iter(
        [
            uuid.UUID("d4000000-0000-4000-8000-000000000001"),  # agent main's ask
            uuid.UUID("d7000000-0000-4000-8000-000000000002"),  # agent ops's: the same first digit
        ]
    )
    from types import SimpleNamespace

    # Only the approval manager's ids (its own `uuid` name): every other uuid4 in the process stays random.
    monkeypatch.setattr(pending, "uuid", SimpleNamespace(uuid4=lambda: next(ids, None) or uuid.uuid4()))
    write_config(state_dir, ALLOWLIST + listed("ops"))
    token = principals.mint(state_dir, "ops")
    work = state_dir.parent / "w"
    work.mkdir()
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=token)
        try:
            mine = await main.request("exec", {"command": "/usr/bin/id -u", "workdir": str(work)})
            theirs = await ops.request("exec", {"command": "/usr/bin/id -g", "workdir": str(work)})
            assert mine["details"]["approvalId"].startswith("d4"), mine
            assert theirs["details"]["approvalId"].startswith("d7"), theirs
            got = await main.request("approvals.status", {"approvalId": "d"})  # unique among its own
            assert got["details"]["approval"]["id"] == mine["details"]["approvalId"], got
            with pytest.raises(RemoteError):  # and another agent's reads as none at all
                await main.request("approvals.status", {"approvalId": "d7"})
        finally:
            await main.close()
            await ops.close()


# ---- class 3: `process log` reads the whole log into the gateway's memory, many times over


async def test_class3_process_log_holds_many_times_the_log_in_gateway_memory(state_dir: Path) -> None:
    """What waits for a client is counted in bytes (16 MiB per connection, 32 MiB per agent), and so is
    what a request holds (its frame plus 6 KiB). `process log` holds neither: it reads the session's
    whole log from disk (up to `logCapBytes`, 64 MiB by default, and the spool reader's 256 MiB), decodes
    it, copies it (`\\r\\n` → `\\n`), and splits it into a list of every line before it takes the last 200.
    For short lines that is tens of bytes of gateway memory per byte of log: 64 MiB of `ab` lines is
    ~1.5 GB for one request, and an agent may have thousands of requests in flight (six run at once on the
    default thread pool). Measured here on a 4 MiB log (tracemalloc, in the test's own gateway): the peak
    for one request, against the per-connection byte budget the limits promise."""
    import tracemalloc

    from runner.gateway.limits import MAX_BACKLOG_BYTES

    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    work = state_dir.parent / "w"
    work.mkdir()
    size = 4 << 20
    async with gateway(state_dir):
        client = await connect(state_dir, operator=False)
        try:
            res = await client.request(
                "exec", {"command": f"yes ab | head -c {size}", "workdir": str(work), "background": True}
            )
            sid = res["details"]["sessionId"]

            async def done() -> bool:
                got = await client.request("process", {"action": "poll", "sessionId": sid})
                return got["details"].get("status") in ("completed", "failed")

            await wait_until(done, timeout=60)
            tracemalloc.start()
            try:
                got = await client.request("process", {"action": "log", "sessionId": sid})
                _now, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
        finally:
            await client.close()
    assert got["details"]["totalLines"] == size // 3 + 1, got["details"]
    # A request may hold what its connection's budget allows, not many times the log it reads.
    assert peak <= min(MAX_BACKLOG_BYTES, 4 * size), f"one `process log` peaked at {peak / 2**20:.0f} MiB"


async def test_class3_sessions_output_reads_the_whole_log_on_the_event_loop(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pane asks for 1 KiB of a finished session's output; the gateway reads every byte of its log
    (`spool_bytes`) in the event loop's own thread, then slices the KiB. With a 64 MiB log each call is a
    64 MiB read and copy during which no other connection is served; an agent sends such calls back to back
    (each is a few bytes, far under its request budget). Asserted without timing: where the read runs, and
    how much it reads for a 1 KiB answer. `process poll` of the same session does the same (it decodes the
    whole log on the loop to keep its last 200,000 characters)."""
    import threading

    from engine.sessions import output as output_mod

    write_config(state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n')
    work = state_dir.parent / "w"
    work.mkdir()
    size = 4 << 20
    reads: list[tuple[str, bool, int]] = []

    def recorded(name: str) -> Any:
        real = getattr(output_mod, name)

        def read(*args: Any, **kwargs: Any) -> Any:
            data = real(*args, **kwargs)
            reads.append((name, threading.current_thread() is threading.main_thread(), len(data)))
            return data

        return read

    for name in ("spool_bytes", "spool_text"):  # raw bytes (sessions.output), text (process poll)
        monkeypatch.setattr(output_mod, name, recorded(name))
    async with gateway(state_dir) as server:
        client = await connect(state_dir, operator=False)
        try:
            res = await client.request(
                "exec", {"command": f"yes ab | head -c {size}", "workdir": str(work), "background": True}
            )
            sid = res["details"]["sessionId"]

            async def done() -> bool:
                got = await client.request("process", {"action": "poll", "sessionId": sid})
                return got["details"].get("status") in ("completed", "failed")

            await wait_until(done, timeout=60)
            # Settled: its output now lives on disk only (a second after it ends).
            await wait_until(lambda: server.services.sessions.get(sid).output.settled, timeout=30)
            reads.clear()
            got = await client.request("sessions.output", {"sessionId": sid, "offset": 0, "limit": 1024})
            await client.request("process", {"action": "poll", "sessionId": sid})
        finally:
            await client.close()
    assert len(got["data"]) <= 1024, got
    on_loop = sum(n for _name, loop_thread, n in reads if loop_thread)
    assert on_loop <= 1 << 20, f"{on_loop} bytes read on the event loop for 1 KiB and a poll ({reads})"


# ---- class 3: asyncio's default thread pool, shared by every principal's sandbox verbs and every spawn


async def test_class3_one_agents_sandbox_list_burst_stalls_another_agents_exec(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`engine.fairpool` exists because on the default pool one agent's burst put every other agent's exec
    behind it. The decision moved there; the sandbox verbs an agent may call (`sandbox.list`, `explain`,
    `recreate`) and the spawn path's own blocking steps (the host view, the content check, a grant's use)
    still share `asyncio.to_thread`'s pool. A Docker engine that takes its time (busy, or listing many
    containers: an agent can make thousands) is stood in for by a `list_runtimes` that waits; agent main
    sends one call per pool thread; agent ops's `echo` on the host should still run."""
    import threading

    from engine import principals
    from engine.sandbox import admin

    slow = threading.Event()
    entered: list[int] = []

    def list_runtimes(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        entered.append(1)
        slow.wait(60)  # the engine answering late
        return []

    monkeypatch.setattr(admin, "list_runtimes", list_runtimes)
    write_config(
        state_dir, '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n' + listed("ops")
    )
    token = principals.mint(state_dir, "ops")
    work = state_dir.parent / "w"
    work.mkdir()
    threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default pool
    async with gateway(state_dir):
        main = await connect(state_dir, operator=False)
        ops = await connect(state_dir, operator=False, credential=token)
        burst = [asyncio.ensure_future(main.request("sandbox.list", {})) for _ in range(threads + 4)]
        try:
            await wait_until(lambda: len(entered) >= threads, timeout=30)
            res = await asyncio.wait_for(
                ops.request("exec", {"command": "echo ops-ran", "workdir": str(work)}), timeout=15
            )
            assert "ops-ran" in res["text"], res
        finally:
            slow.set()
            await asyncio.gather(*burst, return_exceptions=True)
            await main.close()
            await ops.close()
