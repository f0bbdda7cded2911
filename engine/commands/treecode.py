"""Host programs never run code from a tree the agent can write unasked: name the file each would run
(a Makefile, package.json scripts, build.rs, a repository's config, …) so the command asks instead."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

from engine.commands import gitvet, pipconfig, priorwrites, procpaths, progident
from engine.commands.allowlist import AllowlistResult
from engine.commands.analysis import CommandAnalysis
from engine.commands.filetrust import system_owned
from engine.commands.gitvet import Finding
from engine.commands.interpreters import name_of
from engine.commands.makefiles import DEFAULTS, not_regular, parse_make
from engine.commands.pipargs import BUILDS, local_path, parse_pip, read_operands, read_requirements
from engine.commands.regular import Unreadable, read_regular
from engine.commands.scriptfiles import script_operand
from engine.commands.toolargv import argv_problem
from engine.commands.treesafe import is_tree_safe
from engine.commands.which import real_path
from engine.statefs import state_dir

__all__ = [
    "MANIFEST_TREE",
    "TREE_PROGRAMS",
    "UNMODELLED",
    "Finding",
    "TreeChanged",
    "TreeVet",
    "agent_writable",
    "binding",
    "found_reason",
    "sandbox_roots",
    "tree_vet",
    "unbound_findings",
]


@dataclass(frozen=True)
class TreeProgram:
    """A program that runs code it finds in its working tree: the files, and whether it looks upward."""

    files: tuple[str, ...]  # relative to each directory looked at
    what: str
    walk_up: bool = False  # the program searches the cwd's ancestors (npm, cargo, direnv, go)


# No stop at the nearest package.json: npm (>=7) walks on to any ancestor whose package.json lists the
# cwd's package among its workspaces and then reads that root's .npmrc (not the package's); yarn berry
# merges every .yarnrc.yml up to /; pnpm looks upward for pnpm-workspace.yaml. Every ancestor up to the
# operator's home is one the package manager may read, so every one is named and bound: a root .npmrc
# added after an approval changes the binding, and the command asks again.
_NPM = TreeProgram(
    ("package.json", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "pnpm-workspace.yaml"),
    "scripts, lifecycle hooks or a package-manager setting that runs code",
    walk_up=True,
)
_PY_BUILD = TreeProgram(
    ("pyproject.toml", "setup.py", "setup.cfg"), "a build backend or setup script that runs on install"
)
# What each program reads from the tree and would run (docs/SECURITY.md has the table and the why).
TREE_PROGRAMS: dict[str, TreeProgram] = {
    "make": TreeProgram(("GNUmakefile", "makefile", "Makefile"), "recipes and $(shell …) that make runs"),
    "gmake": TreeProgram(("GNUmakefile", "makefile", "Makefile"), "recipes and $(shell …) that make runs"),
    "cmake": TreeProgram(
        ("CMakeLists.txt", "CMakeCache.txt", "CMakePresets.json", "CMakeUserPresets.json"),
        "commands cmake runs",
    ),
    "ninja": TreeProgram(("build.ninja",), "build commands ninja runs"),
    "npm": _NPM,
    "npx": _NPM,
    "pnpm": _NPM,
    "yarn": _NPM,
    "corepack": _NPM,
    "bun": _NPM,
    "cargo": TreeProgram(
        (
            "Cargo.toml",
            "build.rs",
            ".cargo/config.toml",
            ".cargo/config",
            "rust-toolchain",
            "rust-toolchain.toml",
        ),
        "build scripts, proc macros, runners or a toolchain path cargo runs",
        walk_up=True,
    ),
    "rustup": TreeProgram(("rust-toolchain", "rust-toolchain.toml"), "a toolchain path", walk_up=True),
    "go": TreeProgram(("go.mod", "go.work"), "a toolchain, //go:generate commands or code go runs", True),
    "direnv": TreeProgram((".envrc", ".env"), "shell code direnv evaluates", walk_up=True),
    "pip": _PY_BUILD,
    "pip3": _PY_BUILD,
    "uv": _PY_BUILD,
    "poetry": _PY_BUILD,
    "pdm": _PY_BUILD,
    "hatch": _PY_BUILD,
    "tox": TreeProgram(("tox.ini", "pyproject.toml", "setup.cfg"), "commands tox runs"),
    "nox": TreeProgram(("noxfile.py",), "sessions nox runs"),
    "pre-commit": TreeProgram((".pre-commit-config.yaml",), "hooks pre-commit runs"),
    "just": TreeProgram(("justfile", ".justfile", "Justfile"), "recipes just runs", walk_up=True),
    "task": TreeProgram(("Taskfile.yml", "Taskfile.yaml"), "tasks it runs", walk_up=True),
    "rake": TreeProgram(("Rakefile", "rakefile"), "Ruby code rake runs", walk_up=True),
    "bundle": TreeProgram(("Gemfile",), "Ruby code bundler evaluates", walk_up=True),
    "gradle": TreeProgram(
        ("build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts"),
        "build scripts gradle runs",
        walk_up=True,
    ),
    # mvn's launcher (find_maven_basedir) walks up to the nearest directory holding .mvn/ and hands its
    # jvm.config to java (`-agentpath:` loads a library): every ancestor is named, as npm's are.
    "mvn": TreeProgram(
        ("pom.xml", ".mvn/maven.config", ".mvn/jvm.config", ".mvn/extensions.xml"),
        "plugins, core extensions or JVM options maven runs",
        walk_up=True,
    ),
    "composer": TreeProgram(("composer.json",), "scripts composer runs"),
    "meson": TreeProgram(("meson.build",), "commands meson runs"),
    "bazel": TreeProgram(
        (".bazelrc", "WORKSPACE", "MODULE.bazel", "BUILD", "BUILD.bazel"), "rules bazel runs", walk_up=True
    ),
    "docker": TreeProgram(
        ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml"),
        "services, mounts and privileges docker compose starts",
    ),
    "docker-compose": TreeProgram(
        ("compose.yaml", "compose.yml", "docker-compose.yml", "docker-compose.yaml"),
        "services, mounts and privileges docker compose starts",
    ),
}
# What an unmodelled program (on neither list) is said to take from a writable tree: exechost cannot know.
UNMODELLED = (
    "code it may load from there (config naming plugins, conftest.py, hooks, …: it is not a program "
    "known to take none, tools.exec.treeSafe)"
)
PIP_SOURCE = "packages pip may build (an sdist's setup script runs)"
# A project a requirements file names (`./pkg`, `-e ./sub`, `file:`): pip builds it, and its backend runs
# whatever that tree holds; nothing there is bound, so an approval is for this run only (issue 27 §4).
PIP_PROJECT = "a project pip builds (its backend runs and imports whatever that tree holds)"
PIP_LINE = "a requirements line exechost does not model"
OPERANDS_LOOKED_AT = 64  # argv words read for the files and trees a program is named (pytest ../other)
# A command with more words than are read: what the rest names (a script, CC=./cc, a tree) is not known,
# so the command asks rather than being decided on a prefix, and binds no bytes (never saved).
PAST_THE_CAP = f"what its argv words past the first {OPERANDS_LOOKED_AT} name (they are not examined)"
# A tree program after (or piped beside) a command that may write: the files it reads then are not the ones
# vetted (`git checkout other -- package.json && npm test`), so a human decides it, this run only.
WRITTEN_FIRST = "files an earlier command of this text may write before it reads them (not what was vetted)"
# Findings whose code is not in the named file's bytes (a project, a push destination's hooks): a file
# there (a gitfile, an sdist) binds nothing of it, so they are never bound, whatever is at the path.
_NO_BYTES = frozenset(
    {PIP_PROJECT, gitvet.RECEIVE_PACK_TREE, gitvet.LEGACY_REMOTES, PAST_THE_CAP, WRITTEN_FIRST}
    | {procpaths.THROUGH_PROCESS}
)
# What git runs when its config or command line holds what exechost does not know to be inert
# (`-c alias.z='!sh t.sh'`, a filter naming ./clean.sh, an unknown option): programs in no bound file.
GIT_NAMED = "the programs git's config or command line may name"
A_TREE, UNREADABLE = "a tree", "unreadable"  # binding() of a finding no bytes hold
SCRIPTS_TREE = "a script's tree"  # binding() of an interpreter's tree: its script is bound by content
ARGV_FILE = "code or options it reads from a file its argv names"
# An interpreter's tree: its program file is bound by engine.commands.content, not here.
SCRIPT_TREE = "code its script may load from there (the script itself is bound; what it imports is not)"
# A build tool's recipes run files of the tree besides the ones it reads (`sh run.sh`, `./configure`, the
# test binary it builds): what they are is make code, not modelled, so nothing binds them and an approval
# of the tool in a tree the agent can write is for this run only (issue 27 §4).
RECIPE_TREE = (
    "files its recipes run (`sh run.sh`, ./configure, what it builds): they are not bound to their bytes, "
    "so an approval is for this run only"
)
# Every other tree program's manifest names code to run too, beyond the manifest's own bytes: a script
# (`"test": "node t.js"`), an include()d .cmake, a path dependency's build.rs, `build = "x.rs"`, the
# tree's own sources (`cargo test`, `go run`). Those are not modelled, so nothing binds them: like make's
# recipes, an approval of the tool in a tree whose files the agent can add or rewrite is for this run
# only (issue 27 §5: what was approved is what runs).
MANIFEST_TREE = (
    "files its manifest or script names to run (`node t.js`, an include()d file, build.rs, the sources "
    "it builds and runs): they are not bound to their bytes, so an approval is for this run only"
)
# With no makefile, make's built-in rules run programs (cc, as, lex, yacc, tex, makeinfo, …) over the
# tree's files: not known to take no code from their tree (treesafe), so they ask there as `cc foo.c` does.
BUILTIN_RULES = (
    "files its built-in rules run programs over (no makefile: `make foo` runs `cc … foo.c`, and cc, as, "
    "lex, yacc, tex are not known to take no code from their tree): an approval is for this run only"
)
NOT_A_FILE = "a makefile that is not a regular file (stdin, a device, a fifo): nothing there can be vetted"
# The spawn's directory fd of the cwd, as a path: what is looked up under it is found in the directory that
# fd holds (the kernel follows the fd, not a name), so a directory exchanged at the cwd's path after the
# fd was opened and checked is not what the re-vet reads.
ANCHOR = "/proc/self/fd/"
# Options naming the directory a program works in, instead of the cwd.
# (make's are read by make's own grammar: engine.commands.makefiles.)
_DIR_OPTIONS: dict[str, tuple[str, ...]] = {
    "ninja": ("-C",),
    "npm": ("--prefix", "-C"),
    "npx": ("--prefix", "-C"),
    "pnpm": ("-C", "--dir"),
    "yarn": ("--cwd",),
    "cargo": ("-C",),
    "go": ("-C",),
    "cmake": ("-S", "-B", "--build"),
    "task": ("-d", "--dir"),
    "just": ("-d", "--working-directory"),
}
# Options naming the file a program reads instead of its default (that file runs, whatever its name).
_FILE_OPTIONS: dict[str, tuple[str, ...]] = {
    "ninja": ("-f",),
    "cargo": ("--manifest-path",),
    "just": ("-f", "--justfile"),
    "task": ("-t", "--taskfile"),
    "docker": ("-f", "--file"),
    "docker-compose": ("-f", "--file"),
}  # pip's are read by pip's own grammar: engine.commands.pipargs


def _option_values(argv: Sequence[str], options: tuple[str, ...]) -> Iterator[str]:
    for i, word in enumerate(argv[1:], start=1):
        for option in options:
            if word == option and i + 1 < len(argv):
                yield argv[i + 1]
            elif option.startswith("--") and word.startswith(option + "="):
                yield word.split("=", 1)[1]
            elif len(option) == 2 and word.startswith(option) and len(word) > 2 and not word.startswith("--"):
                yield word[2:]


def agent_writable(path: str, sandbox_roots: Sequence[str]) -> bool:
    """A file the agent can change: inside a sandbox workspace (a container may own it), or changeable —
    the file or its directory — by the gateway's own user, whom every host command runs as (_changeable).
    A file another local user owns counts too: other users are as hostile as the agent
    (`/tmp/.cargo/config.toml`)."""
    real = os.path.realpath(path)
    for root in sandbox_roots:
        if root and (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
            return True
    return _changeable(real) or _changeable(os.path.dirname(real))


def _changeable(path: str) -> bool:
    """Whether the gateway's user, or someone as hostile, can change `path`: judged by who owns it, not by
    its mode bits now. Any owner but root can chmod it back (a 0444 Makefile in a 0555 dir that tar kept
    is its owner's to rewrite); a root-owned one is changeable as its mode and ACLs say (os.access: a
    root gateway may change anything)."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return True  # vanished or unreadable: the program may still find something there
    return owner != 0 or os.access(path, os.W_OK)


