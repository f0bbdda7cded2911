"""Content binding: the sha256 of every file a decided command will execute or read as code."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.commands.allowlist import AllowlistResult, SegmentMatch, pin_path, render_bound
from engine.commands.analysis import CommandAnalysis, Segment
from engine.commands.interpoptions import (
    FILE,
    MODULE,
    STDIN,
    UNKNOWN,
    family,
    loaded_values,
    program_source,
    python_skips_first_line,
)
from engine.commands.interpreters import name_of
from engine.commands.protected import process_word
from engine.commands.regular import Unreadable, read_fd
from engine.commands.regular import open_regular as _open_regular
from engine.commands.which import DEFAULT_PATH, resolves_through_proc
from engine.sysbin import only_root_changes

# Agent-writable files are copied into memory to run: past this size the run is refused instead.
WRITABLE_MAX_BYTES = 64 * 1024 * 1024
SHEBANG_MAX = 256  # Linux reads at most this much of a `#!` line (BINPRM_BUF_SIZE)
CACHE_MAX = 4096
UNREADABLE = ""  # the digest of a file that could not be read: never matches, so the run is refused

# Programs that read a file operand as code, by family: options that mean "the code is inline" (no file
# operand) and options that take a value (the next word is not the operand).
_SHELLS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "ash",
        "zsh",
        "ksh",
        "mksh",
        "pdksh",
        "yash",
        "fish",
        "csh",
        "tcsh",
        "posh",
        "rc",
        "es",
    }
)
_FAMILIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "shell": (frozenset({"-c"}), frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})),
    "python": (frozenset({"-c", "-m"}), frozenset({"-W", "-X", "-Q"})),
    "perl": (frozenset({"-e", "-E"}), frozenset({"-I", "-M", "-m", "-x"})),
    "ruby": (frozenset({"-e"}), frozenset({"-I", "-r", "-C", "-E"})),
    "node": (
        frozenset({"-e", "-p", "--eval", "--print"}),
        frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions"}),
    ),
    "other": (frozenset({"-e", "-r"}), frozenset({"-l", "-d", "-I"})),
}
_FAMILY_OF = {
    **{n: "shell" for n in _SHELLS},
    **{n: "python" for n in ("python", "pypy")},
    "perl": "perl",
    "ruby": "ruby",
    **{n: "node" for n in ("node", "nodejs")},
    **{n: "other" for n in ("php", "lua", "luajit", "tclsh", "wish", "expect", "rscript", "julia", "guile")},
}
# Readers that can run a copy while the script keeps its own name ($0, __file__, sys.path[0]).
_POSIX_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "yash", "posh"})
# The shell runs these itself whatever PATH holds: a missing one is nothing to bind.
SHELL_BUILTINS = frozenset(
    {
        ".",
        ":",
        "[",
        "alias",
        "bg",
        "break",
        "cd",
        "command",
        "continue",
        "echo",
        "eval",
        "exec",
        "exit",
        "export",
        "false",
        "fg",
        "getopts",
        "hash",
        "jobs",
        "kill",
        "local",
        "printf",
        "pwd",
        "read",
        "readonly",
        "return",
        "set",
        "shift",
        "test",
        "times",
        "trap",
        "true",
        "type",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
        "source",
        "declare",
        "typeset",
        "let",
    }
)
_FILE_FLAG = {"awk": "-f", "gawk": "-f", "mawk": "-f", "nawk": "-f", "sed": "-f", "gsed": "-f"}


@dataclass(frozen=True)
class ContentItem:
    """One file the command runs or reads as code, as it was when the command was decided."""

    role: str  # executable | interpreter | script | wrapper | loaded (a preload) | file (named, unparsed)
    path: str  # as shown: the pinned path or the operand, made absolute
    real: str  # the file itself (symlinks resolved): what is opened and hashed
    sha256: str | None  # None: the file did not exist (it must not appear before the run)
    size: int
    writable: bool  # the agent (or anyone but root) can change it: it runs from a sealed copy
    where: tuple[int, ...] = ()  # the segment (indexes down nested `sh -c` payloads)
    argv_index: int = -1  # the word it replaces in that segment; -1 = none
    kind: str = ""  # for an executable: elf | shebang | text (no `#!`: the shell runs it)
    shebang: tuple[str, ...] = ()  # interpreter words from the `#!` line (env-style: the resolved path)
    parent: str | None = None  # an interpreter's script (real path)
    reader: str = ""  # a script operand's reader family (sh | python): how its copy keeps its name
    word: str = ""  # a script operand as the command wrote it (its $0 / sys.argv[0])
    search: str = ""  # an absent bare-name program: the PATH it must still be missing from
    # A system-owned file reached through a link the agent can re-point (`./myls -> /usr/bin/ls`): it is
    # `writable` (an approval binds its bytes, never the link's name), and it runs by its real path.
    linked: bool = False
    skip_first: bool = False  # a Python script run with `-x`: its first line never runs (read_words)

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "agentWritable": self.writable,
        }


@dataclass(frozen=True)
class ContentBinding:
    """Every file of one decided command, plus what is needed to re-render it over verified copies."""

    items: tuple[ContentItem, ...]
    analysis: CommandAnalysis
    result: AllowlistResult
    problems: tuple[str, ...] = ()  # what could not be bound (shown to the approver)
    # A program read from stdin or found on a search path (`bash -s`, `python3 -m x`): no file holds it,
    # so no approval can be bound to it and allow-always is not offered (issue 27 §5).
    unbound: bool = False
    notes: tuple[str, ...] = ()  # what the run also loads, unbound (imports from agent-writable files)
    # An interpreter option no grammar covers (or a preload node searches for): what it loads is not a
    # file the text names, so allow-always is not offered either; `notes` says why.
    opaque: bool = False
    # Issue 27 §5, the one rule for allow-always: it is offered only when the binder PROVES that every code
    # source of the command is a file it bound (`proofs`, below). The default is "not proven": a binding
    # built without that proof offers allow-once only. `unproven` says why, in the ask.
    proven: bool = False
    unproven: tuple[str, ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        return [item.to_json() for item in self.items]

    def render(self, words: Mapping[tuple[tuple[int, ...], int], Sequence[str]]) -> str | None:
        """The pinned rendering with `words` in place of the bound argv words."""
        return render_bound(self.analysis, self.result, words)

    def durable_text(self) -> str:
        """What an exact-command durable approval binds besides the text: agent-writable content."""
        return "\n".join(f"{i.real}={i.sha256}" for i in self.items if i.writable)

    @property
    def writable_paths(self) -> frozenset[str]:
        # A linked item's real file is root's: only the link's name is the agent's to change.
        return frozenset(
            p for i in self.items if i.writable for p in ((i.path,) if i.linked else (i.path, i.real))
        )

    def key(self) -> str:
        """One string for the approval's identity: two asks of other content never coalesce."""
        text = "\n".join(f"{i.role}:{i.real}={i.sha256}" for i in self.items)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32] if text else ""


