"""What one host command would run from a tree the agent can write (findings_for): its tree files, what
its argv names and its grammar, each judged by who may change it; what is read is found by
engine.commands.treefiles, and what an approval binds is engine.commands.treecode's."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from engine.commands import gitvet, pipconfig, procpaths, progident
from engine.commands.filetrust import system_owned
from engine.commands.gitvet import Finding
from engine.commands.interpreters import name_of
from engine.commands.makefiles import not_regular, parse_make
from engine.commands.pipargs import BUILDS, local_path, parse_pip, read_operands, read_requirements
from engine.commands.regular import Unreadable, read_regular
from engine.commands.scriptfiles import script_operand
from engine.commands.toolargv import argv_problem
from engine.commands.treefiles import (
    ANCHOR,
    OPERANDS_LOOKED_AT,
    TREE_PROGRAMS,
    argv_code,
    make_value_paths,
    tree_dirs,
    tree_files,
    unmodelled_trees,
    work_dirs,
)
from engine.commands.treesafe import is_tree_safe
from engine.commands.which import real_path
from engine.statefs import state_dir

# What an unmodelled program (on neither list) is said to take from a writable tree: exechost cannot know.
UNMODELLED = (
    "code it may load from there (config naming plugins, conftest.py, hooks, …: it is not a program "
    "known to take none, tools.exec.treeSafe)"
)
PIP_SOURCE = "packages pip may build (an sdist's setup script runs)"
# A project a requirements file names (`./pkg`, `-e ./sub`, `file:`): pip builds it, and its backend runs
# whatever that tree holds; nothing there is bound, so an approval is for this run only (issue 27 §4).
PIP_PROJECT = "a project pip builds (its backend runs and imports whatever that tree holds)"
PIP_LINE = "a requirements line exechost does not model"
# A command with more words than are read: what the rest names (a script, CC=./cc, a tree) is not known,
# so the command asks rather than being decided on a prefix, and binds no bytes (never saved).
PAST_THE_CAP = f"what its argv words past the first {OPERANDS_LOOKED_AT} name (they are not examined)"
# A tree program after (or piped beside) a command that may write: the files it reads then are not the ones
# vetted (`git checkout other -- package.json && npm test`), so a human decides it, this run only.
WRITTEN_FIRST = "files an earlier command of this text may write before it reads them (not what was vetted)"
# An interpreter's tree: its program file is bound by engine.commands.content, not here.
SCRIPT_TREE = "code its script may load from there (the script itself is bound; what it imports is not)"
# A build tool's recipes run files of the tree besides the ones it reads (`sh run.sh`, `./configure`, the
# test binary it builds): what they are is make code, not modelled, so nothing binds them and an approval
# of the tool in a tree the agent can write is for this run only (issue 27 §4).
RECIPE_TREE = (
    "files its recipes run (`sh run.sh`, ./configure, what it builds): they are not bound to their bytes, "
    "so an approval is for this run only"
)
# Every other tree program's manifest names code to run too, beyond the manifest's own bytes: a script
# (`"test": "node t.js"`), an include()d .cmake, a path dependency's build.rs, `build = "x.rs"`, the
# tree's own sources (`cargo test`, `go run`). Those are not modelled, so nothing binds them: like make's
# recipes, an approval of the tool in a tree whose files the agent can add or rewrite is for this run
# only (issue 27 §5: what was approved is what runs).
MANIFEST_TREE = (
    "files its manifest or script names to run (`node t.js`, an include()d file, build.rs, the sources "
    "it builds and runs): they are not bound to their bytes, so an approval is for this run only"
)
# With no makefile, make's built-in rules run programs (cc, as, lex, yacc, tex, makeinfo, …) over the
# tree's files: not known to take no code from their tree (treesafe), so they ask there as `cc foo.c` does.
BUILTIN_RULES = (
    "files its built-in rules run programs over (no makefile: `make foo` runs `cc … foo.c`, and cc, as, "
    "lex, yacc, tex are not known to take no code from their tree): an approval is for this run only"
)
NOT_A_FILE = "a makefile that is not a regular file (stdin, a device, a fifo): nothing there can be vetted"
MAKE_VALUE_FILE = "a file a command-line variable names (a recipe or built-in rule may run it: CC=./cc)"


def agent_writable(path: str, sandbox_roots: Sequence[str]) -> bool:
    """A file the agent can change: inside a sandbox workspace (a container may own it), or changeable —
    the file or its directory — by the gateway's own user, whom every host command runs as (_changeable).
    A file another local user owns counts too: other users are as hostile as the agent
    (`/tmp/.cargo/config.toml`)."""
    real = os.path.realpath(path)
    for root in sandbox_roots:
        if root and (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
            return True
    return _changeable(real) or _changeable(os.path.dirname(real))


def _changeable(path: str) -> bool:
    """Whether the gateway's user, or someone as hostile, can change `path`: judged by who owns it, not by
    its mode bits now. Any owner but root can chmod it back (a 0444 Makefile in a 0555 dir that tar kept
    is its owner's to rewrite); a root-owned one is changeable as its mode and ACLs say (os.access: a
    root gateway may change anything)."""
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return True  # vanished or unreadable: the program may still find something there
    return owner != 0 or os.access(path, os.W_OK)


def _contents_writable(directory: str, sandbox_roots: Sequence[str]) -> bool:
    """Whether the agent can put files into `directory` (a sandbox workspace, or changeable itself): where
    a recipe's `./run.sh` would be found. A root-only directory under a writable parent is not (its
    files are trusted like a root-only makefile there; the spawn anchors the cwd: a renamed parent is no
    way in)."""
    real = os.path.realpath(directory)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in sandbox_roots if r) or (
        _changeable(real)
    )


def sandbox_roots(workspace_root: str) -> list[str]:
    """Where sandbox workspaces live: the state dir (its default `sandboxes/`) and the configured root."""
    # Resolved through the watched path cache: every decision on the host asks, and two realpaths
    # were an eighth of a whole decision (issue 19).
    return [real_path(p) for p in (str(state_dir()), workspace_root) if p]


def found_reason(found: Sequence[Finding]) -> str:
    """One line for the decision's reason; the warnings name every finding."""
    first = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{first.program} would run code from a tree the agent can write: {first.path}: {first.what}{more}"