def _contents_writable(directory: str, sandbox_roots: Sequence[str]) -> bool:
    """Whether the agent can put files into `directory` (a sandbox workspace, or changeable itself): where
    a recipe's `./run.sh` would be found. A root-only directory under a writable parent is not (its
    files are trusted like a root-only makefile there; the spawn anchors the cwd: a renamed parent is no
    way in)."""
    real = os.path.realpath(directory)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in sandbox_roots if r) or (
        _changeable(real)
    )


def sandbox_roots(workspace_root: str) -> list[str]:
    """Where sandbox workspaces live: the state dir (its default `sandboxes/`) and the configured root."""
    # Resolved through the watched path cache: every decision on the host asks, and two realpaths
    # were an eighth of a whole decision (issue 19).
    return [real_path(p) for p in (str(state_dir()), workspace_root) if p]


def found_reason(found: Sequence[Finding]) -> str:
    """One line for the decision's reason; the warnings name every finding."""
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{first.program} would run code from a tree the agent can write: {first.path}: {first.what}{more}"


def _home() -> str:
    return os.path.realpath(os.path.expanduser("~"))


def _dirs(start: str, walk_up: bool) -> Iterator[str]:
    """`start`, then (for programs that search upward) its ancestors; the operator's home holds the
    operator's own config (~/.npmrc, ~/.cargo), trusted like the global git config, so it is passed over,
    but the walk goes on above it as the program's does (npm's workspace root and its .npmrc above a
    service account's home: round 10 d); what is there is a finding when the agent can change it.
    A start under ANCHOR (the spawn's fd of the cwd) is looked in through that fd, never by its path."""
    here = os.path.realpath(start)
    home = _home()
    anchored = start.startswith(ANCHOR)
    while True:
        if here != home or here == os.path.realpath(start):
            yield start if anchored else here
        anchored = False
        parent = os.path.dirname(here)
        if not walk_up or parent == here:
            return
        here = parent


