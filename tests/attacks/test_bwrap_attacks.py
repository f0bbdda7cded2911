"""Issue 28: the attacks the Docker sandbox passes, against the bubblewrap backend with a real bwrap.

Each runs what an agent would run inside its sandbox and checks, from the host, that nothing got out: a host
secret read, a write outside the workspace, a host port reached, /proc/1/root, a workspace symlink leading
out, ptrace of the gateway, a fork bomb, a full /tmp, a setuid binary.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import stat
from pathlib import Path

import pytest

from engine import statefs
from engine.sandbox import SandboxExec, SandboxManager, prepare_exec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run
from tests.helpers.sandbox import sys_probe

pytestmark = [pytest.mark.bwrap, needs_bwrap]
__all__ = ["bwrap_mgr"]


async def _sandbox(mgr: SandboxManager, **kw: str) -> SandboxExec:
    return await prepare_exec(bwrap_config(**kw), "main", "s", None, manager=mgr)


async def test_host_secrets_are_not_there(bwrap_mgr: SandboxManager, state_dir: Path) -> None:
    token = secrets.token_hex(16)
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(token)
    statefs.atomic_write(state_dir / "exec-approvals.json", f'{{"socket": {{"token": "{token}"}}}}', 0o600)
    agent_ws = Path(statefs.state_dir()) / "workspace"
    agent_ws.mkdir()
    (agent_ws / "notes").write_text(token)  # workspaceAccess none: the agent's own workspace stays out
    sx = await _sandbox(bwrap_mgr)
    _, out, _ = await run(
        sx,
        f"cat {home}/.ssh/id_ed25519 {state_dir}/exec-approvals.json /agent/notes 2>/dev/null; "
        "grep -rs . /root /home /etc/shadow /etc/gshadow /etc/ssh 2>/dev/null; "
        "cat /proc/[0-9]*/environ 2>/dev/null; echo; ls /proc | grep -c '^[0-9]'",
    )
    assert token not in out
    assert int(out.split()[-1]) < 30 < len([p for p in os.listdir("/proc") if p.isdigit()])  # its own only


async def test_writes_outside_the_workspace_fail(bwrap_mgr: SandboxManager, state_dir: Path) -> None:
    sx = await _sandbox(bwrap_mgr, extra_sandbox='workspaceAccess = "ro"')
    target = f"/tmp/eh-escape-{secrets.token_hex(4)}"
    _, out, _ = await run(
        sx,
        f"for p in /x /usr/x /etc/passwd /etc/x /bin/x /agent/x /.exechost-bin/x /proc/sys/kernel/hostname "
        f"{state_dir}/x; do (echo pwn > $p) 2>/dev/null && echo wrote:$p; done; "
        f"echo private > {target}; echo ok > /workspace/ok && echo in-workspace",
    )
    assert "wrote:" not in out and "in-workspace" in out
    assert not os.path.exists(target) and not (state_dir / "x").exists()  # its /tmp is its own
    assert "pwn" not in Path("/etc/passwd").read_text()
    assert Path(sx.workspace_dir, "ok").read_text() == "ok\n"


async def test_global_sysctls_cannot_be_written(bwrap_mgr: SandboxManager) -> None:
    """Found while writing these: under a root gateway the sandbox's uid is host root (no capabilities),
    and sysctl files check only the uid. A writable /proc/sys would let a command set kernel.core_pattern
    to `|/workspace/x` and run it as root on the host at the next crash. Probed harmlessly: the same value
    written back."""
    sx = await _sandbox(bwrap_mgr)
    _, out, _ = await run(
        sx,
        "for f in kernel/printk_ratelimit kernel/core_pattern vm/overcommit_ratio; do "
        'v=$(cat /proc/sys/$f); (echo "$v" > /proc/sys/$f) 2>/dev/null && echo wrote:$f; done; echo end',
    )
    assert out == "end\n"


async def test_sys_is_read_only_or_absent(bwrap_mgr: SandboxManager) -> None:
    """Fresh round 17 a found the host view's /sys writable to a root gateway's run (/sys/power/state
    suspends the machine): a sandbox's view mounts no /sys of the host's but read-only, if any."""
    sx = await _sandbox(bwrap_mgr)
    _, out, _ = await run(sx, sys_probe())
    assert out.splitlines() == ["END"], out


async def test_host_ports_and_abstract_sockets_are_unreachable(bwrap_mgr: SandboxManager) -> None:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    abstract = socket.socket(socket.AF_UNIX)
    name = f"eh-{secrets.token_hex(4)}"
    abstract.bind("\0" + name)
    abstract.listen()
    try:
        sx = await _sandbox(bwrap_mgr)
        probe = (
            "import socket, sys\n"
            "for target in [('tcp', ('127.0.0.1', int(sys.argv[1]))), ('unix', '\\0' + sys.argv[2])]:\n"
            "    s = socket.socket(socket.AF_INET if target[0] == 'tcp' else socket.AF_UNIX)\n"
            "    s.settimeout(2)\n"
            "    try:\n"
            "        s.connect(target[1]); print('connected', target[0])\n"
            "    except OSError as exc: print('refused', target[0], exc.errno)\n"
        )
        Path(sx.workspace_dir, "probe.py").write_text(probe)
        _, out, err = await run(sx, f"python3 probe.py {tcp.getsockname()[1]} {name}")
        assert "connected" not in out and out.count("refused") == 2, (out, err)
        for s in (tcp, abstract):
            s.settimeout(0.1)
            with pytest.raises(TimeoutError):
                s.accept()
    finally:
        tcp.close()
        abstract.close()


async def test_proc_1_root_is_the_sandbox_itself(bwrap_mgr: SandboxManager) -> None:
    sx = await _sandbox(bwrap_mgr)
    _, out, _ = await run(
        sx,
        "ls /proc/1/root/; cat /proc/1/root/etc/shadow 2>/dev/null && echo SHADOW; "
        "ls /proc/1/root/home 2>/dev/null && echo HOME; cat /proc/1/cmdline | tr '\\0' ' '; echo; "
        "ls -d /proc/1/root/../../../root 2>/dev/null && echo ROOT",
    )
    assert "SHADOW" not in out and "HOME" not in out and "ROOT" not in out
    assert "workspace" in out  # /proc/1/root is the sandbox's root (its pid 1 is bwrap's init)
    assert "bwrap" in out


async def test_a_workspace_symlink_leading_out_reaches_nothing(bwrap_mgr: SandboxManager) -> None:
    from runner.cli import main

    sx = await _sandbox(bwrap_mgr)
    await run(
        sx, "ln -s /etc/shadow /workspace/shadow; ln -s / /workspace/root; ln -s /root /workspace/media"
    )
    _, out, _ = await run(sx, "cat /workspace/shadow 2>&1; ls /workspace/root/; ls /workspace/root/root 2>&1")
    assert "No such file" in out and "root:" not in out
    # The host-side verbs never follow it: staging into media/ (a link to /root) is refused.
    src = Path(sx.workspace_dir).parent / "in.txt"
    src.write_text("staged")
    assert main(["sandbox", "stage", str(src)]) != 0
    assert not Path("/root/inbound").exists()


async def test_ptrace_of_the_gateway_fails(bwrap_mgr: SandboxManager) -> None:
    sx = await _sandbox(bwrap_mgr)
    probe = (
        "import ctypes, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.ptrace(16, int(sys.argv[1]), 0, 0)\n"  # PTRACE_ATTACH
        "print('attach', r, ctypes.get_errno())\n"
        "r = libc.ptrace(16, 1, 0, 0)\n"
        "print('attach1', r, ctypes.get_errno())\n"
    )
    Path(sx.workspace_dir, "probe.py").write_text(probe)
    _, out, _ = await run(sx, f"python3 probe.py {os.getpid()}; ls /proc/{os.getpid()} 2>/dev/null | head -1")
    assert "attach -1 1" in out and "attach1 -1 1" in out  # EPERM by seccomp, whatever the pid
    assert "cmdline" not in out  # and the gateway is not in the sandbox's /proc at all


async def test_a_fork_bomb_stops_at_the_pids_limit(bwrap_mgr: SandboxManager) -> None:
    sx = await _sandbox(bwrap_mgr, docker="pidsLimit = 32")
    bomb = (
        "import os, signal\n"
        "kids = []\n"
        "for i in range(500):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        print('refused', len(kids), exc.errno); break\n"
        "    if pid == 0:\n"
        "        signal.pause(); os._exit(0)\n"
        "    kids.append(pid)\n"
        "for pid in kids: os.kill(pid, signal.SIGKILL)\n"
        "for pid in kids: os.waitpid(pid, 0)\n"
    )
    Path(sx.workspace_dir, "bomb.py").write_text(bomb)
    _, out, err = await run(sx, "python3 bomb.py")
    words = out.split()
    assert words[:1] == ["refused"] and int(words[1]) < 32 and words[2] == "11", (out, err)  # EAGAIN
    assert (await run(sx, "echo alive"))[1] == "alive\n"  # and the sandbox serves once they are gone


async def test_filling_tmp_stops_at_its_size(bwrap_mgr: SandboxManager) -> None:
    sx = await _sandbox(bwrap_mgr, docker='tmpfs = ["/tmp:size=8m"]')
    host_free = shutil.disk_usage("/tmp").free
    _, out, _ = await run(
        sx, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1 | tail -1; du -k /tmp/fill | cut -f1"
    )
    assert int(out.split()[-1]) <= 8 * 1024
    assert abs(shutil.disk_usage("/tmp").free - host_free) < 32 * 1024 * 1024  # the host's /tmp untouched


async def test_a_setuid_binary_gains_nothing(bwrap_mgr: SandboxManager) -> None:
    sx = await _sandbox(bwrap_mgr)
    copy = Path(sx.workspace_dir, "suid-cat")
    shutil.copy("/bin/cat", copy)
    os.chmod(copy, 0o4755 | stat.S_IXGRP)
    found = [p for p in ("/usr/bin/su", "/usr/bin/mount", "/usr/bin/passwd") if Path(p).exists()]
    _, out, _ = await run(
        sx,
        "/workspace/suid-cat /proc/self/status | grep -E '^(Uid|CapEff|NoNewPrivs)'; "
        + "; ".join(f"ls -l {p} | cut -c1-10" for p in found)
        + "; mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED; true",
    )
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "MOUNTED" not in out
