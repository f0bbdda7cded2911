"""Allowlist matching: resolve each segment's executable, match patterns and safe bins, pin what runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from engine import statefs
from engine.commands.analysis import ANALYSED_SHELLS, OTHER_SHELLS, CommandAnalysis, Segment
from engine.commands.durable import (
    ALLOW_ALWAYS_SOURCE,
    COMMAND_HASH_PREFIX,
    allow_always_patterns,
    approval_binding,
    command_hash_pattern,
    has_durable_approval,
)
from engine.commands.interpreters import is_interpreter, name_of
from engine.commands.matches import AllowlistEntry, AllowlistResult, SegmentMatch
from engine.commands.protected import process_word, protected_root_watched, protected_word, through_process
from engine.commands.rendering import (
    Identity,
    Words,
    enforced_command,
    identity,
    identity_problem,
    pin_path,
    pinned_command,
    render_bound,
)
from engine.commands.safebins import (
    DEFAULT_SAFE_BIN_PROFILES,
    DEFAULT_SAFE_BINS,
    DEFAULT_TRUSTED_DIRS,
    SafeBinProfile,
    safe_bin_names,
    validate_safe_bin_argv,
)
from engine.commands.stdindata import reads_input_as_data
from engine.commands.which import (
    DEFAULT_PATH,
    NAMED,
    REAL,
    RESOLVED,
    WATCH,
    named_path,
    real_path,
    resolve,
    resolve_executable,
    resolve_key,
)
from engine.commands.wrappers import BLOCKED_WRAPPERS, TRANSPARENT_WRAPPERS
from engine.errors import InvalidInput
from engine.statefs import home_dir

__all__ = [
    "ALLOW_ALWAYS_SOURCE",
    "COMMAND_HASH_PREFIX",
    "DEFAULT_SAFE_BINS",
    "DEFAULT_TRUSTED_DIRS",
    "AllowlistEntry",
    "AllowlistResult",
    "Identity",
    "SafeBinProfile",
    "SegmentMatch",
    "Words",
    "allow_always_patterns",
    "approval_binding",
    "command_hash_pattern",
    "enforced_command",
    "evaluate_allowlist",
    "has_durable_approval",
    "identity",
    "identity_problem",
    "is_interpreter",
    "pin_path",
    "pinned_command",
    "profile_from_config",
    "render_bound",
    "resolve_executable",
    "trusted_dir_warnings",
]

SHELLS = ANALYSED_SHELLS | OTHER_SHELLS


# --------------------------------------------------------------------------- patterns


def _expand_home(pattern: str, home: str) -> str:
    return home + pattern[1:] if pattern == "~" or pattern.startswith("~/") else pattern


def _is_literal(pattern: str) -> bool:
    return "*" not in pattern and "?" not in pattern and "/" in pattern


@lru_cache(maxsize=512)
def _compile_glob(pattern: str, home: str) -> re.Pattern[str]:
    """A glob pattern's regex. Pure text: literal paths are not compiled here but resolved when matched
    (`_match_entry`), so a symlink changed later is never answered from a stale compile."""
    pattern = _expand_home(pattern, home)
    out: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    # Case-sensitive, as the file system is: `/tools/*` must not match `/TOOLS/evil.sh`.
    return re.compile("".join(out))


def bare_name_path(pattern: str, path_var: str | None = None) -> str | None:
    """The path a bare-name pattern (`rg`) names now, through PATH; None when `pattern` is not a bare
    name. Bare names never match at run time (they would mean whatever PATH finds then), so an entry
    added by name is stored as this path. Raises InvalidInput when PATH has no such program."""
    if pattern == "*" or "/" in pattern or pattern.startswith(("~", "=")) or any(c in pattern for c in "*?["):
        return None
    found = shutil.which(pattern, path=path_var)
    if found is None:
        raise InvalidInput(f"{pattern}: not found on PATH; give the executable's path instead")
    return named_path(os.path.abspath(found))


@lru_cache(maxsize=512)
def _compile_args(arg_pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(arg_pattern)
    except (re.error, RecursionError, OverflowError):
        return None  # an invalid regex matches nothing


_SHLEX_UNSAFE = re.compile(r"[^\w@%+=:,./-]", re.ASCII)  # shlex.quote leaves words without these alone


def args_text(argv: Sequence[str]) -> str:
    """What argPattern is matched against: argv[1:], each shell-quoted, joined by single spaces."""
    args = argv[1:]
    if _SHLEX_UNSAFE.search("".join(args)) is None and all(args):
        return " ".join(args)  # shlex.quote returns each of them unchanged
    return " ".join(shlex.quote(arg) for arg in args)


@dataclass(frozen=True)
class _Compiled:
    entry: AllowlistEntry
    kind: str  # "any" (bare *), "path" (a glob matching the named path) or "literal" (one named path)
    regex: re.Pattern[str] | None
    args: re.Pattern[str] | None  # None with entry.arg_pattern set = invalid regex, never matches
    literal: str = ""  # kind "literal": the path as written (~ expanded), resolved at match time


@lru_cache(maxsize=64)
def _compile_entries(entries: tuple[AllowlistEntry, ...], home: str) -> tuple[_Compiled, ...]:
    """Entries ready to match, argPattern ones first (more specific), durable hashes dropped."""
    out: list[_Compiled] = []
    for entry in sorted(entries, key=lambda e: e.arg_pattern is None):  # stable: first match wins
        pattern = entry.pattern.strip()
        if not pattern or pattern.startswith(COMMAND_HASH_PREFIX):
            continue
        args = _compile_args(entry.arg_pattern) if entry.arg_pattern is not None else None
        if pattern == "*":
            out.append(_Compiled(entry, "any", None, args))
        elif _is_literal(_expand_home(pattern, home)):
            # A literal path names that file as written: its directories are resolved (`/bin` → `/usr/bin`)
            # but not its last hop, so `/usr/bin/xzcat` never lets its alias `xz` (same inode) through.
            out.append(_Compiled(entry, "literal", None, args, _expand_home(pattern, home)))
        elif "/" in pattern or "\\" in pattern or pattern.startswith("~"):
            out.append(_Compiled(entry, "path", _compile_glob(pattern, home), args))
        # A bare name (`rg`) never matches: like OpenClaw, patterns without a path separator are ignored,
        # since `rg` means whatever the run's PATH finds. `approvals allowlist add` resolves one to its path.
    return tuple(out)


def _match_path(compiled: _Compiled, named: str | None) -> bool:
    """The entry's path part: `named` is the segment's executable as named (`named_path` of what PATH
    found), None if not found. The argPattern is matched separately, against the arguments."""
    if compiled.kind == "literal":
        return named is not None and named_path(compiled.literal, poll=False) == named
    return compiled.kind == "any" or (
        named is not None and compiled.regex is not None and compiled.regex.fullmatch(named) is not None
    )


# --------------------------------------------------------------------------- evaluation


def _real_dirs(dirs: tuple[str, ...]) -> frozenset[str]:
    return frozenset(real_path(d, poll=False) for d in dirs)


@lru_cache(maxsize=64)
def _absolute_dirs(path_var: str) -> frozenset[str]:
    return frozenset(entry.rstrip("/") or "/" for entry in path_var.split(":") if entry.startswith("/"))


@lru_cache(maxsize=64)
def _safe_bin_names(configured: frozenset[str]) -> frozenset[str]:
    return safe_bin_names(configured)  # a pure function of the names


def _in_trusted_dir(real: str, trusted: frozenset[str]) -> bool:
    cut = real.rfind("/") + 1  # os.path.dirname, inlined: this runs for every segment
    head = real[:cut]
    return (head.rstrip("/") or head) in trusted


@dataclass(slots=True)
class _Context:
    entries: tuple[_Compiled, ...]
    cwd: str
    path_var: str
    path_dirs: frozenset[str]  # the absolute entries of path_var
    home: str
    safe_bins: frozenset[str]
    profiles: Mapping[str, SafeBinProfile]
    trusted: frozenset[str]
    protected: str  # the resolved state dir: no operand may point into it
    own: str = ""  # inside it, the run's own (the agent's private copies: hostprivate), reached as its view's
    cwd_real: str = ""  # the cwd resolved, as protected_operand resolves it
    cwd_protected: bool = False  # the cwd itself is inside the state dir
    cwd_process: bool = False  # the cwd itself is a path through /proc or /dev/fd (protected.process_word)
    generation: int = -1  # WATCH generation the context was built in
    # (argv[0], is a `sh -c`) -> what matching knows from the executable alone (_facts), for answers the
    # watched path caches gave: valid as long as the context is (the same WATCH generation).
    facts: dict[tuple[str, bool], _Facts] = field(default_factory=dict)


def evaluate_allowlist(
    analysis: CommandAnalysis,
    entries: Sequence[AllowlistEntry],
    *,
    cwd: str,
    env: Mapping[str, str],
    safe_bins: Collection[str] = DEFAULT_SAFE_BINS,
    safe_bin_profiles: Mapping[str, SafeBinProfile] | None = None,
    trusted_dirs: Sequence[str] = DEFAULT_TRUSTED_DIRS,
    own: str = "",
) -> AllowlistResult:
    """Satisfied only when the analysis is ok and every segment (nested `sh -c` ones too) is satisfied.

    A path that cannot be resolved (a link swapped for a file between its lstat and readlink, EINVAL) fails
    closed: every segment misses with the path named, so the command asks or is refused."""
    try:
        WATCH.changed()  # poll_changes(), once per decision: every lookup below answers from caches as of now
        path_var = env.get("PATH", DEFAULT_PATH)
        if safe_bin_profiles:
            profiles = {**DEFAULT_SAFE_BIN_PROFILES, **safe_bin_profiles}
            generation = WATCH.current()
            context = _new_context(
                entries, cwd, path_var, safe_bins, profiles, trusted_dirs, generation, own
            )[0]
            return _evaluate(analysis, context)
        key = (
            entries if type(entries) is tuple else tuple(entries),
            cwd,
            path_var,
            safe_bins if type(safe_bins) is frozenset else frozenset(safe_bins),
            trusted_dirs if type(trusted_dirs) is tuple else tuple(trusted_dirs),
            *_state_env(),  # everything home_dir() and protected_root() read besides the passwd file
            os.getuid(),
            own,
        )
        last = _LAST[0]
        # The last key first: comparing it costs less than hashing a new one (the entries are dataclasses
        # whose hash is Python code), and decisions mostly repeat the last context.
        if last is not None and last[1] == WATCH.generation and last[0] == key:
            return _evaluate(analysis, last[2])
        hit = _CONTEXTS.get(key)
        if hit is not None and hit[0] == WATCH.generation:
            _LAST[0] = (key, hit[0], hit[1])
            return _evaluate(analysis, hit[1])
        generation = WATCH.current()
        passwd_watched = WATCH.watch_file(statefs.PASSWD_FILE)
        context, watched = _new_context(
            entries, cwd, path_var, safe_bins, DEFAULT_SAFE_BIN_PROFILES, trusted_dirs, generation, own
        )
        # home_dir(): OPENCLAW_HOME made absolute, else the passwd file's
        home_env = os.environ.get("OPENCLAW_HOME", "").strip()
        home_fixed = home_env.startswith("/") if home_env else passwd_watched
        kept = watched and home_fixed and not WATCH.changed()
        if kept and WATCH.store(generation, _CONTEXTS, key, (generation, context), _CONTEXTS_MAX):
            _LAST[0] = (key, generation, context)
        return _evaluate(analysis, context)
    except OSError as err:
        what = err.filename if err.filename is not None else "a path it names"
        reason = f"{what} could not be resolved ({err.strerror or err}); the check cannot tell where it leads"
        return AllowlistResult(False, tuple([_miss(segment, None, reason) for segment in analysis.segments]))


_STATE_ENV = ("OPENCLAW_HOME", "OPENCLAW_STATE_DIR", "HOME")
_HOME_KEY, _STATE_KEY, _HOME_ENV_KEY = (name.encode() for name in _STATE_ENV)
_POSIX = os.name == "posix"


def _state_env() -> tuple[object, ...]:
    """The values of _STATE_ENV (and statefs.pin_generation), for a cache key. os.environ.get raises and
    catches a KeyError inside for each unset name, which costs more than the rest of a cached lookup; on
    POSIX os.environ keeps every value in `_data` (bytes keys), updated by each os.environ write, so read
    that where it is there."""
    data = getattr(os.environ, "_data", None)
    pins = statefs.pin_generation()  # a state dir pinned since: state_dir() answers its real path
    if _POSIX and type(data) is dict:
        return (data.get(_HOME_KEY), data.get(_STATE_KEY), data.get(_HOME_ENV_KEY), pins)
    return (*(os.environ.get(name) for name in _STATE_ENV), pins)


# What a decision needs besides the command, kept while nothing it was read from has changed: the entries
# compiled for this home, the resolved trusted dirs and state dir, the home (from the passwd file). Each
# value is (WATCH generation it was built in, context); any inotify event bumps the generation.
_CONTEXTS: dict[tuple[object, ...], tuple[int, _Context]] = {}
_CONTEXTS_MAX = 256  # one per cwd, mostly: an agent moves between a project's directories
# The context found last: (key, its generation, context), replaced as a whole (one atomic store).
_LAST: list[tuple[tuple[object, ...], int, _Context] | None] = [None]


def clear_contexts() -> None:
    """Forget every kept context (benchmarks and tests measuring the lookups behind them)."""
    _CONTEXTS.clear()
    _LAST[0] = None


def _new_context(
    entries: Sequence[AllowlistEntry],
    cwd: str,
    path_var: str,
    safe_bins: Collection[str],
    profiles: Mapping[str, SafeBinProfile],
    trusted_dirs: Sequence[str],
    generation: int,
    own: str = "",
) -> tuple[_Context, bool]:
    """The context, and whether every path in it came from the watched path cache."""
    home = home_dir()
    trusted = tuple(trusted_dirs)
    protected, protected_watched = protected_root_watched(home)
    cwd_real = real_path(cwd, poll=False) if cwd else os.getcwd()
    context = _Context(
        entries=_compile_entries(tuple(entries), home),
        cwd=cwd,
        path_var=path_var,
        path_dirs=_absolute_dirs(path_var),
        home=home,
        safe_bins=_safe_bin_names(frozenset(safe_bins)),
        profiles=profiles,
        trusted=_real_dirs(trusted),
        protected=protected,
        own=own,
        cwd_real=cwd_real,
        cwd_protected=_within(cwd_real, protected) and not (own and _within(cwd_real, own)),
        cwd_process=through_process(cwd),
        generation=generation,
    )
    cwd_watched = REAL.get(cwd) == cwd_real
    return context, protected_watched and cwd_watched and all(REAL.get(d) is not None for d in trusted)


def _evaluate(analysis: CommandAnalysis, context: _Context) -> AllowlistResult:
    ops = analysis.operators
    if "|" in ops or "|&" in ops:  # a segment after a pipe reads the one before it as its input
        piped = [False, *(op in ("|", "|&") for op in ops)]
        matches = tuple([_match_segment(s, context, piped[i]) for i, s in enumerate(analysis.segments)])
    else:
        matches = tuple([_match_segment(segment, context) for segment in analysis.segments])
    satisfied = analysis.ok and bool(matches)
    for match in matches:
        if not match.satisfied_by:
            satisfied = False
            break
    return AllowlistResult(satisfied, matches)


def _miss(
    segment: Segment, real: str | None, reason: str, wrappers: tuple[str, ...] = (), named: str | None = None
) -> SegmentMatch:
    return SegmentMatch(segment.argv, real, None, None, None, reason, wrappers, None, named)


def _base(path: str) -> str:
    return path[path.rfind("/") + 1 :]  # os.path.basename, without its per-call overhead


@dataclass(frozen=True, slots=True)
class _Facts:
    """What matching a segment knows from its executable alone, before its arguments."""

    found: tuple[str, str] | None  # resolve(): (path as found, real path)
    named: str | None
    real_miss: str | None  # the executable's own reason to miss (a blocked wrapper, a shell renamed)
    interpreter: bool  # real or named path is an interpreter (a heredoc to it is code)
    data_reader: bool  # known to read its input as data (engine.commands.stdindata)
    entries: tuple[_Compiled, ...]  # entries whose path part matches `named`, in order
    safe_miss: str | None  # why this is not a safe bin, whatever its arguments
    profile: SafeBinProfile | None  # else: the profile its arguments must fit


def _facts(name: str, shell_c: bool, context: _Context) -> _Facts:
    """The executable's facts; memoised in the context when every lookup came from a watched cache."""
    key = (name, shell_c)
    known = context.facts.get(key)
    if known is not None:
        return known
    found = resolve(name, context.cwd, context.path_var, poll=False)
    named = named_path(found[0], poll=False) if found else None
    real = found[1] if found else None
    real_miss = None
    if real is not None:
        real_name = _base(real).lower()
        real_prog = name_of(real)
        if real_name in BLOCKED_WRAPPERS or real_prog in BLOCKED_WRAPPERS:
            real_miss = f"blocked wrapper: {real_name}"
        elif real_name in TRANSPARENT_WRAPPERS and _base(name).lower() != real_name:
            real_miss = f"{name} is the wrapper {real_name} under another name"
        elif real_prog in SHELLS and not shell_c and name_of(name) not in SHELLS:
            # A shell under another name would skip the `-c` payload analysis.
            real_miss = f"{name} is the shell {real_name} under another name"
    facts = _Facts(
        found,
        named,
        real_miss,
        any(is_interpreter(p) for p in (real, named) if p),
        reads_input_as_data((name,), real),
        tuple(c for c in context.entries if _match_path(c, named)),
        *_safe_bin_facts(name, found, context),
    )
    if _watched(name, found, context):
        if len(context.facts) >= 256:
            context.facts.clear()
        context.facts[key] = facts
    return facts


