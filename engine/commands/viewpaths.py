"""Where a path the agent names lives for its host run: resolved as the run's view resolves it (its own
/tmp and the like: engine.commands.hostprivate), so no decision reads the host's file where the run
reads the agent's (fresh round 10 c: `npm --prefix /tmp/p`, `ninja -C l` with `l -> /tmp/p`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from engine.commands import hostprivate
from engine.commands.analysis import CommandAnalysis
from engine.commands.textnames import all_words

Binds = Sequence[tuple[str, str]]
MAX_LINKS = 40  # as the kernel's path walk (ELOOP)
# A word is read as a path at each of its slashes (`-C/tmp/p`, `file:///tmp/p`, `--prefix=/tmp/p`): past
# this many places it is taken to reach a private dir (the walk is per place, per component).
MAX_PLACES = 64


def in_view(binds: Binds, path: str, cwd: str) -> str | None:
    """The host path of what the run reaches by `path` (relative to its `cwd`, both as the run names
    them): component by component, each looked up where the view has it (a private dir's components in
    the agent's copy), a link's target read there and walked on in the view. None: a link loop."""
    start = "/" if path.startswith("/") else _walk(binds, cwd, "/")[0]
    done = None if start is None else _walk(binds, path, start)[0]
    return None if done is None else hostprivate.source_of(binds, done) or done


def reader(binds: Binds, host_cwd: str) -> Callable[[str], str | None]:
    """The one translation every path the decision reads goes through: a word (relative to the run's
    cwd) or an absolute path, in the run's naming or as the decision names a place in the agent's copy
    (`<state>/hostprivate/...`), to the host path of what the run reaches there (in_view; None: a link
    loop). With no private dirs, the host's own realpath."""
    if not binds:
        return lambda word: _real(os.path.join(host_cwd, word))
    run_cwd = hostprivate.view_of(binds, host_cwd) or host_cwd

    def at(word: str) -> str | None:
        return in_view(binds, hostprivate.view_of(binds, word) or word, run_cwd)

    return at


def _real(path: str) -> str | None:
    try:
        return os.path.realpath(path)
    except ValueError:  # a NUL in the word: no file has that name
        return None


def _walk(binds: Binds, path: str, done: str) -> tuple[str | None, bool]:
    """`path` walked from the resolved directory `done`, as the view names both: the resolved path in the
    view (links followed where `binds` has them; with no binds, the host's realpath; None: a loop), and
    whether any step was in a private dir (if none was, the host's walk is this one)."""
    todo = [p for p in reversed(path.split("/")) if p]
    links = 0
    touched = False
    while todo:
        part = todo.pop()
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        step = done + part if done.endswith("/") else done + "/" + part
        here = _source(binds, step) if binds else None
        touched = touched or here is not None
        try:
            target = os.readlink(here or step)
        except (OSError, ValueError):
            done = step  # not a link, or absent: the walk goes on by name, as the kernel's would
            continue
        links += 1
        if links > MAX_LINKS:
            return None, touched
        if target.startswith("/"):
            done = "/"
        todo += [p for p in reversed(target.split("/")) if p]
    return done, touched


def _source(binds: Binds, step: str) -> str | None:
    """hostprivate.source_of for a step of a walk (absolute, normal already): the innermost bind wins."""
    best: tuple[str, str] | None = None
    for source, dest in binds:
        if (step == dest or step.startswith(dest + "/")) and (best is None or len(dest) > len(best[1])):
            best = (source, dest)
    return None if best is None else best[0] + step[len(best[1]) :]


def _places(word: str) -> Iterator[str]:
    """Every way a run may read `word` as a path: whole, after its first `=`, after a short option's
    letter, and from each of its slashes (a URL's path, an option's attached value)."""
    yield word
    if "=" in word:
        yield word.split("=", 1)[1]
    if word.startswith("-") and not word.startswith("--") and len(word) > 2:
        yield word[2:]
    at = word.find("/", 1)
    while at != -1:
        yield word[at:]
        at = word.find("/", at + 1)


def diverging(binds: Binds, words: Iterable[str], host_cwd: str) -> list[str]:
    """The words that name, read as a path, another file in the run's view than on the host where the
    decision reads it (its vets, its content binding), in order. `host_cwd` is the decision's cwd (the
    agent's copy of a workdir in a private dir); the run's is that as the view names it."""
    if not binds:
        return []
    run_cwd, _ = _walk(binds, hostprivate.view_of(binds, host_cwd) or host_cwd, "/")
    host_cwd = _walk((), host_cwd, "/")[0] or host_cwd
    found: list[str] = []
    for word in dict.fromkeys(words):
        if not word or "\x00" in word:
            continue
        places = list(dict.fromkeys(_places(word)))
        if len(places) > MAX_PLACES or run_cwd is None:
            found.append(word)
            continue
        for place in places:
            absolute = place.startswith("/")
            run, touched = _walk(binds, place, "/" if absolute else run_cwd)
            if run is None:
                found.append(word)
                break
            if not touched and (absolute or run_cwd == host_cwd):
                continue  # no step in a private dir, from the same place: the host's walk is this one
            host, _ = _walk((), place, "/" if absolute else host_cwd)
            if host is None or (_source(binds, run) or run) != host:
                found.append(word)
                break
    return found


def words_of(analysis: CommandAnalysis, resolved: Iterable[str | None] = (), text: str = "") -> list[str]:
    """Every word a command's runs may read as a path: each segment's argv, its wrappers' and its
    assignments' (an `sh -c` payload's too), and the programs resolved for it; a text the analysis could
    not parse (`(sh /tmp/s.sh)`), every word of it, as the binder binds them (textnames.all_words)."""
    found: list[str] = [p for p in resolved if p]
    if not analysis.ok and text:
        found += all_words(text)
    for segment in analysis.segments:
        found += segment.argv
        found += [w for group in segment.wrapper_argv for w in group]
        found += segment.assignments
        if segment.inner is not None:
            found += words_of(segment.inner)
    return found


REASON = "it names a path that is another file in the run's view (the agent's own /tmp or the like)"


def warning(words: Sequence[str]) -> str:
    """The ask's line for `diverging`'s words."""
    shown = ", ".join(repr(w[:200]) for w in words[:4]) + (
        f" (and {len(words) - 4} more)" if len(words) > 4 else ""
    )
    return (
        f"Warning: {shown} reaches a file in this agent's own copy of a private dir (tools.exec."
        "hostPrivate), not the file of that name on this machine: what the run reads there (and the "
        "digests shown) is the agent's; the command cannot run unasked, and allow-always is not offered."
    )