# --------------------------------------------------------------------------- who can write a file


def system_stat(real: str) -> os.stat_result | None:
    """The file's lstat when only root can change the file at this path: it is a regular file, and it and
    every directory above it are owned by root and writable by neither group nor others. None otherwise:
    it counts as writable by the agent (its account, or another one), so its content is verified at the
    spawn and run from a sealed copy."""
    try:
        st = os.lstat(real)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return st if only_root_changes(os.path.dirname(real)) else None


def system_owned(real: str) -> bool:
    """Only root can change the regular file at `real` (see system_stat)."""
    return system_stat(real) is not None


def links_fixed(path: str, depth: int = 0) -> bool:
    """Whether every link met resolving the absolute `path` sits in a directory only root can change: a
    link in an agent-writable directory is the agent's to re-point, whoever owns its target."""
    if depth > 40:
        return False
    current = "/"
    for part in path.split("/"):
        if not part or part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        step = os.path.join(current, part)
        if not os.path.islink(step):
            current = step
            continue
        if not only_root_changes(current):
            return False
        try:
            target = os.readlink(step)
        except OSError:
            return False
        target = os.path.join(current, target)
        if not links_fixed(target, depth + 1):
            return False
        current = os.path.realpath(target)
    return True


# --------------------------------------------------------------------------- digests


