"""The real Debian image (mmdebstrap + docker import, no registry): real agent tools in a hardened sandbox.

Built once per machine (about 35 s) and reused: the tag carries the build's label, so later runs skip it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

from engine.config.loader import load_config_text
from engine.sandbox import SandboxManager, admin, docker_ops, prepare_exec
from engine.sandbox.images import DEBIAN_FLAVOUR, IMAGE_LABEL
from tests.engine.sandbox.test_sandbox_docker import inspect, run
from tests.helpers.sandbox import remove_labelled

pytestmark = pytest.mark.docker

TAG = "exechost-debian-test:bookworm"
RUN_ID = f"deb-{os.getpid()}-{secrets.token_hex(3)}"
CONFIG = f'[agents.defaults.sandbox]\nmode = "all"\n[agents.defaults.sandbox.docker]\nimage = "{TAG}"\n'


@pytest.fixture(scope="module")
def debian_image() -> Iterator[str]:
    try:
        client = docker_ops.client()
    except docker_ops.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    try:
        labels = (client.images.get(TAG).attrs.get("Config") or {}).get("Labels") or {}
    except docker_ops.not_found_type():
        labels = {}
    if labels.get(IMAGE_LABEL) != DEBIAN_FLAVOUR:
        lines: list[str] = []
        assert admin.setup_image(load_config_text(CONFIG), lines.append) == [TAG]
        assert any("mmdebstrap" in line for line in lines)
    yield TAG
    remove_labelled(RUN_ID)


async def test_git_and_python_in_a_hardened_debian_sandbox(debian_image: str) -> None:
    mgr = SandboxManager(extra_labels={"exechost.test": RUN_ID})
    sx = await prepare_exec(load_config_text(CONFIG), "deb" + secrets.token_hex(3), "s", None, manager=mgr)
    host = inspect(sx.container)["HostConfig"]
    assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    status, out, err = await run(
        sx,
        "git init -q proj && cd proj && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m one"
        " && git log --format=%s && python3 -c 'import sys; print(sys.version_info[0])'"
        " && rg --version | head -1"
        " && bash -c 'echo $BASH_VERSION' | cut -d. -f1",
    )
    assert status[0] == 0, err
    lines = out.split()
    assert lines[0] == "one" and lines[1] == "3" and "ripgrep" in out and lines[-1] == "5"


def test_setup_never_overwrites_an_image_it_did_not_build(debian_image: str) -> None:
    foreign = "exechost-foreign-test:latest"
    docker_ops.client().images.get(debian_image).tag("exechost-foreign-test", "latest")
    try:
        # Retagged, the image keeps our label: re-label by committing a container with another label.
        container = docker_ops.client().containers.create(debian_image, command=["true"])
        try:
            container.commit("exechost-foreign-test", "latest", changes=['LABEL exechost.image="other"'])
        finally:
            container.remove(force=True)
        cfg = load_config_text(CONFIG.replace(TAG, foreign))
        with pytest.raises(docker_ops.SandboxUnavailable, match="was not built by `exechost sandbox setup`"):
            admin.setup_image(cfg, lambda _line: None)
    finally:
        docker_ops.client().images.remove(foreign, force=True)


def test_setup_shows_mmdebstrap_progress_as_it_comes(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: `sandbox setup` was silent for a minute (mmdebstrap ran with --quiet, stderr read at the
    end). A stand-in mmdebstrap prints its progress, waits for us to have shown it, then writes a rootfs
    tar that the real docker import takes."""
    import tarfile
    from pathlib import Path

    from engine.sandbox.images import build_debian_image

    try:
        client = docker_ops.client()
    except docker_ops.SandboxUnavailable as exc:
        pytest.skip(str(exc))
    root = Path(tmp_path)
    rootfs = root / "rootfs.tar"
    (root / "hello").write_text("hi\n")
    with tarfile.open(rootfs, "w") as tar:
        tar.add(root / "hello", arcname="hello")
    shown = root / "shown"
    fake = root / "bin" / "mmdebstrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'I: automatically chosen mode: unshare' >&2\n"
        "echo 'I: downloading packages with apt...' >&2\n"
        # the build goes on only once the first lines were shown: they came while it ran
        f"n=0; while [ ! -e {shown} ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done\n"
        f"cat {rootfs}\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if "downloading packages" in line:
            shown.touch()

    tag = f"exechost-progress-test:{RUN_ID}"
    try:
        build_debian_image(tag, progress)
        assert lines.index("I: downloading packages with apt...") < lines.index(f"imported as {tag}")
    finally:
        client.images.remove(tag, force=True)
