"""The files a command's text names: bound whole when the text is unparsed or a program comes from stdin."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence

from engine.commands.analysis import CommandAnalysis, Segment
from engine.commands.filetrust import system_owned
from engine.commands.interpoptions import program_source


def plain_segments(segments: Sequence[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for segment in segments:
        if segment.inner is not None:
            out += plain_segments(segment.inner.segments)
        elif segment.argv:
            out.append(segment)
    return out


def split_words(command: str) -> list[str]:
    """The text's words as a shell would split them, redirection operators apart (`<x.sh` → x.sh)."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars="<>|&;()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def all_words(command: str, depth: int = 0) -> list[str]:
    """The text's words, and the words of every word that is itself a command line (`sh -c 'cd x; …'`,
    `(cd sub; sh s.sh)` quoted): an unparsed text may run any of them."""
    out: list[str] = []
    for word in split_words(command):
        out.append(word)
        if depth < 2 and any(c in word for c in " \t\n;&|()"):
            out += all_words(word, depth + 1)
    return out


_CHDIR = frozenset({"cd", "pushd", "chdir"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;"})
CD_DIRS_MAX = 16


def cd_dirs(words: Sequence[str], cwd: str, env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """Every directory an unparsed text may read its relative names from: the cwd, each directory it names
    (`env -C sub`), and each place a `cd` (`pushd`) in it leads to, cumulatively (`cd a; cd b` → a/b); the
    first `cd` it cannot follow (no
    operand, `-`, `~`, an expansion, CDPATH set, a name that is no directory, more places than
    CD_DIRS_MAX) as well, else None.

    Not a model of one shell's `cd`: every reading any shell may give a target is a place (the cwd by the
    name it was given and by its real path, a target's `..` taken by name (`cd`, `cd -L`) and after the
    links (`cd -P`, bash's fallback, a shell started with PWD unset)), so a name found in any of them is
    bound in all, present or (must stay) absent."""
    dirs = list(dict.fromkeys([os.path.abspath(cwd), os.path.realpath(cwd)]))
    lost: str | None = None
    # CDPATH set by the gateway, by the agent's env, or by the text itself (`CDPATH=/e; cd sub`).
    cdpath = bool(env.get("CDPATH")) or any("CDPATH" in w for w in words)
    for i, word in enumerate(words):
        if word not in _CHDIR:
            # Not only `cd` changes directory: `env -C sub`, `--chdir=sub`, an alias of cd (dash expands
            # aliases in `sh -c`), a program's own `-C`. Every directory the text names is a place too.
            named = [r for name in _spellings(word) for d in dirs for r in _readings(os.path.join(d, name))]
            dirs = list(dict.fromkeys([*dirs, *(d for d in named if os.path.isdir(d))]))
            if len(dirs) > CD_DIRS_MAX:
                lost = lost or f"{word} (more than {CD_DIRS_MAX} places)"
                dirs = dirs[:CD_DIRS_MAX]
            continue
        rest = [w for w in words[i + 1 : i + 4] if not (w.startswith("-") and w != "-")]
        target = rest[0] if rest else ""
        if (
            not target
            or target in _SEPARATORS
            or target == "-"
            or target.startswith("~")
            or any(c in target for c in "$`*?[{")
            or (cdpath and not target.startswith(("/", "./", "../")))
        ):
            lost = lost or (f"{word} {target}" if target and target not in _SEPARATORS else word)
            continue
        reached = [r for d in dirs for r in _readings(os.path.join(d, target))]
        if not any(os.path.isdir(r) for r in reached):
            # No reading is a directory: a shell that goes on takes the name elsewhere (cdable_vars reads
            # it as a variable, `+N` turns pushd's stack), or fails where `;` runs on: not followed.
            lost = lost or f"{word} {target}"
            continue
        dirs = list(dict.fromkeys([*dirs, *(d for d in reached if os.path.isdir(d))]))
        if len(dirs) > CD_DIRS_MAX:
            lost = lost or f"{word} {target} (more than {CD_DIRS_MAX} places)"
            dirs = dirs[:CD_DIRS_MAX]
    return dirs, lost


def _spellings(word: str) -> list[str]:
    """The directory names a word may give a program: itself, an option's `=value`, an attached `-Cdir`."""
    if word in _SEPARATORS or not word:
        return []
    if not word.startswith("-"):
        return [word]
    out = [word.partition("=")[2]] if "=" in word else []
    if not word.startswith("--") and len(word) > 2:
        out.append(word[2:])
    return [w for w in out if w]


def _readings(path: str) -> tuple[str, str]:
    """A `cd` target by name (`..` drops the name before it) and by what its links lead to."""
    return os.path.abspath(path), os.path.realpath(path)


# What a shell may make of a word other than the word the binder reads (shlex): an expansion (`$x`,
# `$(…)`, `` `…` ``), a quoting one shell has and another has not (`$'x.sh'` is x.sh to bash, `$x.sh` to
# dash), a glob, braces, a tilde, an escape. The file such a word names is not a name the binder read.
_SHELL_READS = frozenset("$`*?[{~\\")
# Programs that take every argument as data (never a program, a script, a file of code or a name bash
# evaluates: `printf -v`, `test -v` and `[[` evaluate array subscripts, `sort --compress-program` runs
# one): an unpinned word in their arguments names nothing that runs. Anything else that gets one is
# refused.
_DATA_ARGS = frozenset(
    [
        "echo",
        "ls",
        "wc",
        "cat",
        "head",
        "tail",
        "uniq",
        "cut",
        "tr",
        "basename",
        "dirname",
        "stat",
        "du",
        "pwd",
        "grep",
        "mkdir",
        "touch",
        "true",
        "false",
        "date",
    ]
)
# Words that open a compound command and are not themselves a program.
_RESERVED = frozenset(["if", "then", "elif", "else", "fi", "do", "done", "while", "until", "!", "{", "}"])
_SUBSTITUTIONS = ("`", "$(", "<(", ">(")


# An arithmetic expansion of digits and operators only (`$((6*7))`): it names no file and evaluates no
# variable (a variable's value would be evaluated again, array subscripts and all), so it reads as a 0.
_LITERAL_ARITHMETIC = re.compile(r"\$\(\([0-9\s+*/%<>&|^~!=-]*\)\)")
# The test command's own names: `[ -e f ]` is a program, not a glob.
_TEST_WORDS = frozenset({"[", "[["})


def unpinned_word(command: str) -> str:
    """Why an unparsed text's names cannot be pinned, or "": the run of such a text is refused, not approved
    unbound (issue 27 §5). A word a shell expands or reads its own way (`$'x.sh'`, `x.s?`, `$x`) may name
    another file than the binder's; it is harmless only as an argument of a program that reads its
    arguments as data (_DATA_ARGS: `ls *.py`, `echo $HOME`) or in a `for` list. Anywhere else (a
    program's place, an interpreter's operand, a command substitution) the run is refused."""
    text = _LITERAL_ARITHMETIC.sub("0", command)
    if not any(c in text for c in _SHELL_READS):
        return ""
    shown = next((w for w in all_words(command) if any(c in w for c in _SHELL_READS)), "") or command[:40]
    reason = f"a word a shell expands or reads its own way ({shown!r}) names no file it binds"
    if any(s in text for s in _SUBSTITUTIONS):
        return reason
    try:
        lex = shlex.shlex(text, posix=False, punctuation_chars=True)  # words as written: quotes, \\ kept
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        return reason
    program = ""
    in_for = False
    for word in words:
        if word and set(word) <= set(";&|()<>"):
            program, in_for = "", False
            continue
        if not program:
            if word in _RESERVED:
                continue
            if word in ("for", "case", "in") or in_for:
                in_for = word != "do"  # a for/case list is data up to its `do`
                continue
            if "=" in word.split("/")[0] and not word.startswith("="):
                name = word.split("=", 1)[0]
                if name.isidentifier():  # an assignment before the program: a value, never run
                    continue
            if word not in _TEST_WORDS and any(c in word for c in _SHELL_READS):
                return reason  # the program itself is a word the shell decides
            program = word.rsplit("/", 1)[-1]
            continue
        if any(c in word for c in _SHELL_READS) and program not in _DATA_ARGS:
            return reason
    return ""


# Files an unparsed or unproven text may name and still be bound (each is digested per decision); past it
# the run is refused: a file dropped from the binding would run unbound (fresh round 10 e).
FILE_WORDS_MAX = 64


def file_words(
    command: str,
    analysis: CommandAnalysis,
    dirs: Sequence[str],
    at: Callable[[str], str | None] | None = None,
) -> tuple[list[str], list[str]]:
    """Every file the command's words name (or its segments'), in every spelling a program may read one:
    a word itself, the value of an option word (`--env-file=.env`) and an attached short value
    (`-r./x.js`). An option nobody modelled may read any of them as code or as settings for code. Also
    the option values that name a path (`=./x`, `=.env`) but do not exist yet: they must stay absent. A
    name is looked up in each of `dirs` (the cwd and where the text cd's, `cd_dirs`); found in one, it
    is bound in every one, present or (must stay) absent. Absolute paths. `at`: where the run's view
    has a path (engine.commands.viewpaths.reader): each is looked for there."""
    place = at or (lambda p: p)

    def isfile(p: str) -> bool:
        real = place(p)
        return real is None or os.path.isfile(real)  # a loop: named, bound as unreadable

    def lexists(p: str) -> bool:
        real = place(p)
        return real is None or os.path.lexists(real)

    if command:
        words = all_words(command)
    else:
        words = [w for seg in plain_segments(analysis.segments) for w in seg.argv]
    out: list[str] = []
    absent: list[str] = []
    for word in dict.fromkeys(words):
        if not word.startswith("-"):
            names = [word]
        else:
            _name, eq, value = word.partition("=")
            names = [value] if eq else []
            if not word.startswith("--") and len(word) > 2:
                names.append(word[2:])
        for name in names:
            if not name:
                continue
            paths = list(dict.fromkeys(os.path.abspath(os.path.join(d, name)) for d in dirs))
            if any(isfile(p) for p in paths):
                out += [p for p in paths if isfile(p)]
                absent += [p for p in paths if not lexists(p)]
            elif word.startswith("-") and ("/" in name or name.startswith(".")):
                absent += [p for p in paths if not lexists(p)]
    return list(dict.fromkeys(out)), list(dict.fromkeys(absent))


def names_interpreter(command: str) -> bool:
    return any(program_source([w]) is not None for w in split_words(command))


IMPORT_SCAN_MAX = 2000  # directory entries looked at, at most: a huge tree is reported as "N+"
_CODE_SUFFIXES = (".py", ".pyc", ".pth", ".so")
_SKIP_DIRS = frozenset({"node_modules", "__pycache__"})


def _package_dir(entry: os.DirEntry[str], depth: int) -> bool:
    name = entry.name
    # A linked directory is one Python imports through: followed (the depth bounds a loop of links).
    return depth < 4 and name[:1] != "." and name not in _SKIP_DIRS and entry.is_dir()


def imports_note(script: str, cwd: str) -> str | None:
    """Python imports modules from the script's directory first: count the agent-writable code there and
    in its package directories (not bound; an approval holds for the script only, docs/SECURITY.md). That
    directory is the one of the script's real path (sys.path[0], and the sealed copy runs under that path
    too): a link's own directory is not where its imports come from."""
    base = os.path.dirname(os.path.realpath(os.path.join(cwd, script)))
    count, seen, capped = 0, 0, False
    queue = [(base, 0)]
    while queue and not capped:
        here, depth = queue.pop()
        try:
            entries = os.scandir(here)
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > IMPORT_SCAN_MAX:
                    capped = True
                    break
                if entry.name.endswith(_CODE_SUFFIXES):
                    count += 1
                elif _package_dir(entry, depth):
                    queue.append((entry.path, depth + 1))
    if os.path.realpath(os.path.join(cwd, script)).endswith(_CODE_SUFFIXES):
        count -= 1  # the script itself, which is bound (counted only when its name has a code suffix)
    if count <= 0 or system_owned(os.path.realpath(os.path.join(cwd, script))):
        return None
    shown = os.path.relpath(base, os.path.realpath(cwd)) if base != os.path.realpath(cwd) else "."
    more = "+" if capped else ""
    return (
        f"Warning: {script} can import code from {count}{more} agent-writable Python files under {shown}/ "
        "that are not bound: changes to them after the approval run."
    )
