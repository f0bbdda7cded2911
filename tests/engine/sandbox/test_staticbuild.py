"""The static helper build is shared by sandboxes started at once: a race there failed CI (stop 38)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from engine.sandbox import staticbuild

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@needs_cc
def test_builders_started_at_once_all_succeed_and_one_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "hello.c"
    source.write_text("int main(void) { return 0; }\n")
    target, stamp = tmp_path / "bin" / "hello", tmp_path / "bin" / "hello.sha"
    target.parent.mkdir()
    compiles: list[int] = []
    real_locked = staticbuild._build_locked

    def counted(*args: object, **kwargs: object) -> str | None:
        compiles.append(1)
        return real_locked(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(staticbuild, "_build_locked", counted)
    start = threading.Barrier(6)
    results: list[str | None] = []

    def one() -> None:
        start.wait()
        results.append(staticbuild.build("cc", source, target, stamp, "d1"))

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [None] * 6
    assert compiles == [1]
    assert staticbuild.current(target, stamp, "d1")
    # no temp file is left beside the helper
    assert sorted(p.name for p in target.parent.iterdir()) == [".hello.lock", "hello", "hello.sha"]
    # another digest is another build
    assert not staticbuild.current(target, stamp, "d2")
    assert staticbuild.build("cc", source, target, stamp, "d2") is None
    assert compiles == [1, 1]
