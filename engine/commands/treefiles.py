"""Where each host program that runs code from its working tree looks: the files it reads there (its
table, TREE_PROGRAMS), the directories it works from, and the files and trees its argv names. What is found
is judged in engine.commands.treefindings."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from engine.commands.makefiles import DEFAULTS, parse_make
from engine.commands.pipargs import BUILDS, parse_pip, read_operands, read_requirements


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

OPERANDS_LOOKED_AT = 64  # argv words read for the files and trees a program is named (pytest ../other)
ARGV_FILE = "code or options it reads from a file its argv names"
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


def _home() -> str:
    return os.path.realpath(os.path.expanduser("~"))


def tree_dirs(start: str, walk_up: bool) -> Iterator[str]:
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


def tree_files(program: str, spec: TreeProgram, argv: Sequence[str], cwd: str) -> list[str]:
    cwd = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    if program in ("make", "gmake"):
        return _make_files(argv, cwd)
    starts = work_dirs(program, argv, cwd)
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
        for here in tree_dirs(start, spec.walk_up):
            out += [os.path.join(here, f) for f in spec.files if os.path.lexists(os.path.join(here, f))]
    # Whatever exists there counts, not only regular files: a FIFO `package.json` is read by npm all the
    # same (it is no file to vet, so the binding leaves it unbound and the run asks every time).
    return [p for p in dict.fromkeys(out) if os.path.lexists(p)]


def work_dirs(program: str, argv: Sequence[str], cwd: str) -> list[str]:
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


def unmodelled_trees(argv: Sequence[str], cwd: str) -> Iterator[str]:
    """Every tree an unmodelled program may take code from: the cwd and its ancestors (mypy, pytest and
    eslint look upward for their config), and each path operand's directory and its ancestors (pytest
    reads the conftest.py beside the tests it is given, wherever they are; gcc the `@file` it is given)."""
    yield from tree_dirs(cwd, walk_up=True)
    for path in _argv_paths(argv, cwd):
        if os.path.isdir(path):
            yield from tree_dirs(path, walk_up=True)
        else:
            yield from tree_dirs(os.path.dirname(path), walk_up=True)


def make_value_paths(argv: Sequence[str], cwd: str) -> list[str]:
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


def argv_code(program: str, argv: Sequence[str], cwd: str) -> list[tuple[str, str]]:
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
            for start in work_dirs(program, argv, cwd)
            for here in tree_dirs(start, walk_up=True)
            if os.path.isdir(os.path.join(here, "node_modules", ".bin"))
        ]
    return [(p, what) for p, what in out if os.path.lexists(p)]


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