def _pip_findings(program: str, argv: Sequence[str], cwd: str, sandbox_roots: Sequence[str]) -> list[Finding]:
    """What pip's argv itself brings: an option or command exechost does not model (asks, naming it),
    and every local place pip takes packages from (find-links, a file: index, a cache, a checkout
    dir) that the agent can write: an sdist there builds, its setup script runs."""
    args = parse_pip(argv)
    found = [] if args.problem is None else [Finding(program, "the command line", args.problem)]
    sources = [(value, cwd) for value in args.sources]
    if args.command in BUILDS:
        reqs = read_requirements(args.requirements, cwd)
        sources += reqs.sources
        # The argv's own projects too (`pip install .`, `-e ./x`): their setup script is bound, but what
        # it imports from its tree is not; a local archive operand is a file, bound whole (argv_code).
        # Read as a requirements line is: a path, a `file:` URL and `name @ file:…` are all projects.
        own = read_operands(list(args.operands), cwd)
        projects = list(own.projects)
        projects += [os.path.join(cwd, e.split("[", 1)[0]) for e in args.editables if "://" not in e]
        projects = [os.path.normpath(p) for p in projects if not os.path.isfile(p)] + reqs.projects
        found += [
            Finding(program, p, PIP_PROJECT)
            for p in dict.fromkeys(projects)
            if agent_writable(p, sandbox_roots)
        ]
        found += [Finding(program, path, f"{PIP_LINE}: {why}") for path, why in reqs.problems + own.problems]
    for value, where in sources:
        path = local_path(value, where)
        if path is not None and os.path.lexists(path) and agent_writable(path, sandbox_roots):
            found.append(Finding(program, os.path.realpath(path), PIP_SOURCE))
    return found


