"""The proof that a binding holds every code source of its command: allow-always is offered only on it."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence

from engine.commands.analysis import CommandAnalysis
from engine.commands.boundfiles import ContentItem
from engine.commands.digests import SHEBANG_MAX, WRITABLE_MAX_BYTES, ContentError, open_regular, read_all
from engine.commands.filetrust import system_owned
from engine.commands.interpoptions import (
    FILE,
    INLINE,
    MODULE,
    STDIN,
    UNKNOWN,
    loaded_values,
    perl_line_switches,
    program_source,
)
from engine.commands.interpreters import name_of
from engine.commands.scriptfiles import (
    FAMILY_OF,
    FILE_FLAG,
    SHELLS,
    elf_interpreter,
    reader_of,
    script_operand,
    venv_of,
)
from engine.commands.textnames import plain_segments

At = Callable[[str], "str | None"]  # a word's host path as the run's view has it (viewpaths.reader)

# Programs that run a word of their argv as code or as a command line (a wrapper exechost does not unwrap
# hands them one): their presence after argv[0] means a code source the binder did not follow.
_RUNS_CODE = frozenset({*SHELLS, *FAMILY_OF, *FILE_FLAG, "eval", "exec", "source", ".", "env", "xargs"})
# Options of sed/awk proven not to read code: letters that stand alone, letters taking a value.
_TEXT_TOOL_FLAGS = {"sed": ("nErsuz", "el"), "awk": ("", "Fv")}
_TEXT_TOOL_LONG = frozenset(
    {
        "--posix",
        "--quiet",
        "--silent",
        "--regexp-extended",
        "--separate",
        "--unbuffered",
        "--null-data",
        "--expression",
        "--debug",
        "--sandbox",
    }
)


def unproven_sources(
    analysis: CommandAnalysis, items: Sequence[ContentItem], cwd: str, command: str, at: At | None = None
) -> list[str]:
    """Why the binder cannot prove it bound every code source of the command; [] when it can.

    Inverted default: a segment is proven only when its program is known to read no code besides the files
    bound here. An unparsed text, `eval`/`source`, a word naming an interpreter or an agent-writable
    executable after a program exechost does not unwrap (`nohup sh x.sh`, `find -exec`), an interpreter
    option outside the grammar's inert ones, a script operand that is not a regular file here (a directory
    the interpreter resolves, a name bash finds on PATH, `x` node runs as x.js), a second or attached
    program file (`awk -fp.awk`, `sed --file=s.sed`), a `#!` argument: each is a reason. `at`: where the
    run's view has a word (engine.commands.viewpaths.reader), so each file is looked at where the run
    reads it."""
    if not analysis.ok:
        return ["the command could not be parsed, so what it runs is not proven bound"]
    why: list[str] = []
    for segment in plain_segments(analysis.segments):
        why += _segment_unproven(segment.argv, cwd, at=at)
    for item in items:
        if item.sha256 is None:
            # Absent now: what appears there (or on PATH) later is code nobody saw.
            why.append(f"{item.path} does not exist when decided")
            continue
        venv = venv_of(os.path.join(cwd, item.path)) if item.role in ("executable", "interpreter") else None
        if (
            venv is not None
            and reader_of(item.real) == "python"
            and not system_owned(os.path.realpath(os.path.join(venv, "pyvenv.cfg")))
        ):
            why.append(
                f"{item.path} is the python of a virtualenv the agent can write ({venv}): it runs every "
                ".pth file of the venv's site-packages at start, and none of that is bound"
            )
        if item.role == "script":
            why += _perl_hands_off(items, item)
        if item.role in ("executable", "interpreter") and item.kind == "elf" and item.writable:
            why += _loader_unproven(item)
        if item.role in ("executable", "interpreter") and len(item.shebang) > 1:
            arg = item.shebang[1]
            if not arg.startswith("-"):
                why.append(f"{item.path}: its #! line passes {arg!r}, a word the interpreter may run")
            else:
                why += _segment_unproven((item.shebang[0], arg, item.real), cwd, shebang=item.path, at=at)
    return why


# What a #! line's option makes the interpreter run instead of (or before) the script.
_SHEBANG_SOURCES = {
    STDIN: "stdin",
    MODULE: "a module it searches for",
    UNKNOWN: "an option exechost does not model",
}


def _loader_unproven(item: ContentItem) -> list[str]:
    """The kernel maps an ELF's loader (PT_INTERP) by its path at exec, from no copy: the `#!` line of a
    binary. Read from the bound bytes (a file swapped since they were hashed is refused), a loader the
    agent can change is code no digest holds."""
    data = _bound_bytes(item)
    if data is None:
        return [f"{item.path} changed while it was decided on"]
    loader = elf_interpreter(data)
    if loader is None or system_owned(os.path.realpath(loader)):
        return []
    return [f"{item.path}: its loader {loader} is a file the agent can change, and is not bound"]


def _segment_unproven(argv: Sequence[str], cwd: str, shebang: str = "", at: At | None = None) -> list[str]:
    name = name_of(argv[0])
    where = f"{shebang}: its #! line" if shebang else name
    if name in ("eval", "source", "."):
        return [f"{name} runs text or a file the binder does not follow"]
    if name in FILE_FLAG:
        return _text_tool_unproven(name, argv, cwd, at)
    source = program_source(argv)
    if source is not None:
        if source.more:
            return [f"{where}: {', '.join(source.more)} reads code besides the bound program"]
        if shebang and (source.kind not in (FILE, INLINE) or loaded_values(argv)):
            # bind() reads the argv's program sources and preloads, never a #! line's: `-mmod` runs a module
            # and never the script, `-` reads stdin, `--require=./x.js` preloads a file nothing binds.
            what = _SHEBANG_SOURCES.get(source.kind, "a file it preloads")
            return [f"{where} runs code from {what}, which is not bound"]
        if source.kind == FILE:
            return _operand_unproven(name, argv, source.index, cwd, at)
        return []  # inline: the code is the text; stdin/module/unknown: reported by bind
    if name in FAMILY_OF:
        operand = script_operand(argv, argv[0])
        if operand is None or any(w.startswith(("-", "+")) for w in argv[1:operand]):
            return [f"{where}: options exechost does not model for {name}"]
        return _operand_unproven(name, argv, operand, cwd, at)
    for word in argv[1:]:
        if any(name_of(w) in _RUNS_CODE for w in word.split()) or _agent_executable(word, cwd, at):
            return [f"{name} runs {word!r}, which exechost does not unwrap or bind"]
    return []


def segment_unproven(argv: Sequence[str], cwd: str, at: At | None = None) -> bool:
    """Whether one plain segment runs code its words name in a way the binder does not model (a wrapper it
    does not unwrap, `nohup sh x.sh`; a second or attached program file, `awk -fp.awk`; an option of an
    interpreter family read by guess): content.bind then binds every file the text names whole."""
    return bool(_segment_unproven(argv, cwd, at=at))


def _operand_unproven(name: str, argv: Sequence[str], index: int, cwd: str, at: At | None) -> list[str]:
    if index >= len(argv):
        return []
    word = argv[index]
    path = _where(word, cwd, at)
    if os.path.isfile(path):
        return []
    if os.path.isdir(path):
        return [f"{name} {word}: a directory, the interpreter runs a file it finds there"]
    return [f"{name} {word}: no such file here; the interpreter may find another one (PATH, {word}.js)"]


def _perl_hands_off(items: Sequence[ContentItem], item: ContentItem) -> list[str]:
    """perlrun: a script whose `#!` line names neither `perl` nor `indir` is handed to the program that line
    names (`#!./helper` runs ./helper), which nothing binds. Read from the bound bytes: a script swapped
    since they were hashed is refused."""
    if not _run_by_perl(items, item):
        return []
    data = _bound_bytes(item)
    if data is None:
        return [f"{item.path} changed while it was decided on"]
    why = []
    for switches in perl_line_switches(data):
        # perlrun: switches on a `#!…perl` line (the first, or the one `-x` finds) act as the argv's do.
        source = program_source(("perl", *switches, item.path))
        if source is None or source.more or source.kind != FILE:
            shown = " ".join(switches)
            why.append(f"perl {item.path}: its #! line's {shown} reads code besides the bound program")
    return why + _perl_handoff(data, item)


def _perl_handoff(data: bytes, item: ContentItem) -> list[str]:
    if not data.startswith(b"#!"):
        return []
    line = data[:SHEBANG_MAX].split(b"\n", 1)[0]
    if b"perl" in line or b"indir" in line:
        return []
    return [
        f"perl {item.path}: its #! line names no perl, so perl runs that program instead, which is not bound"
    ]


def handed_off(items: Sequence[ContentItem]) -> str:
    """Why the run must be refused, even once: code the kernel or perl starts by a path at the spawn, from
    no copy a digest holds (an agent-writable ELF loader, the program a perl script's `#!` names)."""
    for item in items:
        if item.sha256 is None:
            continue
        if item.role in ("executable", "interpreter") and item.kind == "elf" and item.writable:
            why = _loader_unproven(item)
            if why:
                return why[0]
        if item.role == "script" and _run_by_perl(items, item):
            data = _bound_bytes(item)
            if data is None:
                return f"{item.path} changed while it was decided on"
            why = _perl_handoff(data, item)
            if why:
                return why[0]
    return ""


def _run_by_perl(items: Sequence[ContentItem], item: ContentItem) -> bool:
    exe = next(
        (i for i in items if i.role == "executable" and i.where == item.where and i.argv_index == 0), None
    )
    return exe is not None and name_of(exe.real) == "perl"


def _bound_bytes(item: ContentItem) -> bytes | None:
    """The file's bytes now, when they are the ones its digest holds; None otherwise."""
    try:
        fd, st = open_regular(item.real)
    except ContentError:
        return None
    try:
        data = read_all(fd, st.st_size, WRITABLE_MAX_BYTES)
    except ContentError:
        return None
    finally:
        os.close(fd)
    return data if hashlib.sha256(data).hexdigest() == item.sha256 else None


def _text_tool_unproven(name: str, argv: Sequence[str], cwd: str, at: At | None) -> list[str]:
    flags, valued = _TEXT_TOOL_FLAGS["sed" if "sed" in name else "awk"]
    files = 0
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        if word == "-f" and i + 1 < len(argv):
            files += 1
            if not os.path.isfile(_where(argv[i + 1], cwd, at)):
                return [f"{name} -f {argv[i + 1]}: not a regular file here"]
            i += 2
            continue
        if word.startswith("--"):
            long = word.partition("=")[0]
            if long not in _TEXT_TOOL_LONG:
                return [f"{name} {word}: an option the binder does not prove inert"]
            i += 1
            continue
        letters = word[1:]
        if letters[0] in valued:
            i += 1 if len(letters) > 1 else 2
            continue
        if name_of(argv[0]).endswith("sed") and letters[0] == "i":
            i += 1  # -i[SUFFIX]: edit in place
            continue
        if not all(c in flags for c in letters):
            return [f"{name} {word}: an option the binder does not prove inert"]
        i += 1
    if files > 1:
        return [f"{name}: more than one program file"]
    return []


def _agent_executable(word: str, cwd: str, at: At | None) -> bool:
    """A word naming an executable file the agent can write (a wrapper runs a bare name from PATH, whose
    entries are absolute and the operator's: only a word with a `/` names a file in the agent's tree)."""
    if "/" not in word or word.startswith("-"):
        return False
    path = _where(word, cwd, at)
    return os.path.isfile(path) and os.access(path, os.X_OK) and not system_owned(os.path.realpath(path))


def _where(word: str, cwd: str, at: At | None) -> str:
    """The host path of what the run reads by `word`: where its view has it when `at` is given ("" for a
    loop of links there: no file)."""
    if at is None:
        return os.path.join(cwd, word)
    return at(word) or ""
