"""Warm exec without a `docker exec` round trip: a tiny shell supervisor in each container spawns commands.

The container's main process is a busybox-sh loop reading requests from a FIFO in a private control dir
(host `<state>/sandbox-ctl/<name>` ↔ `/.exechost`), bound read-only: the host makes everything in it (the
request FIFO, each command's dir, spec and FIFOs), and the sandbox may only open those FIFOs, which a
read-only mount leaves writable, and read the rest. A writable bind was a dir on the state dir's own
filesystem with no cap, which one agent's sandbox could fill, bytes or inodes (fresh round 17 a). Each
command gets a dir there holding its spec script and FIFOs for stdin, stdout, stderr and status, and runs
in its own session so a kill reaches its whole process group. `slot <id>` prepares such a dir ahead of its
command: a process waits in it, in its session, for the spec (engine.sandbox.slots); `run <id>` starts a
command from scratch (run.sh: the path of containers whose supervisor predates slots). The FIFOs, and
what the container's uid may do to its own entries (chmod), are still the container's, so the host treats
the control dir as hostile: every open goes through directory fds with O_NOFOLLOW and checks the file
type, and nothing in it is ever parsed beyond short status lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import os
import secrets
import shlex
import shutil
import signal as signal_mod
import stat
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from engine import statefs, sysbin
from engine.commands import offargv
from engine.errors import ExecHostError

CTL_MOUNT = "/.exechost"
BIN_MOUNT = "/.exechost-bin"
BUSYBOX = f"{BIN_MOUNT}/busybox"

SUPERVISOR_SH = f"""\
B="$1"
C={CTL_MOUNT}
umask 077
# ctl and x are the host's (Channel.prepare: the control dir is read-only here)
exec 3<>"$C/ctl" || exit 1
# A slot (engine.sandbox.slots): this fork of the supervisor (no exec) holds the status FIFO and waits for
# the slot's process, which gets the streams and waits in a session of its own for the host's go. Its $0 is
# the spec's path, so that messages read as when `sh spec` ran it.
slot() {{
  d="$C/x/$1"
  exec 9>"$d/rc" || exit 1
  $B setsid $B sh -c ". {BIN_MOUNT}/slot.sh" "$d/spec" "$B" "$d" <"$d/in" >"$d/out" 2>"$d/err" &
  wait $!
  echo "exit $?" >&9
}}
while IFS=' ' read -r op a b <&3; do
  case "$op" in
    slot)
      case "$a" in ''|*[!0-9a-f]*) continue ;; esac
      slot "$a" </dev/null >/dev/null 2>&1 3<&- & ;;
    run)
      case "$a" in ''|*[!0-9a-f]*) continue ;; esac
      ( $B sh {BIN_MOUNT}/run.sh "$B" "$C/x/$a" </dev/null >/dev/null 2>&1 3<&- & ) ;;
    kill)
      case "$a" in ''|*[!A-Z0-9]*) continue ;; esac
      case "$b" in ''|*[!0-9]*) continue ;; esac
      $B kill -s "$a" "-$b" 2>/dev/null || $B kill -s "$a" "$b" 2>/dev/null ;;
    killm)
      # Everything that inherited the session marker, even daemons that left the process group.
      case "$a" in ''|*[!A-Z0-9]*) continue ;; esac
      case "$b" in ''|*[!0-9a-f]*) continue ;; esac
      ( for e in /proc/[0-9]*/environ; do
          if $B grep -qa "EXECHOST_SESSION=$b" "$e" 2>/dev/null; then
            p=${{e#/proc/}}; $B kill -s "$a" "${{p%/environ}}" 2>/dev/null
          fi
        done & ) ;;
  esac
done
"""

# Opens every stream itself before forking, then reports "pid": once the host sees it, the container holds
# the FIFO ends and the host may drop its placeholder writers without a spurious EOF.
RUN_SH = """\
B="$1"; d="$2"
exec 9>"$d/rc" || exit 1
if [ -p "$d/in" ]; then exec 5<"$d/in"; else exec 5</dev/null; fi
exec 1>"$d/out" 2>"$d/err"
# An async list gets /dev/null as stdin unless redirected explicitly, hence the detour through fd 5.
$B setsid $B sh "$d/spec" 0<&5 5<&- 9>&- &
p=$!
exec 5<&- 1>&- 2>&-
echo "pid $p" >&9
wait $p
echo "exit $?" >&9
"""

# A slot's process ($1 = busybox or "", $2 = its dir): stdin, stdout and stderr are the slot's FIFOs, fd 9
# the status FIFO. It says it is ready, then waits for the host's go line on stdin (busybox's read takes a
# pipe byte by byte: nothing after the line is consumed): "in" (the rest of the in FIFO is the command's
# stdin) or "null" (/dev/null). The spec then runs in this shell, as run.sh's `sh spec` did, with SHLVL as
# that chain's one more shell left it. On EOF the host dropped the slot: it goes (the host removes its dir).
SLOT_SH = """\
echo "pid $$" >&9
exec 9>&-
IFS= read -r g || exit 0
case "$g" in
  in) ;;
  null) exec 0</dev/null ;;
  *) exit 0 ;;
