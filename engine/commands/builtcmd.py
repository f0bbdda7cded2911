"""Programs that build the command they run from a string or a file (`env -S "sh s.sh"`, `xargs -a list
sh`): the words that name the script are in no word the binder reads, so such a run is refused."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.commands.interpreters import name_of

# GNU env: letters that stand alone, letters taking a value (the rest of the word or the next one).
_ENV = ("i0v", "uCP")
# GNU/busybox xargs: letters that stand alone, letters taking a value, letters whose value is optional
# and attached only.
_XARGS = ("0prtxo", "EILnPsd", "eil")
# Long options whose value may be the next word (any prefix of them is the option).
_ENV_LONG_VALUED = ("--unset", "--chdir")
_XARGS_LONG_VALUED = ("--delimiter", "--max-args", "--max-procs", "--max-chars", "--process-slot-var")


def _long(word: str, full: str) -> bool:
    """getopt_long takes any unambiguous prefix: for env and xargs every `--s…`/`--a…` is the option."""
    name = word.partition("=")[0]
    return len(name) >= 3 and full.startswith(name)


def _env_splits(argv: Sequence[str]) -> bool:
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            return False
        if word.startswith("--"):
            if _long(word, "--split-string"):
                return True
            i += 2 if "=" not in word and any(_long(word, v) for v in _ENV_LONG_VALUED) else 1
            continue
        flags, valued = _ENV
        for j, letter in enumerate(word[1:], 1):
            if letter == "S":
                return True
            if letter in valued:
                i += 0 if j < len(word) - 1 else 1
                break
            if letter not in flags:
                return True  # an option not read here: read as the worst it could be
        i += 1
    return False


def _xargs_reads_a_file(argv: Sequence[str]) -> bool:
    flags, valued, optional = _XARGS
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            return False
        if word.startswith("--"):
            if _long(word, "--arg-file"):
                return True
            i += 2 if "=" not in word and any(_long(word, v) for v in _XARGS_LONG_VALUED) else 1
            continue
        for j, letter in enumerate(word[1:], 1):
            if letter == "a":
                return True
            if letter in valued:
                i += 0 if j < len(word) - 1 else 1
                break
            if letter in optional:
                break
            if letter not in flags:
                return True
        i += 1
    return False


def built_command(words: Iterable[Sequence[str]]) -> str:
    """Why a run whose word lists (segments' argvs, the text's words) hold `env -S`/`--split-string` or
    `xargs -a`/`--arg-file` cannot be bound, or "". Each occurrence of `env`/`xargs` as a word starts a
    reading, wherever it stands (`nohup env -S…`, `find -exec env -S…`): the stricter reading."""
    for argv in words:
        for at, word in enumerate(argv):
            name = name_of(word)
            if name == "env" and _env_splits(argv[at:]):
                return "env -S builds its command line from a string exechost does not bind"
            if name == "xargs" and _xargs_reads_a_file(argv[at:]):
                return "xargs -a takes its command's arguments from a file exechost does not bind"
    return ""
