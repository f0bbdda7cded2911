"""docker.binds for bwrap as open fds: the directory checked is the one mounted, whatever the sandbox renames.

Every allowed bind source lies inside a workspace, and a sandbox can replace any name in its workspace
(`renameat2 RENAME_EXCHANGE` with a link to a host directory) between a check by path and bwrap's mount by
path. So a source is checked once, by its real path, then opened from `/` with no link followed at any
depth (engine.commands.bindsource): a name swapped for a link meanwhile is refused, and the fd names exactly
the directory (or file) at the path that passed the check. bwrap mounts that fd (`--bind-fd`, bubblewrap 0.8),
never a path, on every start: the scope's sandbox, a restart, a terminal.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine.commands import bindsource
from engine.sandbox.settings import DockerSettings
from engine.sandbox.validate import SandboxSecurityError, normalize_path, split_bind, validate_binds


@dataclass(frozen=True)
class Bind:
    """One bind for bwrap: `fd` is an O_PATH fd on the checked source (-1: shown only, never run)."""

    fd: int
    source: str
    target: str
    read_only: bool

    def args(self) -> list[str]:
        if self.fd < 0:
            return ["--ro-bind" if self.read_only else "--bind", self.source, self.target]
        return ["--ro-bind-fd" if self.read_only else "--bind-fd", str(self.fd), self.target]


def _parsed(binds: Iterable[str]) -> Iterator[tuple[str, str, str, bool]]:
    for raw in binds:
        bind = raw.strip()
        source, target, options = split_bind(bind)
        if bind and target:
            yield bind, source, target, "ro" in options.split(",")


def shown(docker: DockerSettings) -> list[Bind]:
    """The binds as `sandbox explain` shows them (by path: nothing is opened, nothing runs)."""
    return [Bind(-1, source, target, ro) for _, source, target, ro in _parsed(docker.binds)]


def open_binds(docker: DockerSettings, allowed_roots: Iterable[str]) -> list[Bind]:
    """Check every docker.binds source by its real path and open exactly that path, no link followed;
    the caller closes the fds (`close`). SandboxSecurityError for a source refused or not there."""
    roots = list(allowed_roots)
    flags = {
        "allow_external": docker.dangerously_allow_external_bind_sources,
        "allow_reserved": docker.dangerously_allow_reserved_container_targets,
    }
    validate_binds(docker.binds, roots, **flags)  # the texts agents know, for what is plainly wrong
    opened: list[Bind] = []
    try:
        for bind, source, target, ro in _parsed(docker.binds):
            real = os.path.realpath(normalize_path(source))
            # The check of record: the path opened below, with no link in it, is this one.
            validate_binds([f"{real}:{target}"], roots, **flags)
            opened.append(Bind(_open_exact(bind, real), real, target, ro))
        return opened
    except BaseException:
        close(opened)
        raise


def close(binds: Iterable[Bind]) -> None:
    for b in binds:
        if b.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(b.fd)


def _open_exact(bind: str, real: str) -> int:
    """An O_PATH fd on `real` reached from `/` with no link at any depth (a directory or a file): the one
    way every bwrap bind source is opened (engine.commands.bindsource, the host view's too)."""
    try:
        return bindsource.open_exact(real)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SandboxSecurityError(
                f'Sandbox security: bind mount "{bind}" source "{real}" cannot be opened without following a '
                "link (a symlink on the way now: left by the sandbox?); refusing it (docker.binds)."
            ) from None
        raise SandboxSecurityError(
            f'Sandbox security: bind mount "{bind}" source "{real}" cannot be opened: '
            f"{exc.strerror or exc} (docker.binds)."
        ) from None