class DigestCache:
    """sha256 of system-owned files keyed by (dev, ino, size, mtime_ns, ctime_ns): any write, truncate,
    rename over or chmod changes the key (ctime cannot be set back), so a stale digest is never served.
    Agent-writable files are never cached: they are read and hashed at every decision and every spawn."""

    def __init__(self, limit: int = CACHE_MAX) -> None:
        self._limit = limit
        self._entries: OrderedDict[tuple[int, int, int, int, int], tuple[str, bytes]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()  # decisions run on worker threads, spawn checks on the event loop

    def get(self, st: os.stat_result) -> tuple[str, bytes] | None:
        """(sha256, the first bytes: `#!` line or ELF magic) of an unchanged file."""
        key = _key(st)
        with self._lock:
            digest = self._entries.get(key)
            if digest is not None:
                self._entries.move_to_end(key)
                self.hits += 1
        return digest

    def put(self, st: os.stat_result, digest: str, head: bytes) -> None:
        with self._lock:
            self.misses += 1
            self._entries[_key(st)] = (digest, head)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


CACHE = DigestCache()


# A file cannot be opened or bound as it must be (engine.commands.regular: the one way files are read).
ContentError = Unreadable


def open_regular(real: str) -> tuple[int, os.stat_result]:
    """An fd on the regular file at `real` (resolved already, so its last component must not be a link;
    O_NONBLOCK so a FIFO planted there cannot hang the gateway)."""
    return _open_regular(real, follow=False)


def read_all(fd: int, size: int, limit: int, path: str = "") -> bytes:
    return read_fd(fd, size, limit, path)


def digest_path(real: str, cache: DigestCache = CACHE) -> tuple[str, int, bool, bytes]:
    """(sha256, size, agent-writable, first bytes) of the file at `real` right now."""
    st = system_stat(real)
    if st is not None:
        hit = cache.get(st)
        if hit is not None:
            return hit[0], st.st_size, False, hit[1]
    fd, fst = open_regular(real)
    try:
        if st is None:
            data = read_all(fd, fst.st_size, WRITABLE_MAX_BYTES, real)
            return hashlib.sha256(data).hexdigest(), len(data), True, data[:SHEBANG_MAX]
        digest = hash_fd(fd, fst, cache)
        return digest, fst.st_size, False, os.pread(fd, SHEBANG_MAX, 0)
    finally:
        os.close(fd)


def hash_fd(fd: int, st: os.stat_result, cache: DigestCache = CACHE) -> str:
    """sha256 of an open system-owned file, from `cache` while its (dev, ino, size, mtime, ctime) hold."""
    hit = cache.get(st)
    if hit is not None:
        return hit[0]
    h = hashlib.sha256()
    offset = 0
    head = b""
    while True:
        chunk = os.pread(fd, 1 << 20, offset)
        if not chunk:
            break
        if not offset:
            head = chunk[:SHEBANG_MAX]
        h.update(chunk)
        offset += len(chunk)
    digest = h.hexdigest()
    cache.put(st, digest, head)
    return digest


# --------------------------------------------------------------------------- what a command reads as code


def parse_shebang(head: bytes) -> tuple[str, ...] | None:
    """The `#!` line's interpreter and its one optional argument (as Linux splits it); None without one."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:SHEBANG_MAX].split(b"\n", 1)[0].strip(b" \t")  # as Linux: a CR stays in the name
    if not line:
        return None
    text = line.decode("utf-8", "surrogateescape")
    parts = text.split(None, 1)
    return tuple(parts)


def file_kind(head: bytes) -> str:
    if head.startswith(b"\x7fELF"):
        return "elf"
    if head.startswith(b"#!"):
        return "shebang"
    return "text"


def reader_of(program: str) -> str:
    """`sh` for POSIX shells, `python` for Python, else "" (the copy's /proc path becomes its name)."""
    name = name_of(program)
    if name in _POSIX_SHELLS:
        return "sh"
    if name in ("python", "pypy"):
        return "python"
    return ""


def script_operand(argv: Sequence[str], program: str) -> int | None:
    """The argv index of the file an interpreter reads as its program (`sh s.sh`, `python3 -u x.py`,
    `awk -f prog.awk`); None when the code is inline (`-c`, `-e`, `-m`) or there is no operand."""
    name = name_of(program)
    flag = _FILE_FLAG.get(name)
    if flag is not None:
        for i, arg in enumerate(argv[1:-1], 1):
            if arg == flag:
                return i + 1
        return None
    source = program_source(argv, program)
    if source is not None:
        return source.index if source.kind == FILE and source.index < len(argv) else None
    family = _FAMILY_OF.get(name)
    if family is None:
        return None
    inline, with_value = _FAMILIES[family]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return i + 1 if i + 1 < len(argv) else None
        if arg == "-" or not arg.startswith(("-", "+")) or (family != "shell" and arg.startswith("+")):
            return None if arg == "-" else i
        if arg in inline or arg.split("=", 1)[0] in inline:
            return None
        if family == "shell" and not arg.startswith("--") and "c" in arg[1:]:
            return None  # `-ec`: a cluster holding -c
        if family == "python" and not arg.startswith("--") and any(c in arg[1:] for c in "cm"):
            return None
        i += 2 if arg in with_value else 1
    return None


# --------------------------------------------------------------------------- binding at decision time


def bind(
    analysis: CommandAnalysis,
    result: AllowlistResult,
    cwd: str,
    env: Mapping[str, str],
    *,
    resolve_program: Callable[[str, str, str], str | None] | None = None,
    command: str | None = None,
) -> ContentBinding:
    """Digest every executable (pinned binaries, wrappers, `#!` interpreters) and every script operand."""
    items: list[ContentItem] = []
    problems: list[str] = []
    path_var = env.get("PATH", DEFAULT_PATH)
    seen: set[tuple[str, tuple[int, ...], int]] = set()
    linked: str | None = None  # a script operand resolved through a link into /proc

    def add(item: ContentItem) -> None:
        key = (item.real, item.where, item.argv_index)
        if key not in seen:
            seen.add(key)
            items.append(item)

    def file_item(role: str, shown: str, real: str, where: tuple[int, ...], index: int, **kw: Any) -> None:
        try:
            digest, size, writable, head = digest_path(real)
        except ContentError as exc:
            problems.append(f"{shown}: {exc}")
            if not system_owned(real):
                # Unreadable (mode 0111, a FIFO…) yet changeable: the run is refused rather than unbound.
                add(ContentItem(role, shown, real, UNREADABLE, 0, True, where, index))
            return
        kind = file_kind(head) if head and role in ("executable", "interpreter") else ""
        shebang: tuple[str, ...] = ()
        if kind == "shebang":
            words = parse_shebang(head) or ()
            shebang = _interpreter_words(words, path_var, cwd, resolve_program)
        add(
            ContentItem(
                role,
                shown,
                real,
                digest,
                size,
                writable,
                where,
                index,
                kind,
                shebang,
                kw.get("parent"),
                kw.get("reader", ""),
                kw.get("word", ""),
                skip_first=kw.get("skip_first", False),
            )
        )
        if shebang and role in ("executable", "interpreter"):
            interp = os.path.realpath(shebang[0])
            depth = kw.get("depth", 0)
            if depth >= 3:
                problems.append(f"{shown}: interpreter chain too deep to bind")
                return
            file_item("interpreter", shebang[0], interp, where, -1, parent=real, depth=depth + 1)
            if shebang[0] != interp and not links_fixed(shebang[0]):
                # `#!/w/venv/bin/python`: the agent's link to root's python. Bound by the real file's bytes
                # and run by its real path (verified._run_words), never again through the link.
                _relink(items, where, shebang[0], parent=real)
        elif kind == "shebang":
            problems.append(f"{shown}: its #! interpreter is chosen at run time and cannot be bound")

    def walk(segments: Sequence[Segment], matches: Sequence[SegmentMatch], where: tuple[int, ...]) -> None:
        nonlocal linked
        for index, (segment, match) in enumerate(zip(segments, matches, strict=False)):
            here = (*where, index)
            for wrapper in match.wrapper_paths:
                file_item("wrapper", wrapper, os.path.realpath(wrapper), here, -1)
            if match.resolved_path is not None:
                shown = pin_path(match) or match.resolved_path
                file_item("executable", shown, match.resolved_path, here, 0)
                named = match.named_path or shown
                if named != match.resolved_path and not links_fixed(os.path.abspath(named)):
                    _relink(items, here, named)
            elif segment.argv and segment.inner is None:
                # Not there yet: the approved text would run whatever appears later, so it must stay absent.
                name = segment.argv[0]
                if "/" in name:
                    named = os.path.abspath(os.path.join(cwd, name))
                    add(ContentItem("executable", named, named, None, 0, True, here, -1))
                elif name and name not in SHELL_BUILTINS:
                    add(ContentItem("executable", name, name, None, 0, True, here, -1, search=path_var))
            if segment.inner is not None and match.inner is not None:
                walk(segment.inner.segments, match.inner.segments, here)
                continue
            program = match.resolved_path or segment.argv[0]
            operand = script_operand(segment.argv, segment.argv[0]) or (
                script_operand(segment.argv, program) if program != segment.argv[0] else None
            )
            if operand is None or operand >= len(segment.argv):
                continue
            word = segment.argv[operand]
            named = os.path.join(cwd, word)
            real = os.path.realpath(named)
            if linked is None and resolves_through_proc(os.path.abspath(named)):
                linked = word  # a link into /proc: resolved here, it names the gateway's file
            # After `--` (or a shell's lone `-`, which ends its options too) no option may follow: `-c`
            # there would name a file to run. The copy is then named by its /proc path instead.
            after_dashdash = segment.argv[operand - 1] in ("--", "-")
            reader = "" if after_dashdash else (reader_of(segment.argv[0]) or reader_of(program))
            if not os.path.lexists(named):
                add(ContentItem("script", os.path.abspath(named), real, None, 0, True, here, operand))
            elif os.path.isdir(named):
                continue  # the interpreter runs a file it finds inside (`python3 app`): unproven, allow-once
            else:  # a FIFO or a device is not bound: refused below, never left unbound
                # Run through a link, the script is named by what it was bound at: "$0" (and __file__) is
                # then the file the run's view pins, not a name the agent can re-point after the spawn.
                if os.path.abspath(named) != real:
                    word = real
                skip = reader == "python" and python_skips_first_line(segment.argv[1:operand])
                file_item(
                    "script",
                    os.path.abspath(named),
                    real,
                    here,
                    operand,
                    reader=reader,
                    word=word,
                    skip_first=skip,
                )

    walk(analysis.segments, result.segments, ())
    unbound = searched = opaque = refused = False
    notes: list[str] = []
    whole = not analysis.ok  # unparsed: every file the text names is bound whole
    for segment in _plain_segments(analysis.segments):
        source = program_source(segment.argv)
        if source is None:
            continue
        for value in loaded_values(segment.argv):
            # `node -r ./hook.js app.js`: the preload runs before the program, so it is bound like it. A
            # bare name (`-r dotenv/config`) is searched for (node_modules up the tree): nothing to bind.
            named = os.path.abspath(os.path.join(cwd, value))
            if os.path.isfile(named):
                file_item("loaded", named, os.path.realpath(named), (), -1)
            elif value.startswith(("/", "./", "../")):
                add(ContentItem("loaded", named, os.path.realpath(named), None, 0, True, (), -1))
            elif family(segment.argv[0]) in ("node", "nodejs") and not searched:
                searched = True
                notes.append(
                    f"Warning: node preloads {value!r}, found by a search of node_modules up the tree: it "
                    "cannot be bound, so allow-always is not offered."
                )
        if source.kind in (STDIN, MODULE, UNKNOWN):
            whole = True  # `cat x.sh | sh`, `sh < x.sh`: the program is whatever those files hold
            unbound = unbound or source.kind != UNKNOWN
        if source.kind == UNKNOWN:
            # An option no grammar covers may load anything from anywhere (`node --env-file=.env` sets
            # NODE_OPTIONS, `python3 -X pycache_prefix=./pc` takes the standard library's bytecode from
            # ./pc): the files the text names are bound for this run, but nothing can be saved.
            opaque = True
        elif source.kind == FILE and family(segment.argv[0]) in ("python", "pypy"):
            note = _imports_note(segment.argv[source.index], cwd)
            if note:
                notes.append(note)
    if whole:
        dirs, lost = _cd_dirs(_all_words(command or ""), cwd, env)
        if lost is not None:
            problems.append(
                f"the text changes directory ({lost}) to a place exechost cannot follow: the files it "
                "names there are not bound"
            )
        words, absent = _file_words(command if command is not None else "", analysis, dirs)
        for word in words:
            real = os.path.realpath(os.path.join(cwd, word))
            file_item("file", os.path.abspath(os.path.join(cwd, word)), real, (), -1)
        for word in absent:
            named = os.path.abspath(os.path.join(cwd, word))
            add(ContentItem("file", named, os.path.realpath(named), None, 0, True, (), -1))
        unbound = unbound and not words
        if not words and not analysis.ok and _names_interpreter(command or ""):
            unbound = True
    if any(item.sha256 == UNREADABLE for item in items):
        # Not a regular file (a FIFO hands each run whatever is written into it) or unreadable: no digest
        # holds it, so nothing can be saved; the run itself is refused at the spawn (verified._check).
        notes.append(
            "Warning: a file the command runs or reads as code is not a regular file (or cannot be read): "
            "it cannot be bound, so allow-always is not offered and the run is refused."
        )
        refused = True
    # Every word as a shell would split it; the text split at blanks when the analysis has the words
    # already (assignments and redirections are in the text only).
    text = command or ""
    words = (text.split() if analysis.ok else _words(text)) + [
        w for s in _plain_segments(analysis.segments) for w in s.argv
    ]
    through = process_word(words, cwd) or linked
    if through is not None:
        notes.append(
            f"Warning: {through} names a file through /proc or /dev/fd, which each process resolves for "
            "itself (its own cwd, fds, root): exechost cannot bind what the run will read there, so "
            "allow-always is not offered."
        )
        refused = True
    if opaque:
        notes.append(
            "Warning: an interpreter is given an option exechost does not model: what that option loads "
            "cannot be bound, so allow-always is not offered."
        )
    why = unproven_sources(analysis, tuple(items), cwd, command or "")
    why += [f"{p}" for p in problems]
    if unbound or searched or opaque:
        why.append("a program comes from stdin, a search path or an option exechost does not model")
    if refused:
        why.append("a file it runs is not a regular file, or is reached through /proc")
    return ContentBinding(
        tuple(items),
        analysis,
        result,
        tuple(problems),
        unbound,
        tuple(notes),
        searched or opaque or refused,
        proven=not why,
        unproven=tuple(dict.fromkeys(why)),
    )


# --------------------------------------------------------------------------- the proof of completeness

# Programs that run a word of their argv as code or as a command line (a wrapper exechost does not unwrap
# hands them one): their presence after argv[0] means a code source the binder did not follow.
_RUNS_CODE = frozenset({*_SHELLS, *_FAMILY_OF, *_FILE_FLAG, "eval", "exec", "source", ".", "env", "xargs"})
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


def _relink(items: list[ContentItem], where: tuple[int, ...], named: str, parent: str | None = None) -> None:
    """Mark the executable just bound at `where` (or the `#!` interpreter of `parent`) as reached through
    the agent's link (ContentItem.linked)."""
    for i, item in enumerate(items):
        if parent is not None:
            mine = item.role == "interpreter" and item.parent == parent
        else:
            mine = item.role == "executable" and item.argv_index == 0
        if mine and item.where == where and item.sha256:
            if not item.writable:
                items[i] = replace(item, path=named, writable=True, linked=True)
            elif item.path != named:
                items[i] = replace(item, path=named)


def unproven_sources(
    analysis: CommandAnalysis, items: Sequence[ContentItem], cwd: str, command: str
) -> list[str]:
    """Why the binder cannot prove it bound every code source of the command; [] when it can.

    Inverted default: a segment is proven only when its program is known to read no code besides the files
    bound here. An unparsed text, `eval`/`source`, a word naming an interpreter or an agent-writable
    executable after a program exechost does not unwrap (`nohup sh x.sh`, `find -exec`), an interpreter
    option outside the grammar's inert ones, a script operand that is not a regular file here (a directory
    the interpreter resolves, a name bash finds on PATH, `x` node runs as x.js), a second or attached
    program file (`awk -fp.awk`, `sed --file=s.sed`), a `#!` argument: each is a reason."""
    if not analysis.ok:
        return ["the command could not be parsed, so what it runs is not proven bound"]
    why: list[str] = []
    for segment in _plain_segments(analysis.segments):
        why += _segment_unproven(segment.argv, cwd)
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
        if item.role in ("executable", "interpreter") and len(item.shebang) > 1:
            arg = item.shebang[1]
            if not arg.startswith("-"):
                why.append(f"{item.path}: its #! line passes {arg!r}, a word the interpreter may run")
            else:
                why += _segment_unproven((item.shebang[0], arg, item.real), cwd, shebang=item.path)
    return why


def venv_of(executable: str) -> str | None:
    """The virtualenv a Python started as `executable` (its argv[0], links not resolved) takes as its
    prefix: CPython's getpath looks for `pyvenv.cfg` beside it and one directory up. None when neither."""
    here = os.path.dirname(os.path.abspath(executable))
    for base in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(base, "pyvenv.cfg")):
            return base
    return None


def _segment_unproven(argv: Sequence[str], cwd: str, shebang: str = "") -> list[str]:
    name = name_of(argv[0])
    where = f"{shebang}: its #! line" if shebang else name
    if name in ("eval", "source", "."):
        return [f"{name} runs text or a file the binder does not follow"]
    if name in _FILE_FLAG:
        return _text_tool_unproven(name, argv, cwd)
    source = program_source(argv)
    if source is not None:
        if source.more:
            return [f"{where}: {', '.join(source.more)} reads code besides the bound program"]
        if source.kind == FILE:
            return _operand_unproven(name, argv, source.index, cwd)
        return []  # inline: the code is the text; stdin/module/unknown: reported by bind
    if name in _FAMILY_OF:
        operand = script_operand(argv, argv[0])
        if operand is None or any(w.startswith(("-", "+")) for w in argv[1:operand]):
            return [f"{where}: options exechost does not model for {name}"]
        return _operand_unproven(name, argv, operand, cwd)
    for word in argv[1:]:
        if any(name_of(w) in _RUNS_CODE for w in word.split()) or _agent_executable(word, cwd):
            return [f"{name} runs {word!r}, which exechost does not unwrap or bind"]
    return []


def _operand_unproven(name: str, argv: Sequence[str], index: int, cwd: str) -> list[str]:
    if index >= len(argv):
        return []
    word = argv[index]
    path = os.path.join(cwd, word)
    if os.path.isfile(path):
        return []
    if os.path.isdir(path):
        return [f"{name} {word}: a directory, the interpreter runs a file it finds there"]
    return [f"{name} {word}: no such file here; the interpreter may find another one (PATH, {word}.js)"]


def _text_tool_unproven(name: str, argv: Sequence[str], cwd: str) -> list[str]:
    flags, valued = _TEXT_TOOL_FLAGS["sed" if "sed" in name else "awk"]
    files = 0
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            break
        if word == "-f" and i + 1 < len(argv):
            files += 1
            if not os.path.isfile(os.path.join(cwd, argv[i + 1])):
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


def _agent_executable(word: str, cwd: str) -> bool:
    """A word naming an executable file the agent can write (a wrapper runs a bare name from PATH, whose
    entries are absolute and the operator's: only a word with a `/` names a file in the agent's tree)."""
    if "/" not in word or word.startswith("-"):
        return False
    path = os.path.join(cwd, word)
    return os.path.isfile(path) and os.access(path, os.X_OK) and not system_owned(os.path.realpath(path))


def _plain_segments(segments: Sequence[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for segment in segments:
        if segment.inner is not None:
            out += _plain_segments(segment.inner.segments)
        elif segment.argv:
            out.append(segment)
    return out


def _words(command: str) -> list[str]:
    """The text's words as a shell would split them, redirection operators apart (`<x.sh` → x.sh)."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars="<>|&;()")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:
        return command.split()


def _all_words(command: str, depth: int = 0) -> list[str]:
    """The text's words, and the words of every word that is itself a command line (`sh -c 'cd x; …'`,
    `(cd sub; sh s.sh)` quoted): an unparsed text may run any of them."""
    out: list[str] = []
    for word in _words(command):
        out.append(word)
        if depth < 2 and any(c in word for c in " \t\n;&|()"):
            out += _all_words(word, depth + 1)
    return out


_CHDIR = frozenset({"cd", "pushd", "chdir"})
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;"})
CD_DIRS_MAX = 16


def _cd_dirs(words: Sequence[str], cwd: str, env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """Every directory an unparsed text may read its relative names from: the cwd, and each place a `cd`
    (`pushd`) in it leads to, cumulatively (`cd a; cd b` → a/b); the first `cd` it cannot follow (no
    operand, `-`, `~`, an expansion, CDPATH set) as well, else None."""
    dirs = [os.path.abspath(cwd)]
    lost: str | None = None
    for i, word in enumerate(words):
        if word not in _CHDIR:
            continue
        rest = [w for w in words[i + 1 : i + 4] if not (w.startswith("-") and w != "-")]
        target = rest[0] if rest else ""
        if (
            not target
            or target in _SEPARATORS
            or target == "-"
            or target.startswith("~")
            or any(c in target for c in "$`*?[{")
            or (env.get("CDPATH") and not target.startswith(("/", "./", "../")))
        ):
            lost = lost or (f"{word} {target}" if target and target not in _SEPARATORS else word)
            continue
        reached = [os.path.abspath(os.path.join(d, target)) for d in dirs]
        dirs = list(dict.fromkeys([*dirs, *(d for d in reached if os.path.isdir(d))]))[:CD_DIRS_MAX]
    return dirs, lost


def _file_words(command: str, analysis: CommandAnalysis, dirs: Sequence[str]) -> tuple[list[str], list[str]]:
    """Every file the command's words name (or its segments'), in every spelling a program may read one:
    a word itself, the value of an option word (`--env-file=.env`) and an attached short value
    (`-r./x.js`). An option nobody modelled may read any of them as code or as settings for code. Also
    the option values that name a path (`=./x`, `=.env`) but do not exist yet: they must stay absent. A
    name is looked up in each of `dirs` (the cwd and where the text cd's, `_cd_dirs`); found in one, it
    is bound in every one, present or (must stay) absent. Absolute paths."""
    if command:
        words = _all_words(command)
    else:
        words = [w for seg in _plain_segments(analysis.segments) for w in seg.argv]
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
            if any(os.path.isfile(p) for p in paths):
                out += [p for p in paths if os.path.isfile(p)]
                absent += [p for p in paths if not os.path.lexists(p)]
            elif word.startswith("-") and ("/" in name or name.startswith(".")):
                absent += [p for p in paths if not os.path.lexists(p)]
    return list(dict.fromkeys(out))[:64], list(dict.fromkeys(absent))[:64]


def _names_interpreter(command: str) -> bool:
    return any(program_source([w]) is not None for w in _words(command))


IMPORT_SCAN_MAX = 2000  # directory entries looked at, at most: a huge tree is reported as "N+"
_CODE_SUFFIXES = (".py", ".pyc", ".pth", ".so")
_SKIP_DIRS = frozenset({"node_modules", "__pycache__"})


def _package_dir(entry: os.DirEntry[str], depth: int) -> bool:
    name = entry.name
    return depth < 4 and name[:1] != "." and name not in _SKIP_DIRS and entry.is_dir(follow_symlinks=False)


def _imports_note(script: str, cwd: str) -> str | None:
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
    count -= 1  # the script itself, which is bound
    if count <= 0 or system_owned(os.path.realpath(os.path.join(cwd, script))):
        return None
    shown = os.path.relpath(base, os.path.realpath(cwd)) if base != os.path.realpath(cwd) else "."
    more = "+" if capped else ""
    return (
        f"Warning: {script} can import code from {count}{more} agent-writable Python files under {shown}/ "
        "that are not bound: changes to them after the approval run."
    )


def _interpreter_words(
    words: tuple[str, ...],
    path_var: str,
    cwd: str,
    resolve_program: Callable[[str, str, str], str | None] | None,
) -> tuple[str, ...]:
    """The interpreter a `#!` line runs, as words to run it with; an `env NAME` line resolved through PATH
    now (it would be searched again at run time, where an agent could plant another one). Empty when the
    line cannot be bound (`env -S …`, a relative interpreter)."""
    if not words or not words[0].startswith("/"):
        return ()
    interp, arg = words[0], (words[1] if len(words) > 1 else None)
    if name_of(interp) != "env":
        return (interp,) if arg is None else (interp, arg)
    if arg is None or arg.startswith("-") or " " in arg or "=" in arg:
        return ()
    found = (resolve_program or _which)(arg, cwd, path_var)
    return (found,) if found else ()


def _which(name: str, cwd: str, path_var: str) -> str | None:
    import shutil

    found = shutil.which(name, path=path_var)
    return os.path.abspath(found) if found else None


def writable_pattern_warning(pattern: str) -> str | None:
    """A warning when an allowlist pattern names one file the agent can write (a `./tool`): the entry
    then allows whatever bytes that file holds at each run."""
    path = os.path.expanduser(pattern)
    if not path.startswith("/") or any(c in path for c in "*?["):
        return None
    real = os.path.realpath(path)
    if not os.path.isfile(real) or system_owned(real):
        return None
    return (
        f"Warning: allowlist entry {pattern} names a file the agent can write ({real}); every run executes "
        "whatever it holds at that moment. Prefer a root-owned copy, or approve it per run."
    )