def _make_files(argv: Sequence[str], cwd: str) -> list[str]:
    """What make reads: every `-f` file (relative to the last of the cumulative `-C`s), else every
    default makefile present (make reads the first; all are named), and whatever make could remake
    each of those from (makefile_sources), present or not."""
    args = parse_make(argv)
    where = cwd
    for d in args.dirs:
        where = os.path.join(where, d)
    named = [os.path.join(where, v) for _i, _p, v in args.files if v != "-"]
    makefiles = named if args.files else [os.path.join(where, n) for n in DEFAULTS]
    out = [m for m in makefiles if os.path.isfile(m)]
    out += [p for m in makefiles for p in makefile_sources(m)]
    return [p for p in dict.fromkeys(out) if os.path.isfile(p)]


def _tree_files(program: str, spec: TreeProgram, argv: Sequence[str], cwd: str) -> list[str]:
    cwd = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    if program in ("make", "gmake"):
        return _make_files(argv, cwd)
    starts = _starts(program, argv, cwd)
    out = [os.path.join(cwd, f) for f in _option_values(argv, _FILE_OPTIONS.get(program, ()))]
    if program == "ninja":
        # ninja chdirs to its (last) -C before it opens its -f file (or build.ninja): both are read there.
        named = [os.path.join(starts[-1], f) for f in _option_values(argv, ("-f",))]
        found = named or [os.path.join(starts[-1], "build.ninja")]
        return [p for p in dict.fromkeys(found) if os.path.lexists(p)]
    if program == "docker" and "compose" not in argv[1:]:
        return []  # only `docker compose` reads a compose file; `docker build` runs its Dockerfile contained
    if program in ("pip", "pip3"):
        builds, pip_starts, pip_files = _pip_reads(argv, cwd)
        out += pip_files
        if not builds:
            return [p for p in dict.fromkeys(out) if os.path.isfile(p)]
        starts += pip_starts
    for start in starts:
        for here in _dirs(start, spec.walk_up):
            out += [os.path.join(here, f) for f in spec.files if os.path.lexists(os.path.join(here, f))]
    # Whatever exists there counts, not only regular files: a FIFO `package.json` is read by npm all the
    # same (it is no file to vet, so the binding leaves it unbound and the run asks every time).
    return [p for p in dict.fromkeys(out) if os.path.lexists(p)]


