"""Sandboxes on the real Docker engine: hardening, exec, kill, PTY, scopes, hot window, recreate, escapes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config.loader import load_config_text
from engine.results import ToolError
from engine.sandbox import SandboxExec, SandboxManager, docker_ops, prepare_exec
from engine.sandbox.registry import Registry, now_ms
from engine.sandbox.settings import resolve_settings, state_id
from engine.sessions import RunSpec, SessionManager
from tests.helpers.sandbox import IMAGE, build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"sbx-{os.getpid()}-{secrets.token_hex(3)}"
TEST_LABEL = f"exechost.test={RUN_ID}"


def _cleanup() -> None:
    remove_labelled(RUN_ID)


@pytest.fixture(scope="session")
def sandbox_image() -> Iterator[str]:
    yield build_test_image()
    _cleanup()


@pytest.fixture
def mgr(sandbox_image: str) -> Iterator[SandboxManager]:
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    _cleanup()


@pytest.fixture
def agent() -> str:
    return "t" + secrets.token_hex(4)  # container names are global to the engine: never collide


def config(extra_sandbox: str = "", docker: str = "", image: str = IMAGE) -> Any:
    return load_config_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n{extra_sandbox}\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{image}"\n{docker}\n'
    )


async def run(sx: SandboxExec, command: str, **kw: Any) -> tuple[tuple[int | None, str | None], str, str]:
    handle = await sx.launcher.spawn(RunSpec(command=command, cwd=sx.cwd, env=kw.pop("env", {}), **kw))
    out, err = b"", b""
    while (chunk := await handle.read()) is not None:
        if chunk[0] == "stderr":
            err += chunk[1]
        else:
            out += chunk[1]
    status = await handle.wait()
    handle.close()
    return status, out.decode(), err.decode()


def inspect(name: str) -> dict[str, Any]:
    return dict(docker_ops.client().api.inspect_container(name))


async def test_hardening_from_outside_and_inside(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    info = inspect(sx.container)
    host = info["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["NetworkMode"] == "none"
    assert host["PidsLimit"] == 512
    assert host["Init"] is True
    assert {u["Name"] for u in host["Ulimits"]} >= {"nofile", "core"}
    assert set(host["Tmpfs"]) == {"/tmp", "/var/tmp", "/run"}
    labels = info["Config"]["Labels"]
    assert labels["openclaw.sandbox"] == "1" and labels["openclaw.sessionKey"] == f"agent:{agent}"
    assert labels["openclaw.configHash"] and labels["exechost.test"] == RUN_ID

    status, out, err = await run(
        sx,
        "touch /rootfile 2>&1; ls /sys/class/net; grep -E 'CapEff|NoNewPrivs' /proc/self/status; "
        "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; "
        "echo hi > /tmp/t && cat /tmp/t; echo data > /workspace/f && pwd",
    )
    assert status == (0, None), err
    lines = out.splitlines()
    assert "Read-only file system" in lines[0]
    assert lines[1] == "lo"  # no interface but loopback
    assert lines[2].split() == ["CapEff:", "0000000000000000"]
    assert lines[3].split() == ["NoNewPrivs:", "1"]
    assert lines[4] == "512"
    assert lines[5:] == ["hi", "/workspace"]
    assert (Path(sx.workspace_dir) / "f").read_text() == "data\n"  # workspaceAccess=none: writable (#46026)


async def test_exec_streams_exit_code_env_and_stdin(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(
        config(docker='env = { LANG = "C.UTF-8", SKILL_API_KEY = "sk" }'), agent, "s", None, manager=mgr
    )
    warnings: list[str] = []
    status, out, err = await run(
        sx,
        'echo out; echo err >&2; echo "$HOME $FOO ${SKILL_API_KEY:-none} ${GITHUB_TOKEN:-none}"; '
        'echo "${PATH%%:*}"; exit 7',
        env={"FOO": "bar", "GITHUB_TOKEN": "leak", "SKILL_API_KEY": "sk2", "PATH": "/opt/agent/bin"},
        warnings=warnings,
    )
    assert status == (7, None)
    assert out == "out\n/workspace bar sk2 none\n/opt/agent/bin\n" and err == "err\n"
    assert warnings == [
        "Warning: sandbox exec dropped env keys: GITHUB_TOKEN (credential-like keys pass only when "
        "agents.defaults.sandbox.docker.env names them)."
    ]
    handle = await sx.launcher.spawn(
        RunSpec(command='read a; read b; echo "$b-$a"', cwd=sx.cwd, env={}, stdin=True)
    )
    await handle.write(b"one\ntwo\n")
    await handle.close_stdin()
    chunks = []
    while (chunk := await handle.read()) is not None:
        chunks.append(chunk[1])
    assert b"".join(chunks) == b"two-one\n" and await handle.wait() == (0, None)


async def test_workdir_mapping_in_container(mgr: SandboxManager, agent: str) -> None:
    cfg = config()
    sx = await prepare_exec(cfg, agent, "s", None, manager=mgr)
    os.makedirs(os.path.join(sx.workspace_dir, "sub"))
    sx = await prepare_exec(cfg, agent, "s", "sub", manager=mgr)
    assert (sx.cwd, sx.warnings) == ("/workspace/sub", [])
    assert (await run(sx, "pwd"))[1] == "/workspace/sub\n"
    sx = await prepare_exec(cfg, agent, "s", "../../etc", manager=mgr)
    assert sx.cwd == "/workspace"
    assert sx.warnings == ['Warning: workdir "../../etc" is unavailable; using "/workspace".']


async def test_kill_reaches_group_and_escaped_daemons(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    marker = secrets.token_hex(8)
    handle = await sx.launcher.spawn(
        RunSpec(
            command="sleep 301 & setsid sleep 302 & echo started; wait", cwd=sx.cwd, env={}, marker=marker
        )
    )
    assert await handle.read() == ("stdout", b"started\n")
    for _ in range(200):
        lines = (await run(sx, "ps -o args"))[1].splitlines()
        if "sleep 301" in lines and "sleep 302" in lines:
            break
        await asyncio.sleep(0.01)
    assert "sleep 301" in lines and "sleep 302" in lines  # both running as processes of their own
    await handle.terminate(grace=2.0)
    assert (await handle.wait())[1] == "SIGTERM"
    handle.close()
    ps = (await run(sx, "ps -o args"))[1]
    assert "sleep 301" not in ps and "sleep 302" not in ps  # the setsid'd daemon too (marker)
    one = await sx.launcher.spawn(RunSpec(command="sleep 303", cwd=sx.cwd, env={}))
    one.signal_group(signal.SIGKILL)
    assert await one.wait() == (None, "SIGKILL")
    one.close()


async def test_background_session_in_registry_poll_write_kill(
    mgr: SandboxManager, agent: str, state_dir: Path
) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
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
        assert result.details["status"] == "running"
        await sessions.process("write", {"sessionId": sid, "data": "ping\n"}, "k")
        for _ in range(100):
            polled = await sessions.process("log", {"sessionId": sid}, "k")
            if "got:ping" in polled.text:
                break
            await asyncio.sleep(0.02)
        assert "ready" in polled.text and "got:ping" in polled.text
        rows = sessions.list_sessions("k")
        assert rows and rows[0]["sessionId"] == sid
        killed = await sessions.process("kill", {"sessionId": sid}, "k")
        assert killed.text == f"Termination requested for session {sid}."
        for _ in range(150):
            ps = (await run(sx, "ps -o args"))[1]
            if "while read" not in ps and "read l" not in ps:
                break
            await asyncio.sleep(0.02)
        assert "read l" not in ps
        session = sessions.get(sid)
        assert session is not None
        async with asyncio.timeout(10):
            await session.done.wait()
        assert session.killed and session.exit_signal == "SIGTERM"
    finally:
        await sessions.close()


async def test_pty_in_sandbox_with_resize(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    handle = await sx.launcher.spawn(RunSpec(command="sh", cwd=sx.cwd, env={}, pty=True, cols=100, rows=30))
    assert handle.pty and handle.pid

    async def until(token: bytes) -> bytes:
        buf = b""
        async with asyncio.timeout(10):
            while token not in buf:
                chunk = await handle.read()
                assert chunk is not None, buf
                buf += chunk[1]
        return buf

    await handle.write(b"tty; stty size; echo $TERM\n")
    got = await until(b"xterm-256color\r\n")
    assert b"/dev/pts/" in got and b"30 100" in got
    handle.resize(80, 20)  # applied through the Engine API in the background: ask until it shows
    buf = b""
    async with asyncio.timeout(10):
        while b"20 80" not in buf:
            await handle.write(b"stty size\n")
            await asyncio.sleep(0.05)
            buf += await until(b"\n")
    await handle.write(b"exit 3\n")
    while await handle.read() is not None:
        pass
    assert await handle.wait() == (3, None)
    handle.close()


async def test_workspace_access_modes(mgr: SandboxManager, agent: str) -> None:
    ro = await prepare_exec(config('workspaceAccess = "ro"'), agent, "s", None, manager=mgr)
    _, out, _ = await run(
        ro, "echo w > /workspace/ok && cat /workspace/ok; echo x > /agent/no 2>&1 || echo ro"
    )
    assert out.splitlines()[0] == "w" and out.splitlines()[-1] == "ro"
    mounts = {m["Destination"]: m for m in inspect(ro.container)["Mounts"]}
    assert mounts["/agent"]["RW"] is False and mounts["/workspace"]["RW"] is True
    docker_ops.remove(ro.container)
    rw = await prepare_exec(config('workspaceAccess = "rw"'), agent + "w", "s", None, manager=mgr)
    await run(rw, "echo shared > /workspace/from-sandbox")
    mounts = {m["Destination"]: m for m in inspect(rw.container)["Mounts"]}
    assert "/agent" not in mounts
    assert (Path(mounts["/workspace"]["Source"]) / "from-sandbox").read_text() == "shared\n"


async def test_scopes_session_agent_shared(mgr: SandboxManager, agent: str) -> None:
    a1 = await prepare_exec(config('scope = "session"'), agent, f"{agent}:s1", None, manager=mgr)
    a2 = await prepare_exec(config('scope = "session"'), agent, f"{agent}:s2", None, manager=mgr)
    assert a1.container != a2.container and a1.scope_key == f"{agent}:s1"
    await run(a1, "echo one > /workspace/mine")
    assert (await run(a2, "cat /workspace/mine 2>&1 || echo absent"))[1].strip().endswith("absent")
    b1 = await prepare_exec(config(), agent, "x1", None, manager=mgr)
    b2 = await prepare_exec(config(), agent, "x2", None, manager=mgr)
    assert b1.container == b2.container and b1.scope_key == f"agent:{agent}"
    s1 = await prepare_exec(config('scope = "shared"'), agent, "y1", None, manager=mgr)
    s2 = await prepare_exec(config('scope = "shared"'), agent + "z", "y2", None, manager=mgr)
    assert s1.container == s2.container == f"openclaw-sbx-{state_id()}-shared"


async def test_hot_window_keeps_then_cold_recreates(mgr: SandboxManager, agent: str) -> None:
    first = await prepare_exec(config(), agent, "s", None, manager=mgr)
    old_id = inspect(first.container)["Id"]
    changed = config(docker="pidsLimit = 64")
    hot = await prepare_exec(changed, agent, "s", None, manager=mgr)
    assert inspect(hot.container)["Id"] == old_id and hot.stale_config
    assert hot.warnings == [
        f"Sandbox config changed for {hot.container} (recently used). "
        f"Recreate to apply: exechost sandbox recreate --agent {agent}"
    ]
    assert (await run(hot, "echo still"))[1] == "still\n"  # the kept container still serves

    def age(entries: list[Any]) -> list[Any]:
        for e in entries:
            e.lastUsedAtMs = now_ms() - 10 * 60 * 1000
        return entries

    Registry().mutate(age)
    cold = await prepare_exec(changed, agent, "s", None, manager=mgr)
    info = inspect(cold.container)
    assert info["Id"] != old_id and cold.created and cold.warnings == []
    assert info["HostConfig"]["PidsLimit"] == 64


async def test_cli_list_recreate_and_config_mismatch(
    mgr: SandboxManager, agent: str, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    cfg_path = state_dir / "config.toml"
    cfg_path.write_text(
        f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    from engine.config.loader import load_config

    sx = await prepare_exec(load_config(cfg_path), agent, "s", None, manager=mgr)
    assert main(["sandbox", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["containers"]
    (row,) = [r for r in rows if r["containerName"] == sx.container]
    assert row["running"] and row["configMatch"] and row["imageMatch"]
    cfg_path.write_text(cfg_path.read_text() + 'memory = "256m"\n')
    assert main(["sandbox", "list"]) == 0
    text = capsys.readouterr().out
    assert f"  {sx.container}\n    Status:  🟢 running" in text
    assert "Config:  ⚠️  mismatch (recreate to apply)" in text
    assert "runtime(s) with config mismatch detected." in text
    assert main(["sandbox", "recreate", "--agent", agent, "--force"]) == 0
    out = capsys.readouterr().out
    assert f"✓ Removed {sx.container}" in out and "Done: 1 removed, 0 failed" in out
    assert not docker_ops.inspect(sx.container).exists
    assert main(["sandbox", "recreate", "--session", "nothing-here", "--force"]) == 0
    assert "No sandbox runtimes found matching the criteria." in capsys.readouterr().out
    assert main(["sandbox", "explain", "--agent", agent, "--json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert explained["runtime"] == "sandboxed" and explained["containerName"] == sx.container


async def test_missing_image_and_refused_configs_create_nothing(mgr: SandboxManager, agent: str) -> None:
    with pytest.raises(ToolError) as err:
        await prepare_exec(config(image="exechost-no-such-image:nope"), agent, "s", None, manager=mgr)
    assert str(err.value).startswith("Sandbox image not found: exechost-no-such-image:nope. Build or pull it")
    assert "exechost sandbox setup" in str(err.value)
    with pytest.raises(
        ToolError, match=re.escape('bind mount "/var/run/docker.sock:/var/run/docker.sock" targets blocked')
    ):
        await prepare_exec(
            config(docker='binds = ["/var/run/docker.sock:/var/run/docker.sock"]'),
            agent,
            "s",
            None,
            manager=mgr,
        )
    with pytest.raises(ToolError, match='network mode "host" is blocked'):
        await prepare_exec(config(docker='network = "host"'), agent, "s", None, manager=mgr)
    with pytest.raises(ToolError, match="is blocked by default"):
        await prepare_exec(config(docker='network = "container:abc"'), agent, "s", None, manager=mgr)
    with pytest.raises(ToolError, match='seccomp profile "unconfined" is blocked'):
        await prepare_exec(config(docker='seccompProfile = "unconfined"'), agent, "s", None, manager=mgr)
    assert docker_ops.list_sandboxes(TEST_LABEL) == []


async def test_setup_command_runs_once(mgr: SandboxManager, agent: str) -> None:
    cfg = config(docker='setupCommand = "echo ran >> /workspace/setup.log"')
    sx = await prepare_exec(cfg, agent, "s", None, manager=mgr)
    await prepare_exec(cfg, agent, "s", None, manager=mgr)
    docker_ops.client().api.stop(sx.container, timeout=1)
    again = await prepare_exec(cfg, agent, "s", None, manager=mgr)  # restarted, not recreated
    assert not again.created
    assert (Path(sx.workspace_dir) / "setup.log").read_text() == "ran\n"
    assert (await run(again, "echo alive"))[1] == "alive\n"


async def test_hostile_control_dir_is_refused(mgr: SandboxManager, agent: str, tmp_path: Path) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    target = tmp_path / "host-target"
    target.mkdir()
    # The container swaps its exec dir for a symlink into a host path; the host must not follow it.
    await run(sx, f"rm -rf /.exechost/x && ln -s {target} /.exechost/x")
    # Refused (RuntimeError) when the host sets the exec dir up itself; a command that found another way
    # to start (a slot readied before the swap, `docker exec`) is fine too: the host wrote nothing there.
    try:
        handle = await sx.launcher.spawn(RunSpec(command="true", cwd=sx.cwd, env={}))
    except RuntimeError:
        pass
    else:
        await handle.wait()
        handle.close()
    assert list(target.iterdir()) == []


def test_missing_docker_says_what_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/eh-no-docker-here.sock")
    docker_ops.reset_client()
    try:
        with pytest.raises(ToolError) as err:
            asyncio.run(prepare_exec(config(), "main", "s", None, manager=SandboxManager()))
        assert str(err.value).startswith("Sandbox mode requires Docker, but no Docker engine answers at")
        assert "systemctl start docker" in str(err.value)
    finally:
        monkeypatch.delenv("DOCKER_HOST")
        docker_ops.reset_client()


async def test_large_output_complete_and_path_prepend(mgr: SandboxManager, agent: str) -> None:
    cfg = load_config_text(
        f'[tools.exec]\npathPrepend = ["/opt/tools/bin"]\n[agents.defaults.sandbox]\nmode = "all"\n'
        f'[agents.defaults.sandbox.docker]\nimage = "{IMAGE}"\n'
    )
    sx = await prepare_exec(cfg, agent, "s", None, manager=mgr)
    handle = await sx.launcher.spawn(RunSpec(command="head -c 12000000 /dev/zero", cwd=sx.cwd, env={}))
    total = 0
    while (chunk := await handle.read()) is not None:
        total += len(chunk[1])
        if total < 6_000_000:
            await asyncio.sleep(0.001)  # a slow consumer: reads pause instead of buffering everything
    assert total == 12_000_000 and await handle.wait() == (0, None)
    handle.close()
    status, out, _ = await run(sx, 'echo "$PATH"')
    assert status == (0, None) and out.startswith("/opt/tools/bin:") and out.strip() != "/opt/tools/bin:"


async def test_concurrent_execs_each_get_their_own_streams(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    results = await asyncio.gather(
        *(run(sx, f"echo out{i}; echo err{i} >&2; exit {i % 4}") for i in range(24))
    )
    for i, (status, out, err) in enumerate(results):
        assert (status, out, err) == ((i % 4, None), f"out{i}\n", f"err{i}\n")


def test_cli_setup_builds_the_configured_image(
    sandbox_image: str, state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli import main

    tag = f"exechost-sbxtest-setup:{RUN_ID}"
    (state_dir / "config.toml").write_text(f'[agents.defaults.sandbox.docker]\nimage = "{tag}"\n')
    try:
        assert main(["sandbox", "setup"]) == 0
        out = capsys.readouterr().out
        assert "Step 1/" in out and out.rstrip().endswith(f"Sandbox image built: {tag}")
        docker_ops.ensure_image(tag)
        built = docker_ops.client().images.get(tag).id
        assert main(["sandbox", "setup"]) == 0  # a cached image it built is reused
        out = capsys.readouterr().out
        assert "reusing it (--rebuild builds it again)" in out and "Step 1/" not in out
        assert docker_ops.client().images.get(tag).id == built
        assert main(["sandbox", "setup", "--rebuild"]) == 0
        assert "Step 1/" in capsys.readouterr().out
    finally:
        docker_ops.client().images.remove(tag)


async def test_resource_keys_and_custom_seccomp_profile(
    mgr: SandboxManager, agent: str, tmp_path: Path
) -> None:
    profile = tmp_path / "seccomp.json"
    # Allow everything except symlink: proves the profile file's content reached the engine.
    profile.write_text(
        json.dumps(
            {
                "defaultAction": "SCMP_ACT_ALLOW",
                "syscalls": [{"names": ["symlink", "symlinkat"], "action": "SCMP_ACT_ERRNO"}],
            }
        )
    )
    cfg = config(
        docker=f'memory = "64m"\ncpus = 0.5\ntmpfs = ["/tmp:size=1m", "/run"]\nseccompProfile = "{profile}"'
    )
    sx = await prepare_exec(cfg, agent, "s", None, manager=mgr)
    host = inspect(sx.container)["HostConfig"]
    assert host["Memory"] == 64 * 1024 * 1024 and host["NanoCpus"] == 500_000_000
    assert host["Tmpfs"]["/tmp"] == "size=1m"
    _, out, _ = await run(sx, "ln -s x /tmp/l 2>&1; echo rc=$?")
    assert "rc=1" in out and "Operation not permitted" in out


async def test_lost_control_dir_recovers_by_restart(mgr: SandboxManager, agent: str) -> None:
    import shutil

    from engine.sandbox import supervisor as sv

    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    shutil.rmtree(sv.ctl_dir(sx.container))  # e.g. an operator cleaned the state dir
    again = await prepare_exec(config(), agent, "s", None, manager=mgr)
    assert not again.created and again.container == sx.container
    assert (await run(again, "echo back"))[1] == "back\n"


async def test_gateway_shutdown_kills_sandbox_sessions(
    mgr: SandboxManager, agent: str, state_dir: Path
) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    sessions = SessionManager(state_dir, kill_grace_sec=1.0)
    await sessions.run(
        RunSpec(command="sleep 304", cwd=sx.cwd, env={}, background=True, launcher=sx.launcher, scope_key="k")
    )

    async def ps_has(text: str) -> bool:
        return text in (await run(sx, "ps -o args"))[1]

    for _ in range(200):  # the job's shell execs `sleep` a moment after the session reports running
        if await ps_has("sleep 304"):
            break
        await asyncio.sleep(0.01)
    assert await ps_has("sleep 304")
    async with asyncio.timeout(20):
        await sessions.close()
    assert not await ps_has("sleep 304")
    closed = await sx.launcher.spawn(RunSpec(command="sleep 305", cwd=sx.cwd, env={}))
    closed.close()  # a closed handle still learns how its command ended
    closed.signal_group(signal.SIGKILL)
    async with asyncio.timeout(10):
        assert await closed.wait() == (None, "SIGKILL")


async def test_busy_container_is_neither_pruned_nor_recreated(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(), agent, "s", None, manager=mgr)
    job = await sx.launcher.spawn(RunSpec(command="sleep 306", cwd=sx.cwd, env={}))
    assert mgr.active[sx.container] == 1

    def age(entries: list[Any]) -> list[Any]:
        for e in entries:
            e.lastUsedAtMs = now_ms() - 48 * 3_600_000
        return entries

    Registry().mutate(age)
    assert await mgr.maybe_prune(resolve_settings(config(), agent), force=True) == []
    changed = await prepare_exec(config(docker="pidsLimit = 99"), agent, "s", None, manager=mgr)
    assert changed.stale_config and changed.container == sx.container  # kept: a job runs in it
    job.signal_group(signal.SIGKILL)
    await job.wait()
    await asyncio.sleep(0)
    assert mgr.active[sx.container] == 0
    job.close()


async def test_non_root_container_user(mgr: SandboxManager, agent: str) -> None:
    sx = await prepare_exec(config(docker='user = "1000:1000"'), agent, "s", None, manager=mgr)
    status, out, err = await run(sx, "id -u; echo w > /workspace/f && cat /workspace/f")
    assert status == (0, None), err
    assert out == "1000\nw\n"
    handle = await sx.launcher.spawn(RunSpec(command="id -u", cwd=sx.cwd, env={}, pty=True))
    data = b""
    while (chunk := await handle.read()) is not None:
        data += chunk[1]
    assert data.strip() == b"1000" and await handle.wait() == (0, None)
    handle.close()


def test_a_container_that_names_no_agent_is_the_operators(mgr: SandboxManager, sandbox_image: str) -> None:
    """Found by the fresh attack round (whose is it?): a container with no registry entry and no
    `exechost.agentId` label (left by an older version, or its registry entry lost) was listed as agent
    main's, so main could see, recreate or remove it. An ownerless scope is the operator's alone."""
    name = "openclaw-sbx-legacy-" + secrets.token_hex(3)
    docker_ops.client().containers.create(
        sandbox_image,
        command=["sleep", "60"],
        name=name,
        labels={
            docker_ops.LABEL: "1",
            docker_ops.STATE_LABEL: state_id(),
            "openclaw.sessionKey": "legacy-plain-key",
            "exechost.test": RUN_ID,
        },
        network_mode="none",
    )
    rows = {r["containerName"]: r for r in mgr.list_runtimes(config())}
    assert rows[name]["agentId"] is None, rows[name]
    owned = docker_ops.client().containers.get(name)
    owned.remove(force=True)
