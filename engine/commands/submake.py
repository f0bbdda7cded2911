"""Every make of a run reads the vetted makefiles: in the view, make's own path is a program that finds, by
make's grammar, which makefiles that make would read, and hands it sealed copies of the vetted ones."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from engine.commands import makefiles
from engine.commands.filetrust import system_owned

PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Held:
    """One vetted makefile: the directory it sits in (device, inode when the view was made), its name
    there, and its bytes; `default` when make found it by its default lookup in that directory."""

    dev: int
    ino: int
    name: str
    data: bytes
    default: bool


# The program bound over make's path in the view (run by the system's Python, isolated: -I ignores the
# agent's PYTHON* variables and its user site, -S the site packages), so `make`, `/usr/bin/make` and
# `$(MAKE)` (make's argv[0]) all start it. It reads its argv with makefiles.parse_make and makefiles.reads
# (their source is included above this), relative to its cwd: each makefile that sits in a held directory
# (compared by device and inode, never by name) and is held there is replaced by a sealed memfd of the
# vetted bytes (`-f /proc/self/fd/N`, the fd inherited by make); a default lookup in a directory whose
# default was held reads that one, whatever appeared beside it since. Then it runs the real make (bound
# at REAL_MAKE) under make's own name. A sub-make (MAKELEVEL set: make exports it to its recipes) whose
# options exechost does not model is refused, since what it would read cannot be told; the command's own
# make with such options was asked about and approved as shown, and runs so.
_MAIN = r"""
import fcntl as _fcntl
import sys as _sys


def _plain_assignment(word):
    return None


assignment_problem = _plain_assignment  # a sub-make's assignments do not change which makefiles it reads


def _copy(name, data):
    fd = os.memfd_create(name[:200], os.MFD_ALLOW_SEALING)
    head = b""
    if _NAME.fullmatch(name):
        head = ("MAKEFILE_LIST := $(patsubst /proc/self/fd/%d,%s,$(MAKEFILE_LIST))\n" % (fd, name)).encode()
    view = memoryview(head + data)
    while view:
        view = view[os.write(fd, view):]
    _fcntl.fcntl(fd, _fcntl.F_ADD_SEALS, _fcntl.F_SEAL_SEAL | _fcntl.F_SEAL_SHRINK | _fcntl.F_SEAL_GROW
                 | _fcntl.F_SEAL_WRITE)
    return "/proc/self/fd/%d" % fd


def _main():
    argv = [MAKE_PATH, *_sys.argv[1:]]
    args = parse_make(argv)
    if args.problem is not None and not os.environ.get("MAKELEVEL"):
        os.execv(REAL_MAKE, argv)
    if args.problem is not None:
        _sys.stderr.write("exechost: refused: a sub-make exechost cannot pin to the vetted makefiles: %s\n"
                          % args.problem)
        _sys.exit(2)
    head = []
    for read in reads(args, "."):
        where = os.path.dirname(read.path) or "."
        try:
            st = os.stat(where)
        except OSError:
            continue
        held = HELD.get((st.st_dev, st.st_ino), {})
        if read.slot is None:
            name = held.get(None, read.name)
            if name in held:
                head += ["-f", _copy(name, held[name])]
        elif os.path.basename(read.path) in held:
            index, prefix = read.slot
            argv[index] = prefix + _copy(read.name, held[os.path.basename(read.path)])
    os.execv(REAL_MAKE, [argv[0], *head, *argv[1:]])


_main()
"""


def program(make: str, held: Iterable[Held], real: str) -> bytes | None:
    """The text of the program bound over `make` holding `held`, running the real make bound at `real`;
    None when the make or the system's Python is not root's (nothing it runs may be the agent's)."""
    python = os.path.realpath(PYTHON)
    if not system_owned(make) or not system_owned(python):
        return None
    table: dict[tuple[int, int], dict[str | None, object]] = {}
    for h in held:
        entry = table.setdefault((h.dev, h.ino), {})
        entry[h.name] = h.data
        if h.default:
            entry[None] = h.name
    return (
        f"#!{python} -IS\n{_grammar()}\n\nMAKE_PATH = {make!r}\nREAL_MAKE = {real!r}\nHELD = {table!r}\n"
        f"_NAME = re.compile(r'[A-Za-z0-9._+/-]+')\n{_MAIN}"
    ).encode()


def _grammar() -> str:
    with open(makefiles.__file__, encoding="utf-8") as handle:
        return handle.read()


def held_in(path: str, name: str, data: bytes, default: bool) -> Held | None:
    """`data`, vetted at `path`, held in its directory as that directory is now (None when it is gone)."""
    try:
        st = os.stat(os.path.dirname(path))
    except OSError:
        return None
    return Held(st.st_dev, st.st_ino, name, data, default)
