"""Safe state-file handling: 0700 dirs, atomic 0600 writes, symlink refusal and cross-process locks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from engine.errors import ExecHostError

DIR_MODE = 0o700
FILE_MODE = 0o600


class StateFileError(ExecHostError):
    """A state path is unsafe (symlink, wrong type) or could not be written."""

    code = "state_file"


def home_dir(env: Mapping[str, str] | None = None) -> str:
    """The operator's home as the state dir sees it: $OPENCLAW_HOME first, else the account's home.

    Never a command's own HOME: what `~` means in a pattern must not depend on the agent's env."""
    source = os.environ if env is None else env
    raw = source.get("OPENCLAW_HOME", "").strip()
    if raw:
        return os.path.abspath(raw)
    return _account_home()


PASSWD_FILE = "/etc/passwd"  # noqa: S105 - the account database, not a secret
# (uid, stamp of the passwd file) -> the account's home. getpwuid costs ~20 µs and every policy decision
# asks; the answer holds until the uid or the passwd file (inode, size, mtime, ctime) changes.
_HOMES: dict[tuple[int, tuple[int, ...]], str] = {}


def _account_home() -> str:
    try:
        info = os.stat(PASSWD_FILE)
        stamp: tuple[int, ...] = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    except OSError:
        stamp = ()
    key = (os.getuid(), stamp)
    cached = _HOMES.get(key) if stamp else None
    if cached is not None:
        return cached
    try:
        home = pwd.getpwuid(key[0]).pw_dir
    except KeyError:
        home = str(Path.home())
    _HOMES.clear()
    if stamp:
        _HOMES[key] = home
    return home


def state_dir(env: dict[str, str] | None = None) -> Path:
    """The state dir: $OPENCLAW_STATE_DIR, else <home>/.openclaw (paths fixed by the seeds); the real path
    a service of this process judged it as, once one did (pin_state_dir)."""
    source = os.environ if env is None else env
    raw = source.get("OPENCLAW_STATE_DIR", "").strip()
    # Absolute: the host view hides it by path in a process whose cwd is the command's, not ours.
    named = Path(os.path.abspath(os.path.expanduser(raw))) if raw else Path(home_dir(source)) / ".openclaw"
    if _PINNED:
        pinned = _PINNED.get(str(named))
        if pinned is not None:
            return pinned[0]
    return named


# A state dir as named -> (the real path a service of this process resolved it to once, and judged; how
# many services hold it). A link on the named way (another account's, in a sticky dir like /tmp) may be
# re-pointed while the service runs: every path it opens from then on stays in the dir it judged (fresh
# round 17 c), whoever asks state_dir() in this process.
_PINNED: dict[str, tuple[Path, int]] = {}
_pins = 0  # bumped at every pin and unpin: a cache of state_dir()'s answer keys on it (pin_generation)


def pin_state_dir(named: Path) -> Path:
    """`named` resolved once (its links followed now, never again): what state_dir() answers for `named`
    from now on in this process, until unpin_state_dir. The caller judges and uses the path returned."""
    global _pins
    key = os.path.abspath(named)
    held = _PINNED.get(key)
    real = held[0] if held is not None else Path(os.path.realpath(key))
    _PINNED[key] = (real, (held[1] if held is not None else 0) + 1)
    _pins += 1
    return real


def unpin_state_dir(named: Path) -> None:
    """The service that pinned `named` stopped (the last one: state_dir() names it as before)."""
    global _pins
    key = os.path.abspath(named)
    held = _PINNED.get(key)
    if held is None:
        return
    if held[1] <= 1:
        del _PINNED[key]
    else:
        _PINNED[key] = (held[0], held[1] - 1)
    _pins += 1


def pin_generation() -> int:
    """Changes whenever what state_dir() answers may have (a pin or unpin)."""
    return _pins


def refuse_symlink(path: Path) -> None:
    """Raise if `path` itself is a symlink: writing through one could clobber any file the user owns."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise StateFileError(f"refusing to use symlinked path: {path}")


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700; refuse a symlink or a non-directory."""
    refuse_symlink(path)
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise StateFileError(f"not a directory: {path}")
    if stat.S_IMODE(st.st_mode) != DIR_MODE and st.st_uid == os.geteuid():
        os.chmod(path, DIR_MODE)
    return path


def atomic_write(path: Path, data: bytes | str, mode: int = FILE_MODE, *, private_dir: bool = True) -> None:
    """Write via temp file in the same dir + fsync + rename, so readers never see a torn file.

    The file is born with `mode`. `private_dir=False` leaves the parent's mode alone, for a dir that is
    shared on purpose (the sandboxes' read-only bin mount).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    if private_dir:
        ensure_private_dir(path.parent)
    refuse_symlink(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_text(path: Path) -> str | None:
    """Read a state file without following a symlink; None when it does not exist."""
    refuse_symlink(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode("utf-8")


def _open_lock(path: Path) -> int:
    lock_path = path.with_name(path.name + ".lock")
    ensure_private_dir(lock_path.parent)
    refuse_symlink(lock_path)
    return os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)


def try_lock(path: Path) -> int | None:
    """Take `<path>.lock` without waiting and keep it: the fd (closing it releases), or None if held."""
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on `<path>.lock`, serialising writers across processes (blocks: call it
    from a thread on async paths)."""
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# What every daemon's runs start with at least: no write for other accounts (group and other stay as the
# operator's own umask has them when it is stricter).
DAEMON_UMASK = 0o022


def settle_umask() -> int:
    """A daemon (gateway, node service) takes a umask no looser than DAEMON_UMASK, whoever started it: an
    agent's client that autostarts the gateway with umask 0 would otherwise make every principal's runs
    create files other accounts can write. Returns the umask now in force."""
    old = os.umask(DAEMON_UMASK)
    os.umask(old | DAEMON_UMASK)
    return old | DAEMON_UMASK
