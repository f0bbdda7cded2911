"""Each sandbox helper compiled once per test session: every test's fresh state dir gets a copy of the build
made from the same source and compiler, the production build path (engine.sandbox.staticbuild) unchanged
around it."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path

from engine.sandbox import staticbuild

Builder = Callable[[str, Path, Path, Path, str], "str | None"]


def cached_builder(cache: Path, real: Builder) -> Builder:
    """A `staticbuild._build_locked` that compiles into `cache` once per (compiler, source bytes) and then
    installs copies of that build (atomically, as the real one installs) into each bin dir it is asked for."""
    lock = threading.Lock()

    def build(compiler: str, source: Path, target: Path, stamp: Path, digest: str) -> str | None:
        key = hashlib.sha256(compiler.encode() + b"\0" + source.read_bytes()).hexdigest()[:24]
        built = cache / key / target.name
        with lock:
            if not built.is_file():
                built.parent.mkdir(parents=True, exist_ok=True)
                problem = real(compiler, source, built, built.parent / "stamp", digest)
                if problem is not None:
                    return problem
        staticbuild._install(built, target, 0o755)
        recorded = built.parent / f"{digest}.sha"
        if not recorded.is_file():
            recorded.write_text(digest + "\n")
        staticbuild._install(recorded, stamp, 0o644)
        return None

    return build
