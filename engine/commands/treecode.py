"""Host programs never run code from a tree the agent can write unasked: name the file each would run
(a Makefile, package.json scripts, build.rs, a repository's config, …) so the command asks instead.

This module binds an approval to what was found (binding) and vets it again before the spawn (TreeVet);
what a command reads is found in engine.commands.treefiles and judged in engine.commands.treefindings, whose
names the callers take from here."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.commands import gitvet, pipconfig, priorwrites, procpaths
from engine.commands.allowlist import AllowlistResult
from engine.commands.analysis import CommandAnalysis
from engine.commands.gitvet import Finding
from engine.commands.regular import Unreadable, read_regular
from engine.commands.treefiles import ANCHOR, OPERANDS_LOOKED_AT, TREE_PROGRAMS
from engine.commands.treefindings import (
    BUILTIN_RULES,
    MANIFEST_TREE,
    PAST_THE_CAP,
    PIP_LINE,
    PIP_PROJECT,
    RECIPE_TREE,
    SCRIPT_TREE,
    UNMODELLED,
    WRITTEN_FIRST,
    agent_writable,
    findings_for,
    found_reason,
    sandbox_roots,
    tree_program,
    written_first,
)

__all__ = [
    "ANCHOR",
    "BUILTIN_RULES",
    "MANIFEST_TREE",
    "OPERANDS_LOOKED_AT",
    "PAST_THE_CAP",
    "PIP_LINE",
    "PIP_PROJECT",
    "RECIPE_TREE",
    "TREE_PROGRAMS",
    "UNMODELLED",
    "UNREADABLE",
    "WRITTEN_FIRST",
    "Finding",
    "TreeChanged",
    "TreeVet",
    "agent_writable",
    "binding",
    "findings_for",
    "found_reason",
    "sandbox_roots",
    "tree_program",
    "tree_vet",
    "unbound_findings",
]

# Findings whose code is not in the named file's bytes (a project, a push destination's hooks): a file
# there (a gitfile, an sdist) binds nothing of it, so they are never bound, whatever is at the path.
_NO_BYTES = frozenset(
    {PIP_PROJECT, gitvet.RECEIVE_PACK_TREE, gitvet.LEGACY_REMOTES, PAST_THE_CAP, WRITTEN_FIRST}
    | {procpaths.THROUGH_PROCESS}
)
# What git runs when its config or command line holds what exechost does not know to be inert
# (`-c alias.z='!sh t.sh'`, a filter naming ./clean.sh, an unknown option): programs in no bound file.
GIT_NAMED = "the programs git's config or command line may name"
A_TREE, UNREADABLE = "a tree", "unreadable"  # binding() of a finding no bytes hold
SCRIPTS_TREE = "a script's tree"  # binding() of an interpreter's tree: its script is bound by content


def binding(found: Sequence[Finding], data: dict[str, bytes] | None = None) -> str:
    """The content an approval of these findings holds for: sha256 of every file named. A Makefile or a
    repository config changed after "allow always" asks again. With `data`, each file is read once into
    it (or taken from it: the bytes git parsed), so the bytes bound are the bytes a pinned run sees."""
    if not found:
        return ""
    lines = []
    for path in sorted({f.path for f in found if os.path.isabs(f.path)}):
        held = data.get(path) if data is not None else None
        if any(
            f.what in _NO_BYTES or f.what.startswith((PIP_LINE, pipconfig.CONFIG))
            for f in found
            if f.path == path
        ):
            lines.append(f"tree:{path}={A_TREE}")  # what it names is not in its bytes: never saved
            continue
        if held is None and os.path.isdir(path):
            # An unmodelled program's tree: nothing in it is bound. An interpreter's is named apart: its
            # program is a file the content binder binds (unbound_findings leaves it out).
            scripts = all(f.what == SCRIPT_TREE for f in found if f.path == path)
            lines.append(f"tree:{path}={SCRIPTS_TREE if scripts else A_TREE}")
            continue
        if held is None:
            try:
                held = read_regular(path, gitvet.CONFIG_READ_CAP)
            except Unreadable:
                # A FIFO is not read (it never hangs a vet); a file past the cap is not bound by a prefix
                # (what follows it would be unbound): both leave the finding unbound (unbound_findings()).
                lines.append(f"tree:{path}={UNREADABLE}")
                continue
            if data is not None:
                data[path] = held
        lines.append(f"tree:{path}={hashlib.sha256(held).hexdigest()}")
    lines += sorted({f"tree-arg:{f.what}" for f in found if not os.path.isabs(f.path)})
    if any(f.program == "git" for f in found):
        # What a git key or option not known inert names (an alias's `!sh t.sh`, a filter's script) is in
        # no bound file's bytes: unbound, so the approval is for this run only. The files' own digests
        # stay above: the spawn's re-vet compares them.
        lines.append(f"tree:{GIT_NAMED}={A_TREE}")
    return "\n".join(lines)


def unbound_findings(text: str) -> list[str]:
    """The findings of a binding() that no bytes hold (a tree an unmodelled program reads, a directory,
    a file that cannot be read or is past the cap): an approval of them would hold whatever is there at
    the next run, so it cannot be saved (allow-always is not offered, and no saved entry matches)."""
    out = []
    for line in text.splitlines():
        if line.startswith("tree:"):
            path, _, held = line[len("tree:") :].rpartition("=")
            if held in (A_TREE, UNREADABLE):
                out.append(path)
    return out


class TreeChanged(Exception):
    """What a host tool would read is no longer what was decided on."""


@dataclass(frozen=True)
class TreeVet:
    """What a decision vetted, kept so the spawn can vet it again: an approval given while the tree held
    one thing never runs what an agent wrote there afterwards (a filter added while the ask waited)."""

    commands: tuple[tuple[tuple[str, ...], tuple[str | None, ...]], ...]  # (argv, resolved paths)
    cwd: str
    roots: tuple[str, ...]
    binding: str  # binding() of the findings shown
    shown: tuple[str, ...] = ()  # their warnings, to name what is new
    found: tuple[Finding, ...] = ()  # what the decision was made on (the same read as `binding`)
    real_cwd: str = ""  # the cwd's real path when decided: what an anchored re-vet names its files by
    tree_safe: tuple[str, ...] = ()  # the operator's additions to treesafe.TREE_SAFE
    # Where each command sits in the rendering (engine.commands.rendering's segment path), and what was
    # rendered: the spawn renders a make again with sealed copies of its makefiles (commands.pinned).
    wheres: tuple[tuple[int, ...], ...] = ()
    analysis: CommandAnalysis | None = field(default=None, compare=False, repr=False)
    result: AllowlistResult | None = field(default=None, compare=False, repr=False)
    # sha256 over every file the vet read (each repository config, inert or not) and the binding: part of
    # an ask's identity, so asks decided on other bytes (another repository's config) never coalesce.
    inputs: str = ""
    # Per command: another that may write the tree runs before it or beside it (engine.commands.priorwrites).
    after_write: tuple[bool, ...] = ()

    def findings(self, record: gitvet.Record | None = None, cwd: str | None = None) -> list[Finding]:
        """Every command's findings (`sh -c` payloads included), as of now."""
        now: list[Finding] = []
        for i, (argv, paths) in enumerate(self.commands):
            now += findings_for(argv, paths, cwd or self.cwd, self.roots, record, self.tree_safe)
            if i < len(self.after_write) and self.after_write[i]:
                now += written_first(argv, paths, cwd or self.cwd)
        return list(dict.fromkeys(now))

    @property
    def vets_nothing(self) -> bool:
        """No command here is one findings_for reads files for: pin() reads and binds nothing, whatever the
        tree holds now (an unmodelled program's finding is its tree, which binds no bytes)."""
        return all(tree_program(argv, paths) is None for argv, paths in self.commands)

    def pin(self, anchor: str | None = None) -> gitvet.Record:
        """Vet again, keeping every byte read: the record the run is pinned to (engine.commands.pinned).
        Raises TreeChanged when those bytes are not what was decided on. With `anchor` (ANCHOR + the fd
        of the directory the run starts in, checked to be the decided cwd), the cwd's files are read
        through that fd and named, in the record and the binding, by the decided cwd's path."""
        record = gitvet.Record()
        now = self.findings(record, anchor)
        text = binding(now, record.data)
        if anchor is not None and self.real_cwd:
            here, real = anchor.rstrip("/") + "/", self.real_cwd.rstrip("/") + "/"

            def move(path: str) -> str:
                if path == here.rstrip("/"):
                    return real.rstrip("/") or "/"
                return real + path[len(here) :] if path.startswith(here) else path

            now = [Finding(f.program, move(f.path), f.what) for f in now]
            record.data = {move(k): v for k, v in record.data.items()}
            text = binding(now, dict(record.data))
        if text != self.binding:
            new = [f for f in now if f.warning() not in self.shown]
            what = f"{new[0].path} now defines {new[0].what}" if new else "a file it would run changed"
            raise TreeChanged(f"the tree changed since the decision ({what})")
        return record

    def problem(self) -> str | None:
        """None when the tree still holds exactly what was decided on; else what changed."""
        try:
            self.pin()
        except TreeChanged as exc:
            return str(exc)
        return None