def _watched(name: str, found: tuple[str, str] | None, context: _Context) -> bool:
    """Every answer the facts rest on is held by a watched cache, as of the context's generation."""
    if context.generation != WATCH.generation:
        return False
    cached = RESOLVED.get(resolve_key(name, context.cwd, context.path_var))
    if cached is None or not cached[2] or cached[0] != found:
        return False
    if found is not None and found[0] not in NAMED:
        return False
    return all(c.kind != "literal" or c.literal in NAMED for c in context.entries)


def _match_segment(segment: Segment, context: _Context, piped: bool = False) -> SegmentMatch:
    argv = segment.argv
    facts = _facts(argv[0], segment.inner is not None, context)
    found, named = facts.found, facts.named
    real = found[1] if found else None
    touched = None
    if segment.inner is None:  # protected_operand, with the cwd's part done once per context
        touched = (
            context.cwd
            if context.cwd_protected
            else protected_word(argv, context.cwd_real, context.protected, context.own)
        )
    if touched is not None:
        return _miss(
            segment, real, f"{touched} is inside exechost's state dir (tokens, approvals)", (), named
        )
    if segment.inner is None:
        through = context.cwd if context.cwd_process else process_word(argv, context.cwd, cwd_checked=True)
        if through is not None:
            why = "names a file through /proc or /dev/fd, which the run resolves in its own process"
            return _miss(segment, real, f"{through} {why}", (), named)
    if segment.blocked_wrapper:
        return _miss(segment, real, f"blocked wrapper: {segment.blocked_wrapper}", (), named)
    if segment.assignments:
        return _miss(segment, real, "env assignment before the command", (), named)
    wrappers: tuple[str, ...] = ()
    if segment.wrapper_argv:
        wrapper_paths: list[str] = []
        for group in segment.wrapper_argv:
            wrapper = resolve(group[0], context.cwd, context.path_var, poll=False)
            name = _base(group[0]).lower()
            if (
                wrapper is None
                or not _in_trusted_dir(wrapper[1], context.trusted)
                or (_base(wrapper[1]).lower() != name)
            ):
                return _miss(segment, real, f"wrapper {name} is not a trusted system binary", (), named)
            wrapper_paths.append(wrapper[1])
        wrappers = tuple(wrapper_paths)
    if facts.real_miss is not None:
        return _miss(segment, real, facts.real_miss, wrappers, named)
    if segment.heredocs and facts.interpreter:
        # `./tool <<EOF` where tool is python under another name: the body would be code.
        return _miss(segment, real, "heredoc to an interpreter: the body is code", wrappers, named)
    if (segment.heredocs or piped) and segment.inner is None and not facts.data_reader:
        # `sqlite3 app.db <<EOF`, `… | ed -s`: input to a program not known to read it as data may be
        # commands to it (engine.commands.stdindata): no entry describes that input, a human decides.
        how = "a heredoc" if segment.heredocs else "a pipe"
        why = f"{how} feeds {_base(real or argv[0])}, which is not known to read its input as data"
        return _miss(segment, real, why, wrappers, named)
    if segment.inner is not None:
        return _match_shell(segment, real, wrappers, named, context)
    text = None
    for compiled in facts.entries:
        if compiled.entry.arg_pattern is not None:
            if compiled.args is None:
                continue
            text = args_text(argv) if text is None else text
            if compiled.args.fullmatch(text) is None:
                continue
        entry = compiled.entry
        return SegmentMatch(argv, real, "allowlist", entry.pattern, entry.id, None, wrappers, None, named)
    reason = facts.safe_miss
    if reason is None:
        assert facts.profile is not None
        problem = validate_safe_bin_argv(argv[1:], facts.profile)
        if problem is None:
            return SegmentMatch(argv, real, "safeBins", None, None, None, wrappers, None, named)
        reason = f"safe bin {_base(argv[0]).lower()}: {problem}"
    return _miss(segment, real, reason, wrappers, named)


