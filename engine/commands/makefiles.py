"""Which makefiles a GNU make command reads, found the way make finds them: its options read by make's own
grammar (getopt_long: clusters, attached values, unambiguous prefixes of long options, permutation, `--`),
`-C` applied cumulatively, `-f` relative to the directory that leaves. The vetting names those files, and
the spawn hands make the vetted bytes by a name no rename reaches (`-f /proc/self/fd/N`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["DEFAULTS", "MakeArgs", "MakeRead", "not_regular", "parse_make", "reads"]

DEFAULTS = ("GNUmakefile", "makefile", "Makefile")  # the first one present is the one make reads
# Short options (make 4.3's table): those taking a value, those whose value is optional (attached only;
# make also takes a following number for -j/-l, which is never a file), and plain flags.
_VALUE = frozenset("CEfIoW")
_OPTIONAL = frozenset("jlO")
_FLAGS = frozenset("bmBdehikLnpqrRsStvw")
# Long options → the short letter they stand for (or their own name), and whether they take a value:
# "=" required, "?" optional (attached with `=` only), "" none.
_LONG: dict[str, tuple[str, str]] = {
    "always-make": ("B", ""), "directory": ("C", "="), "debug": ("debug", "?"),
    "environment-overrides": ("e", ""), "eval": ("E", "="), "file": ("f", "="), "makefile": ("f", "="),
    "help": ("h", ""), "ignore-errors": ("i", ""), "include-dir": ("I", "="), "jobs": ("j", "?"),
    "keep-going": ("k", ""), "load-average": ("l", "?"), "max-load": ("l", "?"),
    "check-symlink-times": ("L", ""), "just-print": ("n", ""), "dry-run": ("n", ""), "recon": ("n", ""),
    "old-file": ("o", "="), "assume-old": ("o", "="), "output-sync": ("O", "?"),
    "print-data-base": ("p", ""), "question": ("q", ""), "no-builtin-rules": ("r", ""),
    "no-builtin-variables": ("R", ""), "silent": ("s", ""), "quiet": ("s", ""),
    "no-silent": ("no-silent", ""),
    "no-keep-going": ("S", ""), "stop": ("S", ""), "touch": ("t", ""), "trace": ("trace", ""),
    "version": ("v", ""), "print-directory": ("w", ""), "no-print-directory": ("no-print-directory", ""),
    "what-if": ("W", "="), "new-file": ("W", "="), "assume-new": ("W", "="),
    "warn-undefined-variables": ("warn-undefined-variables", ""),
}  # fmt: skip
# A command-line assignment is make code (`x:=$(shell …)` and `x!=…` run at once, a `$` in any value runs
# wherever the makefile expands it, GNUMAKEFLAGS=--eval=… is --eval): the only ones understood set a user
# variable (a plain name make itself gives no meaning) to text with no `$`, by an operator that only
# stores it. Anything else asks. Make's own variables: SHELL runs every recipe, MAKEFLAGS and
# GNUMAKEFLAGS are options, MAKEFILES names makefiles read first, VPATH/GPATH/SUFFIXES steer lookups.
_ASSIGNMENT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=|:=|::=|:::=|\+=|\?=)(.*)", re.DOTALL)
_MAKES_OWN = frozenset({"SHELL", "MFLAGS", "GNUMAKEFLAGS", "VPATH", "GPATH", "SUFFIXES", "CURDIR"})


@dataclass
class MakeArgs:
    """What make's argv says about where it works and what it reads."""

    dirs: list[str] = field(default_factory=list)  # every -C, in order (each relative to the previous)
    # every -f: (index of the argv word holding the value, the text before the value in that word, value)
    files: list[tuple[int, str, str]] = field(default_factory=list)
    problem: str | None = None  # an option or assignment exechost does not model: the command asks
    # every command-line assignment make takes, (name, value), in order: make exports each into every
    # recipe's environment and lets it override the makefile's and its built-in rules' variables
    assignments: list[tuple[str, str]] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)  # the targets named (none: the makefile's default)
    no_builtin: bool = False  # -r/-R: make has no built-in rules (with no makefile, nothing to run)


@dataclass(frozen=True)
class MakeRead:
    """One makefile make will read: where its name is in the argv (None: found by the default lookup),
    the name as make knows it (MAKEFILE_LIST), its path, and whether it is there now."""

    slot: tuple[int, str] | None  # (argv index, text before the value in that word)
    name: str
    path: str
    present: bool


