"""The sandbox's small C helpers (the egress forwarder, the landlock helper) are built once, statically, into
the bin dir the sandboxes mount: one way to build, stamp and install them."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

# Sandboxes started at once all want the helper: one builds, the rest wait and find it current. A thread lock
# for this process, a file lock for other processes sharing the bin dir.
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _thread_lock(target: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(target, threading.Lock())


def lock_path(target: Path) -> Path:
    """The file builders of `target` lock: beside the bin dir (in the state dir), never in it. Every sandbox
    mounts the bin dir, and flock needs only a read fd: a sandbox held the lock in there and the next build
    (an upgrade's, a missing helper's) blocked every agent's sandbox start (fresh round 17 a)."""
    return target.parent.parent / f".build-{target.name}.lock"


def current(target: Path, stamp: Path, digest: str) -> bool:
    """Whether `target` is built from the source whose digest is `digest`."""
    try:
        built = stamp.read_text().strip()
    except OSError:
        return False
    return built == digest and target.is_file()


def _install(data_from: Path, target: Path, mode: int) -> None:
    # A name of its own in the target's dir, then rename: a running sandbox never sees half a file, and two
    # builders never share a temp name.
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out, open(data_from, "rb") as src:
            shutil.copyfileobj(src, out)
        os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def build(compiler: str, source: Path, target: Path, stamp: Path, digest: str) -> str | None:
    """Build `source` into `target` and record `digest` in `stamp`, unless another builder just did; None when
    done, else the compiler's complaint."""
    with _thread_lock(target):
        lock_fd = os.open(lock_path(target), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if current(target, stamp, digest):
                return None
            return _build_locked(compiler, source, target, stamp, digest)
        finally:
            os.close(lock_fd)


def _build_locked(compiler: str, source: Path, target: Path, stamp: Path, digest: str) -> str | None:
    # Built beside the bin dir (in the state dir), never under /tmp: every gateway-host run sees /tmp and,
    # as the gateway's uid, may write a 0700 dir of ours there, so it replaced the linker's output (or
    # cc's .s/.o files) before the copy and its program ran first in every agent's sandbox (round 8 q).
    with tempfile.TemporaryDirectory(prefix=f".build-{target.name}-", dir=target.parent.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [compiler, "-static", "-Os", "-s", "-o", str(out), str(source)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "TMPDIR": tmp},  # cc's own temporary files too
        )
        if done.returncode != 0:
            return done.stderr.strip()[-800:]
        _install(out, target, 0o755)  # executed by the sandbox's user, as the bin dir's busybox
        digest_file = Path(tmp) / "stamp"
        digest_file.write_text(digest + "\n")
        _install(digest_file, stamp, 0o644)
    return None
