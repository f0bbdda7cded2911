"""A tree program's argv read by that program's own grammar: it runs unasked only when every option and
operand is one understood here (the inverse of a list of dangerous options, issue 27 §3).

make, pip and git have full grammars of their own (engine.commands.makefiles, pipargs, gitargv). Every
other program of treecode.TREE_PROGRAMS is read here: a grammar names the options it takes as they are
spelled (no abbreviations: npm's nopt expands `--prefi` to `--prefix`, so an abbreviation is unknown and
asks), which take a value and of what shape, which name the directory or file the program works from (those
treecode models: where it looks and in which order), and which operands (subcommands, targets, script and
registry package names) it runs with. Anything else — an unknown or abbreviated option, a path or URL
operand (`cmake ..`, `npx ./pkg`, `npm install file:x`), an option carrying a command line (`npx -c`,
`cmake -E env`), arguments after `--` handed on to a script — is a problem: the command asks. A program
with no grammar here understands only a lone `--version`/`--help`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["GRAMMARS", "Grammar", "argv_problem"]

# A name: a subcommand, target, phase, script or value such as `-j 4` or `--features a,b`. No `/`, no `:`
# (a URL, `plugin:goal`), no leading `.` or `-` (a path, an option): nothing that names a file or a place.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,+-]*\Z")
# An npm registry spec: `lodash`, `lodash@4`, `@scope/pkg@^1.2`. A `/` without the scope's `@` is a GitHub
# shorthand, `./x` a folder, `x.tgz` a tarball, `file:`/`git+` a URL: never this shape.
_NPM_SPEC = re.compile(r"(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9.^~<>=*|_ -]+)?\Z")
# cmake's -G value: a generator name ("Unix Makefiles", "Ninja Multi-Config").
_GENERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9 .+-]*\Z")
_VERSION = frozenset({"--version", "-version", "--help", "-h", "-V", "-v"})


@dataclass(frozen=True)
class Grammar:
    """What one program's argv may hold and still be understood."""

    flags: frozenset[str] = frozenset()  # options taking no value
    named: frozenset[str] = frozenset()  # options whose value is a NAME
    places: frozenset[str] = frozenset()  # options naming where the program works: treecode models them
    # subcommand → how many operands it takes and their shape; None: no subcommands, operands are `operand`
    commands: dict[str, int] | None = None
    operand: re.Pattern[str] = NAME
    most: int = 0  # operands allowed when there are no subcommands
    value_shapes: dict[str, re.Pattern[str]] = field(default_factory=dict)
    leading: str = ""  # a first-word prefix the program reads (cargo's `+toolchain`)
    shapes: dict[str, re.Pattern[str]] = field(default_factory=dict)  # a subcommand's own operand shape


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_NPM_FLAGS = _set(
    "--version -v --help -h --silent -s --quiet -q --yes -y --no-audit --no-fund --offline --prefer-offline "
    "--json --ignore-scripts --no-save --dry-run --no-progress --color --no-color"
)
_ANY = 1 << 16
GRAMMARS: dict[str, Grammar] = {
    # ninja (src/ninja.cc ReadFlags): -C chdirs before -f's file is opened (treecode joins them so);
    # -t runs tools (browse starts a server, some run commands), -d and -w change what it checks.
    "ninja": Grammar(
        flags=_set("-n -v --verbose --quiet --version -h --help"),
        named=_set("-j -k -l"),
        places=_set("-C -f"),
        most=_ANY,
    ),
    # npm: a subcommand and its operands; `--prefix`/-C name the package directory (treecode looks there
    # and for its node_modules/.bin). `exec`, `x`, `explore`, `rebuild`, `-c`/`--call` run a command line
    # of the caller's: not understood, they ask.
    "npm": Grammar(
        flags=_NPM_FLAGS,
        named=_set("--loglevel"),
        places=_set("--prefix -C"),
        commands={
            **dict.fromkeys(("test", "t", "tst", "start", "stop", "restart"), 0),
            **dict.fromkeys(("run", "run-script", "rum", "urn"), 1),
            **dict.fromkeys(("install", "i", "ci", "add"), _ANY),
            **dict.fromkeys(("ls", "list", "outdated"), 0),
        },
        operand=_NPM_SPEC,
        # a script's name: `build:prod` (it names a key of the package.json treecode binds, nothing else)
        shapes=dict.fromkeys(("run", "run-script", "rum", "urn"), re.compile(r"[A-Za-z0-9_][\w:.-]*\Z")),
    ),
    # npx: its operand is the code it runs (a registry package of the agent's choosing, or a bin from a
    # node_modules/.bin nobody bound), and what follows is that program's own argv: only its options here.
    "npx": Grammar(flags=_NPM_FLAGS, places=_set("--prefix -C")),
    # cmake: configure (-S/-B) or build (--build) a directory treecode vets. -P, -E, -C, -D, --preset,
    # --install, -H and a positional source directory (`cmake ..`) are not modelled: they ask.
    "cmake": Grammar(
        flags=_set("--version -version --help -h --fresh"),
        named=_set("-j --parallel --target -t --config -G"),
        places=_set("-S -B --build"),
        value_shapes={"-G": _GENERATOR},
    ),
    # cargo: -C and --manifest-path are modelled; `install --path`, `--config`, a `+./toolchain` path and
    # anything after `--` (the built program's or a test harness's argv) ask.
    "cargo": Grammar(
        flags=_set(
            "--release -r -q --quiet -v --verbose --offline --locked --frozen --workspace --all-targets "
            "--lib --bins --tests --all-features --no-default-features --version -V --help -h"
        ),
        named=_set("-j --jobs -p --package --bin --test --example --features -F --target --profile"),
        places=_set("-C --manifest-path"),
        commands={
            **dict.fromkeys(("build", "b", "test", "t", "check", "c", "run", "r", "doc", "bench"), 0),
            **dict.fromkeys(("version", "tree", "metadata"), 0),
        },
        leading="+",
    ),
    # mvn: lifecycle phases by name (a `plugin:goal` fetches and runs any plugin); -f, -D, -s, -P ask.
    "mvn": Grammar(
        flags=_set(
            "--version -v -V --show-version -q --quiet -B --batch-mode -o --offline -e --errors -h --help -U"
        ),
        named=_set("-T --threads"),
        operand=re.compile(r"[a-z][a-z-]*\Z"),
        most=_ANY,
    ),
}