def tree_vet(
    analysis: CommandAnalysis,
    result: AllowlistResult,
    cwd: str,
    roots: Sequence[str],
    tree_safe: Sequence[str] = (),
) -> TreeVet:
    """Findings for the decision, plus what re-vets them just before the spawn."""
    commands: list[tuple[tuple[str, ...], tuple[str | None, ...]]] = []
    wheres: list[tuple[int, ...]] = []
    flow: list[tuple[tuple[str, ...], bool]] = []  # every simple command in run order (priorwrites)
    at: list[int] = []  # each command's place in `flow`

    def walk(an: CommandAnalysis, res: AllowlistResult, where: tuple[int, ...], piped: bool) -> None:
        piped = piped or "|" in an.operators
        for index, (segment, match) in enumerate(zip(an.segments, res.segments, strict=False)):
            if segment.inner is not None:
                if match.inner is not None:
                    walk(segment.inner, match.inner, (*where, index), piped)
                else:
                    flow.append((tuple(segment.argv), piped))
                continue
            at.append(len(flow))
            flow.append((tuple(segment.argv), piped))
            commands.append((tuple(segment.argv), (match.resolved_path, match.named_path)))
            wheres.append((*where, index))

    if analysis.ok:
        walk(analysis, result, (), False)
    written = priorwrites.after_writes(flow)
    after = tuple(written[i] for i in at)
    vet = TreeVet(tuple(commands), cwd, tuple(roots), "", tree_safe=tuple(tree_safe), after_write=after)
    # One read: the findings decided on and the bytes bound are the same bytes (two reads let a racer
    # show an inert config to the decision and bind the approval to the one with a filter).
    record = gitvet.Record()
    found = vet.findings(record)
    shown = tuple(f.warning() for f in found)
    text = binding(found, record.data)
    inputs = hashlib.sha256(text.encode("utf-8", "surrogateescape"))
    for path in sorted(record.data):
        inputs.update(
            f"\n{path}={hashlib.sha256(record.data[path]).hexdigest()}".encode("utf-8", "surrogateescape")
        )
    return TreeVet(
        vet.commands,
        cwd,
        vet.roots,
        text,
        shown,
        tuple(found),
        os.path.realpath(cwd),
        vet.tree_safe,
        tuple(wheres),
        analysis,
        result,
        inputs.hexdigest(),
        after,
    )
