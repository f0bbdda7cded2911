"""Cost of issue 27's tree27a checks: make's and pip's argv read by their own grammars, npm's walk to every
ancestor (a workspace root may hold the .npmrc npm reads), the git view's folded config, and a command whose
glob words /bin/sh expands at the decision — each against its baseline in the same run (the plain
spelling of the same command, or the walk that stopped at the nearest package.json)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.commands.analysis import analyze_command
from engine.commands.expansion import expand
from engine.commands.makefiles import parse_make
from engine.commands.pinned import folded_config
from engine.commands.pipargs import parse_pip
from engine.commands.treecode import findings_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    r = args.rounds
    make_argv = ["make", "-sj4", "-C", "sub", "V=1", "CFLAGS=-O2 -g", "test"]
    make_us = per_call_us(lambda: parse_make(make_argv), 1000, r)
    pip_argv = ["pip3", "install", "-q", "--no-deps", "-r", "r.txt", "-e", "./pkg", "requests"]
    pip_us = per_call_us(lambda: parse_pip(pip_argv), 1000, r)
    config = b"[core]\n\trepositoryformatversion = 0\n" * 20
    fold_us = per_call_us(lambda: folded_config(config, b"[user]\n\tname = x\n"), 10000, r)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "root" / "a" / "b" / "pkg"
        pkg.mkdir(parents=True)
        (Path(tmp) / "root" / "package.json").write_text('{"workspaces": ["a/b/pkg"]}\n')
        (pkg / "package.json").write_text("{}\n")
        npm = ("/usr/bin/npm",)
        npm_us = per_call_us(lambda: findings_for(["npm", "test"], npm, str(pkg), []), 200, r)
        (pkg / "x.sh").write_text("echo x\n")
        count = iter(range(10**9))  # a new text each call: the analysis keeps a cache by text
        plain_us = per_call_us(lambda: analyze_command(f"sh x.sh {next(count)}"), 200, r)

        def expanded() -> None:
            out = expand(f"sh x.s? {next(count)}", str(pkg))
            assert out is not None
            analyze_command(out.text)

        glob_us = per_call_us(expanded, 50, r)
    print(f"rounds {r}, pid {os.getpid()}")
    record("make argv by make's grammar (7 words, assignments)", f"{make_us:.2f} µs")
    record("pip argv by optparse's grammar (9 words)", f"{pip_us:.2f} µs")
    record("git view: folded repository config", f"{fold_us:.2f} µs")
    record("npm tree vet, package 3 below its workspace root", f"{npm_us:.1f} µs")
    record(
        "`sh x.s?` expanded by /bin/sh + analysed, vs `sh x.sh` analysed",
        f"{glob_us:.0f} µs",
        f"{plain_us:.0f} µs",
        ratio(glob_us, plain_us),
    )


if __name__ == "__main__":
    main()
