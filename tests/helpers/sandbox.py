"""What the Docker sandbox tests share: the locally built busybox test image and cleanup by label."""

from __future__ import annotations

import os

import pytest

from engine.sandbox import docker_ops, wsfs

IMAGE = "exechost-sbxtest:latest"


def remove_labelled(run_id: str) -> None:
    """Remove every container this test run created (each test module labels its own run)."""
    for c in docker_ops.list_sandboxes(f"exechost.test={run_id}", every_install=True):
        docker_ops.remove(c["Id"])


def build_test_image() -> str:
    """Build the test image (no registry is reachable: FROM scratch + busybox); skip when Docker is absent."""
    try:
        docker_ops.client()
    except docker_ops.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    docker_ops.build_image([IMAGE], lambda _line: None)
    return IMAGE


def unmount_workspace(path: str | os.PathLike[str]) -> None:
    """A sandbox workspace as it was before it had a filesystem of its own (engine.sandbox.wsfs, root
    only): its mount detached and its image removed, so a test can rename, remove or replace the dir."""
    path = os.fspath(path)
    wsfs.remove(os.path.dirname(path), path)


def sys_probe(*, own_tmpfs: bool = False) -> str:
    """A shell command printing each mount at or under /sys in its view that is not read-only (the last
    one at each place: what is seen there; with `own_tmpfs`, but a tmpfs: Docker's v1 /sys/fs/cgroup is one
    of the container's own, nothing of the kernel's), then `wrote:` for each of two kernel knobs it could
    open for writing (root-owned 0644 files: the uid alone would be enough; opened for append, nothing
    written), then END."""
    keep = ' && t[p] != "tmpfs"' if own_tmpfs else ""
    return (
        'awk \'$5 == "/sys" || index($5, "/sys/") == 1 { for (i = 7; $i != "-"; i++); '
        'split($6, o, ","); ro[$5] = o[1]; t[$5] = $(i + 1) } '
        f'END {{ for (p in ro) if (ro[p] != "ro"{keep}) print "writable-mount", p, t[p] }}\' '
        "/proc/self/mountinfo; "
        "for f in /sys/power/state /sys/kernel/mm/transparent_hugepage/enabled; do "
        "[ -e $f ] && (: >> $f) 2>/dev/null && echo wrote:$f; done; echo END"
    )
