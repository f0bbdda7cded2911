"""Fresh attacks on the bubblewrap sandbox backend (a hostile agent whose commands run inside it).

Each test is one attack that worked against the backend as first shipped; docs/SECURITY.md, "Sandbox
backends", says what holds and why.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import signal
from pathlib import Path

import pytest

from engine.results import ToolError
from engine.sandbox import SandboxExec, SandboxManager, bwraprecords, prepare_exec
from engine.sessions import RunSpec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

__all__ = ["bwrap_mgr"]  # the fixture, used by name

pytestmark = [needs_bwrap]

PYTHON = "/usr/bin/python3"  # the host's, seen read-only through the system view
needs_python = pytest.mark.skipif(not os.access(PYTHON, os.X_OK), reason="no /usr/bin/python3")


async def _sandbox(mgr: SandboxManager, docker: str = "") -> SandboxExec:
    return await prepare_exec(bwrap_config(docker=docker), "main", "agent:main:main", None, manager=mgr)


@needs_python
async def test_no_socket_family_that_a_network_namespace_does_not_confine(bwrap_mgr: SandboxManager) -> None:
    """AF_VSOCK is not confined by --unshare-net: a sandbox without network could talk to the hypervisor's
    vsock services (the host outside this VM). Docker's default profile refuses it; only families a
    network namespace confines are allowed (UNIX, INET, INET6, NETLINK)."""
    sx = await _sandbox(bwrap_mgr)
    probe = (
        "import socket\n"
        "for fam in (40, 38, 30, 21, 42, 43, 26, 31):\n"  # vsock, alg, tipc, rds, qipcrtr, smc, llc, bt
        "    try:\n"
        "        socket.socket(fam, socket.SOCK_STREAM if fam == 40 else socket.SOCK_DGRAM).close()\n"
        "        print('open', fam)\n"
        "    except OSError as exc:\n"
        "        print('refused', fam, exc.errno)\n"
        "for fam in (1, 2, 10):\n"
        "    socket.socket(fam, socket.SOCK_STREAM).close()\n"
        "    print('allowed', fam)\n"
    )
    status, out, err = await run(sx, f"{PYTHON} -c {_quote(probe)}")
    assert status == (0, None), err
    assert "open" not in out, out
    assert out.count("allowed") == 3, out


async def test_pty_command_stays_under_the_pids_limit(bwrap_mgr: SandboxManager) -> None:
    """A PTY command ran in a one-shot bwrap outside the scope's pids cgroup, and RLIMIT_NPROC does not bind
    uid 0: under a root gateway its fork bomb had no bound at all."""
    sx = await _sandbox(bwrap_mgr, "pidsLimit = 16")
    # The bomb in a shell of its own (dash gives up at its first failed fork); the count with builtins only
    # (a glob and arithmetic: no fork), so it is printed however full the sandbox is.
    command = (
        "sh -c 'for i in $(seq 1 40); do sleep 30 & done' 2>/dev/null; "
        "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo n=$n"
    )
    _, out, _ = await run(sx, command, pty=True)
    counts = [int(line.split("=", 1)[1]) for line in out.split() if line.startswith("n=")]
    assert counts and counts[0] <= 16, out


async def test_pty_command_env_is_not_in_world_readable_argv(bwrap_mgr: SandboxManager) -> None:
    """A PTY command's spec (its `export KEY=value` lines) was bwrap's argv, and argv is readable by every
    local user (/proc/<pid>/cmdline). The Docker backend keeps it in a 0600 file; so does bwrap now."""
    sx = await _sandbox(bwrap_mgr)
    value = f"tok{secrets.token_hex(12)}"
    spec = RunSpec(command="echo started; sleep 30", cwd=sx.cwd, env={"GREETING": value}, pty=True)
    handle = await sx.launcher.spawn(spec)
    try:
        seen = b""
        while b"started" not in seen:
            chunk = await handle.read()
            assert chunk is not None, seen
            seen += chunk[1]
        leaked = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    raw = Path(entry.path, "cmdline").read_bytes()
                except OSError:
                    continue
                if value.encode() in raw:
                    leaked.append(raw.replace(b"\0", b" ")[:200])
        assert leaked == []
    finally:
        handle.signal_group(signal.SIGKILL)
        await handle.wait()
        handle.close()


@needs_python
async def test_no_writable_tmpfs_without_a_size_cap(bwrap_mgr: SandboxManager) -> None:
    """/tmp, /var/tmp and /run are capped (256 MiB each) so a full tmpfs stops there; bwrap's /dev was a
    tmpfs of half the host's RAM, writable by the sandbox (/dev/shm): a RAM fill the OOM killer cannot
    undo by killing any process."""
    sx = await _sandbox(bwrap_mgr)
    probe = (
        "import os\n"
        "for line in open('/proc/self/mountinfo'):\n"
        "    left, _, right = line.partition(' - ')\n"
        "    fields, rest = left.split(), right.split()\n"
        "    if rest[0] != 'tmpfs' or 'rw' not in fields[5].split(','):\n"
        "        continue\n"
        "    st = os.statvfs(fields[4])\n"
        "    print(fields[4], st.f_blocks * st.f_frsize)\n"
    )
    status, out, err = await run(sx, f"{PYTHON} -c {_quote(probe)}")
    assert status == (0, None), err
    sizes = {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.strip()}
    assert "/tmp" in sizes, out
    assert all(size <= 256 * 1024 * 1024 for size in sizes.values()), sizes


async def test_tls_private_keys_never_enter_the_system_view(bwrap_mgr: SandboxManager) -> None:
    """/etc/ssl was allowlisted whole, private/ included; the sandbox's uid is the gateway's (root under a
    root gateway), so a host's TLS keys there (0600, or 0710 root:ssl-cert) were readable inside."""
    sx = await _sandbox(bwrap_mgr)
    command = "ls -d /etc/ssl/private 2>/dev/null && echo VISIBLE; ls /etc/ssl/certs | head -1"
    _, out, _ = await run(sx, command)
    assert "VISIBLE" not in out
    if os.path.isdir("/etc/ssl/certs") and os.listdir("/etc/ssl/certs"):
        assert out.strip(), "the CA certificates must stay visible"