def _starts(program: str, argv: Sequence[str], cwd: str) -> list[str]:
    """The directories a program works from: each value of its directory options, else the cwd."""
    return [os.path.join(cwd, d) for d in _option_values(argv, _DIR_OPTIONS.get(program, ()))] or [cwd]


def _pip_reads(argv: Sequence[str], cwd: str) -> tuple[bool, list[str], list[str]]:
    """Whether pip builds (runs a backend: install, wheel, download, lock), the project trees it would
    build (local path operands, editables), and the files it reads requirements from, as pip's own
    option grammar finds them (engine.commands.pipargs). `pip list`/`pip show` read no tree."""
    args = parse_pip(argv)
    files = [os.path.join(cwd, f) for f in args.files]
    if args.command not in BUILDS:
        return False, [], files
    files += read_requirements(args.requirements, cwd).files  # nested `-r`/`-c` files, bound by bytes
    starts = read_operands(list(args.operands), cwd).projects
    starts += [os.path.join(cwd, e.split("[", 1)[0]) for e in args.editables]
    return True, starts, files


def _pip_findings(program: str, argv: Sequence[str], cwd: str, sandbox_roots: Sequence[str]) -> list[Finding]:
    """What pip's argv itself brings: an option or command exechost does not model (asks, naming it),
    and every local place pip takes packages from (find-links, a file: index, a cache, a checkout
    dir) that the agent can write: an sdist there builds, its setup script runs."""
    args = parse_pip(argv)
    found = [] if args.problem is None else [Finding(program, "the command line", args.problem)]
    sources = [(value, cwd) for value in args.sources]
    if args.command in BUILDS:
        reqs = read_requirements(args.requirements, cwd)
        sources += reqs.sources
        # The argv's own projects too (`pip install .`, `-e ./x`): their setup script is bound, but what
        # it imports from its tree is not; a local archive operand is a file, bound whole (_argv_code).
        # Read as a requirements line is: a path, a `file:` URL and `name @ file:…` are all projects.
        own = read_operands(list(args.operands), cwd)
        projects = list(own.projects)
        projects += [os.path.join(cwd, e.split("[", 1)[0]) for e in args.editables if "://" not in e]
        projects = [os.path.normpath(p) for p in projects if not os.path.isfile(p)] + reqs.projects
        found += [
            Finding(program, p, PIP_PROJECT)
            for p in dict.fromkeys(projects)
            if agent_writable(p, sandbox_roots)
        ]
        found += [Finding(program, path, f"{PIP_LINE}: {why}") for path, why in reqs.problems + own.problems]
    for value, where in sources:
        path = local_path(value, where)
        if path is not None and os.path.lexists(path) and agent_writable(path, sandbox_roots):
            found.append(Finding(program, os.path.realpath(path), PIP_SOURCE))
    return found


def _spellings(word: str) -> Iterator[str]:
    """Every path a program may take from one argv word: the word, an option's `=value` (`--file=x`,
    `-DX:FILEPATH=x`), an attached short value (`-fx.sed`), a response file (`@opts`: gcc, ld, as and
    every libiberty or javac-style program read more argv from it) and a `+toolchain` path (rustup)."""
    if word.startswith(("@", "+")):
        yield word[1:]
    elif not word.startswith("-"):
        yield word
    else:
        if "=" in word:
            yield word.split("=", 1)[1]
        if not word.startswith("--") and len(word) > 2:
            yield word[2:]


def _argv_paths(argv: Sequence[str], cwd: str) -> Iterator[str]:
    """The paths (relative to `cwd`) of what exists among the spellings of the first argv words."""
    for word in argv[1 : OPERANDS_LOOKED_AT + 1]:
        for value in _spellings(word):
            if value and not value.startswith("-") and os.path.lexists(os.path.join(cwd, value)):
                yield os.path.join(cwd, value)


def _trees(argv: Sequence[str], cwd: str) -> Iterator[str]:
    """Every tree an unmodelled program may take code from: the cwd and its ancestors (mypy, pytest and
    eslint look upward for their config), and each path operand's directory and its ancestors (pytest
    reads the conftest.py beside the tests it is given, wherever they are; gcc the `@file` it is given)."""
    yield from _dirs(cwd, walk_up=True)
    for path in _argv_paths(argv, cwd):
        if os.path.isdir(path):
            yield from _dirs(path, walk_up=True)
        else:
            yield from _dirs(os.path.dirname(path), walk_up=True)


MAKE_VALUE_FILE = "a file a command-line variable names (a recipe or built-in rule may run it: CC=./cc)"


def _make_value_paths(argv: Sequence[str], cwd: str) -> list[str]:
    """Every file a command-line assignment's value names (`CC=./cc`, `SHELL=./s.sh`, `CFLAGS='-B. x'`):
    make gives the value to recipes and built-in rules, which may run it, so each file it names is bound
    by its bytes like any argv-named file (a non-regular one is not: the approval cannot be saved)."""
    out: list[str] = []
    for word in argv[1 : OPERANDS_LOOKED_AT + 1]:
        if word.startswith("-") or "=" not in word:
            continue
        for token in word.split("=", 1)[1].split():
            for value in _spellings(token):
                path = os.path.join(cwd, value)
                if value and os.path.lexists(path) and path not in out:
                    out.append(path)
    return out


