"""The container engines' own records of their containers, covered whole in every host view: Docker keeps
each sandbox's config (its `docker.env`, another agent's key) in <data-root>/containers/<id>/config.v2.json,
and containerd its OCI spec under its state dir while it runs (fresh round 17 a)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading
from collections.abc import Mapping

from engine.commands import mountwatch

# Where the engines keep their state by default, the image's, container's and sandbox's records alike:
# Docker's data-root and exec-root (its containerd's root and state, its runc's, its plugins' and netns'
# are below them), a standalone containerd's root and state (and its runc's), Podman's and CRI-O's, LXC's,
# LXD's and Incus's, the kubelet's (every pod's secret volumes), k3s's and RKE2's, the snap Docker's; the
# rootless Docker's and Podman's in the home. A missing one is left out (never made: the host keeps none
# it did not have); one made later changes the view's operations, so the next run's view covers it.
KNOWN = (
    "/var/lib/docker",
    "/run/docker",
    "/var/lib/containerd",
    "/run/containerd",
    "/run/runc",
    "/run/crun",
    "/var/lib/containers",
    "/run/containers",
    "/run/podman",
    "/run/crio",
    "/var/lib/lxc",
    "/var/lib/lxd",
    "/var/lib/incus",
    "/var/snap/lxd/common/lxd",
    "/var/lib/kubelet",
    "/var/lib/rancher",
    "/run/k3s",
    "/var/snap/docker/common/var-lib-docker",
    "/var/snap/docker/current/run",
    "~/.local/share/docker",
    "~/.local/share/containers",
)
DAEMON_CONFIG = "/etc/docker/daemon.json"  # dockerd's default --config-file


def state_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every present engine state dir (resolved): KNOWN, and the data-root and exec-root the Docker engine
    on the local socket runs with, read where the daemon reads them (its command line, then its config
    file): an operator's `data-root = /srv/docker` is covered as the default is. Never `/`, the home or a
    directory holding it."""
    env = os.environ if environ is None else environ
    home = os.path.realpath(env.get("HOME") or os.path.expanduser("~"))
    found = by_name(env, home)
    for alias in _other_names(found):
        if alias in (os.sep, home) or (home + os.sep).startswith(alias + os.sep) or alias in found:
            continue
        found.append(alias)
    return tuple(sorted(found))


def by_name(env: Mapping[str, str], home: str) -> list[str]:
    """The present dirs of KNOWN and the local engine's roots, by their names (resolved), per call: a dir
    made, removed or renamed, or a daemon restarted with another data-root, is seen at the next run."""
    named = [p.replace("~", home, 1) if p.startswith("~") else p for p in KNOWN]
    named += _docker_daemon_roots(env)
    found: list[str] = []
    for path in named:
        if not os.path.isdir(path):  # (most are missing: one stat, no realpath; unreachable is missing too)
            continue
        real = os.path.realpath(path)
        if real in (os.sep, home) or (home + os.sep).startswith(real + os.sep) or real in found:
            continue
        found.append(real)
    return found


MOUNTINFO = "/proc/self/mountinfo"

# (dev, inode) a name resolved to, or None when it did not resolve to anything
Ident = tuple[int, int] | None


class _Aliases:
    """`_other_names` kept until what it was computed from changes, so a host run does not pay the
    kernel's writing of the whole mount table (~0.5 ms) each time. It was computed from two things:
    the mount table's structure, which changes only with a mount event (engine.commands.mountwatch: the
    kernel says so on the fd), and the names the table gives (mount points, mount roots), which a rename
    changes with no mount event (a mount point's parent renamed, a bind's source dir moved). So each
    entry keeps every name it resolved and what it found there (`_ident`: device and inode, or nothing),
    and is trusted only while each still resolves to the same: every engine dir, every mount point of
    their filesystems, every name an alias was looked for at, and each such mount's root as another of
    them shows it. A rename anywhere along one of those names moves what it resolves to."""

    def __init__(self) -> None:
        self._watch = mountwatch.MountWatch()
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, ...], tuple[list[str], dict[str, Ident]]] = {}
        self.fills = 0  # (how many times the table was read and the names computed: for the tests)

    def get(self, dirs: list[str]) -> list[str]:
        with self._lock:
            if self._watch.changed():
                self._entries.clear()
            key = tuple(dirs)
            entry = self._entries.get(key)
            if entry is not None and all(_ident(name) == seen for name, seen in entry[1].items()):
                return list(entry[0])
            seen: dict[str, Ident] = {}
            names = _compute_other_names(dirs, _mounts(), seen)
            self.fills += 1
            if len(self._entries) > 16:  # (a handful of homes at most: never grows without bound)
                self._entries.clear()
            self._entries[key] = (names, seen)
            return list(names)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_ALIASES = _Aliases()


def _other_names(dirs: list[str]) -> list[str]:
    """Every other name the mount table gives those dirs' trees (fresh round 17 a): a bind of the same
    filesystem whose root is in such a tree (Docker's disk bound under an operator's name) or holds it
    (/data/docker bound at /var/lib/docker leaves /data/docker, the same files, on the root mount). By the
    mounts' device and root, not by any name: whatever path a bind gives the engine's records, it is
    covered as the known name is. A name missing or no longer a directory is left out. Kept while the
    mount table and every name it was found by stay the same (`_Aliases`)."""
    return _ALIASES.get(dirs)


