"""pip's config files are pip's argv read from files: `python` re-runs pip with another interpreter,
`find-links` names where packages come from (an sdist there builds, its backend runs), `requirement`
names requirements files. A pip command is vetted with the config files it reads, found the way pip
finds them (pip's `configuration.get_configuration_files`), keyed the way pip keys them, and read by the
same option allowlist as its argv (engine.commands.pipargs): an option not known inert, in a file the
agent can change, makes the command ask (fresh round 10 f).

Which files: the global ones (`$XDG_CONFIG_DIRS/pip/pip.conf`, default /etc/xdg, and /etc/pip.conf) and
the site one, `<sys.prefix>/pip.conf` of the interpreter pip runs in (a venv's own dir: `pip config
--site set` writes it); each only when the agent can change it (a root-owned /etc/pip.conf is the
operator's). The user's (~/.pip/pip.conf, ~/.config/pip/pip.conf) are the operator's, read-only in the
host view with the rest of the home, as treecode passes over the home. PIP_CONFIG_FILE never reaches a
host run (hostenv refuses it, given or inherited). Which keys: pip applies a key of section `global` or
of the command's own name (`[install]`), as the long option `--<key>` (lower-cased, `_` as `-`), and
skips keys no option of that parser has; so are they read here: pip's general options for every command
(`python` asks wherever it is), a build's own options too (install, wheel, download, lock), where a key
exechost does not model asks."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from engine.commands.gitvet import Finding, Record
from engine.commands.pipargs import BUILDS, local_path, option_kind, parse_pip, read_requirements
from engine.commands.regular import Unreadable, read_regular

__all__ = ["CONFIG", "PipConfig", "config_files", "findings", "read_configs", "site_prefixes"]

NAME = "pip.conf"
CAP = 1 << 20  # a config past this is not read by a prefix: it asks
# Every finding's text starts so: what a key names is not in the config's bytes (an interpreter, a
# directory of sdists), so treecode.binding never binds an approval of it to those bytes.
CONFIG = "pip's config"
# pip re-runs itself with `--python` (argv or config) only when this is not in its environment (pip's
# cli/main_parser.py: the re-run sets it for the child)
NO_RERUN = "_PIP_RUNNING_IN_SUBPROCESS"
SOURCE = f"{CONFIG} names a place packages are taken from (an sdist there builds: its backend runs)"


_PYTHON = re.compile(r"(python|pypy)[0-9.]*")
_DISTLIB = "'''exec'"  # distlib's second line, when a `#!` line would be too long


def interpreter(pip: str, path: str | None = None) -> str | None:
    """The Python a pip console script runs in: its `#!` line (`#!/usr/bin/env python3` found on `path`),
    or distlib's two-line form for a long path (`#!/bin/sh`, then `exec` of the python, in quotes); None
    for anything else (a program that is no such script: its site config is not known)."""
    try:
        head = read_regular(pip, 1024, prefix=True).decode(errors="replace")
    except Unreadable:
        return None
    lines = head.split("\n")
    if not lines[0].startswith("#!"):
        return None
    words = lines[0][2:].split()
    if words and os.path.basename(words[0]) == "env":
        name = next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)
        words = [shutil.which(name, path=path) or ""] if name else []
    elif words[:1] == ["/bin/sh"] and len(lines) > 1 and lines[1].startswith(_DISTLIB):
        try:
            words = shlex.split(lines[1])[1:2]
        except ValueError:
            return None
    if not words or not os.path.isabs(words[0]) or not _PYTHON.fullmatch(os.path.basename(words[0])):
        return None
    return words[0]


def site_prefixes(python: str) -> list[str]:
    """`sys.prefix` of `python`, as its startup finds it: the directory holding `pyvenv.cfg` beside the
    executable or one above (a venv), else the installation's prefix above the real binary's directory.
    Both candidates of a venv-less interpreter are named (its path and its real path may differ)."""
    here = os.path.dirname(python)
    for d in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(d, "pyvenv.cfg")):
            return [d]
    out = [os.path.dirname(here), os.path.dirname(os.path.dirname(os.path.realpath(python)))]
    return list(dict.fromkeys(out))


def config_files(python: str, environ: dict[str, str] | None = None) -> list[str]:
    """The global and site config files pip reads when it runs in `python`, in pip's order (later ones
    win)."""
    env = os.environ if environ is None else environ
    dirs = [d.rstrip(os.sep) for d in (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep) if d]
    found = [os.path.join(os.path.expanduser(d), "pip", NAME) for d in dirs] + [os.path.join("/etc", NAME)]
    found += [os.path.join(p, NAME) for p in site_prefixes(python)]
    return list(dict.fromkeys(found))


@dataclass
class PipConfig:
    """What the config files a pip run reads say, in the files the agent can change."""

    data: dict[str, bytes] = field(default_factory=dict)  # each such file's bytes, as read
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file, why it asks)
    sources: list[tuple[str, str]] = field(default_factory=list)  # (file, a place packages come from)
    requirements: list[str] = field(default_factory=list)  # requirement and constraint files named
    python: bool = False  # a `python` key: pip re-runs itself with that interpreter


def read_configs(files: Sequence[str], command: str | None, writable: Callable[[str], bool]) -> PipConfig:
    """Every key of `files` that pip would apply to `command`, judged by its option's kind; only files
    present and `writable` are read (the others are the operator's or root's)."""
    out = PipConfig()
    sections = ("global", command) if command else ("global",)
    for path in files:
        if not os.path.lexists(path) or not writable(path):
            continue
        try:
            data = read_regular(path, CAP)
        except Unreadable as exc:
            out.problems.append((path, f"{CONFIG} that cannot be read as a file ({exc.reason})"))
            continue
        out.data[path] = data
        items = _items(data)
        if isinstance(items, str):  # pip refuses it too; asked rather than guessed
            out.problems.append((path, f"{CONFIG} that does not parse ({items})"))
            continue
        for section, name, value in items:
            if section in sections and value:  # another command's section, or empty: pip skips it
                _key(path, section, name, value, command, out)
    return out


# bytes -> their (section, key, value) items, or why they do not parse: a parser costs ~0.5 ms to make,
# and every pip decision reads the same few files
_PARSED: dict[bytes, tuple[tuple[str, str, str], ...] | str] = {}


def _items(data: bytes) -> tuple[tuple[str, str, str], ...] | str:
    held = _PARSED.get(data)
    if held is not None:
        return held
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(data.decode("utf-8", "replace"))
        # each section's items, [DEFAULT]'s keys among them (as pip reads them)
        found: tuple[tuple[str, str, str], ...] | str = tuple(
            (section, name, value) for section in parser.sections() for name, value in parser.items(section)
        )
    except configparser.Error as exc:
        found = type(exc).__name__
    if len(_PARSED) >= 64:
        _PARSED.clear()
    _PARSED[data] = found
    return found


def _key(path: str, section: str, name: str, value: str, command: str | None, out: PipConfig) -> None:
    key = name.lower().replace("_", "-").removeprefix("--")
    kind = option_kind("--" + key, command)
    shown = f"`{section}.{key} = {value}`"
    if kind is None:
        if command in BUILDS:  # a build applies every option it has: one not modelled asks
            out.problems.append((path, f"{CONFIG} sets {shown}, an option exechost does not model"))
    elif kind == "source":
        out.sources += [(path, v) for v in value.split()]
    elif kind == "reqs":  # `constraint = /etc/xdg/pip/constraints.txt`: read as the argv's `-c` file is
        out.requirements += value.split()
    elif kind == "python":
        out.python = True
        out.problems.append((path, f"{CONFIG} sets {shown}: pip would run itself with that interpreter"))
    elif kind not in ("", "data"):
        out.problems.append((path, f"{CONFIG} sets {shown}: it names what pip reads or builds"))


def findings(
    program: str,
    argv: Sequence[str],
    pip: str,
    cwd: str,
    writable: Callable[[str], bool],
    record: Record | None = None,
) -> list[Finding]:
    """What the config files this pip reads bring: every key that asks, and every local place packages
    are taken from that the agent can change (present or not: one made after the vet is read too). Each
    file read is kept in `record`, so the run reads those very bytes (engine.commands.pinned binds each
    over its path) — but for `pip config`, which writes them (its general options are vetted all the
    same)."""
    python = interpreter(pip)
    args = parse_pip(argv)
    if python is None:
        if record is not None:
            record.env[NO_RERUN] = ""
        return [Finding(program, pip, f"{CONFIG}: not a Python script whose site config could be found")]
    command = args.command
    read = read_configs(config_files(python), command, writable)
    if record is not None:
        if command != "config":
            record.data.update(read.data)
        # Decided not to re-run itself (no --python, no `python` key: any argv problem, asked, counts as
        # one): then it never does, whatever a config made after the vet says (an absent one is not held,
        # and `pip config` reads the file it writes). An empty value holds it off for the whole command.
        rerun = args.problem is not None or read.python
        record.env[NO_RERUN] = "" if rerun or record.env.get(NO_RERUN) == "" else "1"
    found = [Finding(program, path, why) for path, why in read.problems]
    if command not in BUILDS:
        return list(dict.fromkeys(found))
    sources = [(value, cwd) for _path, value in read.sources]
    if read.requirements:
        # pip reads these (and the files they nest) as the argv's own: every line by the same grammar,
        # each file's bytes kept for the run like the config's
        held: dict[str, bytes] = {}
        reqs = read_requirements(read.requirements, cwd, data=held)
        mine = {p: b for p, b in held.items() if writable(p)}
        if record is not None:
            record.data.update(mine)
        unread = [p for p in reqs.files if p not in held and writable(p)]  # absent: one made later is read
        found += [
            Finding(program, p, f"{CONFIG} names a requirements file that cannot be read") for p in unread
        ]
        found += [Finding(program, p, f"{CONFIG}: a requirements line: {why}") for p, why in reqs.problems]
        found += [
            Finding(program, p, f"{CONFIG} names a project pip builds") for p in reqs.projects if writable(p)
        ]
        sources += reqs.sources
    for value, where in sources:
        value = os.path.expanduser(value) if value.startswith("~") else value
        place = local_path(value, where)
        if place is not None and writable(place):
            found.append(Finding(program, os.path.realpath(place), SOURCE))
    return list(dict.fromkeys(found))
