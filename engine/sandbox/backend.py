"""The sandbox backend interface: what a Docker container and a bubblewrap sandbox do differently.

Everything else about a sandbox (scope, layout, workspace access and seeding, skills sync, the supervisor and
its slots, held sessions, the registry, the hot window, prune, list/explain/recreate) is written once in
manager.py, launcher.py and admin.py, and reaches the backend only through `SandboxBackend`: does the
scope's sandbox exist and run, with which config hash (`inspect`); end it (`remove`); which ones exist
(`runtimes`). Creation differs enough (an image and the pool for Docker, a keeper and limits for bwrap) to
be each backend's `create` path in the manager; a terminal is `docker exec -t` there and a one-shot bwrap of
the same view here (launcher.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from engine.sandbox import bwrap, bwraprecords, docker_ops
from engine.sandbox.docker_ops import ContainerState
from engine.sandbox.settings import SandboxSettings

DOCKER = "docker"
BWRAP = "bwrap"


@dataclass
class Runtime:
    """One existing sandbox as its backend sees it (for list, prune and recreate)."""

    name: str
    backend: str
    running: bool
    image: str = ""
    labels: dict[str, str] = field(default_factory=dict)


class SandboxBackend(Protocol):
    id: str

    def inspect(self, name: str) -> ContainerState: ...

    def remove(self, name: str) -> bool: ...

    def runtimes(self) -> list[Runtime]: ...


class DockerBackend:
    id = DOCKER

    def inspect(self, name: str) -> ContainerState:
        return docker_ops.inspect(name)

    def remove(self, name: str) -> bool:
        return docker_ops.remove(name) or docker_ops.inspect(name).exists is False

    def runtimes(self) -> list[Runtime]:
        return [
            Runtime(
                name=str(c["Names"][0]).lstrip("/"),
                backend=DOCKER,
                running=c.get("State") == "running",
                image=str(c.get("Image") or ""),
                labels=dict(c.get("Labels") or {}),
            )
            for c in docker_ops.list_sandboxes()
        ]


class BwrapBackend:
    id = BWRAP

    def inspect(self, name: str) -> ContainerState:
        return bwrap.inspect(name)

    def remove(self, name: str) -> bool:
        return bwrap.remove(name)

    def runtimes(self) -> list[Runtime]:
        rows = []
        for row in bwraprecords.list_sandboxes():
            labels = {
                "openclaw.configHash": str(row.get("configHash") or ""),
                "openclaw.sessionKey": str(row.get("scopeKey") or ""),
                "openclaw.createdAtMs": str(row.get("createdAtMs") or 0),
            }
            image = str(row.get("rootfs") or "host")
            rows.append(Runtime(row["name"], BWRAP, bool(row["running"]), image, labels))
        return rows


BACKENDS: dict[str, SandboxBackend] = {DOCKER: DockerBackend(), BWRAP: BwrapBackend()}


def backend_for(settings: SandboxSettings) -> SandboxBackend:
    return BACKENDS.get(settings.backend, BACKENDS[DOCKER])


def backend_named(backend_id: str | None, name: str) -> SandboxBackend:
    """The backend of an existing sandbox: its registry record's, else the one holding a runtime record."""
    if backend_id in BACKENDS:
        return BACKENDS[backend_id]
    return BACKENDS[BWRAP] if bwrap.inspect(name).exists else BACKENDS[DOCKER]


def image_of(settings: SandboxSettings) -> str:
    """What `sandbox list` compares a sandbox's image with: the Docker image, or the bwrap system view."""
    if settings.backend == BWRAP:
        return settings.bwrap_rootfs or "host"
    return settings.docker.image