def _argv_code(program: str, argv: Sequence[str], cwd: str) -> list[tuple[str, str]]:
    """What a modelled program (not make or git: their grammars name their files) takes code from by
    its argv, beyond its tree files. The argv of a program that runs code it reads is not modelled word by
    word: every file it names, in any spelling (`cmake -P x.cmake`, `-C cache.cmake`,
    `-DCMAKE_TOOLCHAIN_FILE=t.cmake`, `pip install sub-1.tar.gz`, `npm install ./x.tgz`, `@opts`), is bound
    by its bytes. Directories it runs programs from are findings no bytes hold (the approval cannot be
    saved): a rustup toolchain path (`cargo +./tc`, `rustup run ./tc`: its bin/ runs) and, for the
    node package managers, every `node_modules/.bin` up the tree (npx runs the program it finds there,
    and npm puts it on the PATH of every script it runs)."""
    out = [(p, ARGV_FILE) for p in _argv_paths(argv, cwd) if os.path.isfile(p)]
    if program in ("cargo", "rustup"):
        words = list(argv[1:])
        toolchain = words[0][1:] if words[:1] and words[0].startswith("+") else ""
        if not toolchain and "run" in words:
            toolchain = next((w for w in words[words.index("run") + 1 :] if not w.startswith("-")), "")
        if "/" in toolchain:  # rustup reads a toolchain with a path separator as a path, else as a name
            out.append((os.path.join(cwd, toolchain), "a toolchain whose programs it runs"))
    if TREE_PROGRAMS.get(program) is _NPM:
        out += [
            (os.path.join(here, "node_modules", ".bin"), "programs it runs by name (npx, scripts)")
            for start in _starts(program, argv, cwd)
            for here in _dirs(start, walk_up=True)
            if os.path.isdir(os.path.join(here, "node_modules", ".bin"))
        ]
    return [(p, what) for p, what in out if os.path.lexists(p)]


def _unmodelled(argv: Sequence[str], real: str, cwd: str, sandbox_roots: Sequence[str]) -> list[Finding]:
    """The first tree the agent can write that an unmodelled program runs in or is pointed at."""
    seen: set[str] = set()
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    for tree in _trees(argv, here):
        if tree in seen:
            continue
        seen.add(tree)
        if agent_writable(tree, sandbox_roots):
            what = SCRIPT_TREE if _runs_a_script_file(argv, real, here) else UNMODELLED
            return [Finding(os.path.basename(argv[0]), tree, what)]
    return []


def _runs_a_script_file(argv: Sequence[str], real: str, cwd: str) -> bool:
    """An interpreter given its program as a file operand (`python3 x.py`, `sh -e x.sh`, `awk -f p.awk`),
    or a program the agent wrote itself, named by its path (`./tool`): the content binder
    (engine.commands.content) binds that file, and what else such a run loads from its tree (imports
    beside the script) is named in the ask; any other program's tree is unbound."""
    if "/" in argv[0] and not system_owned(real):
        return True  # `./tool`: the agent's own program, bound whole by its bytes as the executable
    index = script_operand(argv, argv[0])
    if index is None and real != argv[0]:
        index = script_operand(argv, real)
    return index is not None and index < len(argv) and os.path.isfile(os.path.join(cwd, argv[index]))


def makefile_sources(makefile: str) -> list[str]:
    """What make could remake `makefile` from before reading it. make treats every makefile it is about to
    read as a goal, present or not, and its built-in rules make `Makefile` from `Makefile.sh` (`%: %.sh`),
    `Makefile.c`, `s.Makefile`, `RCS/Makefile,v`, … and then reads what they made. Every built-in
    prerequisite of a file (and of those, down the chain) is named by the file's own name with something
    after it, or with `s.` before it, in its directory or in `RCS/`/`SCCS/` below it: all of those are
    what make may read as this makefile, so they are vetted with it."""
    directory, name = os.path.split(makefile)
    out = []
    for where in (directory, os.path.join(directory, "RCS"), os.path.join(directory, "SCCS")):
        try:
            entries = sorted(os.listdir(where))
        except OSError:
            continue
        out += [
            os.path.join(where, e)
            for e in entries
            if e != name and (e.startswith(name) or e.startswith("s." + name) or where != directory)
        ]
    return out


def tree_program(argv: Sequence[str], paths: Sequence[str | None]) -> str | None:
    """The program findings_for vets this command as (`git` or a TREE_PROGRAMS name), or None: a command
    that runs nothing from a tree (known by its name as typed or by any path it resolves to)."""
    if not argv:
        return None
    candidates = [name_of(argv[0]), *(name_of(p) for p in paths if p)]
    if "git" in candidates:
        return "git"
    return next((c for c in candidates if c in TREE_PROGRAMS), None)


def findings_for(
    argv: Sequence[str],
    paths: Sequence[str | None],
    cwd: str,
    sandbox_roots: Sequence[str],
    record: gitvet.Record | None = None,
    tree_safe: Collection[str] = (),
) -> list[Finding]:
    """What this one command would run from a tree the agent can write. `paths` are the executable as
    resolved (real path first): a program is known by its name as typed or by any path it resolves to
    (`/usr/bin/npm` → `npm-cli.js`, `~/.cargo/bin/cargo` → `rustup`). git and TREE_PROGRAMS are modelled
    (their files are named and bound); a program known to take no code from its tree (treesafe, plus the
    operator's `tree_safe`) has nothing to find; any other one, in a tree the agent can write, is a
    finding by itself: nobody knows what it reads there (mypy's plugins, pytest's conftest.py, …)."""
    program = tree_program(argv, paths)
    real = next((p for p in paths if p), None)
    if program is None:
        if not argv or real is None or is_tree_safe(argv, real, tree_safe):
            return []  # nothing runs (not found), or nothing it does depends on its tree
        found = _past_the_cap(argv, cwd) + _unmodelled(argv, real, cwd, sandbox_roots)
    elif program == "git":
        if real is None:
            return []
        found = gitvet.vet(real, progident.git_argv(argv), cwd, record)  # `git-upload-archive x`
    else:
        found = _past_the_cap(argv, cwd) + _modelled(program, argv, cwd, sandbox_roots)
        # Every other identity too (`~/.cargo/bin/cargo` is rustup's proxy: it reads the cwd's
        # rust-toolchain.toml before cargo sees -C); a proxy's argv is its tool's, checked above.
        tool = progident.proxied_tool(argv, paths)
        for other in progident.identities(argv, paths, list(TREE_PROGRAMS)):
            if other != program:
                have = {(f.path, f.what) for f in found}
                more = _modelled(other, argv, cwd, sandbox_roots, other != "rustup" or tool != program)
                found += [f for f in more if (f.path, f.what) not in have]
        found += _toolchains(found, record)
        if program in ("pip", "pip3") and real is not None:  # its config files are argv too (pipconfig)
            here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
            found += pipconfig.findings(
                program, argv, real, here, lambda p: agent_writable(p, sandbox_roots), record
            )
    modelled = progident.identities(argv, paths, list(TREE_PROGRAMS)) if program not in (None, "git") else []
    return found + _process_linked(program or os.path.basename(argv[0]), modelled, argv, cwd, found)


