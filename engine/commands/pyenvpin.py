"""A pyenv shim picks its python at the run, from `.python-version` in the cwd or any parent: the version
is read at the decision and pinned into the run's env (PYENV_VERSION, which pyenv reads before any file),
so a `.python-version` the agent writes after the approval changes nothing (fresh round 10 e)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

_SHIM = re.compile(rb'\nexec "(/[^"\n]+)/libexec/pyenv" exec "\$program" "\$@"\n')
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class PyenvError(Exception):
    """The shim's version cannot be pinned (a name pyenv does not install): the run is refused."""


def shim_root(head: bytes) -> str | None:
    """PYENV_ROOT of a pyenv shim (its script names `<root>/libexec/pyenv`), None for any other file."""
    match = _SHIM.search(head)
    return match.group(1).decode("utf-8", "surrogateescape") if match else None


def pyenv_version(shim: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """The version to pin for a run through the file `shim`, None when it is no pyenv shim."""
    try:
        with open(shim, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    root = shim_root(head)
    return pinned_version(root, cwd, env) if root is not None else None


def _version_file(cwd: str, root: str) -> str:
    here = os.path.abspath(cwd)
    while True:
        candidate = os.path.join(here, ".python-version")
        if os.path.isfile(candidate):
            return candidate
        if here == "/":
            return os.path.join(root, "version")
        here = os.path.dirname(here)


def pinned_version(root: str, cwd: str, env: Mapping[str, str]) -> str:
    """The PYENV_VERSION the shim would pick now (pyenv's order: the env, `.python-version` up from the
    cwd, `<root>/version`, else system), each name one pyenv installed under `<root>/versions`."""
    value = env.get("PYENV_VERSION", "")
    if not value:
        path = _version_file(cwd, root)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(4096)
        except OSError:
            text = ""
        words = [w for line in text.splitlines() if not line.lstrip().startswith("#") for w in line.split()]
        value = ":".join(words) or "system"
    for name in value.split(":"):
        if name == "system":
            continue
        if not _VERSION.fullmatch(name) or not os.path.isdir(os.path.join(root, "versions", name)):
            raise PyenvError(f"the pyenv shim would pick version {name!r}, which pyenv has not installed")
    return value