def _compute_other_names(
    dirs: list[str], mounts: list[tuple[str, str, str]], seen: dict[str, Ident]
) -> list[str]:
    """`_other_names` from `mounts`, recording in `seen` every name it resolved (and what it found)."""
    out: list[str] = []
    for path in dirs:
        _ident(path, seen)
        own = _mount_of(path, mounts)
        if own is None:
            continue
        dev, root, point = own
        tail = os.path.relpath(path, point)
        fsroot = os.path.normpath(os.path.join(root, tail)) if tail != "." else root
        same_fs = [m for m in mounts if m[0] == dev]
        for _, m_root, m_point in same_fs:
            _ident(m_point, seen)  # (its parent renamed: the point's name changes, no mount event)
            for _, o_root, o_point in same_fs:  # (its root moved by a rename where another shows it)
                if o_point != m_point and _inside(m_root, o_root):
                    _ident(os.path.normpath(os.path.join(o_point, os.path.relpath(m_root, o_root))), seen)
            if _inside(m_point, path):
                continue
            if _inside(m_root, fsroot):  # (the bind shows part or all of the tree)
                shown = os.path.normpath(os.path.join(path, os.path.relpath(m_root, fsroot)))
                if _same_dir(m_point, shown, seen):  # (and is what is seen there: not mounted over)
                    out.append(m_point)
            elif _inside(fsroot, m_root):  # (the bind holds the tree, under its own name)
                alias = os.path.normpath(os.path.join(m_point, os.path.relpath(fsroot, m_root)))
                if alias != path and _same_dir(alias, path, seen):
                    out.append(alias)
    return out


def _mounts() -> list[tuple[str, str, str]]:
    """(major:minor, root in its filesystem, mount point) of every mount this process sees."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            out.append((fields[2], _unescape(fields[3]), _unescape(fields[4])))
    return out


def _mount_of(path: str, mounts: list[tuple[str, str, str]]) -> tuple[str, str, str] | None:
    """The mount `path` is on: the last mounted at the longest mount point holding it."""
    best: tuple[str, str, str] | None = None
    for m in mounts:
        if _inside(path, m[2]) and (best is None or len(m[2]) >= len(best[2])):
            best = m
    return best


def _inside(path: str, top: str) -> bool:
    return top == os.sep or path == top or path.startswith(top + os.sep)


def _same_dir(a: str, b: str, seen: dict[str, Ident] | None = None) -> bool:
    ia, ib = _ident(a, seen), _ident(b, seen)
    return ia is not None and ia == ib


def _ident(path: str, seen: dict[str, Ident] | None = None) -> Ident:
    """(device, inode) of what `path` resolves to (None: nothing), recorded in `seen` when given."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        found: Ident = None
    else:
        found = (st.st_dev, st.st_ino)
    if seen is not None:
        seen[path] = found
    return found


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 for a space, \\011, \\012, \\134) decoded."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _docker_daemon_roots(env: Mapping[str, str]) -> list[str]:
    """The data-root and exec-root of the engine serving the local Docker socket (DOCKER_HOST or the
    default), by its process (the socket's peer credentials): `--data-root`/`-g`, `--exec-root` and
    `--config-file` on its command line, else the keys of its config file. [] when no local engine
    answers, or it is in another pid namespace (peer pid 0). Read at each view (a file read, no API call):
    a daemon restarted with another data-root is covered at the next run."""
    host = env.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return []
    pid = _peer_pid(host[len("unix://") :])
    if pid <= 0:
        return []
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
    except OSError:
        return []
    flags = _flags(argv, {"--data-root": "data-root", "-g": "data-root", "--graph": "data-root"})
    flags |= _flags(argv, {"--exec-root": "exec-root", "--config-file": "config-file"})
    config: dict[str, object] = {}
    with contextlib.suppress(OSError, ValueError):
        with open(flags.get("config-file", DAEMON_CONFIG), encoding="utf-8") as f:
            loaded = json.load(f)
        config = loaded if isinstance(loaded, dict) else {}
    out = []
    for key in ("data-root", "exec-root", "graph"):
        value = flags.get(key, config.get(key))
        if isinstance(value, str) and value.startswith(os.sep):
            out.append(value)
    return out


def _flags(argv: list[str], names: dict[str, str]) -> dict[str, str]:
    """The values of the named options in a Go-flag argv (`--x v`, `--x=v`, `-x v`), the last one winning."""
    found: dict[str, str] = {}
    for i, word in enumerate(argv):
        head, eq, value = word.partition("=")
        if head in names:
            if eq:
                found[names[head]] = value
            elif i + 1 < len(argv):
                found[names[head]] = argv[i + 1]
    return found


def _peer_pid(path: str) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(2.0)
        sock.connect(path)
        pid: int = struct.unpack("=iII", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        return pid
    except OSError:
        return 0
    finally:
        sock.close()
