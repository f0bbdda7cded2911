"""What a pip command reads, found the way pip finds it: its argv read by pip's own grammar (optparse:
clusters `-qr file`, attached values `-rfile`, `--opt=value`, unique prefixes of long options, options
after operands, `--`; the command word taken out as pip takes it out), against an allowlist of the options
pip has. An option not on it, and a command not modelled, make the command ask (issue 27 §5)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["BUILDS", "PipArgs", "parse_pip"]

# What an option's value is to pip: "" no value; "data" a value nothing runs from (a name, a number, a
# place pip writes to); "file" a file of requirements or constraints pip reads (which name projects it
# builds); "project" a project pip builds (its backend runs); "source" a local place pip takes packages
# from and may build (find-links, a file: index, a cache, an editable checkout dir); "python" an
# interpreter pip re-runs itself with.
_GENERAL: dict[str, str] = {
    "-V": "", "--version": "", "-h": "", "--help": "", "--debug": "", "--isolated": "",
    "--require-virtualenv": "", "--require-venv": "", "--python": "python", "-v": "", "--verbose": "",
    "-q": "", "--quiet": "", "--log": "data", "--log-file": "data", "--local-log": "data",
    "--no-input": "", "--keyring-provider": "data", "--proxy": "data", "--no-proxy-env": "",
    "--retries": "data", "--timeout": "data", "--default-timeout": "data", "--exists-action": "data",
    "--trusted-host": "data", "--cert": "data", "--client-cert": "data", "--cache-dir": "source",
    "--no-cache-dir": "", "--disable-pip-version-check": "", "--no-color": "",
    "--no-python-version-warning": "", "--use-feature": "data", "--use-deprecated": "data",
    "--resume-retries": "data",
}  # fmt: skip
# install, wheel, download and lock (pip 26's tables; an option a given pip lacks makes pip itself fail).
_BUILD: dict[str, str] = {
    "-r": "file", "--requirement": "file", "-c": "file", "--constraint": "file",
    "--build-constraint": "file", "--requirements-from-script": "file", "--group": "group",
    "--no-deps": "", "--no-dependencies": "", "--only-deps": "", "--only-dependencies": "",
    "-e": "project", "--editable": "project", "--dry-run": "", "-t": "data", "--target": "data",
    "--platform": "data", "--python-version": "data", "--implementation": "data", "--abi": "data",
    "--user": "", "--no-user": "", "--root": "data", "--prefix": "data", "--src": "source",
    "--source": "source", "--source-dir": "source", "--source-directory": "source", "-U": "",
    "--upgrade": "", "--upgrade-strategy": "data", "--force-reinstall": "", "-I": "",
    "--ignore-installed": "", "--ignore-requires-python": "", "--no-build-isolation": "",
    "--use-pep517": "", "--check-build-dependencies": "", "--break-system-packages": "",
    "-C": "data", "--config-settings": "data", "--compile": "", "--no-compile": "",
    "--no-warn-script-location": "", "--no-warn-conflicts": "", "--require-hashes": "",
    "--no-require-hashes": "", "--progress-bar": "data", "--root-user-action": "data",
    "--report": "data", "--no-clean": "", "--pre": "", "--all-releases": "data",
    "--only-final": "data", "--no-binary": "data", "--only-binary": "data", "--prefer-binary": "",
    "-i": "source", "--index-url": "source", "--pypi-url": "source", "--extra-index-url": "source",
    "--no-index": "", "--refresh-package": "data", "-f": "source", "--find-links": "source",
    "--uploaded-prior-to": "data", "-w": "data", "--wheel-dir": "data", "--no-verify": "",
    "-d": "data", "--dest": "data", "--destination-dir": "data", "--destination-directory": "data",
    "-o": "data", "--output": "data",
}  # fmt: skip
# Commands that build (a backend runs) and whose options are modelled above.
BUILDS = frozenset({"install", "wheel", "download", "lock"})
# Commands that build nothing and run nothing whatever their own options say (only pip's general
# options are read, for --python): they read installed metadata, an index, or the cache.
_READERS = frozenset(
    {"uninstall", "freeze", "inspect", "list", "show", "check", "search", "cache", "index", "hash",
     "completion", "debug", "help"}
)  # fmt: skip


@dataclass
class PipArgs:
    """What pip's argv says it reads."""

    command: str | None = None
    files: list[str] = field(default_factory=list)  # requirement/constraint files
    editables: list[str] = field(default_factory=list)  # -e values (a directory there is built)
    operands: list[str] = field(default_factory=list)  # requirements: names, paths, archives, URLs
    sources: list[str] = field(default_factory=list)  # local places packages are taken from
    problem: str | None = None  # an option or command exechost does not model: the command asks


