"""The forwarder host runs start is the gateway's own build, held sealed in memory and run by fd."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from engine.sandbox.egress import forwarder, heldcopy


def run_held(fd: int) -> str:
    done = subprocess.run([heldcopy.exec_path(fd)], pass_fds=(fd,), capture_output=True, check=False)
    return done.stderr.decode()


def test_the_held_build_is_sealed_read_only_and_runs_from_its_fd() -> None:
    fd = heldcopy.held_fd()
    assert heldcopy.held_fd() == fd  # built once per process and source
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SEAL
    assert os.readlink(f"/proc/self/fd/{fd}").startswith(f"/memfd:{forwarder.NAME}")
    writer = os.open(heldcopy.exec_path(fd), os.O_WRONLY)
    try:
        with pytest.raises(PermissionError):
            os.write(writer, b"#!/bin/sh\n")  # sealed: nobody writes it, not even us
    finally:
        os.close(writer)
    assert "usage:" in run_held(fd)


def test_a_changed_source_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = heldcopy.held_fd()
    changed = tmp_path / "forward.c"
    changed.write_text(forwarder.SOURCE.read_text().replace('"usage: ', '"Usage, changed: '))
    monkeypatch.setattr(forwarder, "SOURCE", changed)
    second = heldcopy.held_fd()
    assert second != first
    assert "Usage, changed:" in run_held(second)


def test_the_installs_build_of_this_source_is_held_without_a_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup.sh's build, vouched for by its source's digest in the install dir, is copied into the sealed
    memfd: no compile (none can run here), and a build for another source is never taken."""
    source = forwarder.SOURCE.read_text().replace('"usage: ', '"Usage, installed: ')
    changed = tmp_path / "forward.c"
    changed.write_text(source)
    installed = tmp_path / "exechost-egress-forward"
    subprocess.run(["cc", "-Os", "-static", "-s", "-o", str(installed), str(changed)], check=True)
    monkeypatch.setattr(forwarder, "SOURCE", changed)
    monkeypatch.setattr(heldcopy, "INSTALLED", installed)
    monkeypatch.setattr(heldcopy, "_held", {})
    monkeypatch.setattr(heldcopy.sysbin, "which", lambda name: None)  # no compiler
    stamp = Path(f"{installed}.sha256")
    stamp.write_text("0" * 64 + "\n")  # built from another source: not this one's
    with pytest.raises(forwarder.ForwarderUnavailable, match="C compiler"):
        heldcopy.held_fd()
    stamp.write_text(hashlib.sha256(changed.read_bytes()).hexdigest() + "\n")
    fd = heldcopy.held_fd()
    assert heldcopy.held_fd() == fd
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
    assert "Usage, installed:" in run_held(fd)
