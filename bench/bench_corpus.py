"""Allowlist decisions/s on agent-like commands that each name a different file, against shlex.split.

bench_policy.py's templates mostly name the same few paths; an agent's commands name a different file
almost every time (`sed -n '12,+5p' src/mod7/file7.py`, `rg -n todo3 src/mod3/`), existing or not, mostly
inside git repositories or trees with a Makefile or package.json. This builds such trees, generates such a
corpus (every command unique, its file operands unique within a pass), and measures on one core:
the allowlist decision (analysis + allowlist + enforced rendering, analysis cache cleared each command) and
the host decision's later checks (tree vet, content binding) separately, so the profile shows where time
goes. `--profile` prints the top of a cProfile of the allowlist decision.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands import analysis
from engine.commands.allowlist import AllowlistEntry, enforced_command, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.commands.content import bind
from engine.commands.treecode import tree_vet

MODULES, FILES = 24, 40  # per project: 960 existing source files
PROJECTS = ("api", "web", "tool", "lib")  # git repos; web has package.json, tool a Makefile
ENTRIES = [
    AllowlistEntry("/usr/bin/ls"),
    AllowlistEntry("/usr/bin/cat"),
    AllowlistEntry("/usr/bin/nl"),
    AllowlistEntry("/usr/bin/diff"),
    AllowlistEntry("/usr/bin/sed", arg_pattern=r"-n '[0-9,+p]+' [^;]*"),
    AllowlistEntry("/usr/bin/find"),
    AllowlistEntry("git", arg_pattern=r"(status|log|diff|show)( .*)?"),
    AllowlistEntry("/usr/bin/make"),
    AllowlistEntry("/usr/bin/npm"),
]
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"}
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.path.expanduser("~")}


def build_trees(root: Path) -> list[Path]:
    """Four git repositories of nested source files; one with package.json, one with a Makefile."""
    projects = []
    for name in PROJECTS:
        project = root / name
        for m in range(MODULES):
            mod = project / "src" / f"mod{m}"
            mod.mkdir(parents=True)
            for f in range(FILES):
                (mod / f"file{f}.py").write_text(f"def f{f}():\n    return {m}\n")
        (project / "tests").mkdir()
        (project / "README.md").write_text(f"# {name}\n")
        subprocess.run(["git", "init", "-q", str(project)], env=GIT_ENV, check=True)
        projects.append(project)
    (root / "web" / "package.json").write_text('{"scripts": {"test": "node test.js"}}\n')
    (root / "tool" / "Makefile").write_text("test:\n\tpython3 -m pytest\n")
    return projects


# Templates an agent sends; {f}, {g}: files (existing or missing, unique per command), {d}: a directory,
# {n}, {w}: numbers and words that make the command text unique.
TEMPLATES = (
    "sed -n '{n},+5p' {f}",
    "rg -n todo{n} {d}/",
    "wc -l {f} {g}",
    "cat {f} | head -n {n}",
    "head -n {n} {f}",
    "tail -n {n} {f}",
    "nl -ba {f} | sed -n '{n},+20p'",
    "grep -rn 'def f{n}' {d}",
    "git diff -- {f}",
    "git log --oneline -n {n} -- {f}",
    "git status --short {d}",
    "ls -la {d}",
    "find {d} -name '*{w}*.py' | head -n {n}",
    "diff {f} {g}",
    "cat {f}",
    "make test N={n}",
    "npm test -- --grep {w}",
    "python3 -m pytest -q {f}",
    "ls {f} && wc -c {g}",
    "grep -n {w} {f} {g} | wc -l",
)


def corpus(projects: list[Path], n: int, seed: int) -> list[tuple[str, str]]:
    """(command, cwd) pairs: the cwd moves between project roots and module dirs every few commands."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    counter = [seed * n * 2]  # operands of different seeds never coincide
    cwd = str(projects[0])
    for i in range(n):
        if i % 16 == 0:
            project = rng.choice(projects)
            module = project / "src" / f"mod{rng.randrange(MODULES)}"
            cwd = str(project) if rng.random() < 0.7 else str(module)
        directory = "." if "/src/" in cwd else f"src/mod{rng.randrange(MODULES)}"
        template = TEMPLATES[i % len(TEMPLATES)]
        f, g = operand(rng, cwd, counter), operand(rng, cwd, counter)
        out.append((template.format(f=f, g=g, d=directory, n=i, w=f"w{i}"), cwd))
    return out


