"""What a pip command reads, found the way pip finds it: its argv read by pip's own grammar (optparse:
clusters `-qr file`, attached values `-rfile`, `--opt=value`, unique prefixes of long options, options
after operands, `--`; the command word taken out as pip takes it out), against an allowlist of the options
pip has. An option not on it, and a command not modelled, make the command ask (issue 27 §5)."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.commands.regular import Unreadable, read_regular

__all__ = [
    "BUILDS",
    "PipArgs",
    "RequirementReads",
    "option_kind",
    "parse_pip",
    "read_operands",
    "read_requirements",
]

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
    "-r": "reqs", "--requirement": "reqs", "-c": "reqs", "--constraint": "reqs",
    "--build-constraint": "reqs", "--requirements-from-script": "file", "--group": "group",
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
    files: list[str] = field(default_factory=list)  # requirement/constraint files (and --group's)
    requirements: list[str] = field(default_factory=list)  # those read by pip's requirements grammar
    editables: list[str] = field(default_factory=list)  # -e values (a directory there is built)
    operands: list[str] = field(default_factory=list)  # requirements: names, paths, archives, URLs
    sources: list[str] = field(default_factory=list)  # local places packages are taken from
    problem: str | None = None  # an option or command exechost does not model: the command asks


def option_kind(option: str, command: str | None) -> str | None:
    """What the long option `option` is to pip running `command` (its kind in the tables above): pip's
    general options for any command, a build's own too; None for one exechost does not model (a
    reader's own options run nothing: _READERS)."""
    return ({**_GENERAL, **_BUILD} if command in BUILDS else _GENERAL).get(option)


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
    elif kind == "reqs":
        out.files.append(value)
        out.requirements.append(value)
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


# A requirements file's own lines, as pip's req_file reads them (issue 27 §4): a line is options (nested
# `-r`/`-c` files, `-e` projects, places packages come from) or a requirement with per-line options.
# What a line may say is allowlisted: a requirement by name (PEP 508 without `@ url`) or a remote archive
# is data; a local path, a `file:` URL, an editable or a VCS URL names a project pip builds from a tree
# nothing binds (its backend imports whatever is there), so the approval cannot be saved.
_LINE_OPTIONS: dict[str, str] = {
    "-r": "reqs", "--requirement": "reqs", "-c": "reqs", "--constraint": "reqs",
    "-e": "project", "--editable": "project", "-f": "source", "--find-links": "source",
    "-i": "source", "--index-url": "source", "--extra-index-url": "source", "--no-index": "",
    "--pre": "", "--prefer-binary": "", "--require-hashes": "", "--only-binary": "data",
    "--no-binary": "data", "--trusted-host": "data", "--use-feature": "data",
}  # fmt: skip
# Options a requirement line may carry (pip's SUPPORTED_OPTIONS_REQ, less the setup.py argument ones).
_REQ_OPTIONS: dict[str, str] = {"--hash": "data", "--config-settings": "data", "-C": "data"}
# A requirement by name: `name[extras] specifiers ; markers`, no `@ url`, no path.
_BY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]/@]*\])?\s*([<>=!~][^@/\\;]*)?(;[^@]*)?")
_COMMENT = re.compile(r"(^|\s+)#.*$")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
MAX_REQUIREMENT_FILES = 32  # more nested files than this and the command asks


@dataclass
class RequirementReads:
    """What pip takes from its requirements files: every file read (nested ones too), the local projects
    they name (absolute), the local places packages come from, and lines exechost does not model."""

    files: list[str] = field(default_factory=list)
    projects: list[str] = field(default_factory=list)
    sources: list[tuple[str, str]] = field(default_factory=list)  # (value, the directory it is relative to)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file, why)


def _lines(text: str) -> list[str]:
    """pip's preprocess: join `\\`-continued lines, drop comments and blank lines."""
    out: list[str] = []
    held = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            held += raw[:-1]
            continue
        line = _COMMENT.sub("", held + raw).strip()
        held = ""
        if line:
            out.append(line)
    if held.strip():
        out.append(_COMMENT.sub("", held).strip())
    return out