def _toolchains(found: Sequence[Finding], record: gitvet.Record | None) -> list[Finding]:
    """For every rust-toolchain(.toml) found, the directory whose programs it makes rustup run (a `path`
    toolchain; the file's own directory for one not understood): a finding no bytes hold. The bytes read
    are the ones the binding holds (`record`), so the decision and its binding are one read."""
    out: list[Finding] = []
    for f in found:
        if os.path.basename(f.path) not in progident.TOOLCHAIN_FILES or not os.path.isabs(f.path):
            continue
        data = record.data.get(f.path) if record is not None else None
        if data is None:
            try:
                data = read_regular(f.path, gitvet.CONFIG_READ_CAP)
            except Unreadable:
                continue  # bound as unreadable: the approval cannot be saved anyway
            if record is not None:
                record.data[f.path] = data
        out += [
            Finding(f.program, d, progident.TOOLCHAIN_DIR) for d in progident.toolchain_dirs(f.path, data)
        ]
    return list(dict.fromkeys(out))


def _process_linked(
    program: str, modelled: Sequence[str], argv: Sequence[str], cwd: str, found: Sequence[Finding]
) -> list[Finding]:
    """A finding no bytes hold for every argv word, every file found and every tree file a `modelled`
    program looks for (`.cargo/config.toml` under a linked `.cargo`) that reaches /proc or /dev/fd through
    a link (`ninja -C sub`, sub -> /proc/self/cwd/real): the gateway would read its own process's file
    there, the run its own (engine.commands.procpaths)."""
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    base = os.path.realpath(here)  # an anchor's directory, by its fd
    words = procpaths.process_linked_words(argv[1 : OPERANDS_LOOKED_AT + 1], base)
    out = [Finding(program, os.path.join(here, w), procpaths.THROUGH_PROCESS) for w in words]
    for name in modelled:
        spec = TREE_PROGRAMS[name]
        for start in _starts(name, argv, here):
            for where in _dirs(start, spec.walk_up):
                real = os.path.realpath(where) if where.startswith(ANCHOR) else where  # _dirs: real
                for file in spec.files:
                    if procpaths.linked_through_process(file, real, real=True):
                        out.append(Finding(program, os.path.join(where, file), procpaths.THROUGH_PROCESS))
    for f in found:
        if os.path.isabs(f.path) and f.what != procpaths.THROUGH_PROCESS:
            top = here.rstrip("/") or "/"
            if f.path == top:
                continue  # the cwd itself (an anchor, during the spawn's re-vet) is not judged
            inside = f.path.startswith(top.rstrip("/") + "/")
            path = f.path[len(top.rstrip("/")) + 1 :] if inside else f.path
            if procpaths.linked_through_process(path, base, real=True):
                out.append(Finding(program, f.path, procpaths.THROUGH_PROCESS))
    return list(dict.fromkeys(out))


def _past_the_cap(argv: Sequence[str], cwd: str) -> list[Finding]:
    """A finding (no bytes bind it) for a command longer than what _argv_paths and _make_value_paths
    read: whatever its later words name is unexamined, so a human decides it, this run only."""
    if len(argv) <= OPERANDS_LOOKED_AT + 1:
        return []
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    return [Finding(name_of(argv[0]), here, PAST_THE_CAP)]


def _written_first(argv: Sequence[str], paths: Sequence[str | None], cwd: str) -> list[Finding]:
    """A finding (no bytes bind it) for a tree program that runs after a command that may write its tree:
    what it reads then is not what was vetted. (git's config and make's makefiles are held as vetted in
    the run by engine.commands.pinned, an absent makefile as /dev/null; a file make's command-line value
    names, absent at the vet, is not: `cp evil cc && make CC=./cc foo.o`.)"""
    program = tree_program(argv, paths)
    if program in (None, "git"):
        return []
    if program in ("make", "gmake") and not any("=" in w and not w.startswith("-") for w in argv[1:]):
        return []  # its makefiles are pinned; a command-line value (`CC=./cc`) names a file they are not
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    return [Finding(str(program), here, WRITTEN_FIRST)]