def operand(rng: random.Random, cwd: str, counter: list[int]) -> str:
    """A file operand as an agent writes it: relative, `../` or absolute; existing, or one not yet written."""
    counter[0] += 1
    m, f = counter[0] % MODULES, (counter[0] // MODULES) % FILES
    # About a third name a file that does not exist (yet): the agent is about to write it.
    name = f"new{counter[0]}.py" if rng.random() < 0.35 else f"file{f}.py"
    if "/src/" in cwd:
        return name if rng.random() < 0.5 else f"../mod{m}/{name}"
    return f"src/mod{m}/{name}" if rng.random() < 0.9 else f"{cwd}/src/mod{m}/{name}"


def rate(fn: Callable[[str, str], object], commands: list[tuple[str, str]], repeat: int) -> float:
    """Commands per CPU-second of this process, best pass (one core on a shared, loaded machine)."""
    best = 0.0
    for _ in range(repeat):
        start = time.process_time()
        for command, cwd in commands:
            fn(command, cwd)
        best = max(best, len(commands) / max(time.process_time() - start, 1e-9))
    return best


def allowlist_decision(command: str, cwd: str) -> object:
    analysis._analyze_cached.cache_clear()  # every command is unique anyway: no hit to win
    parsed = analyze_command(command)
    result = evaluate_allowlist(parsed, ENTRIES, cwd=cwd, env=ENV)
    return enforced_command(parsed, result)


def host_checks(command: str, cwd: str) -> object:
    """The allowlist decision plus what a host decision adds after it: tree vet and content binding."""
    analysis._analyze_cached.cache_clear()
    parsed = analyze_command(command)
    result = evaluate_allowlist(parsed, ENTRIES, cwd=cwd, env=ENV)
    tree_vet(parsed, result, cwd, [])
    bind(parsed, result, cwd, ENV, command=command)
    return enforced_command(parsed, result)


def shlex_split(command: str, cwd: str) -> object:
    del cwd
    return shlex.split(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=20_000, help="commands per pass")
    parser.add_argument("--repeat", type=int, default=3, help="passes; the best is reported")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the allowlist decision")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    with tempfile.TemporaryDirectory(prefix="exechost-corpus-") as tmp:
        projects = build_trees(Path(tmp))
        # A fresh corpus per measurement (other seeds): no pass sees the previous one's operands.
        passes = [corpus(projects, args.n, seed) for seed in range(args.repeat + 1)]
        allowlist_decision(*passes[-1][0])  # imports, parser, the first contexts
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for command, cwd in passes[-1]:
                allowlist_decision(command, cwd)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)

        def best(fn: Callable[[str, str], object]) -> float:
            return max(rate(fn, passes[k], 1) for k in range(args.repeat))

        base = best(shlex_split)
        decisions = best(allowlist_decision)
        host = max(rate(host_checks, passes[k][: args.n // 4], 1) for k in range(args.repeat))
        missing = sum(1 for c, _ in passes[0] if "new" in c)
    print(
        f"python {platform.python_version()} on {platform.machine()}, one core, {args.n} unique commands x "
        f"{args.repeat} passes (best), {len(TEMPLATES)} templates, {missing} naming a missing file, "
        f"{len(PROJECTS)} git repos x {MODULES * FILES} files"
    )
    for label, value in (
        ("baseline: shlex.split", base),
        ("allowlist decision (analysis + allowlist + render)", decisions),
        ("  + tree vet + content binding (host decision checks)", host),
    ):
        print(f"{label:58s} {value:12,.0f} /s")
    record(
        "allowlist decisions/s, agent corpus, unique files (vs shlex.split)",
        f"{decisions:,.0f}/s",
        f"{base:,.0f}/s",
        ratio(decisions, base),
        "≥ 50,000/s",
    )
    record(
        "  same + tree vet + content binding (vs shlex.split)",
        f"{host:,.0f}/s",
        f"{base:,.0f}/s",
        ratio(host, base),
    )


if __name__ == "__main__":
    main()