def _long(word: str, argv: Sequence[str], i: int, out: MakeArgs) -> int:
    """One `--name[=value]` word (and the next, for a required value): the index after it."""
    text, eq, value = word[2:].partition("=")
    if text in _LONG:
        matches = [text]
    else:
        matches = [name for name in _LONG if name.startswith(text)]
        if len({_LONG[m] for m in matches}) > 1:
            out.problem = f"`{word}`: an ambiguous make option"
            return len(argv)
    if not matches:
        out.problem = f"`{word}`: a make option exechost does not know"
        return len(argv)
    letter, kind = _LONG[matches[0]]
    out.no_builtin = out.no_builtin or letter in ("r", "R")
    if kind == "=" and not eq:
        if i + 1 >= len(argv):
            return i + 1
        _take(letter, i + 1, "", argv[i + 1], out)
        return i + 2
    if eq and kind == "":
        out.problem = f"`{word}`: make takes no value there"
        return len(argv)
    if eq:
        _take(letter, i, word[: len(word) - len(value)], value, out)
    return i + 1


def _take(letter: str, index: int, prefix: str, value: str, out: MakeArgs) -> None:
    if letter == "E":
        out.problem = f"`--eval {value}`: make code given on the command line (make runs it as a makefile)"
    elif letter == "C":
        out.dirs.append(value)
    elif letter == "f":
        out.files.append((index, prefix, value))
        if value == "-":
            out.problem = "`-f -`: a makefile read from stdin (the agent can write a session's stdin)"


def _short(word: str, argv: Sequence[str], i: int, out: MakeArgs) -> int:
    """One cluster (`-kf x.mk`, `-kfx.mk`, `-sC dir`, `-j4`): the index after it."""
    for at in range(1, len(word)):
        letter = word[at]
        rest = word[at + 1 :]
        if letter in _VALUE:
            if rest:
                _take(letter, i, word[: at + 1], rest, out)
                return i + 1
            if i + 1 < len(argv):
                _take(letter, i + 1, "", argv[i + 1], out)
            return i + 2
        if letter in _OPTIONAL:
            return i + 1  # the rest of the word is its value
        if letter not in _FLAGS:
            out.problem = f"`{word}`: a make option exechost does not know"
            return len(argv)
        out.no_builtin = out.no_builtin or letter in "rR"
    return i + 1


def assignment_problem(word: str) -> str | None:
    """None for an assignment make only stores as text in a user variable; else why it asks."""
    match = _ASSIGNMENT.fullmatch(word)
    if match is None:
        return f"`{word}`: a make assignment exechost does not model (make may run it as code)"
    name, _op, value = match.groups()
    if name in _MAKES_OWN or name.startswith("MAKE"):
        return f"`{word}`: sets {name}, a variable make itself acts on"
    if "$" in value:
        return f"`{word}`: a value make expands (a `$` can call $(shell …))"
    return None


def parse_make(argv: Sequence[str]) -> MakeArgs:
    """make's options as make reads them (options may follow targets; `--` ends them)."""
    out = MakeArgs()
    i = 1
    options = True
    while i < len(argv) and out.problem is None:
        word = argv[i]
        if options and word == "--":
            options = False
            i += 1
        elif options and word.startswith("--"):
            i = _long(word, argv, i, out)
        elif options and word.startswith("-") and word != "-":
            i = _short(word, argv, i, out)
        else:
            if "=" in word:  # make takes every word with `=` in it for an assignment, or fails on it
                out.problem = assignment_problem(word)
                match = _ASSIGNMENT.fullmatch(word)
                if match is not None:
                    out.assignments.append((match.group(1), match.group(3)))
            else:
                out.goals.append(word)
            i += 1
    return out


def reads(args: MakeArgs, cwd: str) -> list[MakeRead]:
    """The makefiles make reads, in order: every `-f` (relative to the last `-C`; `-` is stdin, not a
    file), else the first of DEFAULTS present (none present: the one it would read if one appeared,
    `present` False — a racer must not be able to add it)."""
    where = cwd
    for d in args.dirs:
        where = os.path.join(where, d)
    if args.files:
        paths = [(index, prefix, value, os.path.join(where, value)) for index, prefix, value in args.files]
        return [MakeRead((i, prefix), v, p, os.path.isfile(p)) for i, prefix, v, p in paths if v != "-"]
    for name in DEFAULTS:
        path = os.path.join(where, name)
        if os.path.isfile(path):
            return [MakeRead(None, name, path, True)]
    return [MakeRead(None, DEFAULTS[-1], os.path.join(where, DEFAULTS[-1]), False)]


def not_regular(args: MakeArgs, cwd: str) -> list[str]:
    """Every `-f` that names something other than a regular file (stdin, a device, a fifo, a directory):
    what make reads there is not in any file, so nothing can be vetted or bound."""
    named = [r for r in reads(args, cwd) if r.slot is not None]
    return [r.path for r in named if os.path.lexists(r.path) and not r.present]
