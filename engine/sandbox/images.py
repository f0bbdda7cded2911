"""Real sandbox images without a registry: Debian packages through `mmdebstrap`, imported into Docker.

No image registry is reachable here, Debian's archive is. `mmdebstrap` writes a minimal root file system
with the seed's default tools (bash, git, python3, curl, jq, ripgrep) as a tar stream, which Docker imports
as an image (~35 s on this machine, measured in docs/BENCHMARKS.md); the browser image the same way with
Chromium, Xvfb, x11vnc, noVNC, websockify and socat (~60 s). Where a registry is reachable,
`--from-registry` builds the seed's Dockerfiles instead. Images are labelled so `sandbox setup` rebuilds
only images it built.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from engine.sandbox import docker_ops

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The seed's default image (§7.1), plus procps so `ps`/`kill` work in sessions.
DEBIAN_PACKAGES = ("bash", "ca-certificates", "curl", "git", "jq", "python3", "ripgrep", "procps")
# The browser sandbox: Chromium with CDP, a virtual X display, VNC + noVNC, socat for the Unix sockets.
BROWSER_PACKAGES = (
    "bash",
    "ca-certificates",
    "procps",
    "chromium",
    "fonts-dejavu-core",
    "xvfb",
    "x11vnc",
    "novnc",
    "websockify",
    "socat",
)
IMAGE_LABEL = "exechost.image"
DEBIAN_FLAVOUR = "debian"
BROWSER_FLAVOUR = "browser"
DOCKERFILES = {DEBIAN_FLAVOUR: "Dockerfile.debian", BROWSER_FLAVOUR: "Dockerfile.browser"}


def build_debian_image(
    tag: str,
    progress: Callable[[str], None],
    *,
    packages: tuple[str, ...] = DEBIAN_PACKAGES,
    suite: str = DEBIAN_SUITE,
    mirror: str = DEBIAN_MIRROR,
    flavour: str = DEBIAN_FLAVOUR,
) -> str:
    """mmdebstrap | docker import → `tag`; the image id. Raises SandboxUnavailable with what to install."""
    if shutil.which("mmdebstrap") is None:
        raise docker_ops.SandboxUnavailable(
            "Building the Debian sandbox image needs mmdebstrap (`apt-get install mmdebstrap`)."
        )
    repository, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    progress(f"mmdebstrap {suite} with {', '.join(packages)} (from {mirror})")
    command = [
        "mmdebstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        # The image has no users but root and nobody; sessions run as the workspace owner's uid.
        "--customize-hook=mkdir -p $1/workspace",
        suite,
        "-",
        mirror,
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    # A build takes a minute or more: its own progress lines ("I: downloading packages…") are shown
    # as they come, so `sandbox setup` is never silent; the last lines explain a failure.
    tail: list[str] = []
    reader = threading.Thread(target=_relay, args=(proc.stderr, progress, tail), daemon=True)
    reader.start()
    try:
        result = docker_ops.client().api.import_image_from_stream(
            proc.stdout,
            repository=repository,
            tag=version or "latest",
            changes=[
                f'LABEL {IMAGE_LABEL}="{flavour}"',
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "WORKDIR /workspace",
                'CMD ["/bin/bash"]',
            ],
        )
    finally:
        code = proc.wait()
        reader.join(timeout=30)
        err = "\n".join(tail)
    if code != 0:
        raise docker_ops.SandboxUnavailable(f"mmdebstrap failed (exit {code}): {err.strip()[-500:]}")
    progress(f"imported as {tag}")
    image = docker_ops.client().images.get(tag)
    labels = (image.attrs.get("Config") or {}).get("Labels") or {}
    if labels.get(IMAGE_LABEL) != flavour:
        raise docker_ops.SandboxUnavailable(f"docker import of {tag} did not apply its label: {result!r}")
    return str(image.id)


def _relay(stream: IO[bytes], progress: Callable[[str], None], tail: list[str]) -> None:
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        if not line:
            continue
        tail.append(line)
        del tail[:-20]
        if line.startswith(("I:", "W:", "E:")):
            progress(line)


def build_from_registry(tag: str, flavour: str, progress: Callable[[str], None]) -> str:
    """`docker build` of the seed's Dockerfile for `flavour` (needs a registry for debian:bookworm-slim)."""
    dockerfile = Path(__file__).with_name(DOCKERFILES[flavour])
    api = docker_ops.client().api
    progress(f"docker build -f {dockerfile.name} -t {tag} (pulls debian:{DEBIAN_SUITE}-slim)")
    with dockerfile.open("rb") as fh:
        try:
            for chunk in api.build(fileobj=fh, tag=tag, rm=True, decode=True, pull=False):
                if "error" in chunk:
                    raise docker_ops.SandboxUnavailable(
                        f"docker build of {tag} failed: {str(chunk['error']).strip()} (no registry "
                        "reachable? `exechost sandbox setup` without --from-registry builds from Debian "
                        "packages instead)"
                    )
                text = str(chunk.get("stream") or chunk.get("status") or "").rstrip()
                if text:
                    progress(text)
        except docker_ops.api_errors() as exc:
            raise docker_ops.SandboxUnavailable(
                f"docker build of {tag} failed: {exc} (no registry reachable? `exechost sandbox setup` "
                "without --from-registry builds from Debian packages instead)"
            ) from None
    return str(docker_ops.client().images.get(tag).id)