def _unmodelled(argv: Sequence[str], real: str, cwd: str, sandbox_roots: Sequence[str]) -> list[Finding]:
    """The first tree the agent can write that an unmodelled program runs in or is pointed at."""
    seen: set[str] = set()
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    for tree in unmodelled_trees(argv, here):
        if tree in seen:
            continue
        seen.add(tree)
        if agent_writable(tree, sandbox_roots):
            what = SCRIPT_TREE if _runs_a_script_file(argv, real, here) else UNMODELLED
            return [Finding(os.path.basename(argv[0]), tree, what)]
    return []


def _runs_a_script_file(argv: Sequence[str], real: str, cwd: str) -> bool:
    """An interpreter given its program as a file operand (`python3 x.py`, `sh -e x.sh`, `awk -f p.awk`),
    or a program the agent wrote itself, named by its path (`./tool`): the content binder
    (engine.commands.content) binds that file, and what else such a run loads from its tree (imports
    beside the script) is named in the ask; any other program's tree is unbound."""
    if "/" in argv[0] and not system_owned(real):
        return True  # `./tool`: the agent's own program, bound whole by its bytes as the executable
    index = script_operand(argv, argv[0])
    if index is None and real != argv[0]:
        index = script_operand(argv, real)
    return index is not None and index < len(argv) and os.path.isfile(os.path.join(cwd, argv[index]))


def tree_program(argv: Sequence[str], paths: Sequence[str | None]) -> str | None:
    """The program findings_for vets this command as (`git` or a TREE_PROGRAMS name), or None: a command
    that runs nothing from a tree (known by its name as typed or by any path it resolves to)."""
    if not argv:
        return None
    candidates = [name_of(argv[0]), *(name_of(p) for p in paths if p)]
    if "git" in candidates:
        return "git"
    return next((c for c in candidates if c in TREE_PROGRAMS), None)


def findings_for(
    argv: Sequence[str],
    paths: Sequence[str | None],
    cwd: str,
    sandbox_roots: Sequence[str],
    record: gitvet.Record | None = None,
    tree_safe: Collection[str] = (),
) -> list[Finding]:
    """What this one command would run from a tree the agent can write. `paths` are the executable as
    resolved (real path first): a program is known by its name as typed or by any path it resolves to
    (`/usr/bin/npm` → `npm-cli.js`, `~/.cargo/bin/cargo` → `rustup`). git and TREE_PROGRAMS are modelled
    (their files are named and bound); a program known to take no code from its tree (treesafe, plus the
    operator's `tree_safe`) has nothing to find; any other one, in a tree the agent can write, is a
    finding by itself: nobody knows what it reads there (mypy's plugins, pytest's conftest.py, …)."""
    program = tree_program(argv, paths)
    real = next((p for p in paths if p), None)
    if program is None:
        if not argv or real is None or is_tree_safe(argv, real, tree_safe):
            return []  # nothing runs (not found), or nothing it does depends on its tree
        found = _past_the_cap(argv, cwd) + _unmodelled(argv, real, cwd, sandbox_roots)
    elif program == "git":
        if real is None:
            return []
        found = gitvet.vet(real, progident.git_argv(argv), cwd, record)  # `git-upload-archive x`
    else:
        found = _past_the_cap(argv, cwd) + _modelled(program, argv, cwd, sandbox_roots)
        # Every other identity too (`~/.cargo/bin/cargo` is rustup's proxy: it reads the cwd's
        # rust-toolchain.toml before cargo sees -C); a proxy's argv is its tool's, checked above.
        tool = progident.proxied_tool(argv, paths)
        for other in progident.identities(argv, paths, list(TREE_PROGRAMS)):
            if other != program:
                have = {(f.path, f.what) for f in found}
                more = _modelled(other, argv, cwd, sandbox_roots, other != "rustup" or tool != program)
                found += [f for f in more if (f.path, f.what) not in have]
        found += _toolchains(found, record)
        if program in ("pip", "pip3") and real is not None:  # its config files are argv too (pipconfig)
            here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
            found += pipconfig.findings(
                program, argv, real, here, lambda p: agent_writable(p, sandbox_roots), record
            )
    modelled = progident.identities(argv, paths, list(TREE_PROGRAMS)) if program not in (None, "git") else []
    return found + _process_linked(program or os.path.basename(argv[0]), modelled, argv, cwd, found)


