"""What git's own arguments make it run: anything outside gitopts' allowlist of subcommands and their inert
options, and the local repositories a push starts receive-pack in (issue 27 §4)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from urllib.parse import unquote

from engine.commands import gitopts

# Schemes git speaks itself; any other `scheme://` or `<helper>::` runs a `git-remote-<helper>` program.
URL_SCHEMES = frozenset({"http", "https", "ssh", "git", "file", "ftp", "ftps", "git+ssh", "ssh+git"})
# git's is_urlschemechar: a scheme may start with a digit too (`3x://` runs git-remote-3x).
_SCHEME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9+.-]*)://")

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
    """What in git's own arguments (after the global options) may run a program: the subcommand or an
    option not in gitopts' allowlist, an option entering submodules, a URL operand naming a transport
    helper; empty when every word is known to run nothing."""
    if sub is None:
        return []
    for word in rest:
        if word in ("--", "--end-of-options"):
            break
        if _enters_submodules(word):
            return [f"`{word}`, which runs git inside submodules"]
    found = gitopts.problems(sub, rest)
    if not found and sub in gitopts.REMOTE_SUBCOMMANDS:
        # Every operand, those after `--` included: pull hands its repository operand to fetch with no
        # `--` before it, where `--upload-pack=CMD` is the option again (a leading `-` asks).
        cut = next((i for i, w in enumerate(rest) if w in ("--", "--end-of-options")), len(rest))
        operands = [w for w in rest[:cut] if not w.startswith("-")] + list(rest[cut + 1 :])
        found = [f"`{w}`: {p}" for w in operands if (p := url_problem(w))][:1]
    return found


def url_problem(url: str) -> str | None:
    """A URL git fetches with its own transports; `<helper>::` and unknown `scheme://` run a helper."""
    if "::" in url:
        return "a transport helper URL (git would run git-remote-<helper>)"
    match = _SCHEME.match(url)
    if match and match.group(1).lower() not in URL_SCHEMES:
        return f"the {match.group(1)}:// transport runs a git-remote-{match.group(1)} helper"
    if url.startswith("-"):
        return "a URL starting with '-'"
    return None


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


_REPO_SUFFIXES = ("/.git", "", ".git/.git", ".git")


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
            path = url
            if url.lower().startswith("file://"):
                # git url-decodes a `scheme://` URL before it splits it: `file:///x/des%74` is /x/dest.
                path = unquote(url[len("file://") :])
                path = path if path.startswith("/") else "/" + path.partition("/")[2]  # file://host/p
            where = os.path.realpath(os.path.join(cwd, os.path.expanduser(path)))
            # receive-pack's enter_repo tries these suffixes in turn (`git push /w/dest` enters dest.git).
            # Nothing at any: git fails (a repository made there before the spawn is found by the re-vet).
            base = where.rstrip("/") or "/"
            out += [base + s for s in _REPO_SUFFIXES if os.path.lexists(base + s)]
    return list(dict.fromkeys(out))