def _match(name: str, table: dict[str, str]) -> str | None:
    """optparse's _match_abbrev: the exact long option, else the one it is a unique prefix of."""
    if name in table:
        return name
    hits = [o for o in table if o.startswith("--") and o.startswith(name)]
    return hits[0] if len(hits) == 1 else None


def _words(argv: Sequence[str], table: dict[str, str], interspersed: bool, out: PipArgs) -> list[str]:
    """optparse's parse_args over `argv`: options applied to `out`, the operands returned."""
    operands: list[str] = []
    i = 0
    while i < len(argv) and out.problem is None:
        word = argv[i]
        i += 1
        if word == "--":
            operands += argv[i:]
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            option = _match(name, table)
            if option is None:
                out.problem = f"`{word}`: a pip option exechost does not model"
                break
            kind = table[option]
            if not kind:
                if eq:
                    out.problem = f"`{word}`: pip takes no value there"
                continue
            if not eq:
                if i >= len(argv):
                    break  # pip fails: a value is missing
                value, i = argv[i], i + 1
            _take(option, kind, value, out)
        elif word.startswith("-") and word != "-":
            for at in range(1, len(word)):
                option = "-" + word[at]
                if option not in table:
                    out.problem = f"`{word}`: a pip option exechost does not model"
                    break
                if table[option]:
                    kind = table[option]
                    value = word[at + 1 :]
                    if not value:
                        if i >= len(argv):
                            break
                        value, i = argv[i], i + 1
                    _take(option, kind, value, out)
                    break
        else:
            operands.append(word)
            if not interspersed:
                operands += argv[i:]
                break
    return operands


def _take(option: str, kind: str, value: str, out: PipArgs) -> None:
    if kind == "python":
        out.problem = f"`{option} {value}`: pip would run itself with that interpreter"
    elif kind == "file":
        out.files.append(value)
    elif kind == "project":
        out.editables.append(value)
    elif kind == "source":
        out.sources.append(value)
    elif kind == "group":  # `[path:]group`: the groups of a pyproject.toml (./pyproject.toml by default)
        path, colon, _group = value.rpartition(":")
        out.files.append(path if colon and path else "pyproject.toml")


def parse_pip(argv: Sequence[str]) -> PipArgs:
    """pip's argv as pip reads it: its general options up to the command word, then (that word taken
    out of the argv, its first occurrence, as pip does) the whole argv again by the command's parser."""
    out = PipArgs()
    rest = _words(argv[1:], _GENERAL, False, out)
    if out.problem is not None or not rest:
        return out
    out = PipArgs(command=rest[0])
    words = list(argv[1:])
    words.remove(rest[0])
    if out.command in BUILDS:
        out.operands = _words(words, {**_GENERAL, **_BUILD}, True, out)
    elif out.command in _READERS:
        # Their own options are not modelled and need not be; only --python (in any unique prefix) runs.
        python = next((w for w in words if len(w) > 3 and "--python".startswith(w.split("=")[0])), None)
        if python is not None:
            out.problem = f"`{python}`: pip would run itself with another interpreter"
    elif out.command == "config":
        if "edit" in words or any(w.startswith("--ed") for w in words):
            out.problem = "`pip config edit`: pip would run an editor"
    else:
        out.problem = f"`pip {out.command}`: a pip command exechost does not model"
    return out


def local_path(value: str, cwd: str) -> str | None:
    """A value naming a local path (a `file:` URL or a path), resolved against `cwd`; None for a URL."""
    if value.startswith("file://"):
        value = value[len("file://") :]
    elif value.startswith("file:"):
        value = value[len("file:") :]
    elif "://" in value:
        return None
    return os.path.join(cwd, value)