def _bare(word: str, g: Grammar) -> tuple[str, str | None]:
    """The option a word spells and its attached value: `--x=v`, `-jN`, `-Cdir`, `-GNinja`."""
    if word.startswith("--"):
        name, eq, value = word.partition("=")
        return name, value if eq else None
    if len(word) > 2 and word[:2] in g.named | g.places:
        return word[:2], word[2:]
    return word, None


def argv_problem(program: str, argv: Sequence[str]) -> str | None:
    """None when `program`'s grammar understands every word of `argv`; else the first word it does not,
    and why (the command asks)."""
    words = list(argv[1:])
    g = GRAMMARS.get(program)
    if g is None:
        if not words or (len(words) == 1 and words[0] in _VERSION | {"version", "help"}):
            return None
        return f"an argv exechost has no grammar of {program}'s for ({words[0]!r}): it may name code to run"
    if g.leading and words and words[0].startswith(g.leading):
        if not NAME.match(words[0][1:]):
            return f"{words[0]!r}: a toolchain path, not a name"
        words = words[1:]
    command: str | None = None
    operands = 0
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            return "arguments after `--`, handed on to a program or script it runs"
        if word.startswith("-") and word != "-":
            name, value = _bare(word, g)
            if name in g.flags and value is None:
                continue
            if name not in g.named and name not in g.places:
                return f"an option exechost does not model: {word!r} (unknown, abbreviated or running code)"
            if value is None:
                if i >= len(words):
                    return f"{word!r} without its value"
                value = words[i]
                i += 1
            elif not word.startswith("--") and value.startswith("="):
                # getopt reads `-C=sub` as the directory `=sub`, npm's nopt as `sub`: not one reading.
                return f"{word!r}: a short option with `=` its programs read differently"
            if value.startswith("-") or not value:
                # nopt may refuse a value that looks like an option and take the next word instead.
                return f"{word} {value!r}: a value that is empty or looks like an option"
            if name in g.named and not g.value_shapes.get(name, NAME).match(value):
                return f"{word} {value!r}: a value that is not a plain name"
            continue
        if g.commands is not None and command is None:
            if word not in g.commands:
                return f"a subcommand exechost does not model: {word!r}"
            command = word
            continue
        limit = g.commands[command] if g.commands is not None and command is not None else g.most
        operands += 1
        shape = g.shapes.get(command or "", g.operand)
        if operands > limit or not shape.match(word):
            return f"an operand exechost does not model: {word!r} (a path, a URL or more than it takes)"
    return None
