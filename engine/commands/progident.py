"""What a program is, by the name it is invoked as as well as the file it resolves to: a multi-call program
(git, rustup) chooses what it does by its argv[0], and every identity a command has is vetted (issue 27 §4).

The spawn runs a linked program under the name it was typed by (engine.commands.verified), so argv[0]'s
name is what the program sees. Where the names disagree, the stricter reading holds: each TREE_PROGRAMS
identity is vetted, never the first alone.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import PurePosixPath

from engine.commands.interpreters import name_of
from engine.commands.wrappers import names

__all__ = [
    "RUSTUP_PROXIES",
    "TOOLCHAIN_DIR",
    "TOOLCHAIN_FILES",
    "git_argv",
    "identities",
    "proxied_tool",
    "toolchain_dirs",
]

# rustup's proxies (rustup src/lib.rs TOOLS and DUP_TOOLS): links to the rustup binary that, run under one
# of these names (the file stem of argv[0]), pick a toolchain from RUSTUP_TOOLCHAIN, a leading `+name`, the
# settings' directory overrides or a rust-toolchain(.toml) in the process's cwd or any ancestor, and then
# run that toolchain's program of the same name with the rest of the argv.
RUSTUP_PROXIES = names(
    "cargo rustc rustdoc rust-gdb rust-gdbgui rust-lldb rls cargo-clippy clippy-driver cargo-miri rustfmt "
    "cargo-fmt rust-analyzer"
)


def _stem(word: str) -> str:
    """argv[0]'s name as a program reads it: the basename (rustup takes the file stem; on Linux git's
    strip_extension strips nothing)."""
    return os.path.basename(word)


def git_argv(argv: Sequence[str]) -> list[str]:
    """The argv git acts on, for a command whose program is git: git run as `git-<sub>` (git-upload-archive,
    git-upload-pack, git-receive-pack are links to it) runs the builtin <sub> with its whole argv as that
    subcommand's (git.c: "git-xxxx" is the same as "git xxxx"), never as git's global options."""
    name = _stem(argv[0]) if argv else ""
    if name.startswith("git-") and len(name) > len("git-"):
        return ["git", name[len("git-") :], *argv[1:]]
    return list(argv)


def proxied_tool(argv: Sequence[str], paths: Sequence[str | None]) -> str | None:
    """The tool a rustup proxy runs: argv[0]'s name when it is one of RUSTUP_PROXIES and the program it
    resolves to is rustup; else None."""
    if not argv or not any(p and name_of(p) == "rustup" for p in paths):
        return None
    stem = PurePosixPath(_stem(argv[0])).stem  # rustup's process.name(): Path::file_stem
    return stem if stem in RUSTUP_PROXIES else None


def identities(argv: Sequence[str], paths: Sequence[str | None], known: Sequence[str]) -> list[str]:
    """Every name in `known` this command's program goes by, in order: argv[0]'s, then each path it
    resolves to (`~/.cargo/bin/cargo` is cargo and rustup; a system link `gmake` → make is both)."""
    if not argv:
        return []
    names = [name_of(argv[0]), *(name_of(p) for p in paths if p)]
    return [n for n in dict.fromkeys(names) if n in known]


TOOLCHAIN_FILES = ("rust-toolchain", "rust-toolchain.toml")
TOOLCHAIN_DIR = "a toolchain whose programs rustup runs (its bin/ is no file bound by its bytes)"
_TOOLCHAIN_KEYS = frozenset({"channel", "components", "targets", "profile"})
_CHANNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")  # stable, 1.80.0, nightly-2024-01-01: never a path


def toolchain_dirs(path: str, data: bytes) -> list[str]:
    """The directories a rust-toolchain(.toml) of these bytes makes rustup run programs from: a `path`
    toolchain (relative to the file's directory), or — for a file not understood here — the file's own
    directory (what it names is not known). Empty for a file that names an installed toolchain only
    (`channel = "stable"`, components, targets, a profile: rustup's own downloads)."""
    here = os.path.dirname(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [here]
    line = text.strip()
    if (
        os.path.basename(path) == "rust-toolchain"
        and "\n" not in line
        and "=" not in line
        and "[" not in line
    ):
        return [] if _CHANNEL.match(line) else [here]  # the legacy form: one channel name
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return [here]
    toolchain = table.get("toolchain")
    if set(table) != {"toolchain"} or not isinstance(toolchain, dict):
        return [here]
    if isinstance(toolchain.get("path"), str):
        return [os.path.normpath(os.path.join(here, toolchain["path"]))]
    channel = toolchain.get("channel")
    if set(toolchain) - _TOOLCHAIN_KEYS or (channel is not None and not _CHANNEL.match(str(channel))):
        return [here]
    return []
