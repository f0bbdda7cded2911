"""The landlock layer of a bubblewrap sandbox, with a real bwrap and the real helper: what it refuses beyond
the mounts, what still works under it, its TCP ports, its fallback, and the helper's build cache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.config.loader import ConfigError
from engine.sandbox import (
    SandboxManager,
    admin,
    bwrap,
    bwraprecords,
    bwrapview,
    landlock,
    prepare_exec,
    seccomp,
)
from engine.sandbox import supervisor as sv
from engine.sandbox.settings import layout, resolve_settings
from engine.sessions import RunSpec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

needs_landlock = pytest.mark.skipif(landlock.kernel_abi()[0] < 1, reason="this kernel offers no landlock")
needs_cc = pytest.mark.skipif(landlock._compiler() is None, reason="no C compiler to build the helper")
pytestmark = [pytest.mark.bwrap, needs_bwrap, needs_landlock, needs_cc]
__all__ = ["bwrap_mgr"]  # the fixture, imported for pytest

OFF = "[agents.defaults.sandbox.bwrap]\nlandlock = false"


def _one_shot(extra: Path, command: str, *, layered: bool) -> subprocess.CompletedProcess[str]:
    """A one-shot sandbox of the scope's view plus a writable bind at /extra that the ruleset does not name
    (as a bind slipped into the view would be): run `command` in it, with or without the layer."""
    settings = resolve_settings(bwrap_config(), "main")
    lay = layout(settings, "main", "s")
    os.makedirs(lay.workspace_dir, exist_ok=True)
    sv.ensure_bin_dir()
    layer = landlock.status(True, build=True) if layered else None
    assert layer is None or layer.active, layer
    fd = seccomp.seccomp_fd()
    try:
        how = bwrapview.plan(
            settings,
            lay,
            bwrap=bwrapview.find_bwrap(),
            env={},
            seccomp=fd,
            command=["/bin/sh", "-c", command],
            control=False,
            layer=layer,
        )
        at = how.argv.index("--chdir") - 2  # before the root is made read-only
        argv = [*how.argv[:at], "--bind", str(extra), "/extra", *how.argv[at:]]
        return subprocess.run(argv, pass_fds=(fd,), env=how.env, capture_output=True, text=True, timeout=30)
    finally:
        os.close(fd)


def test_a_writable_mount_outside_the_ruleset_is_refused(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    write = "echo x > /extra/f && echo wrote-extra; echo w > /workspace/w && echo wrote-workspace"
    bare = _one_shot(extra, write, layered=False)
    assert "wrote-extra" in bare.stdout  # the mount alone lets it through: the layer is what refuses
    (extra / "f").unlink()
    layered = _one_shot(
        extra, write + "; mkdir /extra/d || echo no-mkdir; ls /extra && echo can-read", layered=True
    )
    assert "wrote-extra" not in layered.stdout and "Permission denied" in layered.stderr, layered
    assert "no-mkdir" in layered.stdout and "can-read" in layered.stdout
    assert "wrote-workspace" in layered.stdout
    assert not (extra / "f").exists() and not (extra / "d").exists()


def test_execute_only_where_programs_live(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    done = _one_shot(
        extra,
        "cp /bin/true /tmp/t && /tmp/t && echo ran-tmp; "
        "cp /bin/true /workspace/t && /workspace/t && echo ran-ws",
        layered=True,
    )
    # Docker mounts tmpfs noexec: the same here. The workspace is where an agent builds and runs its code.
    assert "ran-tmp" not in done.stdout and "ran-ws" in done.stdout, done


async def test_ordinary_commands_still_work_under_it(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    assert bwrap.live_argv(sx.container).count(f"{sv.BIN_MOUNT}/{landlock.NAME}") == 1
    status, out, err = await run(
        sx,
        "set -e; echo a > /workspace/a; mkdir -p sub/deep; mv a sub/deep/b; ln -s sub/deep/b l; cat l; "
        "echo t > /tmp/t; mv /tmp/t /workspace/t2; cat t2 | tr t T; echo s > /dev/shm/s; rm /dev/shm/s; "
        "echo gone > /dev/null; echo out > /dev/stdout; ls /usr/bin/env >/dev/null; python3 -c 'print(6*7)'; "
        "rm -r sub l t2; ls",
    )
    assert status == (0, None), err
    assert out == "a\nT\nout\n42\n"
    for refused in ("/etc/x", "/x", "/.exechost-bin/x", "/proc/sys/kernel/x"):
        assert (await run(sx, f"echo x > {refused}"))[0] != (0, None), refused


async def test_a_terminal_reopens_its_own_tty_only(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    handle = await sx.launcher.spawn(RunSpec(command="sh", cwd=sx.cwd, env={}, pty=True, cols=80, rows=24))
    await handle.write(
        b"echo A1 > /dev/stdout; echo B2 > /dev/stderr; echo C3 > /etc/c || echo NO-ETC; exit 0\n"
    )
    buf = b""
    while (chunk := await handle.read()) is not None:
        buf += chunk[1]
    assert b"A1" in buf and b"B2" in buf and b"NO-ETC" in buf, buf
    assert await handle.wait() == (0, None)
    handle.close()


async def test_tcp_ports_are_the_configured_ones(bwrap_mgr: SandboxManager) -> None:
    if landlock.kernel_abi()[0] < landlock.NET_ABI:
        pytest.skip("landlock here has no TCP rules (ABI < 4)")
    probe = (
        "python3 -c 'import socket, sys\n"
        "for port in (8000, 8001):\n"
        "    s = socket.socket()\n"
        "    try:\n"
        '        s.bind(("127.0.0.1", port)); s.listen(); socket.create_connection(("127.0.0.1", port)); '
        'print(port, "ok")\n'
        "    except OSError as exc:\n"
        "        print(port, exc.errno)\n'"
    )
    sx = await prepare_exec(bwrap_config('scope = "session"'), "main", "s", None, manager=bwrap_mgr)
    # Unset: the sandbox's own loopback is open (its network namespace holds nothing else).
    assert (await run(sx, probe))[1] == "8000 ok\n8001 ok\n"
    ported = bwrap_config('scope = "session"\n[agents.defaults.sandbox.bwrap]\ntcpPorts = [8000]')
    sx = await prepare_exec(ported, "main", "t", None, manager=bwrap_mgr)
    assert (await run(sx, probe))[1] == "8000 ok\n8001 13\n"  # EACCES: listed, only those ports


async def test_explain_says_whether_it_is_active_and_off_turns_it_off(bwrap_mgr: SandboxManager) -> None:
    shown = admin.explain(bwrap_config())["bwrap"]["landlock"]
    assert shown["active"] and shown["abi"] >= 1 and shown["reason"] is None
    assert (
        shown["rules"]["/workspace"] == "wx" and shown["rules"]["/"] == "r" and shown["rules"]["/tmp"] == "w"
    )
    assert any(a.endswith(landlock.NAME) for a in admin.explain(bwrap_config())["bwrap"]["argv"])
    off = admin.explain(bwrap_config(OFF))["bwrap"]
    assert not off["landlock"]["active"] and "landlock = false" in off["landlock"]["reason"]
    assert not any(a.endswith(landlock.NAME) for a in off["argv"])
    sx = await prepare_exec(bwrap_config(OFF), "main", "s", None, manager=bwrap_mgr)
    assert (await run(sx, "echo fine"))[1] == "fine\n"
    assert not any(a.endswith(landlock.NAME) for a in bwrap.live_argv(sx.container))
    record = next(r for r in bwraprecords.list_sandboxes() if r["name"] == sx.container)
    assert record["landlock"]["active"] is False


async def test_a_kernel_without_it_falls_back_visibly(
    bwrap_mgr: SandboxManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landlock, "kernel_abi", lambda: (0, "this kernel has no landlock"))
    shown = admin.explain(bwrap_config())["bwrap"]["landlock"]
    assert shown == {"abi": 0, "active": False, "reason": "this kernel has no landlock"}
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    assert (await run(sx, "echo fine"))[1] == "fine\n"
    record = next(r for r in bwraprecords.list_sandboxes() if r["name"] == sx.container)
    assert record["landlock"] == {"abi": 0, "active": False, "reason": "this kernel has no landlock"}


def test_tcp_ports_must_be_ports() -> None:
    for bad in ('["80"]', "[70000]", "8000", "[true]"):
        with pytest.raises(ConfigError, match="tcpPorts"):
            bwrap_config(f"[agents.defaults.sandbox.bwrap]\ntcpPorts = {bad}")
    settings = resolve_settings(bwrap_config("[agents.defaults.sandbox.bwrap]\ntcpPorts = [9, 8, 9]"), "main")
    assert settings.bwrap_tcp_ports == (8, 9)


def test_no_compiler_falls_back_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(landlock, "_compiler", lambda: None)
    layer = landlock.status(True, build=True)
    assert not layer.active and layer.reason == landlock.NO_COMPILER
    assert not landlock.binary_path().exists()


def test_the_helper_is_rebuilt_when_its_source_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = landlock.ensure_binary()
    built = first.stat()
    assert landlock.ensure_binary().stat().st_ino == built.st_ino  # same source: kept
    source = tmp_path / "landlock.c"
    source.write_text(
        landlock.SOURCE.read_text().replace("int main(", "static const int changed = 1;\nint main(")
    )
    monkeypatch.setattr(landlock, "SOURCE", source)
    landlock.source_digest.cache_clear()
    try:
        again = landlock.ensure_binary()
        assert again.stat().st_ino != built.st_ino  # other source: built anew and swapped in
        assert (sv.bin_dir() / f"{landlock.NAME}.sha").read_text().strip() == landlock.source_digest()
        assert landlock.ensure_binary().stat().st_ino == again.stat().st_ino
    finally:
        landlock.source_digest.cache_clear()