esac
SHLVL=$((SHLVL + 1))
. "$2/spec"
"""

# pid is a FIFO the host made and reads (engine.sandbox.ptyexec); opened read-write, so the open never waits
# for the host's reader.
RUNPTY_SH = """\
echo $$ 1<>"$2/pid"
exec $1 sh "$2/spec"
"""

SCRIPTS = {
    "supervisor.sh": SUPERVISOR_SH,
    "slot.sh": SLOT_SH,
    "run.sh": RUN_SH,
    "runpty.sh": RUNPTY_SH,
}


class SupervisorUnavailable(ExecHostError, RuntimeError):
    """No supervisor reads the control FIFO (container stopped or supervisor killed)."""


def _elf_is_static(path: str) -> bool:
    """True for an ELF binary without a PT_INTERP segment — it runs in any container of this arch."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return False
            (phoff,) = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
        return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))
    except (OSError, struct.error):
        return False


def find_static_busybox() -> str | None:
    for cand in (sysbin.which("busybox"),):
        if cand and os.path.isfile(cand) and _elf_is_static(cand):
            return os.path.realpath(cand)
    return None


def bin_dir() -> Path:
    return statefs.state_dir() / "sandbox-bin"


def ensure_bin_dir() -> tuple[Path, bool]:
    """Install the scripts (and a static busybox) for the read-only bin mount; returns (dir, has_busybox).

    World-readable on purpose (0755/0644): the container may run as another uid and needs to read and
    execute these, never to write; they hold no secrets. statefs' private-dir helpers would flip the dir to
    0700 for a moment under running non-root sandboxes, so this dir is handled here.
    """
    target = bin_dir()
    statefs.ensure_private_dir(target.parent)
    statefs.refuse_symlink(target)
    target.mkdir(mode=0o755, exist_ok=True)
    os.chmod(target, 0o755)  # noqa: S103 - see above
    for name, text in SCRIPTS.items():
        path = target / name
        if statefs.read_text(path) != text:
            statefs.atomic_write(path, text, 0o644, private_dir=False)
    bb = target / "busybox"
    source = find_static_busybox()
    if source is not None and (not bb.exists() or bb.stat().st_size != os.stat(source).st_size):
        with open(source, "rb") as fh:
            statefs.atomic_write(bb, fh.read(), 0o755, private_dir=False)
    return target, bb.exists()


def supervisor_command(has_busybox: bool) -> list[str]:
    if has_busybox:
        return [BUSYBOX, "sh", f"{BIN_MOUNT}/supervisor.sh", BUSYBOX]
    return ["/bin/sh", f"{BIN_MOUNT}/supervisor.sh", ""]


def ctl_dir(name: str) -> Path:
    return statefs.state_dir() / "sandbox-ctl" / name


def spec_script(
    command: str,
    cwd: str,
    env: Mapping[str, str],
    path_prepend: str | None,
    shell: str,
    *,
    busybox: str = "",
) -> str:
    """The per-exec script: cd, exports, then a login shell running the command (reference §1.9).

    With `busybox`, the image's /bin/sh when it has one, else busybox's: tested in the shell itself, since
    a command substitution would cost a fork per command."""
    lines = [f"cd {shlex.quote(cwd)} || exit 126"]
    for key, value in env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    body = command
    if path_prepend:
        # After `sh -l` has read /etc/profile, which may reset PATH (reference §1.7).
        body = f'export PATH={shlex.quote(path_prepend)}:"$PATH"; {command}'
    # The body in the login shell's environment, never on its argv: every process of the sandbox is one
    # of the host's /proc, whose cmdlines any account reads (engine.commands.offargv).
    _, carry = offargv.shell_words(shell, body, "-lc")
    lines.extend(f"export {key}={shlex.quote(value)}" for key, value in carry.items())
    if busybox:
        lines.append(f"set -- -lc {shlex.quote(offargv.STUB)}")
        lines.append(f'[ -x {shell} ] && exec {shell} "$@"')
        lines.append(f'exec {busybox} sh "$@"')
    else:
        lines.append(f"exec {shell} -lc {shlex.quote(offargv.STUB)}")
    return "\n".join(lines) + "\n"


