"""Programs known to take no code from the tree they run in: the inverse of a list of bad cases. Any
other program that would run unasked in a tree the agent can write asks (engine.commands.treecode).

A program is on this list only when what it does is decided by its argv, stdin, the operator's env and
config (home, /etc, the programs on the operator's PATH) and the files its argv names read as data: it
never runs, imports or loads a file because of where it was started (no config found from the cwd or its
ancestors, no plugins, no hooks), and it runs no program at all except through the options listed beside
it, which make it ask. mypy (`plugins` in mypy.ini), pytest (`conftest.py`), pylint (`init-hook`), eslint
(`eslint.config.js`), sphinx (`conf.py`), ruff (`pyproject.toml` naming nothing that runs today, but read
from the tree), every interpreter, build tool and package manager are not on it, nor is anything nobody
has looked at yet: they ask in a writable tree without anyone listing them. The operator adds programs
they have checked with `tools.exec.treeSafe`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

__all__ = ["TREE_SAFE", "is_tree_safe"]

# name → the options that make it run a program (then it is not safe). Why each one is safe:
# - coreutils/util-linux readers and printers (cat … wc, ls, stat, date, printf, …): read argv-named
#   files as data; their only env influence (LS_COLORS, TZ, locale) is the inert-env check's business.
# - writers (cp, mv, rm, mkdir, touch, ln, chmod, tee, truncate, mktemp): change files, never run them;
#   what they may write is the allowlist's business (argPatterns), and a written file runs only through
#   a program that is itself decided.
# - grep, egrep, fgrep (scripts that exec grep), diff, cmp: GNU grep/diffutils read no config file at all.
# - rg: reads `.gitignore`/`.ignore`/`.rgignore` as data (which files to skip); its config file comes
#   only from RIPGREP_CONFIG_PATH (env, never inert); `--pre` runs a program on every file and (ripgrep
#   >= 14) `--hostname-bin` runs one to name the host in hyperlinks. `-z`/`--search-zip` runs the
#   decompressors found on the operator's PATH (not the tree's), with the file as data.
# - find: `-exec`, `-execdir`, `-ok`, `-okdir` run programs; nothing else in find does.
# - sort: `--compress-program` runs a program; split: `--filter` runs a shell.
# - less: every host run has LESSSECURE=1 (hostenv), which turns off what could take code or commands:
#   `!`, `|`, `v`, `:e`, log files, lesskey files (`-k`) and tags files (`-t`, read from the cwd).
_RUNS = {
    "find": ("-exec", "-execdir", "-ok", "-okdir"),
    "rg": ("--pre", "--hostname-bin"),
    "sort": ("--compress-program",),
    "split": ("--filter",),
}
_PLAIN = (
    "cat tac nl head tail wc cut paste join tr uniq fold fmt expand unexpand od base32 base64 basenc "
    "md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum sum comm shuf numfmt tsort pr "
    "csplit ls dir vdir stat du df pwd echo printf true false test [ expr seq sleep yes date basename "
    "dirname realpath readlink id whoami groups logname uname nproc printenv tty hostid "
    "cp mv rm rmdir mkdir touch ln chmod tee truncate mktemp "
    "grep egrep fgrep diff cmp xxd hexdump column rev tree less"
)
TREE_SAFE: dict[str, tuple[str, ...]] = {**dict.fromkeys(_PLAIN.split(), ()), **_RUNS}


def _names(word: str, option: str) -> bool:
    """Whether `word` gives `option`: itself, with `=value`, or (a long option) any prefix getopt_long
    would take for it (`--compress=x`); a prefix shared with another option counts too (it asks)."""
    if word == option or word.startswith(option + "="):
        return True
    head = word.split("=", 1)[0]
    return option.startswith("--") and head.startswith("--") and len(head) > 2 and option.startswith(head)


def is_tree_safe(argv: Sequence[str], real: str | None, extra: Collection[str] = ()) -> bool:
    """Whether this command takes no code from its tree: its executable (the file that runs, by its
    exact name: `base64`, never a `python3.11` read as `python`) is on TREE_SAFE or the operator's
    `extra`, and no word is an option that makes it run a program."""
    if real is None or not argv:
        return False
    name = os.path.basename(real)
    if name in extra:
        return True
    runs = TREE_SAFE.get(name)
    if runs is None:
        return False
    return not any(_names(w, o) for w in argv[1:] for o in runs)
