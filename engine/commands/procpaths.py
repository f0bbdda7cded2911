"""Paths a program reaches through /proc by way of a link (`sub -> /proc/self/cwd/real`): the gateway walking
them sees its own process, the run its own, so what a vet read there is not what the run reads (fresh round
10 f: `ninja -C sub`). No such path is vetted or bound: it is a finding no bytes hold, and the command asks.

engine.commands.protected.process_word refuses a word that spells /proc itself; this follows the links a
word's path walks through, as the kernel does, and stops at the first step inside /proc or /dev/fd.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence

from engine.commands.protected import through_process

__all__ = ["THROUGH_PROCESS", "linked_through_process", "process_linked_words"]

MAX_LINKS = 40  # as the kernel's path walk (ELOOP): more is taken as reaching /proc (nothing to vet)
MAX_PLACES = 64  # places read from one word: past this, the word counts as reaching /proc
THROUGH_PROCESS = (
    "a path that reaches /proc or /dev/fd through a link: each process resolves it for itself (its own "
    "cwd, fds, pid), so nothing there can be vetted"
)


def linked_through_process(path: str, cwd: str, *, real: bool = False) -> bool:
    """Whether `path` (absolute, or relative to the directory `cwd`), walked with every link followed, takes
    a step inside /proc or /dev/fd. The cwd itself is not judged (the allowlist refuses a cwd through
    /proc; an anchored `/proc/self/fd/N` cwd is the gateway's own fd of the decided directory). `real`:
    the caller resolved `cwd` already."""
    done = "/" if path.startswith("/") else cwd if real else os.path.realpath(cwd)
    todo = [p for p in reversed(path.split("/")) if p]
    links = 0
    while todo:
        part = todo.pop()
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        step = done + part if done.endswith("/") else f"{done}/{part}"
        if through_process(step):
            return True
        try:
            target = os.readlink(step)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                done = step  # not a link: walk on
                continue
            return False  # absent (or not a directory): the kernel's walk ends here, no link follows
        except ValueError:
            return False  # a NUL: no path at all
        links += 1
        if links > MAX_LINKS:
            return True
        if target.startswith("/"):
            done = "/"
        todo += [p for p in reversed(target.split("/")) if p]
    return False


def _places(word: str) -> Iterator[str]:
    """Every way a program may read `word` as a path: whole, an option's `=value`, a short option's attached
    value (`-Csub`), a response file or toolchain (`@x`, `+x`), and each absolute path inside it."""
    yield word
    if "=" in word:
        yield word.split("=", 1)[1]
    if word.startswith("-") and not word.startswith("--") and len(word) > 2:
        yield word[2:]
    if word.startswith(("@", "+")):
        yield word[1:]
    at = word.find("/", 1)
    while at != -1:
        yield word[at:]
        at = word.find("/", at + 1)


def process_linked_words(words: Sequence[str], cwd: str) -> list[str]:
    """Each of `words` that, read as a path in any of its places, reaches /proc or /dev/fd through a link."""
    found = []
    base = os.path.realpath(cwd)
    for word in dict.fromkeys(words):
        if not word or "\x00" in word:
            continue
        # An option's own spelling is no path to its program (its attached value is a place of its own).
        places = list(dict.fromkeys(p for p in _places(word) if p and not p.startswith("-")))
        if len(places) > MAX_PLACES or any(linked_through_process(p, base, real=True) for p in places):
            found.append(word)
    return found