def fifo_fd(name: str, flags: int, dir_fd: int) -> int:
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise SupervisorUnavailable(f"sandbox control entry {name!r} is not a FIFO; refusing it")
    return fd


@dataclass
class FifoEnds:
    """The host's ends of an exec dir's FIFOs: the read ends of out, err and rc, a placeholder writer on
    each (so none reads as EOF before the command holds its own ends), and stdin read-write (the
    container's open of it never blocks; what the host writes waits in it)."""

    out: int
    err: int
    rc: int
    stdin: int | None
    placeholders: list[int]


def make_fifos(channel: Channel, efd: int, *, stdin: bool) -> FifoEnds:
    """The FIFOs of one exec dir (`efd`), shared by a command run now (launcher) and a ready slot: made
    0600, handed to the container user, and opened read ends first (a write-open blocks without a
    reader). On a failure every end opened so far is closed."""
    names = ["out", "err", "rc"] + (["in"] if stdin else [])
    for name in names:
        os.mkfifo(name, 0o600, dir_fd=efd)
    channel.give(names, efd)
    opened: list[int] = []
    try:
        reads = []
        for name in ("out", "err", "rc"):
            reads.append(fifo_fd(name, os.O_RDONLY | os.O_NONBLOCK, efd))
            opened.append(reads[-1])
            opened.append(fifo_fd(name, os.O_WRONLY | os.O_NONBLOCK, efd))
        stdin_fd = fifo_fd("in", os.O_RDWR | os.O_NONBLOCK, efd) if stdin else None
    except BaseException:
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    return FifoEnds(reads[0], reads[1], reads[2], stdin_fd, [fd for fd in opened if fd not in reads])


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    return fd


class Channel:
    """Host side of one container's control dir."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = ctl_dir(name)

    def prepare(self) -> None:
        """The control dir, its request FIFO and its exec dirs' dir, made (again) by the host: the
        sandbox binds it read-only. Call it again after the dir is handed to the container's user.
        Exec dirs nobody uses are removed: all of them while no supervisor runs; the first time this
        process prepares the dir, those made before it started (an exited gateway's slots: their
        processes saw EOF and left, and only the host may remove their dirs now)."""
        statefs.ensure_private_dir(self.path.parent)
        statefs.ensure_private_dir(self.path)
        first = self.name not in _prepared
        _prepared.add(self.name)
        furnish(self.path, stale_before=math.inf if not self.alive() else _SINCE if first else None)

    def send(self, line: str) -> None:
        data = (line + "\n").encode()
        try:
            dfd = _open_dir(str(self.path))
        except OSError as exc:
            raise SupervisorUnavailable(f"no control dir for {self.name}: {exc.strerror}") from exc
        try:
            fd = fifo_fd("ctl", os.O_WRONLY | os.O_NONBLOCK, dfd)
        except OSError as exc:
            raise SupervisorUnavailable(f"sandbox supervisor of {self.name} is not running") from exc
        finally:
            os.close(dfd)
        try:
            os.write(fd, data)  # < PIPE_BUF: atomic, never interleaved with another request
        except OSError as exc:
            raise SupervisorUnavailable(f"sandbox supervisor of {self.name} is not running") from exc
        finally:
            os.close(fd)

    def alive(self) -> bool:
        try:
            dfd = _open_dir(str(self.path))
        except OSError:
            return False
        try:
            os.close(fifo_fd("ctl", os.O_WRONLY | os.O_NONBLOCK, dfd))
            return True
        except (OSError, SupervisorUnavailable):
            return False
        finally:
            os.close(dfd)

    async def wait_ready(
        self, timeout: float = 10.0, *, step: float | None = None, running: Callable[[], bool] | None = None
    ) -> None:
        """Until the supervisor reads its FIFO. `step`: a fixed polling interval (a bubblewrap sandbox is
        up in milliseconds: backing off would cost more than the start), else 2 ms doubling to 50 ms.
        `running`: whether what starts the supervisor still runs (a bwrap that failed ends at once)."""
        deadline = time.monotonic() + timeout
        delay = step or 0.002
        while not self.alive():
            if time.monotonic() > deadline or (running is not None and not running()):
                raise SupervisorUnavailable(f"sandbox supervisor of {self.name} did not start")
            await asyncio.sleep(delay)
            delay = delay if step else min(delay * 2, 0.05)

    def kill(self, pid: int, sig: int) -> None:
        self.send(f"kill {signal_mod.Signals(sig).name.removeprefix('SIG')} {int(pid)}")

    def kill_marked(self, marker: str, sig: int) -> None:
        self.send(f"killm {signal_mod.Signals(sig).name.removeprefix('SIG')} {marker}")

    def new_exec_dir(self) -> tuple[str, int, int]:
        """mkdir x/<id> without following anything; returns (id, x dir fd, exec dir fd)."""
        dfd = _open_dir(str(self.path))
        try:
            xfd = _open_dir("x", dfd)
        except OSError as exc:
            raise SupervisorUnavailable(f"sandbox control dir of {self.name} is not ready") from exc
        finally:
            os.close(dfd)
        exec_id = secrets.token_hex(8)
        try:
            os.mkdir(exec_id, 0o700, dir_fd=xfd)
            efd = _open_dir(exec_id, xfd)
            owner = self.owner()
            if owner is not None:
                os.fchown(efd, *owner)
        except OSError:
            os.close(xfd)
            raise
        return exec_id, xfd, efd

    def remove_exec_dir(self, exec_id: str) -> None:
        """Remove x/<id> by name (a held command's, after its end): nothing followed, a bad id ignored."""
        if len(exec_id) != 16 or any(c not in "0123456789abcdef" for c in exec_id):
            return
        try:
            dfd = _open_dir(str(self.path))
            try:
                xfd = _open_dir("x", dfd)
            finally:
                os.close(dfd)
            try:
                efd = _open_dir(exec_id, xfd)
            except OSError:
                os.close(xfd)
                return
        except OSError:
            return
        remove_exec_dir(exec_id, xfd, efd)

    def owner(self) -> tuple[int, int] | None:
        """The container user's uid:gid when it is not ours (the control dir was given to it at create)."""
        st = os.stat(self.path)
        return None if st.st_uid == os.geteuid() else (st.st_uid, st.st_gid)

    def give(self, names: list[str], dir_fd: int) -> None:
        """Hand an exec's files to the container user, so a non-root sandbox can open them (0600 stays)."""
        owner = self.owner()
        if owner is not None:
            for name in names:
                os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)


