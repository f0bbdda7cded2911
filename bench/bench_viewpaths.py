"""What reading a command's paths as the run's view has them costs each host decision (fresh round 10 c,
engine.commands.viewpaths): the agent's private dirs found once per decision, and the walk of every word
and program path through them; against the same decision with `hostPrivate = []` (its raw baseline), in
the same run. Per-call p50 in microseconds.

Usage: .venv/bin/python bench/bench_viewpaths.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record

COMMANDS = [
    "git status --short",
    "ninja -C build -n",
    "npm --prefix ./web test",
    "ls -la src/a src/b /usr/share/doc",
    "cmake -P ./scripts/x.cmake",
    "git push file:///srv/git/x.git HEAD:refs/heads/x",
    # files fed to a shell, bound whole: each word's file found where the run's view has it (fixDE10)
    "cat s.sh t/x.sh | sh",
]


def per_call(fn: Callable[[], object], runs: int) -> float:
    """p50 of `runs` calls, microseconds."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    # outside every default private dir (/tmp is one): the workdir is then the same on the host and in
    # the view, as a project's is
    with tempfile.TemporaryDirectory(prefix=".eh-bench-vp-", dir=os.path.expanduser("~")) as top:
        root = Path(top)
        state = root / "state"
        state.mkdir(mode=0o700)
        os.environ["OPENCLAW_STATE_DIR"] = str(state)
        os.environ.pop("EXECHOST_HOST_PRIVATE", None)  # the default set: /tmp, /var/tmp, /dev/shm, ...
        (state / "config.toml").write_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n')
        tree = root / "w"
        (tree / "build").mkdir(parents=True)
        os.symlink("/tmp", tree / "t")  # one word's walk goes through a link into a private dir
        (tree / "s.sh").write_text("echo hi\n")

        from engine.approvals.store import ApprovalsStore
        from engine.commands import viewpaths
        from engine.commands.analysis import analyze_command
        from engine.config.loader import load_config
        from engine.policy.decision import evaluate
        from engine.policy.privatebinds import private_binds

        config = load_config(state / "config.toml")
        (state / "config.toml").write_text(
            '[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\nhostPrivate = []\n'
        )
        unviewed = load_config(state / "config.toml")  # the raw baseline: no private dirs to walk
        store = ApprovalsStore(state / "exec-approvals.json")
        for program in (
            "/usr/bin/git",
            "/usr/bin/ls",
            "/usr/bin/ninja",
            "/usr/bin/npm",
            "/usr/bin/cmake",
            "/usr/bin/cat",
        ):
            store.add_allowlist("main", program)
        params = {"host": "gateway"}
        rows = []
        for command in COMMANDS:

            def plain(command: str = command) -> object:
                return evaluate(command, config=unviewed, store=store, cwd=str(tree), params=params)

            def viewed(command: str = command) -> object:
                return evaluate(command, config=config, store=store, cwd=str(tree), params=params)

            plain()
            viewed()
            base = per_call(plain, args.runs)
            full = per_call(viewed, args.runs)
            rows.append((command, full, base))
        binds = private_binds(config, "main")
        binds_us = per_call(lambda: private_binds(config, "main"), args.runs)
        words = viewpaths.words_of(analyze_command("ls -la src/a t/x /usr/share/doc"))
        walk_us = per_call(lambda: viewpaths.diverging(binds, words, str(tree)), args.runs)
    for command, full, base in rows:
        print(f"decision `{command}`: {full:.0f} us with the view's paths, {base:.0f} us without")
        record(f"decision with view paths: {command}", f"{full:.0f} us", f"{base:.0f} us", ratio(full, base))
    print(f"private_binds (found and made, once per host decision): {binds_us:.0f} us")
    print(f"diverging over 5 words (one through a link into /tmp): {walk_us:.0f} us")
    record("private_binds per host decision", f"{binds_us:.0f} us")
    record("viewpaths.diverging, 5 words", f"{walk_us:.0f} us")


if __name__ == "__main__":
    main()