def _toolchains(found: Sequence[Finding], record: gitvet.Record | None) -> list[Finding]:
    """For every rust-toolchain(.toml) found, the directory whose programs it makes rustup run (a `path`
    toolchain; the file's own directory for one not understood): a finding no bytes hold. The bytes read
    are the ones the binding holds (`record`), so the decision and its binding are one read."""
    out: list[Finding] = []
    for f in found:
        if os.path.basename(f.path) not in progident.TOOLCHAIN_FILES or not os.path.isabs(f.path):
            continue
        data = record.data.get(f.path) if record is not None else None
        if data is None:
            try:
                data = read_regular(f.path, gitvet.CONFIG_READ_CAP)
            except Unreadable:
                continue  # bound as unreadable: the approval cannot be saved anyway
            if record is not None:
                record.data[f.path] = data
        out += [
            Finding(f.program, d, progident.TOOLCHAIN_DIR) for d in progident.toolchain_dirs(f.path, data)
        ]
    return list(dict.fromkeys(out))


def _process_linked(
    program: str, modelled: Sequence[str], argv: Sequence[str], cwd: str, found: Sequence[Finding]
) -> list[Finding]:
    """A finding no bytes hold for every argv word, every file found and every tree file a `modelled`
    program looks for (`.cargo/config.toml` under a linked `.cargo`) that reaches /proc or /dev/fd through
    a link (`ninja -C sub`, sub -> /proc/self/cwd/real): the gateway would read its own process's file
    there, the run its own (engine.commands.procpaths)."""
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    base = os.path.realpath(here)  # an anchor's directory, by its fd
    words = procpaths.process_linked_words(argv[1 : OPERANDS_LOOKED_AT + 1], base)
    out = [Finding(program, os.path.join(here, w), procpaths.THROUGH_PROCESS) for w in words]
    for name in modelled:
        spec = TREE_PROGRAMS[name]
        for start in work_dirs(name, argv, here):
            for where in tree_dirs(start, spec.walk_up):
                real = os.path.realpath(where) if where.startswith(ANCHOR) else where  # tree_dirs: real
                for file in spec.files:
                    if procpaths.linked_through_process(file, real, real=True):
                        out.append(Finding(program, os.path.join(where, file), procpaths.THROUGH_PROCESS))
    for f in found:
        if os.path.isabs(f.path) and f.what != procpaths.THROUGH_PROCESS:
            top = here.rstrip("/") or "/"
            if f.path == top:
                continue  # the cwd itself (an anchor, during the spawn's re-vet) is not judged
            inside = f.path.startswith(top.rstrip("/") + "/")
            path = f.path[len(top.rstrip("/")) + 1 :] if inside else f.path
            if procpaths.linked_through_process(path, base, real=True):
                out.append(Finding(program, f.path, procpaths.THROUGH_PROCESS))
    return list(dict.fromkeys(out))


def _past_the_cap(argv: Sequence[str], cwd: str) -> list[Finding]:
    """A finding (no bytes bind it) for a command longer than what _argv_paths and make_value_paths
    read: whatever its later words name is unexamined, so a human decides it, this run only."""
    if len(argv) <= OPERANDS_LOOKED_AT + 1:
        return []
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    return [Finding(name_of(argv[0]), here, PAST_THE_CAP)]


