"""Fresh round 10, attacker b: issue 27 §2 (every limit per principal, in bytes) and whose-is-it keys,
attacked from the docs and the code only."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import principals
from engine.config.loader import load_config
from engine.protocol.client import ControlClient
from engine.protocol.frames import RemoteError
from tests.helpers.browser import browser_image, browser_state  # noqa: F401  (fixtures)
from tests.helpers.gateway import connect, gateway, list_agents, listed, wait_until, write_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs as the state dir")

# main may run anything on the gateway host (in its host view); ops may run nothing without a human.
TWO_AGENTS = """
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"

[[agents.list]]
id = "main"
[agents.list.tools.exec]
security = "full"
ask = "off"

[[agents.list]]
id = "ops"
"""

# ... or main's commands run in a bubblewrap sandbox, its workspace under <state>/sandboxes (the default)
SANDBOXED_MAIN = TWO_AGENTS.replace(
    'ask = "off"\n', 'ask = "off"\nhost = "auto"\n[agents.list.sandbox]\nmode = "all"\nbackend = "bwrap"\n', 1
)


@contextlib.contextmanager
def small_state(state: Path, size: str, inodes: int = 0) -> Iterator[None]:
    """The state dir on a filesystem of its own, `size` big (a state dir on a small /home or /var)."""
    assert not any(state.iterdir())
    options = f"size={size},mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(state)], check=True)
    try:
        yield
    finally:
        from engine.commands import hostkeeper  # its keepers hold the mount busy

        hostkeeper.stop()
        subprocess.run(["umount", "-l", str(state)], check=False)


async def agents(state: Path, *names: str) -> list[ControlClient]:
    config = load_config(state / "config.toml")
    list_agents(state, *(name for name in names if not config.admits(name)))  # the operator lists them
    for name in names:
        principals.mint(state, name)
    return [await connect(state, operator=False, agent=name) for name in names]


async def events_of(client: ControlClient) -> list[dict[str, Any]]:
    return list((await client.request("events", {}))["events"])


@needs_root
@pytest.mark.parametrize(
    ("where", "config", "unit"),
    [
        ("/tmp", TWO_AGENTS, "bytes"),  # a host run's own /tmp: <state>/hostprivate/main/%2Ftmp
        ("/tmp", TWO_AGENTS, "inodes"),  # (a byte quota alone would not do)
        # a sandbox's workspace: <state>/sandboxes/...
        ("/workspace", SANDBOXED_MAIN, "bytes"),  # (its own capped filesystem: engine.sandbox.wsfs)
        ("log", TWO_AGENTS, "bytes"),  # its session's output log: 2 GiB per agent, whatever the disk has
    ],
)
async def test_class3_one_agents_own_dir_fills_the_state_dirs_disk_for_everyone(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, where: str, config: str, unit: str
) -> None:
    monkeypatch.delenv("EXECHOST_HOST_PRIVATE")  # the real default: /tmp, /var/tmp, /dev/shm, ...
    with small_state(state_dir, "16m" if unit == "bytes" else "256m", 0 if unit == "bytes" else 3000):
        write_config(state_dir, config)
        async with gateway(state_dir):
            main, ops = await agents(state_dir, "main", "ops")
            operator = await connect(state_dir)
            try:
                # main's own dir, as its runs see it: on the state dir's filesystem
                bytes_ = f"head -c 64000000 /dev/zero > {where}/f; df {where}"
                inodes = (
                    f"mkdir {where}/d && cd {where}/d && seq 1 5000 | xargs touch 2>/dev/null; df -i {where}"
                )
                if where == "log":  # (written by the gateway, in its budget: none of it in main's dirs)
                    bytes_ = "head -c 64000000 /dev/zero | tr '\\\\0' x; df /tmp >&2"
                fill = await main.request("exec", {"command": bytes_ if unit == "bytes" else inodes})
                if where == "log":
                    assert shutil.disk_usage(state_dir).free < 1 << 20, shutil.disk_usage(state_dir)
                else:
                    assert "100%" in fill["text"], fill["text"]
                assert fill["details"]["ranOn"].split()[0] == (
                    "sandbox" if where == "/workspace" else "gateway"
                )
                asked = await ops.request("exec", {"command": "echo ran-for-ops"})
                assert asked["details"]["status"] == "approval-pending"
                await operator.request(
                    "approve", {"id": asked["details"]["approvalId"], "decision": "allow-once"}
                )
                told = await wait_until(lambda: events_of(ops))
                history = await operator.request("approvals.history", {})
            finally:
                for client in (main, ops, operator):
                    await client.close()
    assert "Exec denied" not in told[0]["text"], told  # was: "Exec denied (gateway id=…, spawn-failed)"
    assert "error" not in history, history  # was: "decision history not written: the disk is full"


@needs_root
async def test_class3_one_agents_session_workspaces_together_fill_the_state_dirs_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SANDBOXED_MAIN.replace('backend = "bwrap"\n', 'backend = "bwrap"\nscope = "session"\n', 1)
    # (two live at a time: the idle one ends first, its workspace stays, as every scope's does)
    config = config.replace('ask = "on-miss"\n', 'ask = "on-miss"\nmaxSandboxesPerAgent = 2\n', 1)
    with small_state(state_dir, "16m"):
        write_config(state_dir, config)
        async with gateway(state_dir):
            main, ops = await agents(state_dir, "main", "ops")
            operator = await connect(state_dir)
            try:
                for n in range(24):  # each its own workspace, each filled to its cap (~1 MiB of the disk)
                    command = "head -c 64000000 /dev/zero > /workspace/f; df /workspace"
                    try:
                        await main.request("exec", {"command": command, "sessionKey": f"s{n}"})
                    except RemoteError:  # (main's own next sandbox has no room: its problem alone)
                        break
                asked = await ops.request("exec", {"command": "echo ran-for-ops"})
                await operator.request(
                    "approve", {"id": asked["details"]["approvalId"], "decision": "allow-once"}
                )
                told = await wait_until(lambda: events_of(ops))
                history = await operator.request("approvals.history", {})
            finally:
                for client in (main, ops, operator):
                    await client.close()
    assert "Exec denied" not in told[0]["text"], told
    assert "error" not in history, history


ONLY_MAIN_FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'
# 80 sleeping children, or as many as the cap allows, held: a shell's loop would exit at its first failed
# fork (dash: "Cannot fork"), and its session's leftovers be ended, so the group would be full only for a
# moment; this one keeps its share full until killed
HOLD_80 = """/usr/bin/python3 -c '
import os, time
for _ in range(80):
    try:
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
    except OSError:
        pass
