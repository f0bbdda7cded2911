"""make's command-line variables are env the agent gives every program make runs: make exports each one
into its recipes' environment and lets it override the makefile's variables and the built-in ones its
built-in rules run (CC, AS, LEX, RM, …; with no makefile at all `make foo` still runs `$(CC) … foo.c`).
So each is judged as the exec's `env` param is (issue 27 §3, fresh round 10 f): only a key on the inert
list, with a value of its kind, rides along unasked; any other makes the command ask."""

from __future__ import annotations

from collections.abc import Sequence

from engine.commands.hostenv import foreign_env_keys
from engine.commands.makefiles import parse_make
from engine.commands.treecode import TreeVet, tree_program

__all__ = ["foreign", "make_env", "warning"]


def make_env(tree: TreeVet | None) -> dict[str, str]:
    """Every command-line assignment of every make in the command (`sh -c` payloads too), as env: the
    last one of a name wins, as in make."""
    out: dict[str, str] = {}
    for argv, paths in tree.commands if tree is not None else ():
        if tree_program(argv, paths) in ("make", "gmake"):
            out.update(parse_make(argv).assignments)
    return out


def foreign(tree: TreeVet | None, inert: Sequence[str] = ()) -> list[str]:
    """The names of make command-line variables that are not inert env (hostenv.foreign_env_keys, with the
    operator's `tools.exec.inertEnv`): each makes a command that would run unasked ask instead."""
    return foreign_env_keys(make_env(tree), inert)


def warning(names: Sequence[str]) -> str:
    return (
        f"Warning: make's command line sets {', '.join(names)}: make exports a command-line variable into "
        "every recipe's environment and runs it where a rule names it (CC in its built-in rules), and it "
        "is not on the inert env list (tools.exec.inertEnv), so the command cannot run unasked."
    )
