"""Durable approvals: the exact-command hash an "allow always" saves, what it is bound to (cwd, env,
script contents), and which executable paths it may save instead."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from engine.commands.argvsafe import takes_no_code
from engine.commands.interpreters import is_interpreter
from engine.commands.regular import Unreadable, read_regular

if TYPE_CHECKING:
    from engine.commands.analysis import CommandAnalysis, Segment
    from engine.commands.matches import AllowlistEntry, AllowlistResult, SegmentMatch

__all__ = [
    "ALLOW_ALWAYS_SOURCE",
    "COMMAND_HASH_PREFIX",
    "allow_always_patterns",
    "approval_binding",
    "command_hash_pattern",
    "has_durable_approval",
]

COMMAND_HASH_PREFIX = "=command:"
ALLOW_ALWAYS_SOURCE = "allow-always"


def command_hash_pattern(command: str, binding: str = "") -> str:
    """`=command:<sha256(trimmed text [+ binding])>`: an exact-command durable approval, never the
    plaintext. The binding (cwd, env, script contents) makes it hold only where it was given. The whole
    digest, not OpenClaw's 16 hex digits: the agent chooses every byte of the text, and 64 bits are a
    birthday search of ~2^32 hashes away from a harmless command whose approval matches a harmful one
    (round 8 s). A 16-digit entry written before matches nothing: the command asks once more."""
    text = command.strip() + ("\0" + binding if binding else "")
    return COMMAND_HASH_PREFIX + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


SCRIPT_HASH_CAP = 16 * 1024 * 1024


def _script_digest(path: str) -> str:
    """sha256 of the script's first SCRIPT_HASH_CAP + 1 bytes; "unreadable" for anything but a regular file
    (never read: a FIFO would hang the decision, and hand each run other bytes anyway)."""
    try:
        return hashlib.sha256(read_regular(path, SCRIPT_HASH_CAP + 1, prefix=True)).hexdigest()
    except Unreadable:
        return "unreadable"


def _scripts(analysis: CommandAnalysis, cwd: str, out: list[str]) -> None:
    """The script operands of interpreter segments (`sh run.sh`, `python3 x.py`) as path=sha256."""
    for segment in analysis.segments:
        if segment.inner is not None:
            _scripts(segment.inner, cwd, out)
            continue
        if not is_interpreter(segment.argv[0]):
            continue
        operand = next((a for a in segment.argv[1:] if not a.startswith("-")), None)
        if operand is None:
            continue
        path = os.path.realpath(os.path.join(cwd, operand))
        if os.path.isfile(path):
            out.append(f"{path}={_script_digest(path)}")


def approval_binding(analysis: CommandAnalysis, cwd: str, env_overrides: Mapping[str, str] | None) -> str:
    """What an exact-command approval is bound to besides its text: the canonical cwd, the requested env
    (keys and values, hashed) and the content of every script operand. Change one and it asks again."""
    env_text = "\0".join(f"{k}={v}" for k, v in sorted((env_overrides or {}).items()))
    env_digest = hashlib.sha256(env_text.encode("utf-8", "surrogatepass")).hexdigest()
    scripts: list[str] = []
    _scripts(analysis, cwd, scripts)
    return "\n".join([f"cwd={os.path.realpath(cwd)}", f"env={env_digest}", *scripts])


def has_durable_approval(command: str, entries: Sequence[AllowlistEntry], binding: str = "") -> bool:
    """Reference §3.3 (a): an allow-always `=command:<sha256>` entry for exactly this command, bound to
    this cwd, env and script content. A hand-added hash entry is an ordinary line, not a durable approval."""
    wanted = command_hash_pattern(command, binding)
    return any(entry.pattern == wanted and entry.source == ALLOW_ALWAYS_SOURCE for entry in entries)


def _runs_others(segment: Segment, match: SegmentMatch) -> bool:
    """Whether the program may take code from its argv: any one not known to take none (argvsafe), by
    its name as typed or any path it resolves to (`ls` → a busybox is not ls)."""
    names_ = (segment.argv[0], match.named_path or "", match.resolved_path or "")
    return not all(takes_no_code(n) for n in names_ if n)


def _persistable(path: str | None) -> bool:
    # `*` and `?` in a path cannot be written as a literal pattern; interpreters would allow any code.
    return path is not None and "*" not in path and "?" not in path and not is_interpreter(path)


def _collect(analysis: CommandAnalysis, result: AllowlistResult, out: list[str]) -> bool:
    complete = analysis.ok and len(result.segments) == len(analysis.segments)
    for segment, match in zip(analysis.segments, result.segments, strict=False):
        if segment.blocked_wrapper or segment.assignments:
            complete = False
        elif segment.inner is not None:
            if match.inner is None or not _collect(segment.inner, match.inner, out):
                complete = False
        elif _persistable(match.named_path) and not _runs_others(segment, match):
            assert match.named_path is not None
            if match.named_path not in out:
                out.append(match.named_path)
        else:
            complete = False  # the exact command is saved instead (the hash covers it)
    return complete


def allow_always_patterns(
    command: str, analysis: CommandAnalysis, result: AllowlistResult, binding: str = ""
) -> list[str]:
    """Patterns "allow always" persists: inner executables' named paths when every one is known to take
    no code from its argv (argvsafe: ls, cat, …) and the command is a plain chain; else the exact
    command's hash."""
    paths: list[str] = []
    complete = _collect(analysis, result, paths) if analysis.ok else False
    if complete and paths:
        return paths
    return [*paths, command_hash_pattern(command, binding)]
