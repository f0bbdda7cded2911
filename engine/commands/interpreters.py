"""Shells, interpreters and command runners: programs whose arguments or input can be any code at all."""

from __future__ import annotations

import os
import re
from functools import lru_cache

from engine.commands.wrappers import BLOCKED_WRAPPERS, names

# Shells, interpreters and command runners: "allow always" never persists these, since a path entry
# for them would allow any code at all.
INTERPRETERS = (
    names(
        "sh bash rbash dash ash zsh ksh mksh lksh oksh pdksh yash fish csh tcsh rc es posh ion nu xonsh "
        "elvish busybox toybox python pypy "
        "node nodejs bun deno perl ruby irb php lua luajit tclsh wish expect awk gawk mawk nawk sed gsed "
        "osascript pwsh powershell cmd wscript cscript r rscript julia guile racket sbcl clisp ocaml erl "
        "elixir iex swift java jshell groovy scala env xargs parallel watch find make nice nohup time "
        "timeout stdbuf npx uvx pipx jq gojq jaq "
    )
    | BLOCKED_WRAPPERS
)
# python3.11, node18, perl5.36.0, ruby3.1, lua5.4, python3.7m, python3.11-dbg: the name before its version.
_VERSION_SUFFIX = re.compile(r"^(.+?)(?:[-_]?[\d.]*|[-_]?\d[\d.]*(?:m|dm|-dbg|-dm))(\.exe)?$")
# Debian's multiarch launchers (`perl5.36-x86_64-linux-gnu`: its own binary, not a link): the same program.
_MULTIARCH = re.compile(r"-[a-z0-9_]+-linux-gnu[a-z0-9_]*$")


@lru_cache(maxsize=1024)
def name_of(path: str) -> str:
    """The program name without directory, version suffix or .exe: `python3.11` → `python`."""
    base = _MULTIARCH.sub("", os.path.basename(path).lower())
    match = _VERSION_SUFFIX.match(base)
    return match.group(1) if match else base


def is_interpreter(path_or_name: str) -> bool:
    """Shells, language interpreters and command runners (python3.11 and node18 included)."""
    base = os.path.basename(path_or_name).lower()
    return base in INTERPRETERS or name_of(base) in INTERPRETERS


# Programs that can start other programs or run code given in arguments, config or keystrokes (pagers and
# editors have shell escapes; git runs aliases, hooks and filters; tar, find, sort, zip run helpers).
# "Allow always" never saves such a program's path: it saves the exact command instead (issue 9).
RUNNERS = INTERPRETERS | names(
    "git tar find sort vim vi view rview ex nvim vimdiff emacs nano pico ed less more most man pg xargs make "
    "gmake cmake ninja ssh scp sftp rsync zip unzip docker podman kubectl systemctl journalctl npm npx yarn "
    "pnpm pip pip3 cargo go gcc cc g++ clang tmux screen crontab at batch flock script dpkg apt apt-get "
    "mail mutt ftp sqlite3 psql mysql gpg openssl curl wget busybox su sudo doas "
    # split --filter=CMD and rlwrap CMD run a shell command of the caller's choosing.
    "split gsplit rlwrap "
    # Debian's alternatives and editor builds (each a vim or a nano with its shell escape; sensible-* run
    # $EDITOR/$PAGER/$BROWSER), and programs that run the command or directory they are given.
    "editor pager sensible-editor sensible-pager sensible-browser select-editor vim.basic vim.tiny vim.nox "
    "vim.gtk vim.gtk3 vim.athena gvim evim rvim nvi elvis jed joe mcedit micro "
    "ssh-agent run-parts fakeroot fakeroot-sysv fakeroot-tcp fakechroot dbus-run-session dbus-launch perf "
    "strace ltrace gdb valgrind chroot unshare nsenter setsid setpriv runuser chrt ionice taskset "
    "c++ clang++ cpp cc1 collect2 ld "
    # rustup and its proxies (engine.commands.progident): rust-gdb/rust-lldb wrap a debugger, rustc runs
    # a linker and proc macros, rustup runs any command (`rustup run`).
    "rustup rustc rustdoc rust-gdb rust-gdbgui rust-lldb lldb clippy-driver cargo-clippy cargo-miri"
)
# A cross or versioned compiler driver (`x86_64-linux-gnu-gcc-12`, `aarch64-linux-gnu-g++`): `-wrapper
# CMD`, `-B dir`, `-fplugin=` and spec files run programs of the caller's choosing, as gcc's do.
_COMPILER_DRIVERS = frozenset(
    {"gcc", "g++", "cc", "c++", "cpp", "clang", "clang++", "gfortran", "gccgo", "ld"}
)


def runs_others(path_or_name: str) -> bool:
    """Whether a program can run arbitrary other programs or code (see RUNNERS)."""
    base = os.path.basename(path_or_name).lower()
    if base in RUNNERS or name_of(base) in RUNNERS:
        return True
    return name_of(base).rsplit("-", 1)[-1] in _COMPILER_DRIVERS
