"""Cost of vetting a program as every identity it has and of walking its paths for links into /proc (fresh
round 10 f): a whole tree vet of a cargo through a rustup proxy and of a ninja -C, against the same vet with
the /proc walk off and the proxy's second identity off (the baseline, in the same run)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.commands import progident, treecode, treefindings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    r = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "w"
        (work / "sub").mkdir(parents=True)
        (work / "sub" / "Cargo.toml").write_text('[package]\nname = "x"\n')
        (work / "build").mkdir()
        (work / "build" / "build.ninja").write_text("rule r\n  command = true\nbuild x: r\n")
        (Path(tmp) / "rustup").write_text("#!/bin/sh\n")
        (Path(tmp) / "cargo").symlink_to("rustup")
        cargo = (["cargo", "-C", "sub", "build", "--release"], (f"{tmp}/rustup", f"{tmp}/cargo"))
        ninja = (["ninja", "-C", "build", "-j", "4"], ("/usr/bin/ninja",))

        def vet(argv: list[str], paths: tuple[str, ...]) -> Callable[[], object]:
            return lambda: treecode.findings_for(argv, paths, str(work), [])

        full = [per_call_us(vet(*cargo), 200, r), per_call_us(vet(*ninja), 200, r)]
        walk, ids = treefindings._process_linked, progident.identities
        treefindings._process_linked = lambda *a: []  # type: ignore[assignment]
        progident.identities = lambda argv, paths, known: [n for n in ids(argv, paths, known)][:1]  # type: ignore[assignment]
        try:
            base = [per_call_us(vet(*cargo), 200, r), per_call_us(vet(*ninja), 200, r)]
        finally:
            treefindings._process_linked, progident.identities = walk, ids
    print(f"rounds {r}, pid {os.getpid()}")
    for name, now, then in zip(
        ("cargo -C sub build (rustup proxy)", "ninja -C build"), full, base, strict=True
    ):
        record(f"{name}: tree vet vs without identities and /proc walk", f"{now:.1f} µs", f"{then:.1f} µs",
               ratio(now, then))  # fmt: skip


if __name__ == "__main__":
    main()
