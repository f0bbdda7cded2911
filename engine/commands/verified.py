"""The spawn side of content binding: each bound file read once, its digest checked, those bytes run."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.commands.boundfiles import ContentBinding, ContentItem
from engine.commands.digests import (
    CACHE,
    UNREADABLE,
    WRITABLE_MAX_BYTES,
    ContentError,
    hash_fd,
    open_regular,
    read_all,
)
from engine.commands.filetrust import system_owned, system_stat
from engine.commands.interpoptions import python_skips_first_line
from engine.commands.interpreters import name_of
from engine.commands.scriptfiles import reader_of, venv_of
from engine.statefs import state_dir

MFD_EXEC = 0x0010  # Linux ≥ 6.3: say the copy is meant to be executed (vm.memfd_noexec=1 would refuse it)
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
DEFAULT_SHELL = "/bin/sh"
# dash has no `exec -a`: bash runs a linked program under its typed name (by its real, root-owned path).
ARGV0_SHELL = os.path.realpath("/bin/bash")
# Runs a sealed copy under the script's own name: argv[0], __file__ and sys.path[0] as `python x.py` sets
# them, in __main__ (so pickling and `if __name__ == "__main__"` behave), compiled from the copy's bytes.
PY_LOADER = (
    "import sys,os;m=sys.modules['__main__'];p=sys.argv.pop(1);sys.argv[0]=m.__file__=p\n"
    "if sys.path and sys.path[0]=='':sys.path[0]=os.path.dirname(os.path.abspath(p))\n"
    "del m\n"
    "exec(compile({read},p,'exec'))"
)
# What the loader compiles: the copy whole, or (python -x) from the first newline on, as CPython's -x skips
# the first line (pymain_run_file: every byte up to the first '\n', which it keeps so line numbers hold).
_WHOLE = "open({copy!r},'rb').read()"
_SKIP_FIRST = "(lambda s:s[s.find(b'\\n'):] if b'\\n' in s else b'')(open({copy!r},'rb').read())"


def read_words(reader: str, copy: str, name: str, skip_first: bool = False, mirrored: str = "") -> list[str]:
    """The words that make an interpreter read its script. Every bound script is given `mirrored`: the
    copy in the run's view, in a directory no rename reaches (VerifiedRun.mirrors, _handed_a_path), so
    "$0", __file__ and BASH_SOURCE re-read the copy. A bind at the script's own name was not enough: Linux
    detaches a bind whose mountpoint is renamed over from another namespace. Without a mirror (a caller
    that builds no view): a POSIX shell sources `copy` from `sh -c '. COPY' NAME`, Python runs PY_LOADER
    (skipping the first line for `-x`), others are handed `name`."""
    if mirrored:
        return [mirrored]
    if reader == "sh":
        return ["-c", f". {copy}", name]
    if reader == "python":
        read = (_SKIP_FIRST if skip_first else _WHOLE).format(copy=copy)
        return ["-c", PY_LOADER.format(read=read), name]
    return [name]


def view_root() -> str:
    """An empty directory the pinned view's tmpfs is mounted over, inside the namespace only (0700, ours:
    in the state dir, which no agent reaches)."""
    path = os.path.join(str(state_dir()), "pinned")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return path


@dataclass(frozen=True)
class Mirror:
    """A script handed to its reader in the view: `base` (a read-only tmpfs of the run's namespace, which
    no process outside it can rename in) mirrors the tree from / down to `real_dir`, where the sealed copy
    sits as `name`; every other entry at each level is a link to the real one, so the script's relative
    requires (`../lib` included), FindBin and `__dirname` reads still reach its project."""

    base: str
    real_dir: str
    name: str
    data: bytes
    runnable: bool = False

    @property
    def view_dir(self) -> str:
        return self.base + self.real_dir.rstrip("/")

    @property
    def path(self) -> str:
        return os.path.join(self.view_dir, self.name)


class StaleContent(Exception):
    """A bound file is not what was decided on (or cannot be read): the run is refused."""


@dataclass
class VerifiedRun:
    """The command to start and the sealed copies it reads (inherited by the child at the same numbers)."""

    command: str
    fds: tuple[int, ...] = ()
    checked: int = 0
    # Agent-writable files run from copies, by real path and verified bytes: the run's view shows those
    # bytes at the path too, so a script re-reading "$0" or __file__ gets what was approved.
    rereads: tuple[tuple[str, bytes], ...] = ()
    mirrors: tuple[Mirror, ...] = ()  # scripts of readers that are given a path (read_words)
    # What `command` was before any word was replaced, and the replacements (segment path, argv index →
    # words): the pinned view adds its own (a make's sealed makefiles) and renders once more.
    source: str = ""
    words: dict[tuple[tuple[int, ...], int], Sequence[str]] = field(default_factory=dict)
    _closed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.source = self.source or self.command

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def sealed_copy(data: bytes, name: str, head: Callable[[int], bytes] | None = None) -> int:
    """A memfd holding `data`, sealed against any write, growth or shrink: no one, the agent included,
    can change what the kernel or an interpreter reads from it. `head(fd)` goes before the data (text
    that names the copy's own fd number)."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        fd = os.memfd_create(name[:200], flags | MFD_EXEC)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        fd = os.memfd_create(name[:200], flags)  # kernels before 6.3 know no MFD_EXEC
    try:
        view = memoryview(head(fd) + data if head is not None else data)
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _short(digest: str | None) -> str:
    return f"sha256 {digest[:12]}…" if digest else ("no file" if digest is None else "unreadable")


def verify(binding: ContentBinding | None, command: str, pinned: str | None) -> VerifiedRun:
    """Check every bound file against its decided digest and return what to run.

    When `command` is the pinned rendering, each agent-writable file is replaced by a sealed copy of the
    very bytes just hashed (`/proc/self/fd/N`), so nothing written after the check can run. System-owned
    files (only root can change them) are checked against the digest cache and run by path.
    Raises StaleContent saying which file changed and how.
    """
    if binding is not None and binding.refuse:
        raise StaleContent(f"the run cannot be bound to what was approved: {binding.refuse}")
    if binding is None or not binding.items:
        return VerifiedRun(command)
    substitute = pinned is not None and command == pinned
    run = VerifiedRun(command)
    copies: dict[str, str] = {}  # real path → /proc/self/fd/N of its sealed copy
    mirrored: dict[str, str] = {}  # real path → its copy's path in the view (Mirror)
    fds: list[int] = []
    try:
        for item in binding.items:
            data = _check(item)
            run.checked += 1
            if item.linked and substitute:
                # Root's file, just checked, run by its real path: never again through the agent's link.
                copies.setdefault(item.real, item.real)
                continue
            if data is not None and substitute and item.real not in copies:
                fd = sealed_copy(data, os.path.basename(item.real))
                fds.append(fd)
                copies[item.real] = f"/proc/self/fd/{fd}"
                if _runs_under_its_name(binding, item):
                    # a later re-read by its real path: the view binds these very bytes there, read-only
                    run.rereads += ((item.real, data),)
                if _handed_a_path(binding, item):
                    mirror = Mirror(
                        os.path.join(view_root(), "m", str(len(run.mirrors))),
                        os.path.dirname(item.real),
                        os.path.basename(item.real),
                        data,
                        _runnable(item.real),
                    )
                    run.mirrors += (mirror,)
                    mirrored[item.real] = mirror.path
        run.fds = tuple(fds)
        if substitute:
            words = _words(binding, copies, mirrored)
            rendered = binding.render(words) if words else None
            if rendered is not None:
                run.command = rendered
                run.words = dict(words)
    except BaseException:
        run.fds = tuple(fds)
        run.close()
        raise
    return run


def _runs_under_its_name(binding: ContentBinding, item: ContentItem) -> bool:
    """Whether the run may read `item` again by its real path, beside its mirror: a script naming itself by
    a literal path (`cat ./s.sh`). The view binds the copy there read-only too, which holds against an
    in-place rewrite (not a rename: "$0" and __file__ name the mirror, _handed_a_path)."""
    if item.role == "script":
        return True
    if item.kind != "shebang":
        return False
    interp = next((i for i in binding.items if i.role == "interpreter" and i.parent == item.real), None)
    return interp is not None and reader_of(interp.real) == ""


def _handed_a_path(binding: ContentBinding, item: ContentItem) -> bool:
    """Whether the run hands `item` to its reader by a path in its mirror (Mirror): every script an
    interpreter is given (`sh s.sh`, `python3 x.py`, `perl x.pl`, …) and every `#!` script run through
    its verified interpreter (`./s.sh`). "$0", __file__, BASH_SOURCE and __filename are then that path,
    whose every directory is the view's own tmpfs: no rename outside the run's namespace reaches a
    re-read of it, as it reaches a copy bound at the script's own path (Linux detaches that bind).
    Nothing is sourced from `-c '. COPY'` either, so bash's "am I sourced?" tests (`(return 0)`, `$-`,
    BASH_EXECUTION_STRING, BASH_SOURCE) answer as under `bash s.sh`."""
    if item.role == "script":
        return True
    if item.kind != "shebang":
        return False
    return any(i.role == "interpreter" and i.parent == item.real for i in binding.items)


def _runnable(path: str) -> bool:
    try:
        return bool(os.stat(path).st_mode & 0o111)
    except OSError:
        return False


def _check(item: ContentItem) -> bytes | None:
    """The verified bytes of an agent-writable file (None for a system-owned one, checked by digest)."""
    if item.sha256 is None:
        if item.search:
            found = shutil.which(item.path, path=item.search)
            if found is not None:
                raise StaleContent(f"{item.path} appeared on PATH ({found}) since it was approved (absent)")
        elif os.path.lexists(item.path):
            raise StaleContent(f"{item.path} appeared since it was approved (it did not exist)")
        return None
    if item.sha256 == UNREADABLE:
        # Bound unreadable (over the cap, a FIFO): nothing is read again here, the run is refused.
        raise StaleContent(f"{item.path} could not be bound when it was decided (see the decision's reasons)")
    if not item.writable or item.linked:
        st = system_stat(item.real)
        hit = CACHE.get(st) if st is not None else None
        if hit is not None and hit[0] == item.sha256:
            return None  # unchanged since it was hashed, and only root can change it
    try:
        fd, st = open_regular(item.real)
    except ContentError as exc:
        raise StaleContent(f"{item.path} is gone or unreadable since it was approved ({exc})") from None
    try:
        if (item.writable and not item.linked) or not system_owned(item.real):
            try:
                data = read_all(fd, st.st_size, WRITABLE_MAX_BYTES)
            except ContentError as exc:
                raise StaleContent(f"{item.path}: {exc}") from None
            found = hashlib.sha256(data).hexdigest()
        else:
            try:
                data, found = None, hash_fd(fd, st, CACHE, path=item.path)
            except ContentError as exc:  # over the cap content binding reads: it was bound unreadable
                raise StaleContent(f"{item.path}: {exc}") from None
    finally:
        os.close(fd)
    if found != item.sha256:
        raise StaleContent(
            f"{item.path} changed since it was approved ({_short(item.sha256)} approved, {_short(found)} now)"
        )
    return data


def _words(
    binding: ContentBinding, copies: dict[str, str], mirrored: dict[str, str]
) -> dict[tuple[tuple[int, ...], int], list[str]]:
    """(segment, argv index) → the words that run the verified copies instead of the paths."""
    out: dict[tuple[tuple[int, ...], int], list[str]] = {}
    interpreters: dict[str | None, ContentItem] = {
        i.parent: i for i in binding.items if i.role == "interpreter" and i.parent
    }
    for item in binding.items:
        if item.argv_index < 0 or item.sha256 is None:
            continue
        if item.role == "script":
            if item.real in copies:
                out[(item.where, item.argv_index)] = read_words(
                    item.reader, copies[item.real], item.word, item.skip_first, mirrored.get(item.real, "")
                )
            continue
        words = _run_words(item, copies, mirrored, interpreters, 0)
        if words != [item.path]:
            out[(item.where, item.argv_index)] = words
    # `bash x.sh` runs its copy as `bash -c '. COPY' x.sh`; bash given `-c` with a socket on stdin (a held
    # session's) takes itself for a shell sshd started and sources ~/.bashrc, which `bash x.sh` never
    # does. `--norc` (a long option: before the agent's short ones) keeps the run what was approved.
    for item in binding.items:
        if item.role != "script" or item.reader != "sh" or item.real not in copies or item.sha256 is None:
            continue
        exe = next(
            (
                i
                for i in binding.items
                if i.role == "executable" and i.where == item.where and i.argv_index == 0
            ),
            None,
        )
        if exe is not None and name_of(exe.real) == "bash":
            out[(item.where, 0)] = [*out.get((item.where, 0), [exe.path]), "--norc"]
    return out


def _run_words(
    item: ContentItem,
    copies: dict[str, str],
    mirrored: dict[str, str],
    interpreters: dict[str | None, ContentItem],
    depth: int,
) -> list[str]:
    """How to run one bound executable from what was verified: a `#!` script through its (verified)
    interpreter named explicitly, so the kernel never looks the interpreter up by path again."""
    own = copies.get(item.real, item.path)
    if item.kind == "shebang" and item.shebang and depth < 4:
        interp = interpreters.get(item.real)
        if interp is not None:
            # Run from its copy, a bash script goes through `-c`: no ~/.bashrc there (see _words).
            copied_bash = item.real in copies and name_of(interp.real) == "bash"
            norc = ["--norc"] if copied_bash and reader_of(interp.real) == "sh" else []
            head = [*_run_words(interp, copies, mirrored, interpreters, depth + 1), *norc, *item.shebang[1:]]
            if item.real in copies:
                name = item.real if item.linked else item.path  # a link's name is the agent's to re-point
                skip = python_skips_first_line(item.shebang[1:])
                mirror = mirrored.get(item.real, "")
                return [*head, *read_words(reader_of(interp.real), own, name, skip, mirror)]
            return [*head, own]
    if item.kind == "text" and item.real in copies:
        return [DEFAULT_SHELL, own]  # no `#!`: the shell would run it as a script (ENOEXEC)
    if item.linked and own == item.real and reader_of(item.real) and venv_of(item.path) is None:
        # A shell or a Python takes its own path from argv[0] ($BASH, sys.executable) and re-runs itself
        # through it (subprocess, multiprocessing): under the link's name that would be the agent's link
        # again, so it runs under its real path, a name only root can change. (A virtualenv's python keeps
        # the link's name below, or it would lose its venv: the ask says that run is not bound.)
        return [own]
    if (
        item.linked
        and own == item.real
        and (os.path.basename(item.path) != os.path.basename(own) or venv_of(item.path) is not None)
        and (system_owned(ARGV0_SHELL))
    ):
        # The program still sees the name it was typed by (`xzcat`, a multi-call binary's applet). `--norc`:
        # bash given `-c` with a socket on stdin (a held session's) would source ~/.bashrc first.
        return [ARGV0_SHELL, "--norc", "-c", 'exec -a "$0" "$@"', item.path, own]
    return [own]
