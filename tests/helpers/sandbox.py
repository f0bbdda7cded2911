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
