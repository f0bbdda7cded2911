"""engine/ is a UI-free library: importing every engine module must not load textual, console or runner."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import engine

FORBIDDEN = ("textual", "console", "runner", "rich")


def test_engine_never_imports_ui_or_services() -> None:
    names = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
    assert names, "engine has no modules"
    code = (
        "import importlib, json, sys\n"
        f"for n in {names!r}: importlib.import_module(n)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert bad == [], f"engine pulled in {bad}"


def test_console_never_imports_runner() -> None:
    root = Path(__file__).resolve().parents[2] / "console"
    offenders = []
    for path in root.rglob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("import runner", "from runner")):
                offenders.append(f"{path}: {stripped}")
    assert offenders == []
