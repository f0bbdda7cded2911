"""Which word of a command an interpreter reads as its program, and what a `#!` line or a venv runs."""

from __future__ import annotations

import os
from collections.abc import Sequence

from engine.commands.digests import SHEBANG_MAX
from engine.commands.interpoptions import FILE, program_source
from engine.commands.interpreters import name_of

# Programs that read a file operand as code, by family: options that mean "the code is inline" (no file
# operand) and options that take a value (the next word is not the operand).
SHELLS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "ash",
        "zsh",
        "ksh",
        "mksh",
        "pdksh",
        "yash",
        "fish",
        "csh",
        "tcsh",
        "posh",
        "rc",
        "es",
    }
)
_FAMILIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "shell": (frozenset({"-c"}), frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})),
    "python": (frozenset({"-c", "-m"}), frozenset({"-W", "-X", "-Q"})),
    "perl": (frozenset({"-e", "-E"}), frozenset({"-I", "-M", "-m", "-x"})),
    "ruby": (frozenset({"-e"}), frozenset({"-I", "-r", "-C", "-E"})),
    "node": (
        frozenset({"-e", "-p", "--eval", "--print"}),
        frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions"}),
    ),
    "other": (frozenset({"-e", "-r"}), frozenset({"-l", "-d", "-I"})),
}
FAMILY_OF = {
    **{n: "shell" for n in SHELLS},
    **{n: "python" for n in ("python", "pypy")},
    "perl": "perl",
    "ruby": "ruby",
    **{n: "node" for n in ("node", "nodejs")},
    **{n: "other" for n in ("php", "lua", "luajit", "tclsh", "wish", "expect", "rscript", "julia", "guile")},
}
# Readers that can run a copy while the script keeps its own name ($0, __file__, sys.path[0]).
_POSIX_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "yash", "posh"})
# The shell runs these itself whatever PATH holds: a missing one is nothing to bind.
SHELL_BUILTINS = frozenset(
    {
        ".",
        ":",
        "[",
        "alias",
        "bg",
        "break",
        "cd",
        "command",
        "continue",
        "echo",
        "eval",
        "exec",
        "exit",
        "export",
        "false",
        "fg",
        "getopts",
        "hash",
        "jobs",
        "kill",
        "local",
        "printf",
        "pwd",
        "read",
        "readonly",
        "return",
        "set",
        "shift",
        "test",
        "times",
        "trap",
        "true",
        "type",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
        "source",
        "declare",
        "typeset",
        "let",
    }
)
FILE_FLAG = {"awk": "-f", "gawk": "-f", "mawk": "-f", "nawk": "-f", "sed": "-f", "gsed": "-f"}


def parse_shebang(head: bytes) -> tuple[str, ...] | None:
    """The `#!` line's interpreter and its one optional argument (as Linux splits it); None without one."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:SHEBANG_MAX].split(b"\n", 1)[0].strip(b" \t")  # as Linux: a CR stays in the name
    if not line:
        return None
    text = line.decode("utf-8", "surrogateescape")
    parts = text.split(None, 1)
    return tuple(parts)


def file_kind(head: bytes) -> str:
    if head.startswith(b"\x7fELF"):
        return "elf"
    if head.startswith(b"#!"):
        return "shebang"
    return "text"


PT_INTERP = 3


def elf_interpreter(data: bytes) -> str | None:
    """The loader an ELF image names in its PT_INTERP header (what the kernel maps by that path at exec, as
    it runs a `#!` line's interpreter); None for a static binary or anything that is not an ELF image."""
    if len(data) < 52 or not data.startswith(b"\x7fELF") or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide, big = data[4] == 2, data[5] == 2

    def num(at: int, size: int) -> int:
        return int.from_bytes(data[at : at + size], "big" if big else "little")

    phoff = num(32, 8) if wide else num(28, 4)
    phentsize, phnum = (num(54, 2), num(56, 2)) if wide else (num(42, 2), num(44, 2))
    for i in range(min(phnum, 256)):
        at = phoff + i * phentsize
        if at + (56 if wide else 32) > len(data) or num(at, 4) != PT_INTERP:
            continue
        offset, size = (num(at + 8, 8), num(at + 32, 8)) if wide else (num(at + 4, 4), num(at + 16, 4))
        name = data[offset : offset + min(size, 4096)].split(b"\0", 1)[0]
        return name.decode("utf-8", "surrogateescape") or None
    return None


def reader_of(program: str) -> str:
    """`sh` for POSIX shells, `python` for Python, else "" (the copy's /proc path becomes its name)."""
    name = name_of(program)
    if name in _POSIX_SHELLS:
        return "sh"
    if name in ("python", "pypy"):
        return "python"
    return ""


def script_operand(argv: Sequence[str], program: str) -> int | None:
    """The argv index of the file an interpreter reads as its program (`sh s.sh`, `python3 -u x.py`,
    `awk -f prog.awk`); None when the code is inline (`-c`, `-e`, `-m`) or there is no operand."""
    name = name_of(program)
    flag = FILE_FLAG.get(name)
    if flag is not None:
        for i, arg in enumerate(argv[1:-1], 1):
            if arg == flag:
                return i + 1
        return None
    source = program_source(argv, program)
    if source is not None:
        return source.index if source.kind == FILE and source.index < len(argv) else None
    family = FAMILY_OF.get(name)
    if family is None:
        return None
    inline, with_value = _FAMILIES[family]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1 if i + 1 < len(argv) else None
        if arg == "-" or not arg.startswith(("-", "+")) or (family != "shell" and arg.startswith("+")):
            return None if arg == "-" else i
        if arg in inline or arg.split("=", 1)[0] in inline:
            return None
        if family == "shell" and not arg.startswith("--") and "c" in arg[1:]:
            return None  # `-ec`: a cluster holding -c
        if family == "python" and not arg.startswith("--") and any(c in arg[1:] for c in "cm"):
            return None
        i += 2 if arg in with_value else 1
    return None


def venv_of(executable: str) -> str | None:
    """The virtualenv a Python started as `executable` (its argv[0], links not resolved) takes as its
    prefix: CPython's getpath looks for `pyvenv.cfg` beside it and one directory up. None when neither."""
    here = os.path.dirname(os.path.abspath(executable))
    for base in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(base, "pyvenv.cfg")):
            return base
    return None