def _options(words: list[str], table: dict[str, str]) -> tuple[list[tuple[str, str]], str | None]:
    """optparse over one line's option words: (option kind, value) pairs, or why it cannot be read."""
    taken: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            option = _match(name, table)
        elif word.startswith("-") and len(word) >= 2:
            option, eq, value = ("-" + word[1], "=", word[2:]) if len(word) > 2 else (word, "", "")
            option = option if option in table else None
        else:
            return taken, f"`{word}`: a word pip would not take here"
        if option is None:
            return taken, f"`{word}`: an option exechost does not model in a requirements file"
        kind = table[option]
        if kind and not eq:
            if i >= len(words):
                return taken, f"`{word}`: its value is missing"
            value, i = words[i], i + 1
        elif not kind and eq:
            return taken, f"`{word}`: pip takes no value there"
        taken.append((kind, value))
    return taken, None


def read_operands(specs: list[str], cwd: str) -> RequirementReads:
    """The argv's own requirements read as a requirements line is (`./pkg`, `file:///w/pkg`,
    `pkg @ file:///w/pkg`, `git+https://…`): every spelling of a local project is a project."""
    out = RequirementReads()
    for spec in specs:
        _requirement(spec, cwd, out, "the command line")
    return out


def _requirement(spec: str, cwd: str, out: RequirementReads, where: str) -> None:
    """One requirement: by name or a remote archive (data), else a project pip builds from a tree."""
    if _BY_NAME.fullmatch(spec):
        return
    name, at, url = spec.partition("@")
    target = url.strip().split(";", 1)[0].strip() if at and _BY_NAME.fullmatch(name.strip()) else spec
    scheme = _URL.match(target)
    if scheme and scheme.group(1).lower() in ("http", "https"):
        return  # an archive from the network: pip fetches it as it fetches a name from the index
    if scheme and "+" in scheme.group(1):
        out.problems.append((where, f"`{spec}`: a VCS checkout pip clones and builds"))
        return
    path = local_path(target, cwd)
    if path is None:
        out.problems.append((where, f"`{spec}`: a requirement exechost does not model"))
    else:
        out.projects.append(os.path.normpath(path))


def read_requirements(
    files: Sequence[str], cwd: str, cap: int = 1 << 20, data: dict[str, bytes] | None = None
) -> RequirementReads:
    """Every requirements file pip reads from `files` (relative to `cwd`), nested `-r`/`-c` ones relative to
    the file naming them, as pip's req_file reads them; what each line names, sorted by what it is. With
    `data`, each file's bytes as read (and parsed) are kept there."""
    out = RequirementReads()
    queue = [os.path.join(cwd, f) for f in files]
    while queue:
        path = queue.pop(0)
        if path in out.files:
            continue
        if len(out.files) >= MAX_REQUIREMENT_FILES:
            out.problems.append((path, "more nested requirements files than exechost reads"))
            break
        out.files.append(path)
        try:
            raw = read_regular(path, cap)
        except Unreadable:
            continue  # not bound by bytes either (treecode.binding): nothing it says is taken unasked
        if data is not None:
            data[path] = raw
        text = raw.decode("utf-8", "replace")
        here = os.path.dirname(path)
        for line in _lines(text):
            if "${" in line:
                out.problems.append((path, f"`{line}`: pip expands an environment variable there"))
                continue
            try:
                words = shlex.split(line)
            except ValueError:
                out.problems.append((path, f"`{line}`: a line exechost cannot split"))
                continue
            first = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
            if first:  # a requirement, then its own options
                _requirement(" ".join(words[:first]), cwd, out, path)
                _taken, problem = _options(words[first:], _REQ_OPTIONS)
                if problem:
                    out.problems.append((path, problem))
                continue
            taken, problem = _options(words, _LINE_OPTIONS)
            if problem:
                out.problems.append((path, problem))
            for kind, value in taken:
                if kind == "reqs":
                    nested = local_path(value, here)
                    if nested is None:
                        out.problems.append((path, f"`{value}`: requirements read from the network"))
                    else:
                        queue.append(os.path.realpath(nested))  # `..` where the kernel takes it
                elif kind == "project":
                    _requirement(value.split("[", 1)[0] if "://" not in value else value, cwd, out, path)
                elif kind == "source":
                    out.sources.append((value, here))
    return out
