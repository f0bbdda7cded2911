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
    # no temp file is left beside the helper, and the builders' lock is not in the dir sandboxes mount
    assert sorted(p.name for p in target.parent.iterdir()) == ["hello", "hello.sha"]
    assert staticbuild.lock_path(target).parent == target.parent.parent
    # another digest is another build
    assert not staticbuild.current(target, stamp, "d2")
    assert staticbuild.build("cc", source, target, stamp, "d2") is None
    assert compiles == [1, 1]


@needs_cc
def test_the_sessions_build_cache_builds_again_for_a_changed_source(tmp_path: Path) -> None:
    """Tests copy one build per (compiler, source) into each bin dir (tests/helpers/staticcache.py): a
    changed source is a new build, the same source in another bin dir is the same binary, stamped."""
    import subprocess

    from tests.helpers.staticcache import cached_builder

    compiles: list[Path] = []

    def real(compiler: str, source: Path, target: Path, stamp: Path, digest: str) -> str | None:
        compiles.append(target)
        return staticbuild._build_locked(compiler, source, target, stamp, digest)

    build = cached_builder(tmp_path / "cache", real)
    source = tmp_path / "exit.c"
    bins = [tmp_path / f"bin{n}" for n in range(3)]
    for d in bins:
        d.mkdir()
    source.write_text("int main(void) { return 3; }\n")
    for d in bins[:2]:
        assert build("cc", source, d / "exit", d / "exit.sha", "v1") is None
        assert staticbuild.current(d / "exit", d / "exit.sha", "v1")
        assert subprocess.run([d / "exit"], check=False).returncode == 3
    assert len(compiles) == 1  # the second bin dir got a copy
    source.write_text("int main(void) { return 5; }\n")
    assert build("cc", source, bins[2] / "exit", bins[2] / "exit.sha", "v2") is None
    assert len(compiles) == 2
    assert subprocess.run([bins[2] / "exit"], check=False).returncode == 5
    assert staticbuild.current(bins[2] / "exit", bins[2] / "exit.sha", "v2")
