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
        "sh bash dash ash zsh ksh mksh pdksh yash fish csh tcsh rc es posh busybox toybox python pypy "
        "node nodejs bun deno perl ruby irb php lua luajit tclsh wish expect awk gawk mawk nawk sed gsed "
        "osascript pwsh powershell cmd wscript cscript r rscript julia guile racket sbcl clisp ocaml erl "
        "elixir iex swift java jshell groovy scala env xargs parallel watch find make nice nohup time "
        "timeout stdbuf npx uvx pipx "
    )
    | BLOCKED_WRAPPERS
)
_VERSION_SUFFIX = re.compile(r"^(.+?)[-_]?[\d.]*(\.exe)?$")


@lru_cache(maxsize=1024)
def name_of(path: str) -> str:
    """The program name without directory, version suffix or .exe: `python3.11` → `python`."""
    base = os.path.basename(path).lower()
    match = _VERSION_SUFFIX.match(base)
    return match.group(1) if match else base


def is_interpreter(path_or_name: str) -> bool:
    """Shells, language interpreters and command runners (python3.11 and node18 included)."""
    base = os.path.basename(path_or_name).lower()
    return base in INTERPRETERS or name_of(base) in INTERPRETERS