def furnish(path: Path, *, stale_before: float | None = None) -> None:
    """`ctl` (a FIFO) and `x` (a dir) in the control dir, each made where missing or not what it should be,
    and owned as the dir is (the container's user). A `ctl` FIFO is never replaced: a supervisor may hold
    it. `stale_before`: exec dirs in x made before then are removed (the supervisor removed them itself at
    its start while it could write here). Removing one in use harms nothing: a command holds its FIFOs
    open already, and a ready slot is checked in place before it is taken (engine.sandbox.slots)."""
    dfd = _open_dir(str(path))
    try:
        st = os.fstat(dfd)
        owner = (st.st_uid, st.st_gid)
        for name, kind, make in (
            ("ctl", stat.S_ISFIFO, lambda n: os.mkfifo(n, 0o600, dir_fd=dfd)),
            ("x", stat.S_ISDIR, lambda n: os.mkdir(n, 0o700, dir_fd=dfd)),
        ):
            try:
                have: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                have = None
            if have is not None and not kind(have.st_mode):
                _remove_entry(name, dfd, have)
                have = None
            if have is None:
                make(name)
                have = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if (have.st_uid, have.st_gid) != owner:
                os.chown(name, *owner, dir_fd=dfd, follow_symlinks=False)
        if stale_before is not None:
            xfd = _open_dir("x", dfd)
            try:
                for entry in os.listdir(xfd):
                    with contextlib.suppress(OSError):
                        st = os.stat(entry, dir_fd=xfd, follow_symlinks=False)
                        if st.st_ctime < stale_before:
                            _remove_entry(entry, xfd, st)
            finally:
                os.close(xfd)
    finally:
        os.close(dfd)


def _remove_entry(name: str, dir_fd: int, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # fd-based: links inside are removed, never followed
    else:
        os.unlink(name, dir_fd=dir_fd)


_SINCE = time.time()  # (about when this process started: every exec dir it makes is newer)
_prepared: set[str] = set()  # control dirs this process has prepared once (and pruned then)


def write_file(name: str, text: str, dir_fd: int) -> None:
    fd = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
    )
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def remove_exec_dir(exec_id: str, xfd: int, efd: int) -> None:
    for name in ("spec", "in", "out", "err", "rc", "pid"):
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=efd)
    os.close(efd)
    with contextlib.suppress(OSError):
        os.rmdir(exec_id, dir_fd=xfd)
    os.close(xfd)


@dataclass
class ExitStatus:
    exit_code: int | None
    signal: int | None


def decode_status(code: int | None, signalled: int | None) -> ExitStatus:
    """sh reports death by signal N as 128+N; only believe it for a signal we actually sent."""
    if code is not None and signalled is not None and code == 128 + signalled:
        return ExitStatus(None, signalled)
    return ExitStatus(code, None)


def errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))