def _modelled(
    program: str, argv: Sequence[str], cwd: str, sandbox_roots: Sequence[str], grammar: bool = True
) -> list[Finding]:
    """findings_for a TREE_PROGRAMS program: its tree files, what its argv names, its grammar (`grammar`
    False: the argv is another program's, read by that one's: a rustup proxy's tool)."""
    spec = TREE_PROGRAMS[program]
    named = _argv_code(program, argv, cwd) if program not in ("make", "gmake") else []
    files = [(p, spec.what) for p in _tree_files(program, spec, argv, cwd)]
    files += [(p, what) for p, what in named if p not in {f for f, _ in files}]
    found = [Finding(program, path, what) for path, what in files if agent_writable(path, sandbox_roots)]
    if program in ("make", "gmake"):
        args = parse_make(argv)
        if args.problem is not None:  # make would read what exechost cannot name: a human decides
            found.append(Finding(program, "the command line", args.problem))
        here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
        found += [Finding(program, path, NOT_A_FILE) for path in not_regular(args, here)]
        where = os.path.join(here, *args.dirs) if args.dirs else here
        # No makefile: make's built-in rules still run cc, as, lex, yacc, tex, … over the tree's files for
        # each goal (`make foo` from foo.c), programs that ask there themselves; with no goal, or none
        # of its built-in rules (`make -r test`), nothing runs.
        builtin = bool(args.goals) and not args.no_builtin
        if (files or builtin) and _contents_writable(where, sandbox_roots):
            found.append(Finding(program, where, RECIPE_TREE if files else BUILTIN_RULES))
        have = {f.path for f in found}
        found += [
            Finding(program, path, MAKE_VALUE_FILE)
            for path in _make_value_paths(argv, here)
            if path not in have and agent_writable(path, sandbox_roots)
        ]
    if program in ("pip", "pip3"):
        here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
        found += _pip_findings(program, argv, here, sandbox_roots)
    if program not in ("make", "gmake", "pip", "pip3"):
        # Read by the program's own grammar: anything it does not understand asks (toolargv).
        problem = argv_problem(program, argv) if grammar else None
        # (`docker` other than `docker compose` reads no tree: its argv is the allowlist's business.)
        if problem is not None and (program != "docker" or "compose" in argv[1:]):
            found.append(Finding(program, "the command line", problem))
        # (make has RECIPE_TREE; pip's requirements are read by its own grammar, and every project it
        # builds is a PIP_PROJECT finding already: a tree, unbound.)
        found += _manifest_trees(program, [p for p, _ in files], sandbox_roots)
    return found


def _manifest_trees(program: str, files: Sequence[str], sandbox_roots: Sequence[str]) -> list[Finding]:
    """The directory of every file the tool reads code from (its manifests, an argv-named script) where
    the agent can add or rewrite files: what those name and run is not bound (MANIFEST_TREE), so the
    finding is a directory, which binds no bytes (binding() → A_TREE): allow-always is not offered."""
    dirs = dict.fromkeys(os.path.dirname(p) for p in files if os.path.isabs(p))
    return [Finding(program, d, MANIFEST_TREE) for d in dirs if _contents_writable(d, sandbox_roots)]


def binding(found: Sequence[Finding], data: dict[str, bytes] | None = None) -> str:
    """The content an approval of these findings holds for: sha256 of every file named. A Makefile or a
    repository config changed after "allow always" asks again. With `data`, each file is read once into
    it (or taken from it: the bytes git parsed), so the bytes bound are the bytes a pinned run sees."""
    if not found:
        return ""
    lines = []
    for path in sorted({f.path for f in found if os.path.isabs(f.path)}):
        held = data.get(path) if data is not None else None
        if any(
            f.what in _NO_BYTES or f.what.startswith((PIP_LINE, pipconfig.CONFIG))
            for f in found
            if f.path == path
        ):
            lines.append(f"tree:{path}={A_TREE}")  # what it names is not in its bytes: never saved
            continue
        if held is None and os.path.isdir(path):
            # An unmodelled program's tree: nothing in it is bound. An interpreter's is named apart: its
            # program is a file the content binder binds (unbound_findings leaves it out).
            scripts = all(f.what == SCRIPT_TREE for f in found if f.path == path)
            lines.append(f"tree:{path}={SCRIPTS_TREE if scripts else A_TREE}")
            continue
        if held is None:
            try:
                held = read_regular(path, gitvet.CONFIG_READ_CAP)
            except Unreadable:
                # A FIFO is not read (it never hangs a vet); a file past the cap is not bound by a prefix
                # (what follows it would be unbound): both leave the finding unbound (unbound_findings()).
                lines.append(f"tree:{path}={UNREADABLE}")
                continue
            if data is not None:
                data[path] = held
        lines.append(f"tree:{path}={hashlib.sha256(held).hexdigest()}")
    lines += sorted({f"tree-arg:{f.what}" for f in found if not os.path.isabs(f.path)})
    if any(f.program == "git" for f in found):
        # What a git key or option not known inert names (an alias's `!sh t.sh`, a filter's script) is in
        # no bound file's bytes: unbound, so the approval is for this run only. The files' own digests
        # stay above: the spawn's re-vet compares them.
        lines.append(f"tree:{GIT_NAMED}={A_TREE}")
    return "\n".join(lines)


def unbound_findings(text: str) -> list[str]:
    """The findings of a binding() that no bytes hold (a tree an unmodelled program reads, a directory,
    a file that cannot be read or is past the cap): an approval of them would hold whatever is there at
    the next run, so it cannot be saved (allow-always is not offered, and no saved entry matches)."""
    out = []
    for line in text.splitlines():
        if line.startswith("tree:"):
            path, _, held = line[len("tree:") :].rpartition("=")
            if held in (A_TREE, UNREADABLE):
                out.append(path)
    return out


class TreeChanged(Exception):
    """What a host tool would read is no longer what was decided on."""


