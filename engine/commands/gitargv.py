"""What git's own arguments make it run: the subcommands and options that name a program, an allowlist of
subcommands known to run none, and the local repositories a push starts receive-pack in (issue 27 §4)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

# Subcommands whose own arguments name a program to run (git's fixed set, unlike config driver names).
_PROGRAM_OPTIONS: dict[str, tuple[str, ...]] = {
    "clone": ("-u", "--upload-pack", "--template", "-c", "--config"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "ls-remote": ("--upload-pack",),
    "push": ("--receive-pack", "--exec"),
    "send-pack": ("--receive-pack", "--exec"),
    "fetch-pack": ("--upload-pack", "--exec"),
    # `--remote=<repo>`: git-upload-archive runs in that repository with its own config (git clears the
    # forced command-line config for it), where `tar.<format>.command` with `tar.<format>.remote = true`
    # is a program; no vet read that config.
    "archive": ("--exec", "--remote"),
    "rebase": ("-x", "--exec"),
    "grep": ("-O", "--open-files-in-pager"),
    "difftool": ("-x", "--extcmd", "-t", "--tool"),
    "mergetool": ("-t", "--tool"),
    "init": ("--template",),
}
_PROGRAM_SUBCOMMANDS = frozenset(
    {
        "filter-branch",
        "bisect",
        "send-email",
        "instaweb",
        "maintenance",
        "daemon",
        "submodule",
        "p4",
        "svn",
        "cvsimport",
        "cvsserver",
        "cvsexportcommit",
        "quiltimport",
        "web--browse",
        "difftool",
        "mergetool",
        "credential",
        "upload-pack",
        "upload-archive",  # serves a request from stdin in the repository it names, with that config
        "for-each-repo",  # runs `git -C <each value of a config key> <its own argv>`: a git line unvetted
        "receive-pack",
        "shell",
        "remote-ext",
        "remote-fd",
        "hook",
        "run-command",
    }
)
# Subcommands known to run no program of their own choosing: what they run is named by config (vetted
# above, or the operator's), by attributes that select a vetted driver, or by an option listed in
# _PROGRAM_OPTIONS. Any other word (an alias, a subcommand added by a later git, a `git-<name>` on the
# PATH) asks: a list of what is known not to run programs, not of what is known to (issue 27 §4).
_PLAIN_SUBCOMMANDS = frozenset(
    {
        "add", "am", "annotate", "apply", "archive", "blame", "branch", "bundle", "cat-file",
        "check-attr", "check-ignore", "check-mailmap", "check-ref-format", "checkout", "checkout-index",
        "cherry", "cherry-pick", "clean", "clone", "column", "commit", "commit-graph", "commit-tree",
        "config", "count-objects", "describe", "diff", "diff-files", "diff-index", "diff-tree",
        "fast-export", "fast-import", "fetch", "fetch-pack", "fmt-merge-msg", "for-each-ref",
        "format-patch", "fsck", "gc", "get-tar-commit-id", "grep", "hash-object", "help", "index-pack",
        "init", "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree", "mailinfo", "mailsplit",
        "merge", "merge-base", "merge-file", "merge-tree", "mktag", "mktree", "multi-pack-index", "mv",
        "name-rev", "notes", "pack-objects", "pack-refs", "patch-id", "prune", "prune-packed", "pull",
        "push", "range-diff", "read-tree", "rebase", "reflog", "remote", "repack", "replace", "request-pull",
        "reset", "restore", "rev-list", "rev-parse", "revert", "rm", "send-pack", "shortlog", "show",
        "show-branch", "show-index", "show-ref", "sparse-checkout", "stash", "status", "stripspace",
        "switch", "symbolic-ref", "tag", "unpack-objects", "update-index", "update-ref", "var",
        "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree", "write-tree",
        # known to run programs, asked by _PROGRAM_SUBCOMMANDS unless their safe words are given
        *("submodule", "bisect"),
    }
)  # fmt: skip
_SAFE_SUBCOMMAND_WORDS = {"submodule": frozenset({"status", "summary"}), "bisect": frozenset({"log", "view"})}


# Options that make git run git inside submodules (the forced config turns every such default off,
# hostenv.GIT_FORCED_CONFIG): a submodule's own config was vetted only as of the re-vet, and a gitlink
# added after it names a repository nobody vetted.
_ENTERS_SUBMODULES = frozenset(
    ("--recurse-submodules", "--ignore-submodules=none", "--ignore-submodules=untracked", "--submodule",
     "--submodule=diff", "--submodule=log")
)  # fmt: skip


def _long(word: str, option: str) -> bool:
    """Whether `word` (`--name` or `--name=value`) is the long `option` as git's parse-options reads it:
    the name whole or any prefix of it (git takes a unique prefix: `--upload-pa=CMD` is `--upload-pack`).
    A prefix another option shares counts too: it asks when git would have refused it, never the reverse."""
    head = word.split("=", 1)[0]
    return option.startswith("--") and head.startswith("--") and len(head) > 2 and option.startswith(head)


def _enters_submodules(word: str) -> bool:
    name, eq, value = word.partition("=")
    if _long(name, "--recurse-submodules"):
        return not eq or value not in ("no", "false", "off")
    if _long(name, "--ignore-submodules"):
        return bool(eq) and value in ("none", "untracked")
    if _long(name, "--submodule"):
        return not eq or value in ("diff", "log")
    return word in _ENTERS_SUBMODULES


def argv_programs(sub: str | None, rest: Sequence[str]) -> list[str]:
    """What in git's own arguments (after the global options) runs a program: the subcommand, or an
    option naming one or entering submodules; empty when nothing does."""
    if sub is None:
        return []
    for word in rest:
        if word == "--":
            break
        if _enters_submodules(word):
            return [f"`{word}`, which runs git inside submodules"]
    if "--" in sub:
        # git's internal helpers (`submodule--helper foreach CMD`, `bisect--helper`, `web--browse`, …) are
        # the machinery behind commands that run programs, each a subcommand of its own: none is for agents.
        return [f"`git {sub}`, an internal helper of git's"]
    if sub in _PROGRAM_SUBCOMMANDS:
        first = next((w for w in rest if not w.startswith("-")), None)
        if first is None or first not in _SAFE_SUBCOMMAND_WORDS.get(sub, frozenset()):
            return [f"`git {sub}`, which runs other programs"]
    if sub not in _PLAIN_SUBCOMMANDS:
        return [f"`git {sub}`, not a subcommand known to run no program"]
    options = _PROGRAM_OPTIONS.get(sub, ())
    for word in rest:
        if word == "--":
            break
        for option in options:
            short = len(option) == 2
            if (
                word == option
                or (not short and _long(word, option))
                # parse-options clusters short options: `-qu CMD` is `-q -u CMD`. The letter anywhere in
                # the cluster counts (inside an earlier option's attached value it asks needlessly).
                or (short and word.startswith("-") and not word.startswith("--") and option[1] in word[1:])
            ):
                return [f"`git {sub} {option}`, which names a program"]
    return []


# Subcommands that start git-receive-pack in the destination repository. For a local destination (a path,
# `file://`) git starts it there itself, with its environment's GIT_CONFIG_COUNT cleared (local_repo_env):
# the destination's own hooks (pre-receive, update, post-receive, …), its config (receive.* filters,
# core.alternateRefsCommand, updateInstead's checkout) run, and no vet read them. Fetching from a local
# path runs git-upload-pack there, which runs no hooks and honours its program keys
# (uploadpack.packObjectsHook) only from protected config, never a repository's own: it runs nothing.
RECEIVE_PACK = frozenset({"push", "send-pack"})
RECEIVE_PACK_TREE = (
    "a local repository `git push` runs receive-pack in: its hooks and config run there, unvetted (an "
    "approval is for this run only)"
)
_PUSH_VALUE_OPTIONS = ("--repo", "--push-option", "--receive-pack", "--exec")
# `git push <name>`: a remote of the repository's config, else the word itself is the URL.
_REMOTE_KEY = re.compile(r"remote\.(.+)\.(url|pushurl)", re.IGNORECASE)
_REWRITE_KEY = re.compile(r"url\.(.+)\.(insteadof|pushinsteadof)", re.IGNORECASE)


def is_local_url(url: str) -> bool:
    """git's transport choice: `file://` and a path are local; `scheme://` and scp-like `host:path` (a
    colon before any slash) are not."""
    if url.lower().startswith("file://"):
        return True
    if "://" in url or "::" in url:
        return False
    colon, slash = url.find(":"), url.find("/")
    return colon < 0 or (0 <= slash < colon)


def _push_destinations(rest: Sequence[str]) -> list[str] | None:
    """The repository words of a push argv (`--repo`, the first operand); None: none given (git takes the
    branch's push remote, remote.pushDefault or origin)."""
    named: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word == "--":
            operands += rest[i:]
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            option = next((o for o in _PUSH_VALUE_OPTIONS if _long(name, o)), None)
            if option is not None and not eq and i < len(rest):
                value, i = rest[i], i + 1
            if option == "--repo":
                named.append(value)
        elif word.startswith("-") and len(word) > 1:
            if word[-1] == "o" and i < len(rest):  # `-o <push-option>`
                i += 1
        else:
            operands.append(word)
    return named + operands[:1] or None


def local_destinations(rest: Sequence[str], cwd: str, pairs: Sequence[tuple[str, str | None]]) -> list[str]:
    """Every local repository a push with this argv would start receive-pack in (RECEIVE_PACK_TREE): the
    argv's repository, or the URLs of the remote it names (every remote's when it names none) among the
    config `pairs`, rewritten by url.*.insteadOf as git would (each rewrite that could apply counts)."""
    remotes: dict[str, list[str]] = {}
    rewrites: list[tuple[str, str]] = []  # (the prefix a URL starts with, what git puts instead)
    for key, value in pairs:
        if value is None:
            continue
        if match := _REMOTE_KEY.fullmatch(key):
            remotes.setdefault(match.group(1), []).append(value)
        elif match := _REWRITE_KEY.fullmatch(key):
            rewrites.append((value, match.group(1)))
    words = _push_destinations(rest)
    urls: list[str] = []
    for word in words if words is not None else list(remotes):
        urls += remotes.get(word, [word])
    urls += [
        base + url[len(prefix) :] for url in list(urls) for prefix, base in rewrites if url.startswith(prefix)
    ]
    out: list[str] = []
    for url in dict.fromkeys(urls):
        if is_local_url(url):
            path = url[len("file://") :] if url.lower().startswith("file://") else url
            where = os.path.realpath(os.path.join(cwd, os.path.expanduser(path)))
            # Nothing there: git fails (a repository made there before the spawn is found by the re-vet).
            if os.path.lexists(where):
                out.append(where)
    return out
