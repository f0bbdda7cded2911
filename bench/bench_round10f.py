"""Cost of fresh round 10 f's checks on the decision path: make's command-line variables judged as env
(engine.commands.makevars), and pip's config files read and judged (engine.commands.pipconfig) — each
against its baseline in the same run (make's grammar alone; pip's tree vet without its config files)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.commands import pipconfig, treecode
from engine.commands.hostenv import foreign_env_keys
from engine.commands.makefiles import parse_make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    r = parser.parse_args().rounds
    make_argv = ["make", "-sj4", "-C", "sub", "V=1", "CFLAGS=-O2 -g", "LANG=C", "test"]
    grammar_us = per_call_us(lambda: parse_make(make_argv), 2000, r)
    env_us = per_call_us(lambda: foreign_env_keys(dict(parse_make(make_argv).assignments)), 2000, r)
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        os.symlink("/usr/bin/python3", venv / "bin" / "python")
        pip = venv / "bin" / "pip"
        pip.write_text(f"#!{venv}/bin/python\nimport sys\n")
        (venv / "pip.conf").write_text("[global]\ntimeout = 60\nindex-url = https://pypi.example/simple\n")
        argv = [str(pip), "install", "-q", "requests"]
        writable = lambda p: treecode.agent_writable(p, [])  # noqa: E731
        config_us = per_call_us(lambda: pipconfig.findings("pip", argv, str(pip), tmp, writable), 200, r)
        vet_us = per_call_us(lambda: treecode.findings_for(argv, (str(pip),), tmp, []), 200, r)
    print(f"rounds {r}, pid {os.getpid()}")
    record(
        "make argv: grammar + command-line variables judged as env, vs grammar alone",
        f"{env_us:.2f} µs",
        f"{grammar_us:.2f} µs",
        ratio(env_us, grammar_us),
    )
    record(
        "pip install tree vet with its config files, vs without them",
        f"{vet_us:.0f} µs",
        f"{vet_us - config_us:.0f} µs",
        ratio(vet_us, vet_us - config_us),
    )


if __name__ == "__main__":
    main()