def _match_shell(
    segment: Segment, real: str | None, wrappers: tuple[str, ...], named: str | None, context: _Context
) -> SegmentMatch:
    assert segment.inner is not None
    if real is None or not _in_trusted_dir(real, context.trusted) or name_of(real) not in ANALYSED_SHELLS:
        return _miss(segment, real, "the shell is not a trusted system shell", wrappers, named)
    inner = _evaluate(segment.inner, context)
    if not inner.satisfied:
        missed = next((m for m in inner.segments if not m.satisfied_by), None)
        detail = f"{missed.argv[0]}: {missed.reason}" if missed else "payload not satisfied"
        return SegmentMatch(
            segment.argv,
            real,
            None,
            None,
            None,
            f"inside {segment.argv[0]} -c: {detail}",
            wrappers,
            inner,
            named,
        )
    patterns = ", ".join(m.matched_pattern or f"{m.satisfied_by} {m.argv[0]}" for m in inner.segments)
    return SegmentMatch(segment.argv, real, "allowlist", patterns, None, None, wrappers, inner, named)


def _safe_bin_facts(
    name: str, found: tuple[str, str] | None, context: _Context
) -> tuple[str | None, SafeBinProfile | None]:
    """Why `name` is not a safe bin whatever its arguments; else the profile its arguments must fit."""
    name = _base(name).lower()
    if name not in context.safe_bins:
        return ("allowlist miss" if found else "executable not found"), None
    if found is None:
        return "executable not found", None
    real = found[1]
    if not _in_trusted_dir(real, context.trusted):
        return f"safe bin {name} resolved outside the trusted dirs", None
    if _base(real).lower() != name:
        return f"safe bin {name} resolves to {_base(real)}", None
    profile = context.profiles.get(name)
    if profile is None:
        return f"safe bin {name} has no profile", None
    return None, profile


def trusted_dir_warnings(dirs: Sequence[str]) -> list[str]:
    """The reference's warning for each group- or world-writable trusted dir."""
    out = []
    for directory in dirs:
        try:
            mode = os.stat(directory).st_mode
        except OSError:
            continue
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            out.append(
                f"exec: safeBinTrustedDirs includes world-writable directory '{directory}'; "
                "remove trust or tighten permissions (for example chmod 755)."
            )
    return out


def profile_from_config(name: str, raw: Mapping[str, object]) -> SafeBinProfile:
    """`tools.exec.safeBinProfiles.<name>` → SafeBinProfile; ValueError names the bin and the problem."""
    try:
        return SafeBinProfile.from_config(raw)
    except ValueError as exc:
        raise InvalidInput(f"safeBinProfiles.{name}: {exc}") from None


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")
