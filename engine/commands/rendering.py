"""What runs: an allowlisted or approved command rendered with every executable pinned and every word
quoted, and the identity of what was pinned, re-checked just before the spawn."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.commands.analysis import CommandAnalysis, Segment
    from engine.commands.matches import AllowlistResult, SegmentMatch

__all__ = [
    "Identity",
    "Words",
    "enforced_command",
    "identity",
    "identity_problem",
    "pin_path",
    "pinned_command",
    "render_bound",
]


def _base(path: str) -> str:
    return path[path.rfind("/") + 1 :]  # os.path.basename, without its per-call overhead


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\"'\"'") + "'" if "'" in word else "'" + word + "'"


_MULTICALL = frozenset({"busybox", "toybox", "coreutils"})


def pin_path(match: SegmentMatch) -> str | None:
    """The path a segment runs as: its real path, unless that would change the name the program sees
    (`xzcat` → `xz` compresses and deletes; `rview` → `vim.basic` has shell escapes): then the named path,
    whose target the caller re-checks just before spawning."""
    real, named = match.resolved_path, match.named_path
    if real is None:
        return None
    if named is not None and _base(named) != _base(real):
        return named
    return real


Words = Mapping[tuple[tuple[int, ...], int], Sequence[str]]  # (segment path, argv index) → words


def _render(segment: Segment, match: SegmentMatch, words_for: Words, where: tuple[int, ...]) -> str | None:
    real, named = match.resolved_path, match.named_path
    if real is None:
        return None  # nothing to pin argv[0] to: the plan is unavailable
    if named is not None and named != real and _base(named) != _base(real):
        real = named  # pin_path, inlined: this runs for every segment of every allowed decision
    if len(match.wrapper_paths) != len(segment.wrapper_argv):
        return None
    if _base(real).lower() in _MULTICALL and _base(segment.argv[0]).lower() not in _MULTICALL:
        return (
            None  # a multi-call binary picks its applet from argv[0]; pinning the real path would change it
        )
    if (
        not words_for
        and segment.inner is None
        and not segment.wrapper_argv
        and not segment.heredocs
        and "'" not in segment.raw
        and "'" not in real
    ):
        # The common case: no word holds a quote (quote removal never makes one the raw text lacks), so
        # one join quotes them all, exactly as _quote would one by one.
        return "'" + "' '".join((real, *segment.argv[1:])) + "'"

    def word(index: int, text: str) -> list[str]:
        # A verified copy stands in for a bound file (engine.commands.verified): its words, not the path.
        swapped = words_for.get((where, index)) if words_for else None
        return [_quote(w) for w in swapped] if swapped is not None else [_quote(text)]

    words: list[str] = []
    for group, path in (
        zip(segment.wrapper_argv, match.wrapper_paths, strict=True) if segment.wrapper_argv else ()
    ):
        words += [_quote(path), *(_quote(w) for w in group[1:])]
    if segment.inner is not None:
        if match.inner is None:
            return None
        payload = _render_all(segment.inner, match.inner, words_for, where)
        if payload is None:
            return None
        # What was analysed is the payload, so the payload is what runs: one command runs pinned with no
        # shell at all; a chain runs in the pinned system shell with none of the agent's shell options
        # (`-l` would read profiles, `-x` trace), so nothing but the analysed words is ever parsed.
        if len(segment.inner.segments) == 1:
            words.append(payload)
        else:
            # bash with `-c` and a socket on stdin (a held session's) takes itself for a shell rshd or
            # sshd started and sources ~/.bashrc first: `--norc` keeps it to the payload.
            norc = ["'--norc'"] if _base(match.resolved_path or "") == "bash" else []
            words += [*word(0, real), *norc, "'-c'", _quote(payload)]
    elif not words_for:
        words.append(_quote(real))
        words += [_quote(a) for a in segment.argv[1:]]
    else:
        words += [*word(0, real), *(w for i, a in enumerate(segment.argv[1:], 1) for w in word(i, a))]
    # Heredocs are rendered as quoted (literal) heredocs carrying exactly the data bash would have fed.
    if segment.heredocs:
        words += [f"<<'{_delimiter(doc.data, index)}'" for index, doc in enumerate(segment.heredocs)]
    return " ".join(words)


def _delimiter(data: str, index: int) -> str:
    """A delimiter no line of `data` equals, so the rendered body ends exactly where it did."""
    lines = set(data.split("\n"))
    delimiter = f"EXECHOST_EOF_{index}"
    while delimiter in lines:
        delimiter += "_"
    return delimiter


def enforced_command(analysis: CommandAnalysis, result: AllowlistResult) -> str | None:
    """What runs instead of the raw text: argv[0] pinned, every word single-quoted, operators kept."""
    if not result.satisfied:
        return None
    return _render_all(analysis, result)


def pinned_command(analysis: CommandAnalysis, result: AllowlistResult) -> str | None:
    """The same rendering for a command a human approved (satisfied or not): what they saw is what runs.
    None when the command is not a plain chain (the approved raw text runs) or something did not resolve."""
    return _render_all(analysis, result)


def render_bound(analysis: CommandAnalysis, result: AllowlistResult, words_for: Words) -> str | None:
    """The pinned rendering with some words replaced (verified copies of bound files)."""
    return _render_all(analysis, result, words_for)


def _render_all(
    analysis: CommandAnalysis,
    result: AllowlistResult,
    words_for: Words | None = None,
    where: tuple[int, ...] = (),
) -> str | None:
    if not analysis.ok or len(result.segments) != len(analysis.segments):
        return None
    parts: list[str] = []
    bodies: list[str] = []
    words = words_for or {}
    for index, (segment, match) in enumerate(zip(analysis.segments, result.segments, strict=True)):
        rendered = _render(segment, match, words, (*where, index) if words else where)  # where: for words
        if rendered is None:
            return None
        if index:
            parts.append(analysis.operators[index - 1])
        parts.append(rendered)
        if segment.heredocs:
            # Bodies follow the command line in order, as bash reads them: after the newline that ends it.
            bodies += [doc.data + _delimiter(doc.data, i) + "\n" for i, doc in enumerate(segment.heredocs)]
    line = " ".join(parts)
    return line + "\n" + "".join(bodies) if bodies else line


Identity = tuple[tuple[str, str, int, int], ...]  # (path as run, its real path, st_dev, st_ino)


def identity(result: AllowlistResult, cwd: str) -> Identity:
    """What an approval was shown: every executable (and the cwd) down to dev/ino, for a re-check."""
    out: list[tuple[str, str, int, int]] = []

    def add(path: str, real: str) -> None:
        try:
            st = os.stat(real)
        except OSError:
            return
        out.append((path, real, st.st_dev, st.st_ino))

    def walk(res: AllowlistResult) -> None:
        for match in res.segments:
            pin = pin_path(match)
            if pin is not None and match.resolved_path is not None:
                add(pin, match.resolved_path)
            for wrapper in match.wrapper_paths:
                add(wrapper, wrapper)
            if match.inner is not None:
                walk(match.inner)

    walk(result)
    add(cwd, os.path.realpath(cwd))
    return tuple(out)


def identity_problem(ident: Identity) -> str | None:
    """None when every path still resolves to the same file; else what changed since it was approved."""
    for path, real, dev, ino in ident:
        try:
            now = os.path.realpath(path)
            st = os.stat(now)
        except OSError:
            return f"{path} is gone"
        if now != real or (st.st_dev, st.st_ino) != (dev, ino):
            return f"{path} changed since it was approved (now {now})"
    return None
