"""The shapes of content binding: one file a decided command runs, and all of them with their proof."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.commands.allowlist import AllowlistResult, render_bound
from engine.commands.analysis import CommandAnalysis


@dataclass(frozen=True)
class ContentItem:
    """One file the command runs or reads as code, as it was when the command was decided."""

    role: str  # executable | interpreter | script | wrapper | loaded (a preload) | file (named, unparsed)
    path: str  # as shown: the pinned path or the operand, made absolute
    real: str  # the file itself (symlinks resolved): what is opened and hashed
    sha256: str | None  # None: the file did not exist (it must not appear before the run)
    size: int
    writable: bool  # the agent (or anyone but root) can change it: it runs from a sealed copy
    where: tuple[int, ...] = ()  # the segment (indexes down nested `sh -c` payloads)
    argv_index: int = -1  # the word it replaces in that segment; -1 = none
    kind: str = ""  # for an executable: elf | shebang | text (no `#!`: the shell runs it)
    shebang: tuple[str, ...] = ()  # interpreter words from the `#!` line (env-style: the resolved path)
    parent: str | None = None  # an interpreter's script (real path)
    reader: str = ""  # a script operand's reader family (sh | python): how its copy keeps its name
    word: str = ""  # a script operand as the command wrote it (its $0 / sys.argv[0])
    search: str = ""  # an absent bare-name program: the PATH it must still be missing from
    # A system-owned file reached through a link the agent can re-point (`./myls -> /usr/bin/ls`): it is
    # `writable` (an approval binds its bytes, never the link's name), and it runs by its real path.
    linked: bool = False
    skip_first: bool = False  # a Python script run with `-x`: its first line never runs (read_words)

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "path": self.path,
            "sha256": self.sha256,
            "size": self.size,
            "agentWritable": self.writable,
        }


# What the gateway read to bind a command is read with its own rights, not the asker's: an agent's
# `policy.check sh ~/.config/bank-pin` must not hand back that 0600 file's sha256 (a short secret is
# recovered offline) nor its size. What an agent is shown of a binding is only what it named itself.
# The row keeps its shape ("sha256"/"size" null) and says so: `withheld`, not "the file did not exist".
AGENT_FIELDS = ("role", "path", "agentWritable")


def agent_digests(rows: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """A binding's rows (ContentItem.to_json) as an agent may see them: which files, never their bytes'
    digest or size (the operator sees those, in its own views)."""
    return [
        {**{k: row.get(k) for k in AGENT_FIELDS}, "sha256": None, "size": None, "withheld": True}
        for row in rows or ()
        if isinstance(row, Mapping)
    ]


def agent_view(view: Mapping[str, Any]) -> dict[str, Any]:
    """A decision's or an approval's view (it may hold the decision under "decision") as an agent may see
    it: every `contentDigests` in it through agent_digests."""
    out = dict(view)
    if "contentDigests" in out:
        out["contentDigests"] = agent_digests(out["contentDigests"])
    inner = out.get("decision")
    if isinstance(inner, Mapping):
        out["decision"] = agent_view(inner)
    return out


@dataclass(frozen=True)
class ContentBinding:
    """Every file of one decided command, plus what is needed to re-render it over verified copies."""

    items: tuple[ContentItem, ...]
    analysis: CommandAnalysis
    result: AllowlistResult
    problems: tuple[str, ...] = ()  # what could not be bound (shown to the approver)
    # A program read from stdin or found on a search path (`bash -s`, `python3 -m x`): no file holds it,
    # so no approval can be bound to it and allow-always is not offered (issue 27 §5).
    unbound: bool = False
    notes: tuple[str, ...] = ()  # what the run also loads, unbound (imports from agent-writable files)
    # An interpreter option no grammar covers (or a preload node searches for): what it loads is not a
    # file the text names, so allow-always is not offered either; `notes` says why.
    opaque: bool = False
    # Issue 27 §5, the one rule for allow-always: it is offered only when the binder PROVES that every code
    # source of the command is a file it bound (`proofs`, below). The default is "not proven": a binding
    # built without that proof offers allow-once only. `unproven` says why, in the ask.
    proven: bool = False
    unproven: tuple[str, ...] = ()
    # Issue 27 §5, no allow-once without binding: an unparsed text whose names the binder cannot pin (a
    # `cd` it cannot follow, a word a shell expands) would run whatever those names reach then. Not empty:
    # why the run is refused at the spawn (verified.verify), whatever the operator decided.
    refuse: str = ""
    # Env the run must start with, read at the decision (a pyenv shim's PYENV_VERSION: pyenvpin).
    env: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> list[dict[str, Any]]:
        return [item.to_json() for item in self.items]

    def render(self, words: Mapping[tuple[tuple[int, ...], int], Sequence[str]]) -> str | None:
        """The pinned rendering with `words` in place of the bound argv words."""
        return render_bound(self.analysis, self.result, words)

    def durable_text(self) -> str:
        """What an exact-command durable approval binds besides the text: agent-writable content."""
        return "\n".join(f"{i.real}={i.sha256}" for i in self.items if i.writable)

    @property
    def writable_paths(self) -> frozenset[str]:
        # A linked item's real file is root's: only the link's name is the agent's to change.
        return frozenset(
            p for i in self.items if i.writable for p in ((i.path,) if i.linked else (i.path, i.real))
        )

    def key(self) -> str:
        """One string for the approval's identity: two asks of other content never coalesce."""
        text = "\n".join(f"{i.role}:{i.real}={i.sha256}" for i in self.items)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32] if text else ""