time.sleep(300)'"""


needs_pids = pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/pids", os.W_OK), reason="needs a writable v1 pids hierarchy"
)


@needs_pids
async def test_class3_the_operators_exec_shares_agent_mains_process_share(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sandbox import bwraplimits

    # a host of 160 pids, so an agent's share is 40 (really pid_max/4: 8,192 here, the same shape)
    monkeypatch.setattr(bwraplimits, "_pid_max", lambda: 160)
    write_config(state_dir, ONLY_MAIN_FULL)
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        operator = await connect(state_dir)
        sid = None
        try:
            bomb = await main.request("exec", {"command": HOLD_80, "background": True})
            sid = bomb["details"]["sessionId"]
            group = bwraplimits.host_pids_group("main")
            assert group is not None
            await wait_until(lambda: int((group / "pids.current").read_text()) >= 40)
            ran = await operator.request("exec", {"command": "echo operator-ran"})
        finally:
            if sid is not None:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
            await operator.close()
    # was: "exechost: host view: fork: Resource temporarily unavailable"
    assert "operator-ran" in ran["text"], ran["text"]


NODE_RUNS = '[tools.exec]\nhost = "node"\nnode = "alpha"\nsecurity = "full"\nask = "off"\n\n'


async def run_on_node(state: Path, command: str) -> str:
    async with gateway(state):
        (main,) = await agents(state, "main")
        try:
            result = await main.request("exec", {"command": command})
        finally:
            await main.close()
    return str(result["text"])


def test_class2_two_gateways_agents_named_main_share_one_tmp_on_a_node(
    state_dir: Path, sshd_nodes: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    alpha = sshd_nodes[0]
    # the node runs what its gateways send, with the default's private /tmp (the suite's stand-in, which
    # the node's logins get from tests/helpers/sshd.py, would share the machine's)
    (alpha.state_dir / "config.toml").write_text(ONLY_MAIN_FULL + 'hostPrivate = ["/tmp"]\n')
    # the node's exechost-hostenter: this venv's (its scripts may name the prefix it was made at)
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    nodes = alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    write_config(state_dir, NODE_RUNS + nodes)
    other = state_dir.parent / "g2"
    other.mkdir(mode=0o700)
    write_config(other, NODE_RUNS + nodes)
    planted = asyncio.run(run_on_node(state_dir, "echo from-gateway-A > /tmp/left; cat /tmp/left"))
    assert "from-gateway-A" in planted and "ran on: node alpha" in planted
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(other))  # another gateway (its own gateway key), same node
    seen = asyncio.run(run_on_node(other, "cat /tmp/left"))
    assert "ran on: node alpha" in seen
    assert "from-gateway-A" not in seen, seen


BUDGET = "maxOutputBytesPerAgent = 4194304\n"  # 4 MiB of session output on disk per agent


async def test_class3_an_agents_node_sessions_keep_output_past_its_budget(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(ONLY_MAIN_FULL + BUDGET)
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    nodes = alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    write_config(state_dir, NODE_RUNS + BUDGET + nodes)
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        try:
            big = "head -c 12000000 /dev/zero | tr '\\\\0' x"
            started = await main.request("exec", {"command": big, "background": True})
            sid = started["details"]["sessionId"]

            async def done() -> bool:
                polled = await main.request("process", {"action": "poll", "sessionId": sid})
                return polled["details"].get("status") != "running"

            await wait_until(done, timeout=60)
            # the session's log on the node, while the gateway (and its link) is still up
            logs = {p.name: p.stat().st_size for p in alpha.state_dir.rglob("*.log")}
        finally:
            await main.close()
    assert sum(logs.values()) <= 4194304 + (1 << 20), logs


DOCKER_AND_HOST = """
[tools.exec]
host = "auto"
security = "full"
ask = "off"

[agents.defaults.sandbox]
mode = "non-main"
backend = "docker"
[agents.defaults.sandbox.docker]
image = "exechost-sbxtest:latest"
pidsLimit = 1000
pool = 0
"""
SLEEPERS = "i=0; while [ $i -lt 90 ]; do sleep 300 & i=$((i+1)); done; wait"


def _current(group: Path) -> int:
    return int((group / "pids.current").read_text())


@needs_pids
async def test_class3_one_agent_holds_a_quarter_of_pids_twice(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sandbox import bwraplimits, docker_ops, dockercg

    monkeypatch.setattr(bwraplimits, "_pid_max", lambda: 400)  # an agent's quarter: 100
    monkeypatch.setattr(dockercg, "_pid_max", lambda: 400)
    write_config(state_dir, DOCKER_AND_HOST)
    sids: list[str] = []
    try:
        async with gateway(state_dir):
            (main,) = await agents(state_dir, "main")
            try:
                # a session of its own runs in a Docker sandbox; its main session on the gateway host
                for key in ("side", ""):
                    r = await main.request(
                        "exec", {"command": SLEEPERS, "background": True, "sessionKey": key}
                    )
                    sids.append(r["details"]["sessionId"])
                # where each place's processes are counted: the group Docker puts main's containers in (was
                # /exechost-docker-<install>/<owner>), and its host runs' (/exechost-<install>/<owner>/host)
                (box,) = docker_ops.list_sandboxes()  # its `side` session's
                parent = docker_ops.client().api.inspect_container(box["Id"])["HostConfig"]["CgroupParent"]
                docker_group = Path(f"/sys/fs/cgroup/pids{parent}")
                host_group = bwraplimits.host_pids_group("main")
                assert host_group is not None
                said = {sid: "" for sid in sids}

                async def settled() -> bool:
                    """Each session holds its 90 sleepers, or its shell could fork no more (what it said)."""
                    done = True
                    for sid, key, group in zip(sids, ("side", ""), (docker_group, host_group), strict=True):
                        got = await main.request(
                            "process", {"action": "poll", "sessionId": sid, "sessionKey": key}
                        )
                        said[sid] += got["text"]
                        gave_up = "fork" in said[sid].lower() or got["details"].get("status") != "running"
                        done = done and (_current(group) >= 90 or gave_up)
                    return done

                await wait_until(settled, timeout=60)
                held = _current(docker_group) + _current(host_group)
            finally:
                for sid, key in zip(sids, ("side", ""), strict=False):
                    await main.request("process", {"action": "kill", "sessionId": sid, "sessionKey": key})
                await main.close()
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    # was 180: a quarter in Docker's hierarchy (exechost-docker-<install>/<owner>) and another in bwrap's
    # (exechost-<install>/<owner>/host), each install group capped at half: two agents take all of pid_max
    assert held <= 400 // 4, held


def _host_rss_kib(state: Path) -> int:
    """The resident memory of the state dir's session host(s) (`python -I -S host_main.py <state>/…`)."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            if not any(a.startswith(str(state).encode() + b"/") for a in argv[1:]) or b"-S" not in argv:
                continue
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        total += int(status.split("VmRSS:")[1].split()[0])
    return total


async def test_class3_input_to_sessions_that_never_read_is_held_by_the_shared_session_host(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_TEST_HOLD_SESSIONS", "1")  # as the daemon runs them
    write_config(state_dir, ONLY_MAIN_FULL)
    chunk = "x" * (1000 * 1000)
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        sids: list[str] = []
        try:
            for _ in range(4):
                started = await main.request("exec", {"command": "sleep 600", "background": True})
                sids.append(started["details"]["sessionId"])
            before = _host_rss_kib(state_dir)
            for sid in sids:  # 16 MB each, to a `sleep` that never reads its stdin (a pipe: 64 KiB)
                for _ in range(16):
                    await main.request("process", {"action": "write", "sessionId": sid, "data": chunk})
            after = _host_rss_kib(state_dir)
        finally:
            for sid in sids:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
    # one agent's unread input, held in the process every agent's sessions (and the operator's) live in
    assert after - before < 32 * 1024, (before, after)


SANDBOXED = """
[tools.exec]
host = "auto"
security = "full"
ask = "off"
maxSessionsPerAgent = 2

[agents.defaults.sandbox]
mode = "all"
backend = "docker"
scope = "session"
[agents.defaults.sandbox.docker]
image = "exechost-sbxtest:latest"
pool = 0
"""


async def test_class3_an_agents_sandboxes_are_not_counted(state_dir: Path) -> None:
    from engine.sandbox import docker_ops

    write_config(state_dir, SANDBOXED)
    try:
        async with gateway(state_dir):
            (main,) = await agents(state_dir, "main")
            try:
                for n in range(6):  # six session keys, six sandboxes, no session left running
                    r = await main.request("exec", {"command": "true", "sessionKey": f"k{n}"})
                    assert r["details"]["ranOn"].startswith("sandbox ")
                running = [c for c in docker_ops.list_sandboxes() if c["State"] == "running"]
            finally:
                await main.close()
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    # a cap of the agent's own (here its session cap, or one of its own): past it a clear error, or the
    # least recently used of its own sandboxes stopped, never another agent's
    assert len(running) <= 2, [c["Names"] for c in running]


POOLED = """
[tools.exec]
host = "auto"
security = "full"
ask = "off"

[agents.defaults.sandbox]
mode = "all"
backend = "docker"
scope = "session"
[agents.defaults.sandbox.docker]
image = "exechost-sbxtest:latest"
pidsLimit = 1000
pool = 1
"""


def _pool_ready(docker_ops: Any) -> bool:
    """One unclaimed pool container per listed agent (main and ops: a spare is made in the groups of the
    agent that will claim it, engine/sandbox/pool.pool_key), each running."""
    pooled = [c for c in docker_ops.list_sandboxes() if "-pool." in c["Names"][0]]
    return len(pooled) == 2 and all(c["State"] == "running" for c in pooled)


async def test_class3_claimed_pool_sandboxes_of_two_agents_share_one_process_cap(state_dir: Path) -> None:
    from engine.sandbox import docker_ops

    write_config(state_dir, POOLED + listed("ops"))
    try:
        async with gateway(state_dir):
            main, ops = await agents(state_dir, "main", "ops")
            try:
                await main.request("exec", {"command": "true", "sessionKey": "a"})  # fills the pool
                await wait_until(lambda: _pool_ready(docker_ops), timeout=60)
                await main.request("exec", {"command": "true", "sessionKey": "b"})  # claims it
                await wait_until(lambda: _pool_ready(docker_ops), timeout=60)  # refilled
                await ops.request("exec", {"command": "true", "sessionKey": "c"})  # claims that one
                groups: dict[str, set[str]] = {"main": set(), "ops": set()}
                for c in docker_ops.list_sandboxes():
                    inspect = docker_ops.client().api.inspect_container(c["Id"])
                    for (
                        agent
                    ) in groups:  # (a claimed container keeps its pool labels; its name is the scope's)
                        if f"-agent-{agent[:2]}-" in c["Names"][0]:
                            groups[agent].add(inspect["HostConfig"]["CgroupParent"])
            finally:
                await main.close()
                await ops.close()
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    assert groups["main"] and groups["ops"], groups
    # each agent's processes counted in its own owner's group (was: both in /exechost-docker-<install>/pool)
    assert not groups["main"] & groups["ops"], groups


TWO_ON_A_NODE = NODE_RUNS


async def test_class3_one_agents_node_sessions_take_every_watch_a_node_has(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    from tests.helpers.peers import collect

    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(ONLY_MAIN_FULL)
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    nodes = alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    write_config(state_dir, TWO_ON_A_NODE + nodes)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        operator = await connect(state_dir)
        started: list[tuple[ControlClient, str]] = []
        try:
            await operator.subscribe(["sessions"])  # every session's output, as a console following all
            seen = collect(operator)
            for _ in range(64):  # main's own session cap (maxSessionsPerAgent), nothing more
                r = await main.request("exec", {"command": "sleep 600", "background": True})
                started.append((main, r["details"]["sessionId"]))
            r = await ops.request(
                "exec", {"command": "while :; do echo ops-line; sleep 0.2; done", "background": True}
            )
            sid = r["details"]["sessionId"]
            started.append((ops, sid))

            def ops_output() -> bool:
                return any(e.event == "session.output" and e.data.get("sessionId") == sid for e in seen)

            await wait_until(ops_output, timeout=15)  # (at once with 63 sessions of main)
        finally:
            for client, s in started:
                await client.request("process", {"action": "kill", "sessionId": s})
            for c in (main, ops, operator):
                await c.close()


BOTH_FULL = TWO_AGENTS.replace(
    '[[agents.list]]\nid = "ops"\n',
    '[[agents.list]]\nid = "ops"\n[agents.list.tools.exec]\nsecurity = "full"\nask = "off"\n',
)


async def test_another_agents_private_tmp_is_no_workdir_and_not_in_view(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (held): main names ops's private /tmp copy as its workdir, by its state-dir path and
    through /proc/self/root; it gets the home fallback or a refusal, and never ops's file."""
    monkeypatch.delenv("EXECHOST_HOST_PRIVATE")
    write_config(state_dir, BOTH_FULL)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        try:
            await ops.request("exec", {"command": "echo ops-secret > /tmp/ops-file"})
            other = state_dir / "hostprivate" / "ops" / "%2Ftmp"
            assert (other / "ops-file").read_text() == "ops-secret\n"
            said = []
            for wd in (str(other), str(other.parent), f"/proc/self/root{other}", "/tmp"):
                try:
                    r = await main.request("exec", {"command": "cat ops-file /tmp/ops-file", "workdir": wd})
                    said.append(r["text"])
                except RemoteError as exc:
                    said.append(str(exc))
        finally:
            await main.close()
            await ops.close()
    assert not any("ops-secret" in text for text in said), said


async def test_class2_a_reused_session_id_rewrites_another_agents_approved_run(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sessions import registry

    # the window of dropped ids kept out of reuse: 1,024 in production (as many quick runs of main's), 1 here
    monkeypatch.setattr(registry, "RECENTLY_DROPPED", 1)
    write_config(state_dir, TWO_AGENTS)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        operator = await connect(state_dir)
        try:
            asked = await ops.request("exec", {"command": "echo ops-approved"})
            await operator.request(
                "approve", {"id": asked["details"]["approvalId"], "decision": "allow-once"}
            )
            await wait_until(lambda: events_of(ops))
            before = (await operator.request("approvals.history", {}))["approvals"][0]["run"]
            assert before["exitCode"] == 0, before
            sid = before["sessionId"]
            await ops.request("process", {"action": "remove", "sessionId": sid})  # ops tidies up
            await main.request(
                "exec", {"command": "true"}
            )  # ... and main's runs push its id out of the window
            await main.request("exec", {"command": "true"})
            # by volume in production (a random name of ~3,200 per session): main's next one is named as ops's
            adjective, noun = sid.split("-")[:2]
            real = registry.secrets.choice
            with monkeypatch.context() as luck:
                luck.setattr(
                    registry.secrets,
                    "choice",
                    lambda seq: next((w for w in (adjective, noun) if w in seq), None) or real(seq),
                )
                await main.request("exec", {"command": "exit 7"})
            after = (await operator.request("approvals.history", {}))["approvals"][0]["run"]
        finally:
            for c in (main, ops, operator):
                await c.close()
    assert after == before  # was: ops's approved `echo` shown as exit code 7, main's run


LOOKALIKES = """
[tools.exec]
host = "gateway"
security = "full"
ask = "off"

[[agents.list]]
id = "a.b"
[[agents.list]]
id = "a-b"
[[agents.list]]
id = "A-b"
"""


async def test_agent_ids_that_fold_alike_get_their_own_tmp_and_process_group(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (held): ids a slug or a case-folding name would merge (`a.b`, `a-b`, `A-b`) each get
    their own private /tmp (a dir named by the exact id) and their own pids group (slug + hash)."""
    from engine.sandbox import bwraplimits

    monkeypatch.delenv("EXECHOST_HOST_PRIVATE")
    write_config(state_dir, LOOKALIKES)
    async with gateway(state_dir):
        clients = await agents(state_dir, "a.b", "a-b", "A-b")
        try:
            await clients[0].request("exec", {"command": "echo from-a.b > /tmp/mark"})
            seen = [(await c.request("exec", {"command": "cat /tmp/mark"}))["text"] for c in clients[1:]]
            groups = {str(bwraplimits.host_pids_group(name)) for name in ("a.b", "a-b", "A-b")}
        finally:
            for c in clients:
                await c.close()
    assert not any("from-a.b" in text for text in seen), seen
    if os.access("/sys/fs/cgroup/pids", os.W_OK):
        assert len(groups) == 3, groups


@pytest.mark.usefixtures("browser_state")
async def test_class3_an_agents_browser_is_outside_its_owner_groups(state_dir: Path) -> None:
    from engine.sandbox import docker_ops
    from engine.sandbox.browser import list_browsers

    state = state_dir
    docker = '[agents.defaults.sandbox.docker]\nimage = "exechost-sbxtest:latest"\npool = 0\n'
    write_config(
        state, '[tools.exec]\nsecurity = "full"\nask = "off"\n' + (state / "config.toml").read_text() + docker
    )
    try:
        async with gateway(state):
            (main,) = await agents(state, "main")
            try:
                ran = await main.request("exec", {"command": "true"})
                assert ran["details"]["ranOn"].startswith("sandbox ")
                went = await main.request("browser", {"action": "navigate", "url": "about:blank"})
                assert went["details"]["status"] == "ok", went
            finally:
                await main.close()
        parents = {}
        for c in [*docker_ops.list_sandboxes(), *list_browsers()]:
            inspect = docker_ops.client().api.inspect_container(c["Id"])
            parents[c["Names"][0]] = inspect["HostConfig"].get("CgroupParent")
    finally:
        for c in docker_ops.list_sandboxes():
            docker_ops.remove(c["Id"])
    # the agent's exec sandbox and its browser counted together (was: the browser's parent is "")
    assert len(parents) == 2 and len(set(parents.values())) == 1, parents


NO_VIEW = BOTH_FULL.replace(
    '[tools.exec]\nhost = "gateway"\n', '[tools.exec]\nhost = "gateway"\nhostView = "none"\n'
)


@needs_pids
async def test_class3_without_a_view_a_run_moves_into_another_agents_pids_group(state_dir: Path) -> None:
    from engine.sandbox import bwraplimits

    write_config(state_dir, NO_VIEW)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        try:
            theirs = bwraplimits.host_pids_group("ops")
            mine = bwraplimits.host_pids_group("main")
            assert theirs is not None and mine is not None
            moved = await main.request(
                "exec", {"command": f"echo $$ > {theirs}/tasks; grep pids /proc/self/cgroup"}
            )
        finally:
            await main.close()
            await ops.close()
    assert str(mine).removeprefix("/sys/fs/cgroup/pids") in moved["text"], moved["text"]


BWRAP_64M = """
[tools.exec]
host = "auto"
security = "full"
ask = "off"

[agents.defaults.sandbox]
mode = "all"
backend = "bwrap"
[agents.defaults.sandbox.docker]
memory = "64m"
"""
# 40 MB each, touched (resident), held a minute; each says when it holds them ("held N"), and its subshell
# when it is gone ("gone N": killed, or out of memory)
HOG = (
    '(/usr/bin/python3 -c \'import sys, time; b = bytearray(40 << 20); b[::4096] = b"x" * 10240; '
    'print("held", sys.argv[1], flush=True); time.sleep(60)\' $i; echo gone $i)'
)


def _group_rss_kib(group: Path) -> int:
    """The memory the group's processes hold of their own: anonymous and shared-memory (tmpfs) pages. Not
    VmRSS: that counts the page cache of a binary once per process mapping it (a sandbox's seven busybox
    processes showed the same ~1.9 MB each, ~20 MB of a 68 MB sum while its memory group was charged 47)."""
    total = 0
    for pid in (group / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError, IndexError):
            status = Path(f"/proc/{pid}/status").read_text()
            total += sum(int(status.split(f"{key}:")[1].split()[0]) for key in ("RssAnon", "RssShmem"))
    return total


@needs_pids
async def test_class3_a_bwrap_sandboxs_memory_is_per_process(state_dir: Path) -> None:
    from engine.sandbox.settings import slugify, state_id

    write_config(state_dir, BWRAP_64M)
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        sid = None
        try:
            hogs = await main.request(
                "exec", {"command": f"for i in 1 2 3 4; do {HOG} & done; wait", "background": True}
            )
            assert hogs["details"]["ranOn"].startswith("sandbox ")
            sid = hogs["details"]["sessionId"]
            owner = Path(f"/sys/fs/cgroup/pids/exechost-{state_id()}/agent-{slugify('main')}")

            def rss() -> int:  # every process of main's sandboxes (their pids groups are the owner's)
                return sum(_group_rss_kib(procs.parent) for procs in owner.rglob("cgroup.procs"))

            said = ""

            async def settled() -> bool:
                """Every hog holds its 40 MB, or is gone (was: all four held them, ~156 MB)."""
                nonlocal said
                got = await main.request("process", {"action": "poll", "sessionId": sid})
                said += got["text"]
                return all(f"held {i}" in said or f"gone {i}" in said for i in range(1, 5))

            await wait_until(settled, timeout=30)
            held = rss()
        finally:
            if sid is not None:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
    assert held <= 64 * 1024, f"{held} KiB"


async def test_an_agent_cannot_follow_node_sessions_so_cannot_take_the_nodes_watches(
    state_dir: Path, sshd_nodes: list[Any]
) -> None:
    """Regression (held): an agent's own connection cannot make the gateway watch node sessions (only the
    operator's consoles see them), so an agent alone takes no watch (the xfail above needs a console)."""
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(ONLY_MAIN_FULL)
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    write_config(
        state_dir, NODE_RUNS + alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    )
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        try:
            await main.subscribe(["sessions"])
            started = await main.request("exec", {"command": "sleep 60", "background": True})
            sid = started["details"]["sessionId"]
            assert sid.startswith("node:alpha:")
            with pytest.raises(RemoteError, match="No session found"):
                await main.request("sessions.follow", {"sessionId": sid})
            await main.request("process", {"action": "kill", "sessionId": sid})
        finally:
            await main.close()


# main may run nothing without a human; ops the same: both ask
BOTH_ASK = """
[tools.exec]
host = "gateway"
security = "allowlist"
ask = "on-miss"
"""


async def test_class3_one_agents_expired_asks_rotate_another_agents_decision_out_of_the_history(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asks expire after 30 minutes in production (32 of main's at a time): 300 ms here
    monkeypatch.setenv("EXECHOST_APPROVAL_TIMEOUT_MS", "300")
    write_config(state_dir, BOTH_ASK)
    async with gateway(state_dir) as server:
        main, ops = await agents(state_dir, "main", "ops")
        operator = await connect(state_dir)
        try:
            asked = await ops.request("exec", {"command": "echo ops-approved"})
            ops_id = asked["details"]["approvalId"]
            await operator.request("approve", {"id": ops_id, "decision": "allow-once"})
            await wait_until(lambda: events_of(ops))
            filler = "x" * 60_000  # a command near its 64 KiB cap: each decision line keeps it
            for batch in range(4):
                for n in range(30):
                    r = await main.request("exec", {"command": f"true {batch}-{n} # {filler}"})
                    assert r["details"]["status"] == "approval-pending", r["text"][:300]
                await wait_until(lambda: not server.services.approvals.pending(), timeout=30)
        finally:
            for c in (main, ops, operator):
                await c.close()
    async with gateway(state_dir):  # the next gateway: what the operator can still read of who approved what
        operator = await connect(state_dir)
        try:
            kept: list[dict[str, Any]] = []
            cursor = None
            while True:  # every page, newest first
                page = await operator.request("approvals.history", {"cursor": cursor} if cursor else {})
                kept += page["approvals"]
                cursor = page["next"]
                if cursor is None:
                    break
        finally:
            await operator.close()
    assert any(a["id"] == ops_id for a in kept), f"{len(kept)} decisions kept, all main's"


async def _flood_denied(sock: Path, count: int) -> None:
    """A link of its own on the node's service socket that never acknowledges an event: `count` runs the
    node refuses at once (security = deny rides along), each an exec.denied event kept for that link."""
    import asyncio
    import json

    reader, writer = await asyncio.open_unix_connection(str(sock), limit=1 << 24)
    try:
        await reader.readline()  # the node's hello
        frames = []
        for n in range(count):
            params = {"command": ["true"], "agentId": "flood", "sessionKey": f"f{n}", "security": "deny"}
            frames.append(
                json.dumps({"type": "req", "id": f"flood/{n}", "method": "system.run", "params": params})
            )
        writer.write(("\n".join(frames) + "\n").encode())
        await writer.drain()
        answered = 0
        while answered < count:
            line = await asyncio.wait_for(reader.readline(), 60)
            assert line, "the node closed the flood's link"
            answered += json.loads(line).get("type") == "res"
    finally:
        writer.close()


@pytest.mark.parametrize("flood", [0, 2000])
async def test_class3_a_link_that_never_acks_pushes_another_gateways_events_out_of_the_node(
    state_dir: Path, sshd_nodes: list[Any], flood: int
) -> None:
    alpha = sshd_nodes[0]
    (alpha.state_dir / "config.toml").write_text(ONLY_MAIN_FULL)
    helper = os.path.join(sys.prefix, "libexec", "exechost-hostenter")
    write_config(
        state_dir, NODE_RUNS + alpha.config_toml() + f'env = {{ EXECHOST_HOSTENTER = "{helper}" }}\n'
    )
    service = alpha.run_service()  # `node run`: sessions outlive a link, and several gateways share it
    # outside the node's home: that is an overlay made for each run, where a name the run looked up before
    # it was made stays missing until the run ends (engine.commands.homelayer)
    go = alpha.marks / "go"
    try:
        async with gateway(state_dir):
            (main,) = await agents(state_dir, "main")
            try:
                waiting = f"while [ ! -e {go} ]; do sleep 0.05; done; echo bg-done"
                await main.request("exec", {"command": waiting, "background": True})
            finally:
                await main.close()
        # this gateway is away (restarting): its run ends now, and its notice is kept for it on the node
        go.touch()
        await wait_until(lambda: not _running_with(str(go)), timeout=30)
        if flood:  # meanwhile a link of another gateway's (any login of the node's account) never acks
            await _flood_denied(alpha.state_dir / "node.sock", flood)
        async with gateway(state_dir):
            (main,) = await agents(state_dir, "main")
            try:
                await main.request("exec", {"command": "true"})  # (its link comes up, and is owed the notice)
                try:
                    got = await wait_until(lambda: events_of(main), timeout=15)
                except AssertionError:
                    got = []
            finally:
                await main.close()
        said = (alpha.root / "node-run.log").read_text()
    finally:
        service.kill()
        service.wait()
    # was: none, and the node's log said "2000 events were dropped while no gateway took them"
    assert got and "bg-done" in got[0]["text"], said[-300:]


def _running_with(word: str) -> bool:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if word.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    return True
    return False


async def hogs_said(client: ControlClient, sid: str, hogs: int = 1) -> str | None:
    """Background hogs' reports, once each has taken all it could (a line starting with its count)."""
    got = await client.request("process", {"action": "log", "sessionId": sid})
    return got["text"] if len(re.findall(r"^\d+", got["text"], re.M)) >= hogs else None


async def hog_said(client: ControlClient, sid: str) -> str | None:
    return await hogs_said(client, sid)


# main's commands in a bubblewrap sandbox of its own (the restricted setup); ops on the host
MAIN_IN_A_SANDBOX = BOTH_FULL.replace(
    'ask = "off"\n', 'ask = "off"\nhost = "auto"\n[agents.list.sandbox]\nmode = "all"\nbackend = "bwrap"\n', 1
)

PTY_HOG = (
    "/usr/bin/python3 -c 'import os, time\n"
    "fds = []\n"
    "try:\n"
    "    while True: fds.append(os.openpty())\n"
    "except OSError as e: print(len(fds), e, flush=True)\n"
    "time.sleep(120)'"
)


@pytest.mark.parametrize("where", ["host", "sandbox"])
async def test_class3_one_agents_run_takes_every_pty_of_the_host(state_dir: Path, where: str) -> None:
    write_config(state_dir, BOTH_FULL if where == "host" else MAIN_IN_A_SANDBOX)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        sid = None
        try:
            # (two processes: a sandbox's nofile rlimit is 4096, two fds a terminal)
            hog = await main.request("exec", {"command": f"{PTY_HOG} & {PTY_HOG} & wait", "background": True})
            assert hog["details"]["ranOn"].split()[0] == ("gateway" if where == "host" else "sandbox")
            sid = hog["details"]["sessionId"]
            # both hogs have opened all they could (was: kernel.pty.max less kernel.pty.reserve, what every
            # devpts instance but the host's own shares), and each says how many
            await wait_until(lambda: hogs_said(main, sid, 2), timeout=30)
            theirs = await ops.request("exec", {"command": "echo ops-on-a-terminal", "pty": True})
        finally:
            if sid is not None:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
            await ops.close()
    assert "ops-on-a-terminal" in theirs["text"], theirs["text"]  # was: /dev/ptmx: No space left on device


INOTIFY_HOG = (
    "/usr/bin/python3 -c 'import ctypes, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fds = []\n"
    "while len(fds) < 100000:\n"
    "    fd = libc.inotify_init1(0)\n"
    "    if fd < 0: break\n"
    "    fds.append(fd)\n"
    "print(len(fds), ctypes.get_errno(), flush=True)\n"
    "time.sleep(120)'"
)


def _inotify_works() -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0)
    if fd >= 0:
        os.close(fd)
    return bool(fd >= 0)


# Not strict: the count is the machine's root's, shared with every root process here (dockerd and runc free
# instances as other tests' containers go), so one freed mid-test lets ops's run make one by chance (seen
# twice in a loaded run): a pass is no fix. Open, as the reason says.
INOTIFY_OPEN = pytest.mark.xfail(
    strict=False,
    reason="open: host runs are the gateway's uid, in its user namespace: per-uid kernel counters "
    "(fs.inotify.max_user_instances 128; watches, mqueue bytes alike) have no per-agent share: main's run "
    "took them all; ops's run and the operator's own programs got EMFILE",
)


# (a bwrap sandbox's user namespace has maxima of its own, a share of the gateway user's: usershare)
@pytest.mark.parametrize("where", [pytest.param("host", marks=INOTIFY_OPEN), "sandbox"])
async def test_class3_one_agents_run_takes_the_gateway_users_inotify_instances(
    state_dir: Path, where: str
) -> None:
    write_config(state_dir, BOTH_FULL if where == "host" else MAIN_IN_A_SANDBOX)
    async with gateway(state_dir):
        main, ops = await agents(state_dir, "main", "ops")
        sid = None
        try:
            assert _inotify_works()
            hog = await main.request("exec", {"command": INOTIFY_HOG, "background": True})
            assert hog["details"]["ranOn"].split()[0] == ("gateway" if where == "host" else "sandbox")
            sid = hog["details"]["sessionId"]
            # it has made all it could (was: every one of the gateway user's), and says how many
            await wait_until(lambda: hog_said(main, sid), timeout=30)
            theirs = await ops.request("exec", {"command": INOTIFY_HOG.replace("time.sleep(120)", "0")})
            mine = _inotify_works()  # the operator's own account's programs (an editor, a file watcher)
        finally:
            if sid is not None:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
            await ops.close()
    got = re.search(r"^(\d+) \d+$", theirs["text"], re.M)  # instances ops's run could make, errno
    assert mine and got is not None and int(got.group(1)) > 0, theirs["text"]  # was: "0 24" (EMFILE), both


SHM_PUT = (
    "/usr/bin/python3 -c 'import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmat.restype = ctypes.c_void_p\n"
    "sid = libc.shmget(0, 4093, 0o1600)\n"  # IPC_PRIVATE, IPC_CREAT | 0600: the run's own, it believes
    "addr = libc.shmat(sid, None, 0)\n"
    'ctypes.memmove(addr, b"ops-secret-in-shm", 17)\n'
    "print(sid, flush=True)'"
)
SHM_GET = (
    "/usr/bin/python3 -c 'import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.shmat.restype = ctypes.c_void_p\n"
    'for line in open("/proc/sysvipc/shm").read().splitlines()[1:]:\n'
    "    sid = int(line.split()[1])\n"
    "    addr = libc.shmat(sid, None, 0o10000)\n"  # SHM_RDONLY
    "    if addr not in (None, ctypes.c_void_p(-1).value): print(ctypes.string_at(addr, 17))'"
)


def _remove_shm(size: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[3]) == size:
            libc.shmctl(int(fields[1]), 0, None)  # IPC_RMID


async def test_class2_another_agents_sysv_shared_memory_is_in_reach(state_dir: Path) -> None:
    write_config(state_dir, BOTH_FULL)
    try:
        async with gateway(state_dir):
            main, ops = await agents(state_dir, "main", "ops")
            try:
                put = await ops.request("exec", {"command": SHM_PUT})
                assert put["details"]["exitCode"] == 0, put["text"]
                got = await main.request("exec", {"command": SHM_GET})
            finally:
                await main.close()
                await ops.close()
    finally:
        _remove_shm(4093)
    assert "ops-secret" not in got["text"], got["text"][-200:]  # was: b'ops-secret-in-shm'


AIO_HOG = (
    "/usr/bin/python3 -c 'import ctypes, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "ctxs, n = [], 32768\n"
    "while n:\n"
    "    ctx = ctypes.c_ulong(0)\n"
    "    if libc.syscall(206, n, ctypes.byref(ctx)) == 0: ctxs.append(ctx)\n"  # io_setup (x86_64)
    "    else: n //= 2\n"
    "print(len(ctxs), flush=True)\n"
    "time.sleep(120)'"
)


def _aio_works() -> bool:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ctx = ctypes.c_ulong(0)
    if libc.syscall(206, 1, ctypes.byref(ctx)) != 0:  # io_setup
        return False
    libc.syscall(207, ctx)  # io_destroy
    return True


def _aio_free() -> int:
    return int(Path("/proc/sys/fs/aio-max-nr").read_text()) - int(Path("/proc/sys/fs/aio-nr").read_text())


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="io_setup's number is x86_64's")
async def test_class3_a_sandboxed_agent_takes_every_aio_context_of_the_host(state_dir: Path) -> None:
    write_config(state_dir, MAIN_IN_A_SANDBOX)
    async with gateway(state_dir):
        (main,) = await agents(state_dir, "main")
        sid = None
        try:
            assert _aio_works()
            hog = await main.request("exec", {"command": AIO_HOG, "background": True})
            assert hog["details"]["ranOn"].startswith("sandbox ")
            sid = hog["details"]["sessionId"]
            # its contexts are set up: it says how many it made (all it could: the host's every one, was)
            await wait_until(lambda: hog_said(main, sid), timeout=30)
            mine = _aio_works()  # any other program's first AIO context
        finally:
            if sid is not None:
                await main.request("process", {"action": "kill", "sessionId": sid})
            await main.close()
    assert mine  # was: io_setup(1) refused (EAGAIN) host-wide while main's sandbox held them
