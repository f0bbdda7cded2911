"""Cost of reading a tree program's whole argv by its own grammar (issue 27 §3, fresh round 10 c): the
grammar alone, and a whole tree vet of an npm and a cmake command against the same vet with the grammar
switched off (the baseline, in the same run); and the argv-safe check allow-always makes per segment."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.commands import treecode, treefindings
from engine.commands.argvsafe import takes_no_code
from engine.commands.toolargv import argv_problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    r = parser.parse_args().rounds
    npm_argv = ["npm", "--prefix", "sub", "--no-audit", "install", "lodash", "@scope/pkg@^1.2"]
    cmake_argv = ["cmake", "-S", ".", "-B", "build", "-G", "Unix Makefiles"]
    grammar_us = per_call_us(lambda: argv_problem("npm", npm_argv), 2000, r)
    safe_us = per_call_us(lambda: takes_no_code("/usr/bin/mvn"), 2000, r)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sub").mkdir()
        (Path(tmp) / "sub" / "package.json").write_text("{}\n")
        (Path(tmp) / "CMakeLists.txt").write_text("project(x NONE)\n")

        def vet(argv: list[str], path: str) -> Callable[[], object]:
            return lambda: treecode.findings_for(argv, (path,), tmp, [])

        npm_us = per_call_us(vet(npm_argv, "/usr/bin/npm"), 200, r)
        cmake_us = per_call_us(vet(cmake_argv, "/usr/bin/cmake"), 200, r)
        real = treefindings.argv_problem
        treefindings.argv_problem = lambda program, argv: None  # the baseline: the vet without the grammar
        try:
            npm_base = per_call_us(vet(npm_argv, "/usr/bin/npm"), 200, r)
            cmake_base = per_call_us(vet(cmake_argv, "/usr/bin/cmake"), 200, r)
        finally:
            treefindings.argv_problem = real
    print(f"rounds {r}, pid {os.getpid()}")
    record("npm argv by its grammar (7 words)", f"{grammar_us:.2f} µs")
    record("allow-always: argv-safe check of one path", f"{safe_us:.2f} µs")
    record(
        "npm tree vet with grammar vs without",
        f"{npm_us:.1f} µs",
        f"{npm_base:.1f} µs",
        ratio(npm_us, npm_base),
    )
    record(
        "cmake tree vet with grammar vs without",
        f"{cmake_us:.1f} µs",
        f"{cmake_base:.1f} µs",
        ratio(cmake_us, cmake_base),
    )


if __name__ == "__main__":
    main()
