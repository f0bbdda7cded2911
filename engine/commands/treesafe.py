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
# - tree: reads directories as data; `-R` (with -H and -L) re-runs tree for each directory at the depth
#   limit, and tree up to 1.8.0 (Debian 11, Ubuntu 20.04) does it with system("tree … \"<dir name>\""):
#   a directory named `$(cmd)` runs cmd in a shell. A short option, so it is found in any cluster.
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
# name → the short option letters that make it run a program, wherever they sit in a cluster (`-aR`). Every
# word with one leading dash is read as a cluster, an option's value too: a value that looks like one asks.
_RUNS_LETTERS = {"tree": "R"}

# Programs whose options are read the other way round as well: every option word must be one understood
# here (a new release's program-running option, as ripgrep 14's --hostname-bin was, asks until it is
# looked at). rg's: searching, filtering, printing; left out are --pre, --hostname-bin and -z/--search-zip
# (runs decompressors found on PATH). Long options are matched whole (no abbreviations), `--x=value` by its
# name; a short cluster stops at its first option that takes a value (the rest is that value).
_RG_LONG = (
    "after-context auto-hybrid-regex before-context binary block-buffered byte-offset case-sensitive color "
    "colors column context context-separator count count-matches crlf debug dfa-size-limit encoding engine "
    "field-context-separator field-match-separator file files files-with-matches files-without-match "
    "fixed-strings follow glob glob-case-insensitive heading help hidden hyperlink-format iglob ignore "
    "ignore-case ignore-dot ignore-exclude ignore-file ignore-file-case-insensitive ignore-files "
    "ignore-global ignore-messages ignore-parent ignore-vcs include-zero invert-match json line-buffered "
    "line-number line-regexp max-columns max-columns-preview max-count max-depth max-filesize messages mmap "
    "multiline multiline-dotall no-auto-hybrid-regex no-binary no-block-buffered no-byte-offset no-column "
    "no-config no-context-separator no-crlf no-encoding no-filename no-fixed-strings no-follow "
    "no-glob-case-insensitive no-heading no-hidden no-ignore no-ignore-dot no-ignore-exclude no-ignore-files "
    "no-ignore-file-case-insensitive no-ignore-global no-ignore-messages no-ignore-parent no-ignore-vcs "
    "no-include-zero no-invert-match no-json no-line-buffered no-line-number no-max-columns-preview "
    "no-messages no-mmap no-multiline no-multiline-dotall no-one-file-system no-pcre2 no-pcre2-unicode "
    "no-require-git no-sort-files no-stats no-text no-trim no-unicode null null-data one-file-system "
    "only-matching passthru passthrough path-separator pcre2 pcre2-version pre-glob pretty quiet "
    "regex-size-limit regexp replace smart-case sort sort-files sortr stats stop-on-nonmatch text threads "
    "trim type type-add type-clear type-list type-not unicode unrestricted version vimgrep with-filename "
    "word-regexp"
)
_UNDERSTOOD: dict[str, tuple[frozenset[str], str, str]] = {
    # name → (long options, short flags, short options taking a value)
    "rg": (frozenset("--" + o for o in _RG_LONG.split()), "abcFHhiILlNnoPpqSsUuVvwx0.", "ABCdEefgjMmrTt"),
}


def _understood(name: str, argv: Sequence[str]) -> bool:
    """Whether every option word of a program with a list of understood options is on it."""
    known = _UNDERSTOOD.get(name)
    if known is None:
        return True
    longs, flags, valued = known
    for word in argv[1:]:
        if word == "--":
            return True  # the rest are patterns and paths
        if word == "-" or not word.startswith("-"):
            continue  # a pattern, a path or an option's value: data
        if word.startswith("--"):
            if word.split("=", 1)[0] not in longs:
                return False
            continue
        for letter in word[1:]:
            if letter in valued:
                break  # the rest of the word is this option's value
            if letter not in flags:
                return False
    return True


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
    `extra`, no word is an option that makes it run a program, and (rg) every option is one understood."""
    if real is None or not argv:
        return False
    name = os.path.basename(real)
    if name in extra:
        return True
    runs = TREE_SAFE.get(name)
    if runs is None or not _understood(name, argv):
        return False
    if any(_names(w, o) for w in argv[1:] for o in runs):
        return False
    letters = _RUNS_LETTERS.get(name, "")
    return not any(w[:1] == "-" and w[1:2] != "-" and any(c in w for c in letters) for w in argv[1:])