def _quote(text: str) -> str:
    return shlex.quote(text)


def _pids_ancestors(pid: int) -> list[tuple[str, int]]:
    """(v1 pids cgroup path, pids.max) of `pid`'s group and each ancestor below the root, innermost first."""
    base = Path("/sys/fs/cgroup/pids")
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    rel = next(line.split(":", 2)[2] for line in lines if line.split(":", 2)[1] == "pids")
    found = []
    group = base / rel.lstrip("/")
    while group != base:
        raw = (group / "pids.max").read_text().strip()
        found.append((str(group), 10**9 if raw == "max" else int(raw)))
        group = group.parent
    return found


@pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/pids", os.W_OK), reason="no writable v1 pids cgroup: no pids cap to share"
)
async def test_one_agent_cannot_take_every_pid_of_the_host(bwrap_mgr: SandboxManager) -> None:
    """pidsLimit caps one sandbox; an agent with scope "session" names as many scopes as it likes (any
    session key in its namespace), so 64 sandboxes at the default 512 took all 32768 pids of this host:
    nothing else could fork. An agent's sandboxes share a pids budget below the host's pid_max, in a cgroup
    of their own (another agent's budget is another cgroup)."""

    config = bwrap_config(extra_sandbox='scope = "session"')
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    groups = {}
    for agent, key in (("a", "agent:a:one"), ("a", "agent:a:two"), ("b", "agent:b:one")):
        sx = await prepare_exec(config, agent, key, None, manager=bwrap_mgr)
        record = bwraprecords.read_record(sx.container)
        assert record is not None
        # bwrap (its keeper went back to the gateway's group; its other child drains bwrap's stderr)
        (inner,) = [
            p
            for p in bwraprecords.children(int(record["pid"]))
            if Path(f"/proc/{p}/comm").read_text() == "bwrap\n"
        ]
        groups[key] = _pids_ancestors(inner)
    for key, chain in groups.items():
        shared = [(path, cap) for path, cap in chain[1:] if cap <= pid_max // 2]
        assert shared, f"{key}: no cap above its own sandbox's: {chain}"
    a_one = {path for path, _ in groups["agent:a:one"][1:]}
    a_two = {path for path, _ in groups["agent:a:two"][1:]}
    b_one = {path for path, _ in groups["agent:b:one"][1:]}
    assert (a_one & a_two) - b_one, (a_one, b_one)  # agent a's budget, which b's sandboxes are not in


async def test_one_agent_cannot_pin_the_hosts_memory_in_tmpfs(bwrap_mgr: SandboxManager) -> None:
    """Each sandbox's tmpfs mounts (/tmp and the rest, /dev/shm) pin RAM that no OOM kill frees, and an agent
    names as many session scopes as it likes: ~30 sandboxes at the default sizes filled this host's RAM. An
    agent's running sandboxes together reserve at most a quarter of the RAM (the install's at most half); the
    next is refused with a clear error, another agent still gets one, a removed sandbox frees its share."""
    from engine.sandbox import bwrap

    ram = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    size = ram // 10  # two fit in an agent's quarter, a third does not
    config = bwrap_config(extra_sandbox='scope = "session"', docker=f'tmpfs = ["/tmp:size={size}"]')
    first = await prepare_exec(config, "a", "agent:a:one", None, manager=bwrap_mgr)
    await prepare_exec(config, "a", "agent:a:two", None, manager=bwrap_mgr)
    with pytest.raises(ToolError, match=r"this agent's running sandboxes already reserve .* of tmpfs"):
        await prepare_exec(config, "a", "agent:a:three", None, manager=bwrap_mgr)
    rows = bwraprecords.list_sandboxes()
    mine = [r for r in rows if r["running"] and str(r.get("owner")).startswith("agent-a-")]
    assert len(mine) == 2 and sum(r["tmpfsBytes"] for r in mine) <= ram // 4, rows
    await prepare_exec(config, "b", "agent:b:one", None, manager=bwrap_mgr)  # another agent's own share
    assert bwrap.remove(first.container)
    await prepare_exec(config, "a", "agent:a:three", None, manager=bwrap_mgr)  # the freed share is usable


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/pids", os.W_OK), reason="no writable v1 pids cgroup")
async def test_a_terminal_ends_with_its_sandbox(bwrap_mgr: SandboxManager) -> None:
    """A PTY command's one-shot bwrap was nobody's child but the gateway's: `sandbox recreate` and prune
    removed the scope's sandbox and the terminal ran on, with the old config and no pids cap."""
    from engine.sandbox import bwrap

    sx = await _sandbox(bwrap_mgr, "pidsLimit = 64")
    handle = await sx.launcher.spawn(RunSpec(command="echo started; sleep 60", cwd=sx.cwd, pty=True))
    try:
        seen = b""
        while b"started" not in seen:
            chunk = await handle.read()
            assert chunk is not None, seen
            seen += chunk[1]
        assert bwrap.remove(sx.container)
        async with asyncio.timeout(20):  # a kill ends it at once; the sleep would take 60 s
            await handle.wait()
    finally:
        handle.signal_group(signal.SIGKILL)
        handle.close()


@needs_python
async def test_no_setuid_file_lands_in_the_host_workspace(bwrap_mgr: SandboxManager) -> None:
    """The sandbox's uid is the gateway's (root under a root gateway) and the owner of a file may set its
    setuid bit without any capability: `chmod 4755` on a copy of a shell left a root setuid binary in the
    host's workspace (`nosuid` binds protect the sandbox, not the host), a root shell for any local user who
    can reach that path (a `workspaceAccess = "rw"` project dir, say). No call sets S_ISUID or S_ISGID."""
    sx = await _sandbox(bwrap_mgr)
    probe = (
        "import os, shutil\n"
        "shutil.copy('/usr/bin/id', 'a')\n"
        "for how in (lambda: os.chmod('a', 0o4755), lambda: os.chmod('a', 0o2755),\n"
        "            lambda: os.close(os.open('b', os.O_CREAT | os.O_WRONLY, 0o4755)),\n"
        "            lambda: os.mknod('c', 0o104755)):\n"
        "    try:\n"
        "        how()\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
        "fd = os.open('a', os.O_RDONLY)\n"
        "try:\n"
        "    os.fchmod(fd, 0o6755)\n"
        "except OSError as exc:\n"
        "    print('refused', exc.errno)\n"
    )
    status, out, err = await run(sx, f"{PYTHON} -c {_quote(probe)}")
    assert status == (0, None), err
    marked = []
    for entry in os.scandir(sx.workspace_dir):
        mode = entry.stat(follow_symlinks=False).st_mode
        if mode & 0o6000:
            marked.append((entry.name, oct(mode)))
    assert marked == [], out
