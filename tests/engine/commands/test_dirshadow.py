"""A covered directory shows its files, directories and links, never a socket, a fifo or a hidden file."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from engine.commands import dirshadow


def test_a_covered_directory_keeps_files_dirs_and_links_only(tmp_path: Path) -> None:
    d = tmp_path / "ssh"
    d.mkdir()
    (d / "config").write_text("Host *\n")
    (d / "id_node").write_text("KEY\n")
    (d / "sub").mkdir()
    (d / "latest").symlink_to("config")
    os.mkfifo(d / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "cm-master"))
    try:
        ops, covered = dirshadow.shadow_ops([str(d)], {str(d / "id_node")})
    finally:
        sock.close()
    assert covered == [str(d)]
    assert ops[:2] == ["--tmpfs", str(d)] and ops[-2:] == ["--remount-ro", str(d)]
    named = " ".join(ops)
    # a subdirectory is copied the same way (a ControlMaster socket in ~/.ssh/sockets: fresh round 9 y)
    assert f"--ro-bind {d}/config {d}/config" in named and f"--dir {d}/sub" in named
    assert f"--ro-bind {d}/sub {d}/sub" not in named
    assert f"--symlink config {d}/latest" in named
    for absent in ("id_node", "fifo", "cm-master"):
        assert f"{d}/{absent}" not in named


def test_a_directory_too_large_is_not_covered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its hidden files keep their own binds then (hostview)."""
    monkeypatch.setattr(dirshadow, "MAX_ENTRIES", 1)
    for name in ("a", "b"):
        (tmp_path / name).write_text("x")
    assert dirshadow.shadow_ops([str(tmp_path)], set()) == ([], [])
