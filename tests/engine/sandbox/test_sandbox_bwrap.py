"""The bubblewrap backend with a real bwrap: exec, confinement item by item, scopes, PTY, kill, config."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from engine import statefs
from engine.config.loader import ConfigError, load_config_text
from engine.results import ToolError
from engine.sandbox import (
    SandboxManager,
    admin,
    bwrap,
    bwraprecords,
    bwrapview,
    filetable,
    prepare_exec,
    seccomp,
    usershare,
)
from engine.sandbox.registry import Registry, now_ms
from engine.sandbox.settings import DockerSettings, config_hash, layout, resolve_settings
from engine.sessions import RunSpec, SessionManager
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

pytestmark = [pytest.mark.bwrap, needs_bwrap]
__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

config = bwrap_config


def _ns(pid: str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


async def test_exec_streams_exit_code_env_and_stdin(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(
        config(docker='env = { LANG = "C.UTF-8", SKILL_API_KEY = "sk" }'),
        "main",
        "s",
        None,
        manager=bwrap_mgr,
    )
    assert sx.created and "-bw-" in sx.container
    status, out, err = await run(
        sx,
        'echo out; echo err >&2; echo "$HOME $FOO ${SKILL_API_KEY:-none} ${GITHUB_TOKEN:-none}"; exit 7',
        env={"FOO": "bar", "GITHUB_TOKEN": "leak", "SKILL_API_KEY": "sk2"},
    )
    assert status == (7, None)
    assert out == "out\n/workspace bar sk2 none\n" and err == "err\n"
    handle = await sx.launcher.spawn(
        RunSpec(command='read a; read b; echo "$b-$a"', cwd=sx.cwd, env={}, stdin=True)
    )
    await handle.write(b"one\ntwo\n")
    await handle.close_stdin()
    chunks = []
    while (chunk := await handle.read()) is not None:
        chunks.append(chunk[1])
    assert b"".join(chunks) == b"two-one\n" and await handle.wait() == (0, None)
    again = await prepare_exec(
        config(docker='env = { LANG = "C.UTF-8", SKILL_API_KEY = "sk" }'),
        "main",
        "s",
        None,
        manager=bwrap_mgr,
    )
    assert not again.created and again.container == sx.container  # warm: the same sandbox


async def test_the_gateway_environment_never_enters(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_TEST_SECRET", "s3cret")
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    _, out, _ = await run(sx, "cat /proc/1/environ | tr '\\0' '\\n'; env")
    assert "s3cret" not in out and "OPENCLAW_STATE_DIR" not in out and "EXECHOST_BWRAP" not in out


async def test_namespaces_caps_no_new_privs_seccomp(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    kinds = ("user", "pid", "ipc", "uts", "net", "mnt", "cgroup")
    _, out, _ = await run(
        sx,
        "for k in " + " ".join(kinds) + "; do readlink /proc/self/ns/$k; done; "
        "grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status; hostname; echo $$",
    )
    lines = out.splitlines()
    inside = dict(zip(kinds, lines[: len(kinds)], strict=True))
    for kind in kinds:
        assert inside[kind] != _ns("self", kind), kind  # a namespace of its own, each
    status = dict(line.split(":\t") for line in lines[len(kinds) : len(kinds) + 6])
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == status["CapAmb"] == "0000000000000000"
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
    assert lines[-2] == "sandbox" and int(lines[-1]) < 100  # its own UTS name and PID numbering


async def test_system_view_is_read_only_and_shows_nothing_private(
    bwrap_mgr: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    host_tmp = Path("/tmp") / f"eh-host-{secrets.token_hex(4)}"
    host_tmp.write_text("host tmp")
    try:
        sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
        home = os.environ["HOME"]
        _, out, _ = await run(
            sx,
            f"for p in /home /root {home} {state_dir} {host_tmp} /etc/shadow /etc/sudoers /etc/ssh "
            f"/var/run/docker.sock /run/docker.sock; do [ -e $p ] && echo present:$p; done; "
            "for p in /usr/x /etc/x /x /bin/x /lib/x; do touch $p 2>/dev/null && echo wrote:$p; done; "
            "echo t > /tmp/t && echo tmp-ok; echo w > /workspace/w && echo ws-ok; ls /tmp",
        )
        assert "present:" not in out and "wrote:" not in out, out
        assert "tmp-ok" in out and "ws-ok" in out
        assert (Path(sx.workspace_dir) / "w").read_text() == "w\n"
        assert host_tmp.name not in out  # a private /tmp, not the host's
        assert not any(p.name == "t" for p in Path("/tmp").iterdir() if p.is_file() and p.name == "t")
    finally:
        host_tmp.unlink()


async def test_seccomp_refuses_what_docker_refuses(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    # x86_64 numbers; errno: 1 = EPERM (refused), 38 = ENOSYS (clone3, io_setup: they fall back)
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "calls = {'ptrace': (101, 0, 0, 0, 0), 'mount': (165, 0, 0, 0, 0), 'bpf': (321, 0, 0, 0),\n"
        "  'userfaultfd': (323, 0), 'keyctl': (250, 0, 0), 'add_key': (248, 0, 0, 0, 0),\n"
        "  'unshare': (272, 0x10000000), 'setns': (308, 0, 0), 'perf_event_open': (298, 0, 0, 0, 0, 0),\n"
        "  'clone_newuser': (56, 0x10000000 | 17, 0, 0, 0, 0),\n"
        "  'clone_newnet': (56, 0x40000000 | 17, 0, 0, 0, 0),\n"
        "  'clone3': (435, 0, 0), 'io_setup': (206, 1, 0), 'io_uring_setup': (425, 0, 0),\n"
        "  'kexec_load': (246, 0, 0, 0, 0),\n"
        "  'init_module': (175, 0, 0, 0), 'pivot_root': (155, 0, 0), 'umount2': (166, 0, 0)}\n"
        "for name, (nr, *args) in calls.items():\n"
        "    r = libc.syscall(nr, *args)\n"
        "    print(name, r, ctypes.get_errno())\n"
        "pid = os.fork()\n"
        "if pid == 0: os._exit(0)\n"
        "print('fork', os.waitpid(pid, 0)[1])\n"
    )
    (Path(sx.workspace_dir) / "probe.py").write_text(probe)
    status, out, err = await run(sx, "python3 probe.py")
    assert status == (0, None), err
    got = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    for name in (
        "ptrace",
        "mount",
        "bpf",
        "userfaultfd",
        "keyctl",
        "add_key",
        "unshare",
        "setns",
        "perf_event_open",
        "clone_newuser",
        "clone_newnet",
        "io_uring_setup",
        "kexec_load",
        "init_module",
        "pivot_root",
        "umount2",
    ):
        assert got[name] == ["-1", "1"], (name, got[name])
    assert got["clone3"] == ["-1", "38"]
    assert got["io_setup"] == ["-1", "38"]  # ENOSYS: fs.aio-max-nr is the whole host's (libaio falls back)
    assert got["fork"] == ["0"]  # a plain fork (clone without namespace flags) works


async def test_the_sandboxs_terminals_are_capped(bwrap_mgr: SandboxManager) -> None:
    """bwrap's own devpts has no max=, and every instance but the host's shares one count: the sandbox's
    is exechost-hostenter's (own-pts), capped, and holds no terminal of the host's."""
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    status, out, err = await run(sx, "grep ' /dev/pts ' /proc/self/mounts; ls -A /dev/pts")
    assert status == (0, None), err
    assert "devpts" in out and ",max=256" in out and out.split()[-1] == "ptmx", out


@pytest.mark.skipif(os.geteuid() != 0, reason="a gateway that is not root keeps bwrap's own namespace")
async def test_the_sandboxs_inotify_counts_are_a_share_of_the_gateway_users(
    bwrap_mgr: SandboxManager,
) -> None:
    """Counted per user namespace and in every one above: the sandbox's own maxima leave the rest of the
    gateway user's to everyone else (engine.sandbox.usershare)."""
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    status, out, err = await run(
        sx, "cat /proc/sys/user/max_inotify_instances /proc/sys/user/max_inotify_watches"
    )
    assert status == (0, None), err
    ours = [
        int(Path(f"/proc/sys/user/{n}").read_text()) for n in ("max_inotify_instances", "max_inotify_watches")
    ]
    assert [int(n) for n in out.split()] == [n // usershare.SHARE for n in ours], out


async def test_limits_pids_nofile_core_and_tmp_size(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(
        config(docker='pidsLimit = 64\nmemory = "1g"'), "main", "s", None, manager=bwrap_mgr
    )
    _, out, _ = await run(sx, "cat /proc/self/limits; df -k /tmp | tail -1")
    limits = {line[:26].strip(): line[26:].split()[:2] for line in out.splitlines()[1:-1]}
    # (the default nofile, 4096/8192, lowered to fit 64 processes in a 16th of fs.file-max: filetable)
    nofile = filetable.nofile(DockerSettings(pids_limit=64))
    assert nofile[1] <= 8192 and nofile[1] * 64 <= max(filetable.file_max() // 16, 64 * 64)
    assert limits["Max open files"] == [str(n) for n in nofile] and limits["Max core file size"] == ["0", "0"]
    assert limits["Max processes"] == ["64", "64"]
    assert limits["Max address space"] == [str(1024**3)] * 2
    assert int(out.splitlines()[-1].split()[1]) == bwrapview.TMPFS_BYTES // 1024
    record = json.loads((bwraprecords.runtime_dir() / f"{sx.container}.json").read_text())
    if record["cgroup"]:  # where this process may make a pids cgroup, it caps the sandbox too
        assert Path(record["cgroup"], "pids.max").read_text().strip() == "64"
        # The keeper entered it itself and left once bwrap ran: bwrap (and the drain of its stderr) and all
        # inside are its members.
        members = {int(pid) for pid in Path(record["cgroup"], "cgroup.procs").read_text().split()}
        inner = bwraprecords.children(record["pid"])
        assert inner and set(inner) <= members and record["pid"] not in members
        await bwrap_mgr.settle()
        assert bwrap_mgr.remove_runtime(sx.container)
        assert not Path(record["cgroup"]).exists()  # and goes with it


async def test_no_network_and_no_host_port(bwrap_mgr: SandboxManager) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
        _, out, _ = await run(
            sx,
            "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
            "python3 -c 'import socket, sys; socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 2)' "
            f"{port} 2>&1 | tail -1",
        )
        assert out.splitlines()[0] == "lo" and "Error" in out.splitlines()[-1]
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


async def test_workspace_access_modes(bwrap_mgr: SandboxManager) -> None:
    ro = await prepare_exec(config('workspaceAccess = "ro"'), "main", "s", None, manager=bwrap_mgr)
    _, out, _ = await run(
        ro, "echo w > /workspace/ok && cat /workspace/ok; echo x > /agent/no 2>/dev/null || echo ro"
    )
    assert out.splitlines() == ["w", "ro"]
    rw = await prepare_exec(config('workspaceAccess = "rw"'), "other", "s", None, manager=bwrap_mgr)
    await run(rw, "echo shared > /workspace/from-sandbox; ls /agent 2>/dev/null || echo no-agent")
    assert Path(rw.workspace_dir, "from-sandbox").read_text() == "shared\n"
    settings = resolve_settings(config('workspaceAccess = "rw"'), "other")
    assert rw.workspace_dir == layout(settings, "other", "s").agent_workspace


async def test_scopes_session_agent_shared(bwrap_mgr: SandboxManager) -> None:
    a1 = await prepare_exec(config('scope = "session"'), "a", "a:s1", None, manager=bwrap_mgr)
    a2 = await prepare_exec(config('scope = "session"'), "a", "a:s2", None, manager=bwrap_mgr)
    assert a1.container != a2.container and a1.scope_key == "a:s1"
    await run(a1, "echo one > /workspace/mine; echo t > /tmp/shared-in-scope")
    assert (await run(a2, "cat /workspace/mine 2>&1 || echo absent"))[1].strip().endswith("absent")
    assert (await run(a1, "cat /tmp/shared-in-scope"))[1] == "t\n"  # one sandbox per scope: /tmp too
    s1 = await prepare_exec(config('scope = "shared"'), "a", "y1", None, manager=bwrap_mgr)
    s2 = await prepare_exec(config('scope = "shared"'), "b", "y2", None, manager=bwrap_mgr)
    assert s1.container == s2.container and s1.container.endswith("-shared")


async def test_kill_reaches_group_and_escaped_daemons(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    marker = secrets.token_hex(8)
    handle = await sx.launcher.spawn(
        RunSpec(
            command="sleep 301 & setsid sleep 302 & echo started; wait", cwd=sx.cwd, env={}, marker=marker
        )
    )
    assert await handle.read() == ("stdout", b"started\n")
    await handle.terminate(grace=2.0)
    assert (await handle.wait())[1] == "SIGTERM"
    handle.close()
    ps = (await run(sx, "ps -eo args"))[1]
    assert "sleep 301" not in ps and "sleep 302" not in ps


async def test_pty_is_a_terminal_with_the_same_view(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    await run(sx, "echo from-pipes > /workspace/shared-file")
    handle = await sx.launcher.spawn(RunSpec(command="sh", cwd=sx.cwd, env={}, pty=True, cols=100, rows=30))
    assert handle.pty

    async def until(token: bytes) -> bytes:
        buf = b""
        async with asyncio.timeout(10):
            while token not in buf:
                chunk = await handle.read()
                assert chunk is not None, buf
                buf += chunk[1]
        return buf

    await handle.write(
        b"[ -t 0 ] && [ -t 1 ] && echo is-a-tty; stty size; cat /workspace/shared-file; "
        b"grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status; "
        b"echo from-pty > /tmp/t; echo from-shm > /dev/shm/t; echo $TERM\n"
    )
    got = await until(b"xterm-256color\r\n")
    # (--new-session: no controlling tty, so TIOCSTI reaches nothing; the seccomp filter refuses it
    # besides.)
    assert b"is-a-tty" in got and b"30 100" in got and b"from-pipes" in got and b"NoNewPrivs:\t1" in got
    assert (
        b"Seccomp:\t2" in got and b"CapEff:\t0000000000000000" in got and b"CapBnd:\t0000000000000000" in got
    )
    # In the sandbox's own namespaces and mounts (fresh round 6 k): its /tmp and /dev/shm are the
    # sandbox's, not new ones a terminal could fill besides.
    assert (await run(sx, "cat /tmp/t /dev/shm/t"))[1] == "from-pty\nfrom-shm\n"
    # The terminal's own bwrap (its parent there, under no seccomp filter) is in the sandbox's PID
    # namespace, and out of its commands' reach: no /proc/<pid>/mem, environ, fd or root of it opens.
    probe = (
        "for p in $(ls /proc | grep -E '^[0-9]+$'); do [ $p = 1 ] && continue; "
        "case $(tr '\\0' ' ' < /proc/$p/cmdline 2>/dev/null) in /usr/bin/bwrap*) echo bwrap; "
        "for f in mem environ fd/0 root/.; do (exec 3</proc/$p/$f) 2>/dev/null && echo opened $f; done;; "
        "esac; done"
    )
    seen = (await run(sx, probe))[1]
    assert seen == "bwrap\n", seen
    await handle.write(b"exit 3\n")
    while await handle.read() is not None:
        pass
    assert await handle.wait() == (3, None)
    handle.close()


async def test_background_session_poll_write_kill(bwrap_mgr: SandboxManager, state_dir: Path) -> None:
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    sessions = SessionManager(state_dir)
    try:
        result = await sessions.run(
            RunSpec(
                command="echo ready; while read l; do echo got:$l; done",
                cwd=sx.cwd,
                env={},
                background=True,
                launcher=sx.launcher,
                host="sandbox",
                scope_key="k",
            )
        )
        sid = result.details["sessionId"]
        await sessions.process("write", {"sessionId": sid, "data": "ping\n"}, "k")
        for _ in range(200):
            polled = await sessions.process("log", {"sessionId": sid}, "k")
            if "got:ping" in polled.text:
                break
            await asyncio.sleep(0.02)
        assert "ready" in polled.text and "got:ping" in polled.text
        await sessions.process("kill", {"sessionId": sid}, "k")
        session = sessions.get(sid)
        assert session is not None
        async with asyncio.timeout(10):
            await session.done.wait()
        assert session.killed
    finally:
        await sessions.close()


async def test_hot_window_keeps_then_cold_recreates_and_dead_sandbox_restarts(
    bwrap_mgr: SandboxManager,
) -> None:
    first = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    pid = json.loads((bwraprecords.runtime_dir() / f"{first.container}.json").read_text())["pid"]
    changed = config(docker="pidsLimit = 64")
    hot = await prepare_exec(changed, "main", "s", None, manager=bwrap_mgr)
    assert hot.stale_config and "Recreate to apply: exechost sandbox recreate --agent main" in hot.warnings[0]

    def age(entries: list[Any]) -> list[Any]:
        for e in entries:
            e.lastUsedAtMs = now_ms() - 10 * 60 * 1000
        return entries

    await bwrap_mgr.settle()  # the create's registry write, made off the request path
    Registry().mutate(age)
    bwrap_mgr.forget(first.container)
    cold = await prepare_exec(changed, "main", "s", None, manager=bwrap_mgr)
    assert cold.created and cold.warnings == []
    assert "Max processes             64" in (await run(cold, "cat /proc/self/limits"))[1]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the old keeper, and with it the old sandbox, is gone
    new_pid = json.loads((bwraprecords.runtime_dir() / f"{cold.container}.json").read_text())["pid"]
    os.killpg(new_pid, signal.SIGKILL)  # the sandbox dies under us: the next command gets a new one
    for _ in range(500):
        if not bwrap.inspect(cold.container).running:
            break
        await asyncio.sleep(0.01)
    bwrap_mgr.forget(cold.container)
    again = await prepare_exec(changed, "main", "s", None, manager=bwrap_mgr)
    assert again.created and (await run(again, "echo back"))[1] == "back\n"


async def test_rootfs_tree_replaces_the_host_system(bwrap_mgr: SandboxManager, tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "marker").write_text("from rootfs\n")
    (rootfs / "opt").mkdir()
    (rootfs / "home").mkdir()  # never entered
    sx = await prepare_exec(
        config(extra=f'[agents.defaults.sandbox.bwrap]\nrootfs = "{rootfs}"\n'),
        "main",
        "s",
        None,
        manager=bwrap_mgr,
    )
    # No /bin/sh in this tree: the spec falls back to the mounted static busybox.
    _, out, _ = await run(
        sx,
        "cat /etc/marker; [ -e /usr/bin/python3 ] && echo host-usr; [ -e /home ] || echo no-home; "
        "touch /opt/x 2>/dev/null || echo ro",
    )
    assert out.splitlines() == ["from rootfs", "no-home", "ro"]
    rows = bwrap_mgr.list_runtimes(config(extra=f'[agents.defaults.sandbox.bwrap]\nrootfs = "{rootfs}"\n'))
    assert rows[0]["image"] == str(rootfs) and rows[0]["imageMatch"]


async def test_list_recreate_prune_explain_through_the_cli(
    bwrap_mgr: SandboxManager, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.config.loader import load_config
    from runner.cli import main

    cfg_path = state_dir / "config.toml"
    cfg_path.write_text(
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
        '[agents.defaults.sandbox.docker]\nenv = { LANG = "C.UTF-8", API_TOKEN = "hunter2" }\n'
    )
    sx = await prepare_exec(load_config(cfg_path), "main", "s", None, manager=bwrap_mgr)
    assert main(["sandbox", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["containers"]
    (row,) = [r for r in rows if r["containerName"] == sx.container]
    assert row["running"] and row["configMatch"] and row["backend"] == "bwrap"
    assert main(["sandbox", "explain", "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["backend"] == "bwrap" and explained["containerName"] == sx.container
    argv = explained["bwrap"]["argv"]
    assert any(a.endswith("/bwrap") for a in argv) and "--die-with-parent" in argv and "--unshare-net" in argv
    assert "hunter2" not in json.dumps(explained) and explained["bwrap"]["env"]["API_TOKEN"] == "<redacted>"
    assert not any("hunter2" in arg for arg in bwrap.live_argv(sx.container))  # never in a live argv (ps)
    assert main(["sandbox", "explain"]) == 0
    text = capsys.readouterr().out
    assert "bwrap" in text and "--seccomp" in text and "hunter2" not in text
    assert main(["sandbox", "recreate", "--all", "--force"]) == 0
    assert f"✓ Removed {sx.container}" in capsys.readouterr().out
    assert not bwrap.inspect(sx.container).exists
    sx = await prepare_exec(load_config(cfg_path), "main", "s", None, manager=bwrap_mgr)

    def age(entries: list[Any]) -> list[Any]:
        for e in entries:
            e.lastUsedAtMs = e.createdAtMs = now_ms() - 30 * 86_400_000
        return entries

    await bwrap_mgr.settle()  # the create's registry write, made off the request path
    Registry().mutate(age)
    assert main(["sandbox", "prune"]) == 0
    assert not bwrap.inspect(sx.container).running


def test_backend_key_is_validated_and_hashed() -> None:
    with pytest.raises(ConfigError, match="invalid value 'podman'"):
        load_config_text('[agents.defaults.sandbox]\nbackend = "podman"\n')
    with pytest.raises(ConfigError, match="rootfs: must be an absolute path"):
        load_config_text('[agents.defaults.sandbox.bwrap]\nrootfs = "relative"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_config_text('[agents.defaults.sandbox.bwrap]\nroot = "/x"\n')
    per_agent = load_config_text(
        '[agents.defaults.sandbox]\nmode = "all"\n[[agents.list]]\nid = "b"\n'
        '[agents.list.sandbox]\nbackend = "bwrap"\n'
    )
    docker, bw = resolve_settings(per_agent, "main"), resolve_settings(per_agent, "b")
    assert (docker.backend, bw.backend) == ("docker", "bwrap")
    d_lay, b_lay = layout(docker, "x", "s"), layout(bw, "x", "s")
    assert d_lay.name != b_lay.name and d_lay.workspace_dir == b_lay.workspace_dir
    assert config_hash(docker, d_lay) != config_hash(bw, b_lay)


async def test_missing_bwrap_is_one_clear_line(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(bwrap.os, "access", lambda *_a: False)
    with pytest.raises(ToolError) as err:
        await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    assert str(err.value) == bwrapview.INSTALL_HINT and "\n" not in str(err.value)


async def test_works_with_no_docker_engine(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.sandbox import docker_ops

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    docker_ops.reset_client()
    try:
        sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
        assert (await run(sx, "echo fine"))[1] == "fine\n"
        rows = bwrap_mgr.list_runtimes(config())
        assert [r["containerName"] for r in rows] == [sx.container]
        await bwrap_mgr.settle()
        assert await asyncio.to_thread(admin.prune, config(), "main", bwrap_mgr) == []
        done = await asyncio.to_thread(admin.recreate, config(), all=True, manager=bwrap_mgr)
        assert done == {"removed": [sx.container], "failed": []}
        assert not bwrap.inspect(sx.container).exists
    finally:
        docker_ops.reset_client()
    statefs.state_dir()  # (the state dir is still the test's)


def test_a_bound_unix_socket_is_the_only_way_out(tmp_path: Path) -> None:
    """The seam egress (issue 29) plugs into: no route in the network namespace, a host socket bound in."""
    import subprocess

    from engine.sandbox import supervisor as sv

    settings = resolve_settings(config(), "main")
    lay = layout(settings, "main", "s")
    os.makedirs(lay.workspace_dir, exist_ok=True)
    sv.ensure_bin_dir()
    path = str(tmp_path / "proxy.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    fd = seccomp.seccomp_fd()
    try:
        probe = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/egress.sock'); "
        probe += "s.sendall(b'hi')"
        how = bwrapview.plan(
            settings,
            lay,
            bwrap=bwrapview.find_bwrap(),
            env={},
            seccomp=fd,
            command=["python3", "-c", probe],
            control=False,
            sockets={path: "/run/egress.sock"},
        )
        assert ["--ro-bind", path, "/run/egress.sock"] == how.argv[
            how.argv.index(path) - 1 : how.argv.index(path) + 2
        ]
        done = subprocess.run(how.argv, pass_fds=(fd,), env=how.env, capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr
        conn, _ = server.accept()
        assert conn.recv(2) == b"hi"
        conn.close()
    finally:
        os.close(fd)
        server.close()


@pytest.mark.docker
async def test_list_shows_both_backends(bwrap_mgr: SandboxManager) -> None:
    from engine.sandbox import docker_ops
    from tests.helpers.sandbox import IMAGE, build_test_image

    build_test_image()
    both = load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
        "pool = 0\n"
        '[[agents.list]]\nid = "b"\n[agents.list.sandbox]\nbackend = "bwrap"\n'
    )
    d = await prepare_exec(both, "main", "s", None, manager=bwrap_mgr)
    try:
        b = await prepare_exec(both, "b", "s", None, manager=bwrap_mgr)
        await bwrap_mgr.settle()
        rows = {r["containerName"]: r for r in bwrap_mgr.list_runtimes(both)}
        assert rows[d.container]["backend"] == "docker" and rows[b.container]["backend"] == "bwrap"
        assert all(rows[n]["running"] and rows[n]["configMatch"] for n in (d.container, b.container))
        assert bwrap_mgr.remove_runtime(d.container) and bwrap_mgr.remove_runtime(b.container)
        assert not docker_ops.inspect(d.container).exists and not bwrap.inspect(b.container).exists
    finally:
        docker_ops.remove(d.container)


async def test_a_network_is_refused_by_exec_and_policy_check_alike(
    bwrap_mgr: SandboxManager, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(docker='network = "bridge"')
    with pytest.raises(ToolError) as err:
        await prepare_exec(cfg, "main", "s", None, manager=bwrap_mgr)
    assert "the bwrap backend has no network" in str(err.value)
    assert not bwraprecords.list_sandboxes()
    from runner.cli import main

    Path(statefs.state_dir(), "config.toml").write_text(
        '[tools.exec]\nhost = "sandbox"\nsecurity = "full"\nask = "off"\n[agents.defaults.sandbox]\n'
        'mode = "all"\nbackend = "bwrap"\n[agents.defaults.sandbox.docker]\nnetwork = "bridge"\n'
    )
    main(["policy", "check", "--json", "--", "true"])
    checked = json.loads(capsys.readouterr().out)
    assert checked["decision"] == "deny" and "the bwrap backend has no network" in checked["reason"], checked


async def test_skills_seeding_and_stage_reach_the_bwrap_workspace(
    bwrap_mgr: SandboxManager, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    skills = Path(statefs.state_dir(), "workspace", "skills")
    skills.mkdir(parents=True)
    (skills / "howto.md").write_text("seeded\n")
    sx = await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    inbound = Path(sx.workspace_dir).parent / "report.txt"
    inbound.write_text("staged\n")
    Path(statefs.state_dir(), "config.toml").write_text(
        '[agents.defaults.sandbox]\nmode = "all"\nbackend = "bwrap"\n'
    )
    assert main(["sandbox", "stage", str(inbound)]) == 0
    assert "/workspace/media/inbound/report.txt" in capsys.readouterr().out
    _, out, _ = await run(sx, "cat /workspace/skills/howto.md /workspace/media/inbound/report.txt")
    assert out == "seeded\nstaged\n"


async def test_a_bwrap_that_fails_says_why_at_once(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """bwrap's own error (its stderr, drained by the keeper into the log) is the start's error, reported
    once the keeper has ended (the wait for the supervisor watches it) rather than at the 10 s deadline."""
    missing = tmp_path / "no-such-tree"
    monkeypatch.setattr(bwrapview, "system_view", lambda rootfs: ["--ro-bind", str(missing), "/usr"])
    with pytest.raises(ToolError, match="did not start: bwrap: Can't find source path") as raised:
        await prepare_exec(config(), "main", "s", None, manager=bwrap_mgr)
    assert str(missing) in str(raised.value)


async def test_sandboxes_started_at_once_all_enter_their_pids_groups(bwrap_mgr: SandboxManager) -> None:
    """A start makes its pids group, records it, and only then lets its keeper enter: a sweep by another
    start in between (taking every empty unrecorded group for a leftover) removed it, and that keeper could
    not enter (4 of 10 concurrent starts failed). Sweeps now run under the start lock."""
    many = bwrap_config(
        'scope = "session"', docker='tmpfs = ["/tmp:size=8m", "/var/tmp:size=8m", "/run:size=8m"]'
    )
    started = await asyncio.gather(
        *(prepare_exec(many, "main", f"agent:main:at-once-{i}", None, manager=bwrap_mgr) for i in range(12))
    )
    for sx in started:
        assert (await run(sx, "echo up"))[1] == "up\n"
        record = bwraprecords.read_record(sx.container)
        assert record is not None
        if record["cgroup"]:
            assert Path(record["cgroup"], "cgroup.procs").read_text().split()