def written_first(argv: Sequence[str], paths: Sequence[str | None], cwd: str) -> list[Finding]:
    """A finding (no bytes bind it) for a tree program that runs after a command that may write its tree:
    what it reads then is not what was vetted. (git's config and make's makefiles are held as vetted in
    the run by engine.commands.pinned, an absent makefile as /dev/null; a file make's command-line value
    names, absent at the vet, is not: `cp evil cc && make CC=./cc foo.o`.)"""
    program = tree_program(argv, paths)
    if program in (None, "git"):
        return []
    if program in ("make", "gmake") and not any("=" in w and not w.startswith("-") for w in argv[1:]):
        return []  # its makefiles are pinned; a command-line value (`CC=./cc`) names a file they are not
    here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
    return [Finding(str(program), here, WRITTEN_FIRST)]


def _modelled(
    program: str, argv: Sequence[str], cwd: str, sandbox_roots: Sequence[str], grammar: bool = True
) -> list[Finding]:
    """findings_for a TREE_PROGRAMS program: its tree files, what its argv names, its grammar (`grammar`
    False: the argv is another program's, read by that one's: a rustup proxy's tool)."""
    spec = TREE_PROGRAMS[program]
    named = argv_code(program, argv, cwd) if program not in ("make", "gmake") else []
    files = [(p, spec.what) for p in tree_files(program, spec, argv, cwd)]
    files += [(p, what) for p, what in named if p not in {f for f, _ in files}]
    found = [Finding(program, path, what) for path, what in files if agent_writable(path, sandbox_roots)]
    if program in ("make", "gmake"):
        args = parse_make(argv)
        if args.problem is not None:  # make would read what exechost cannot name: a human decides
            found.append(Finding(program, "the command line", args.problem))
        here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
        found += [Finding(program, path, NOT_A_FILE) for path in not_regular(args, here)]
        where = os.path.join(here, *args.dirs) if args.dirs else here
        # No makefile: make's built-in rules still run cc, as, lex, yacc, tex, … over the tree's files for
        # each goal (`make foo` from foo.c), programs that ask there themselves; with no goal, or none
        # of its built-in rules (`make -r test`), nothing runs.
        builtin = bool(args.goals) and not args.no_builtin
        if (files or builtin) and _contents_writable(where, sandbox_roots):
            found.append(Finding(program, where, RECIPE_TREE if files else BUILTIN_RULES))
        have = {f.path for f in found}
        found += [
            Finding(program, path, MAKE_VALUE_FILE)
            for path in make_value_paths(argv, here)
            if path not in have and agent_writable(path, sandbox_roots)
        ]
    if program in ("pip", "pip3"):
        here = cwd if cwd.startswith(ANCHOR) else os.path.realpath(cwd)
        found += _pip_findings(program, argv, here, sandbox_roots)
    if program not in ("make", "gmake", "pip", "pip3"):
        # Read by the program's own grammar: anything it does not understand asks (toolargv).
        problem = argv_problem(program, argv) if grammar else None
        # (`docker` other than `docker compose` reads no tree: its argv is the allowlist's business.)
        if problem is not None and (program != "docker" or "compose" in argv[1:]):
            found.append(Finding(program, "the command line", problem))
        # (make has RECIPE_TREE; pip's requirements are read by its own grammar, and every project it
        # builds is a PIP_PROJECT finding already: a tree, unbound.)
        found += _manifest_trees(program, [p for p, _ in files], sandbox_roots)
    return found


def _manifest_trees(program: str, files: Sequence[str], sandbox_roots: Sequence[str]) -> list[Finding]:
    """The directory of every file the tool reads code from (its manifests, an argv-named script) where
    the agent can add or rewrite files: what those name and run is not bound (MANIFEST_TREE), so the
    finding is a directory, which binds no bytes (binding() → A_TREE): allow-always is not offered."""
    dirs = dict.fromkeys(os.path.dirname(p) for p in files if os.path.isabs(p))
    return [Finding(program, d, MANIFEST_TREE) for d in dirs if _contents_writable(d, sandbox_roots)]