@dataclass(frozen=True)
class TreeVet:
    """What a decision vetted, kept so the spawn can vet it again: an approval given while the tree held
    one thing never runs what an agent wrote there afterwards (a filter added while the ask waited)."""

    commands: tuple[tuple[tuple[str, ...], tuple[str | None, ...]], ...]  # (argv, resolved paths)
    cwd: str
    roots: tuple[str, ...]
    binding: str  # binding() of the findings shown
    shown: tuple[str, ...] = ()  # their warnings, to name what is new
    found: tuple[Finding, ...] = ()  # what the decision was made on (the same read as `binding`)
    real_cwd: str = ""  # the cwd's real path when decided: what an anchored re-vet names its files by
    tree_safe: tuple[str, ...] = ()  # the operator's additions to treesafe.TREE_SAFE
    # Where each command sits in the rendering (engine.commands.rendering's segment path), and what was
    # rendered: the spawn renders a make again with sealed copies of its makefiles (commands.pinned).
    wheres: tuple[tuple[int, ...], ...] = ()
    analysis: CommandAnalysis | None = field(default=None, compare=False, repr=False)
    result: AllowlistResult | None = field(default=None, compare=False, repr=False)
    # sha256 over every file the vet read (each repository config, inert or not) and the binding: part of
    # an ask's identity, so asks decided on other bytes (another repository's config) never coalesce.
    inputs: str = ""
    # Per command: another that may write the tree runs before it or beside it (engine.commands.priorwrites).
    after_write: tuple[bool, ...] = ()

    def findings(self, record: gitvet.Record | None = None, cwd: str | None = None) -> list[Finding]:
        """Every command's findings (`sh -c` payloads included), as of now."""
        now: list[Finding] = []
        for i, (argv, paths) in enumerate(self.commands):
            now += findings_for(argv, paths, cwd or self.cwd, self.roots, record, self.tree_safe)
            if i < len(self.after_write) and self.after_write[i]:
                now += _written_first(argv, paths, cwd or self.cwd)
        return list(dict.fromkeys(now))

    @property
    def vets_nothing(self) -> bool:
        """No command here is one findings_for reads files for: pin() reads and binds nothing, whatever the
        tree holds now (an unmodelled program's finding is its tree, which binds no bytes)."""
        return all(tree_program(argv, paths) is None for argv, paths in self.commands)

    def pin(self, anchor: str | None = None) -> gitvet.Record:
        """Vet again, keeping every byte read: the record the run is pinned to (engine.commands.pinned).
        Raises TreeChanged when those bytes are not what was decided on. With `anchor` (ANCHOR + the fd
        of the directory the run starts in, checked to be the decided cwd), the cwd's files are read
        through that fd and named, in the record and the binding, by the decided cwd's path."""
        record = gitvet.Record()
        now = self.findings(record, anchor)
        text = binding(now, record.data)
        if anchor is not None and self.real_cwd:
            here, real = anchor.rstrip("/") + "/", self.real_cwd.rstrip("/") + "/"

            def move(path: str) -> str:
                if path == here.rstrip("/"):
                    return real.rstrip("/") or "/"
                return real + path[len(here) :] if path.startswith(here) else path

            now = [Finding(f.program, move(f.path), f.what) for f in now]
            record.data = {move(k): v for k, v in record.data.items()}
            text = binding(now, dict(record.data))
        if text != self.binding:
            new = [f for f in now if f.warning() not in self.shown]
            what = f"{new[0].path} now defines {new[0].what}" if new else "a file it would run changed"
            raise TreeChanged(f"the tree changed since the decision ({what})")
        return record

    def problem(self) -> str | None:
        """None when the tree still holds exactly what was decided on; else what changed."""
        try:
            self.pin()
        except TreeChanged as exc:
            return str(exc)
        return None


def tree_vet(
    analysis: CommandAnalysis,
    result: AllowlistResult,
    cwd: str,
    roots: Sequence[str],
    tree_safe: Sequence[str] = (),
) -> TreeVet:
    """Findings for the decision, plus what re-vets them just before the spawn."""
    commands: list[tuple[tuple[str, ...], tuple[str | None, ...]]] = []
    wheres: list[tuple[int, ...]] = []
    flow: list[tuple[tuple[str, ...], bool]] = []  # every simple command in run order (priorwrites)
    at: list[int] = []  # each command's place in `flow`

    def walk(an: CommandAnalysis, res: AllowlistResult, where: tuple[int, ...], piped: bool) -> None:
        piped = piped or "|" in an.operators
        for index, (segment, match) in enumerate(zip(an.segments, res.segments, strict=False)):
            if segment.inner is not None:
                if match.inner is not None:
                    walk(segment.inner, match.inner, (*where, index), piped)
                else:
                    flow.append((tuple(segment.argv), piped))
                continue
            at.append(len(flow))
            flow.append((tuple(segment.argv), piped))
            commands.append((tuple(segment.argv), (match.resolved_path, match.named_path)))
            wheres.append((*where, index))

    if analysis.ok:
        walk(analysis, result, (), False)
    written = priorwrites.after_writes(flow)
    after = tuple(written[i] for i in at)
    vet = TreeVet(tuple(commands), cwd, tuple(roots), "", tree_safe=tuple(tree_safe), after_write=after)
    # One read: the findings decided on and the bytes bound are the same bytes (two reads let a racer
    # show an inert config to the decision and bind the approval to the one with a filter).
    record = gitvet.Record()
    found = vet.findings(record)
    shown = tuple(f.warning() for f in found)
    text = binding(found, record.data)
    inputs = hashlib.sha256(text.encode("utf-8", "surrogateescape"))
    for path in sorted(record.data):
        inputs.update(
            f"\n{path}={hashlib.sha256(record.data[path]).hexdigest()}".encode("utf-8", "surrogateescape")
        )
    return TreeVet(
        vet.commands,
        cwd,
        vet.roots,
        text,
        shown,
        tuple(found),
        os.path.realpath(cwd),
        vet.tree_safe,
        tuple(wheres),
        analysis,
        result,
        inputs.hexdigest(),
        after,
    )
