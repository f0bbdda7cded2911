"""Where an interpreter takes its program from, reading its options the way that interpreter does (issue 27
§5): a file operand, inline text, stdin, a module it searches for, or "unknown" (then every file the
command names is bound whole instead)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.commands.interpreters import name_of

FILE, INLINE, STDIN, MODULE, UNKNOWN = "file", "inline", "stdin", "module", "unknown"


@dataclass(frozen=True)
class Source:
    kind: str  # file | inline | stdin | module | unknown
    index: int = -1  # file: the operand's argv index; inline: the code's index
    # Options that make the interpreter read code besides its program (python -i: a REPL on stdin after the
    # script; perl -d: the debugger's commands, -M/-m: a module found on @INC): nothing binds that code.
    more: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grammar:
    """One interpreter family's options: letters that stand alone (and may cluster), letters taking a
    value (the rest of the word or the next one), letters whose optional value can only be attached,
    and long options."""

    flags: str
    valued: str
    attached: str
    long_flags: frozenset[str]
    long_valued: frozenset[str]
    inline: str  # letters meaning "the program is this text"
    stdin: str = ""  # letters meaning "the program is stdin"
    module: str = ""  # letters meaning "a module found on a search path"
    search: str = ""  # letters meaning "the program operand is searched for on PATH" (perl -S)
    long_inline: frozenset[str] = frozenset()
    plus: bool = False  # `+x` turns an option off (shells)
    digits: str = ""  # letters taking optional attached digits, after which the cluster goes on (perl -l0)
    more: str = ""  # letters (of flags, valued or attached) that read code besides the program
    long_more: frozenset[str] = frozenset()


_SH = Grammar(
    flags="abefhkmnptuvxBCEHPTls", valued="oO", attached="", inline="c", stdin="s", plus=True,
    long_flags=frozenset({"--norc", "--noprofile", "--posix", "--restricted", "--verbose", "--noediting",
                          "--login", "--debugger", "--protected", "--version", "--help"}),
    long_valued=frozenset(),
)  # fmt: skip
_PYTHON = Grammar(
    flags="bBdEhiIOPqsSuvVx?R3", valued="WX", attached="", inline="c", module="m", more="i",
    long_flags=frozenset({"--version", "--help", "--help-env", "--help-xoptions", "--help-all"}),
    long_valued=frozenset({"--check-hash-based-pycs"}),
)  # fmt: skip
# `-X` options that change only diagnostics, encodings or limits. Others load code from a place an option
# names (`pycache_prefix=DIR`: the standard library's bytecode; `presite=MOD`) or are new: unknown.
PYTHON_INERT_X = frozenset(
    {"faulthandler", "showrefcount", "tracemalloc", "importtime", "dev", "utf8", "warn_default_encoding",
     "no_debug_ranges", "int_max_str_digits", "frozen_modules", "perf", "perf_jit", "cpu_count", "gil"}
)  # fmt: skip
_PERL = Grammar(
    flags="acfnpstTuUvwWX", valued="IMm", attached="idDCxV", inline="eE", digits="l0", search="S",
    long_flags=frozenset({"--version", "--help"}), long_valued=frozenset(), more="dDMm",
)  # fmt: skip
_RUBY = Grammar(
    flags="acdlnpsvwyhU", valued="IrCE", attached="xWKT", inline="e", digits="0",
    long_flags=frozenset({"--version", "--help", "--verbose", "--copyright", "--yydebug", "--jit", "--yjit"}),
    long_valued=frozenset(),
)  # fmt: skip
_NODE = Grammar(
    flags="hvic", valued="rC", attached="", inline="ep",
    long_flags=frozenset({"--version", "--help", "--no-warnings", "--no-deprecation", "--trace-warnings",
                          "--enable-source-maps", "--throw-deprecation", "--trace-uncaught", "--check",
                          "--interactive", "--no-experimental-fetch", "--abort-on-uncaught-exception",
                          "--preserve-symlinks", "--preserve-symlinks-main", "--pending-deprecation",
                          "--experimental-vm-modules", "--expose-gc", "--jitless", "--frozen-intrinsics"}),
    long_valued=frozenset({"--require", "--import", "--loader", "--experimental-loader", "--conditions",
                           "--input-type", "--title", "--stack-size", "--max-old-space-size"}),
    long_inline=frozenset({"--eval", "--print"}), more="i", long_more=frozenset({"--interactive"}),
)  # fmt: skip
_GRAMMARS = {
    **{n: _SH for n in ("sh", "bash", "dash", "ash")},
    "python": _PYTHON,
    "pypy": _PYTHON,
    "perl": _PERL,
    "ruby": _RUBY,
    "node": _NODE,
    "nodejs": _NODE,
}
# Options that load code from a named place besides the program (node --require, perl -M, ruby -r,
# python has none): their values are files or modules the run executes.
LOADS = {"node": ("-r", "--require", "--import", "--loader", "--experimental-loader"), "ruby": ("-r",)}


def family(program: str) -> str | None:
    """The grammar key for a program path or name (`python3.11` → python), None when not modelled."""
    name = name_of(program)
    return name if name in _GRAMMARS else None


def program_source(argv: Sequence[str], program: str | None = None) -> Source | None:
    """Where `argv` (an interpreter's words) takes its program from; None for programs not modelled."""
    key = family(program or argv[0]) if argv else None
    if key is None:
        return None
    more: list[str] = []
    source = _source(_GRAMMARS[key], argv, more)
    return Source(source.kind, source.index, tuple(more)) if more else source


def _source(g: Grammar, argv: Sequence[str], more: list[str]) -> Source:
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-" and g is not _SH:
            return Source(STDIN, i)
        if word in ("--", "-"):  # a shell's lone `-` ends its options too
            return Source(FILE, i + 1) if i + 1 < len(argv) else Source(STDIN)
        if word.startswith("--"):
            name, eq, _value = word.partition("=")
            if name in g.long_more:
                more.append(name)
            if name in g.long_inline:
                return Source(INLINE, i if eq else i + 1)
            if name in g.long_valued:
                i += 1 if eq else 2
                continue
            if name in g.long_flags and not eq:
                i += 1
                continue
            return Source(UNKNOWN)
        if not (word.startswith("-") or (g.plus and word.startswith("+"))) or len(word) == 1:
            return Source(FILE, i)
        step = _cluster(g, word, i, argv, more)
        if isinstance(step, Source):
            return step
        i = step
    return Source(STDIN)


def _cluster(g: Grammar, word: str, i: int, argv: Sequence[str], more: list[str]) -> int | Source:
    """The next argv index after one option word, or where the program comes from if it says."""
    plus = word.startswith("+")
    taken = 0  # words after this one a shell's `-o`/`-O` letters took (`-ox errexit`, `-oo a b`)
    j = 0
    while j + 1 < len(word):
        j += 1
        letter, rest = word[j], word[j + 1 :]
        if letter in g.more and not plus:
            more.append(f"-{letter}")
        if letter in g.digits:
            allowed = "0123456789"
            if letter == "0" and word[j + 1 : j + 2] in ("x", "X"):
                j, allowed = j + 1, "0123456789abcdefABCDEF"  # -0xHHH
            while j + 1 < len(word) and word[j + 1] in allowed:
                j += 1
            continue
        if letter in g.inline and not plus:
            return Source(INLINE, i + 1 + taken if taken else i if rest else i + 1)
        if letter in g.module and not plus:
            return Source(MODULE, i if rest else i + 1)
        if letter in g.search:
            # `perl -S app.pl` runs the app.pl PATH holds (perlrun), never ./app.pl: a program found on a
            # search path, like a module (nothing the text names holds it).
            return Source(MODULE)
        if letter in g.stdin:
            # `sh -s args`: the program is stdin, the words after are its arguments. bash reads `+s` the
            # same (shell.c sets read_from_stdin whatever the sign); dash turns it off: read as stdin for
            # every shell, the stricter of the two.
            return Source(STDIN)
        if letter in g.valued and g.plus:
            # sh, bash, dash and busybox give `-o`/`-O` the next word whatever follows in the cluster:
            # `bash -ox errexit s.sh` runs s.sh with errexit and xtrace on (fresh round 10 e).
            taken += 1
            continue
        if letter in g.valued:
            if g is _PYTHON and letter == "X":
                value = rest or (argv[i + 1] if i + 1 < len(argv) else "")
                if value.partition("=")[0] not in PYTHON_INERT_X:
                    return Source(UNKNOWN)
            return i + 1 if rest else i + 2
        if letter in g.attached:
            return i + 1  # its value, if any, is the rest of this word
        if letter not in g.flags:
            return Source(UNKNOWN)
    return i + 1 + taken


def loaded_values(argv: Sequence[str], program: str | None = None) -> list[str]:
    """Values of options that load code besides the program (`node -r ./x.js`, `ruby -r ./y`)."""
    key = family(program or argv[0]) if argv else None
    options = LOADS.get(key or "", ())
    out: list[str] = []
    for i, word in enumerate(argv[1:], start=1):
        for option in options:
            if word == option and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif word.startswith(option + "="):
                out.append(word.split("=", 1)[1])
    return out


def perl_line_switches(data: bytes) -> list[list[str]]:
    """The switch words of each `#!` line of a perl script perl may read switches from (perlrun: the
    first line, or under `-x` the first `#!` line naming perl; every such line is read, the stricter
    choice): the words after the one holding `perl`, up to the first that is no switch."""
    found: list[list[str]] = []
    for number, raw in enumerate(data.split(b"\n")):
        if not raw.startswith(b"#!") or (number and b"perl" not in raw):
            continue
        words = raw[2:].decode("latin-1").split()
        at = next((k for k, w in enumerate(words) if "perl" in w), None)
        if at is None:
            continue
        switches = []
        for word in words[at + 1 :]:
            if not word.startswith("-") or word in ("-", "--"):
                break
            switches.append(word)
        if switches:
            found.append(switches)
    return found


def python_skips_first_line(options: Sequence[str]) -> bool:
    """Whether Python's options (the words before its script) hold `-x`, alone or in a cluster (`-ux`);
    the value of `-W`/`-X` (attached or the next word) is not a cluster."""
    value_next = False
    for word in options:
        if value_next:
            value_next = False
            continue
        if not word.startswith("-") or word.startswith("--") or word == "-":
            continue
        for j, letter in enumerate(word[1:], 1):
            if letter in "WX":
                value_next = j == len(word) - 1
                break
            if letter == "x":
                return True
    return False
