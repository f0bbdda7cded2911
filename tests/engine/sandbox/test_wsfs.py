"""Each sandbox workspace on a capped filesystem of its own (engine.sandbox.wsfs): the cap holds in bytes and
inodes, the files outlive a gateway and a reboot (a detached mount), removal takes the image, and a gateway
that is not root, or a plain workspace with files, keeps plain dirs."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import principals
from engine.sandbox import pool, wsfs
from engine.sandbox.workspace import WorkspaceError
from tests.helpers.gateway import connect, gateway, write_config

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts loop devices and a small tmpfs")

SANDBOXED = """
[tools.exec]
host = "auto"
security = "full"
ask = "off"

[agents.defaults.sandbox]
mode = "all"
backend = "bwrap"
"""


@contextlib.contextmanager
def small_root(path: Path, size: str = "16m", inodes: int = 0) -> Iterator[str]:
    """A workspace root on a filesystem of its own, `size` big (a state dir on a small /var)."""
    path.mkdir()
    options = f"size={size},mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield str(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)  # (the workspaces' mounts with it)


def detach(path: str) -> None:
    """A reboot, as far as a workspace is concerned: its mount gone, its image kept."""
    subprocess.run(["umount", str(path)], check=True)
    assert not os.path.ismount(path)


def loops_of(image: str) -> list[str]:
    out = subprocess.run(["losetup", "-j", image], check=True, capture_output=True, text=True).stdout
    return out.splitlines()


@needs_root
def test_a_workspace_holds_at_most_its_cap_in_bytes_and_the_root_keeps_the_rest(tmp_path: Path) -> None:
    with small_root(tmp_path / "r") as root:
        ws = os.path.join(root, "agent-main-0123")
        assert wsfs.ensure(root, ws)
        assert os.path.ismount(ws) and os.stat(ws).st_mode & 0o777 == 0o700
        assert os.listdir(ws) == []  # (no lost+found)
        with pytest.raises(OSError) as full, open(os.path.join(ws, "f"), "wb") as f:
            for _ in range(64):
                f.write(b"\0" * (1 << 20))
                f.flush()
                os.fsync(f.fileno())
        assert full.value.errno == errno.ENOSPC
        assert os.statvfs(root).f_bavail * os.statvfs(root).f_frsize > 12 << 20  # 16m: only its 2m taken
        image = wsfs.image_path(root, ws)
        assert os.stat(image).st_mode & 0o777 == 0o600
        assert os.stat(os.path.dirname(image)).st_mode & 0o777 == 0o700


@needs_root
def test_a_workspace_holds_at_most_its_own_inodes_and_the_root_keeps_its(tmp_path: Path) -> None:
    with small_root(tmp_path / "r", "256m", inodes=3000) as root:
        ws = os.path.join(root, "agent-main-0123")
        assert wsfs.ensure(root, ws)
        made = 0
        with pytest.raises(OSError) as full:
            for made in range(200_000):  # (how many, below)
                os.close(os.open(os.path.join(ws, str(made)), os.O_CREAT | os.O_WRONLY, 0o600))
        assert full.value.errno == errno.ENOSPC
        assert made > 3000  # more than the root's own inodes: none of them the root's
        assert os.statvfs(root).f_favail > 2900
        os.mkdir(os.path.join(root, "still-room"))


@needs_root
def test_a_workspace_is_mounted_again_after_a_reboot_with_its_files(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "agent-main-0123")
    assert wsfs.ensure(root, ws)
    Path(ws, "kept").write_text("the agent's")
    image = wsfs.image_path(root, ws)
    made = os.stat(image).st_ino
    # sparse: only what was written takes the host's disk (mkfs and the kernel zero nothing out)
    assert os.stat(image).st_blocks * 512 < min(8 << 20, wsfs.cap(root) // 2), os.stat(image)
    detach(ws)
    assert os.listdir(ws) == []
    assert wsfs.ensure(root, ws)
    assert Path(ws, "kept").read_text() == "the agent's"
    assert os.stat(image).st_ino == made  # the same image: never made anew
    detach(ws)


@needs_root
def test_a_device_a_sandbox_still_holds_is_mounted_again_never_a_second_one(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "agent-main-0123")
    holder = tmp_path / "holder"  # a sandbox's bind of it, in a namespace of its own
    holder.mkdir()
    assert wsfs.ensure(root, ws)
    subprocess.run(["mount", "--bind", ws, str(holder)], check=True)
    try:
        detach(ws)
        Path(holder, "written-meanwhile").write_text("x")
        assert wsfs.ensure(root, ws)
        assert len(loops_of(wsfs.image_path(root, ws))) == 1  # (two devices over one ext4 would corrupt it)
        assert os.listdir(ws) == ["written-meanwhile"]
    finally:
        subprocess.run(["umount", str(holder)], check=False)
    detach(ws)


@needs_root
def test_a_plain_workspace_with_files_stays_plain_and_keeps_them(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "agent-main-0123")
    os.makedirs(ws, mode=0o700)
    Path(ws, "from-before").write_text("mine")
    assert not wsfs.ensure(root, ws)
    assert not os.path.ismount(ws) and Path(ws, "from-before").read_text() == "mine"
    assert not os.path.exists(wsfs.image_path(root, ws))


@needs_root
def test_files_written_under_an_unmounted_image_are_refused_never_hidden(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "agent-main-0123")
    assert wsfs.ensure(root, ws)
    detach(ws)
    Path(ws, "stray").write_text("x")
    with pytest.raises(WorkspaceError, match="move the files aside"):
        wsfs.ensure(root, ws)
    assert os.listdir(ws) == ["stray"]


def test_a_gateway_that_is_not_root_keeps_plain_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsfs, "enabled", lambda: False)  # (what a non-root euid answers)
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "agent-main-0123")
    assert not wsfs.ensure(root, ws)
    assert os.path.isdir(ws) and not os.path.ismount(ws)
    assert not os.path.exists(os.path.join(root, wsfs.IMAGES))


def test_not_root_is_not_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsfs.os, "geteuid", lambda: 1000)
    assert not wsfs.enabled()


@needs_root
def test_removing_a_spare_takes_its_mount_and_image(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    ws = os.path.join(root, "pool.0123456789ab")
    assert wsfs.ensure(root, ws)
    image = wsfs.image_path(root, ws)
    pool._remove_workspace(ws)
    assert not os.path.lexists(ws) and not os.path.exists(image)
    assert loops_of(image) == []


@needs_root
def test_a_claimed_spares_filesystem_moves_with_its_files_and_options(tmp_path: Path) -> None:
    root = str(tmp_path / "sandboxes")
    spare, scope = os.path.join(root, "pool.0123456789ab"), os.path.join(root, "agent-main-0123")
    assert wsfs.ensure(root, spare)
    Path(spare, "f").write_text("x")
    os.mkdir(scope, 0o700)
    wsfs.move(root, spare, scope)
    assert not os.path.lexists(spare) and not os.path.exists(wsfs.image_path(root, spare))
    assert os.path.ismount(scope) and Path(scope, "f").read_text() == "x"
    st = os.statvfs(scope)
    assert st.f_flag & os.ST_NOSUID and st.f_flag & os.ST_NODEV
    detach(scope)
    assert wsfs.ensure(root, scope) and Path(scope, "f").read_text() == "x"  # (its image renamed with it)
    detach(scope)


@needs_root
async def test_a_workspace_keeps_its_files_across_gateway_restarts_and_a_reboot(state_dir: Path) -> None:
    write_config(state_dir, SANDBOXED)
    principals.mint(state_dir, "main")
    commands = ["echo kept > /workspace/f; df /workspace", "cat /workspace/f", "cat /workspace/f"]
    seen = []
    for n, command in enumerate(commands):
        async with gateway(state_dir):
            main = await connect(state_dir, operator=False, agent="main")
            try:
                seen.append(await main.request("exec", {"command": command}))
            finally:
                await main.close()
        if n == 1:  # a reboot: the workspace's mount gone, its image kept
            for point in wsfs_mounts(state_dir):
                detach(point)
    assert seen[0]["details"]["ranOn"].split()[0] == "sandbox"
    assert "/dev/loop" in seen[0]["text"], seen[0]["text"]  # its own filesystem
    assert [r["text"].strip() for r in seen[1:]] == ["kept", "kept"]


def wsfs_mounts(state: Path) -> list[str]:
    top = f"{state}/sandboxes/"
    with open("/proc/self/mountinfo") as f:
        return [w[4] for w in (line.split() for line in f) if w[4].startswith(top)]


SERVE = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("ready", flush=True)
while True:
    s.accept()[0].close()
"""


@needs_root
@pytest.mark.parametrize("namespace", ["ours", "its own"])
def test_workspaces_stay_plain_where_the_docker_engine_would_not_see_the_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, namespace: str
) -> None:
    sock = tmp_path / "docker.sock"
    unshare = ["unshare", "--mount", "--propagation", "private"] if namespace == "its own" else []
    engine = subprocess.Popen([*unshare, sys.executable, "-c", SERVE, str(sock)], stdout=subprocess.PIPE)
    try:
        assert engine.stdout is not None and engine.stdout.readline() == b"ready\n"
        monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
        root = str(tmp_path / "sandboxes")
        ws = os.path.join(root, "agent-main-0123")
        assert wsfs.ensure(root, ws) == (namespace == "ours")
        assert os.path.exists(wsfs.image_path(root, ws)) == (namespace == "ours")
        if namespace == "ours":
            detach(ws)
    finally:
        engine.kill()
        engine.wait()


def test_an_engine_elsewhere_never_sees_our_mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert not wsfs.docker_sees_our_mounts()
