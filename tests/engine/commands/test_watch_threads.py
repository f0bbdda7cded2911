"""Issue 35 item 4: decisions run on several threads at once (asyncio.to_thread, the offload thread); the
caches and the inotify watcher they share must hold under that."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.commands import which
from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
from engine.commands.analysis import analyze_command
from engine.config.loader import load_config_text
from engine.policy.decision import evaluate

THREADS = 8
ROUNDS = 300


def run_together(work: list[threading.Thread]) -> None:
    for t in work:
        t.start()
    for t in work:
        t.join()


def test_watch_changed_from_many_threads_at_once(tmp_path: Path) -> None:
    """`select.poll` objects refuse concurrent `poll()` calls ("concurrent poll() invocation")."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    which.resolve("tool", str(tmp_path), str(bindir))  # watches bindir
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS + 1)

    def poller() -> None:
        start.wait()
        try:
            for _ in range(ROUNDS * 10):
                which.WATCH.changed()
        except BaseException as exc:
            errors.append(exc)

    def changer() -> None:
        start.wait()
        for i in range(ROUNDS):
            (bindir / f"f{i % 7}").touch()
            (bindir / f"f{i % 7}").unlink()

    run_together(
        [threading.Thread(target=poller) for _ in range(THREADS)] + [threading.Thread(target=changer)]
    )
    assert errors == []


def test_decisions_from_many_threads_agree_with_the_file_system(tmp_path: Path) -> None:
    """Full decisions race a directory that changes under them: no thread fails, and once the changes stop
    every thread's next decision sees the final state (no stale cached answer survives a concurrent drain)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "tool"
    env = {"PATH": str(bindir)}
    entries = [AllowlistEntry(str(bindir / "*"))]
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS + 1)
    done = threading.Barrier(THREADS + 1)
    after: list[bool] = []
    config = load_config_text('[tools.exec]\nhost = "gateway"\nsecurity = "allowlist"\n', tmp_path / "c.toml")

    def decide() -> bool:
        result = evaluate_allowlist(analyze_command("tool --x"), entries, cwd=str(tmp_path), env=env)
        return bool(result.satisfied)

    def decider() -> None:
        start.wait()
        try:
            for _ in range(ROUNDS):
                decide()
                evaluate("tool", config=config, params={"host": "gateway"}, cwd=str(tmp_path), env=env)
        except BaseException as exc:
            errors.append(exc)
        done.wait()
        after.append(decide())

    def changer() -> None:
        start.wait()
        for _ in range(ROUNDS // 3):
            tool.write_text("#!/bin/sh\n")
            tool.chmod(0o755)
            tool.unlink()
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
        done.wait()

    run_together(
        [threading.Thread(target=decider) for _ in range(THREADS)] + [threading.Thread(target=changer)]
    )
    assert errors == []
    assert after == [True] * THREADS
    os.unlink(tool)
    assert not decide()


def test_a_reused_watch_number_never_blocks_and_never_trusts_the_cache(tmp_path: Path) -> None:
    """Code elsewhere in the process that closes a number it does not own can hand the watcher's fd
    number to a blocking pipe (this hung a decision thread for 300 s in CI). The watcher must notice the
    number is no longer its inotify file: no blocking read, and every cached answer dropped."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert which.resolve("tool", str(tmp_path), str(bindir)) is not None
    generation = which.WATCH.generation
    number = which.WATCH.fd
    os.close(number)  # the stray close
    r, w = os.pipe()  # a blocking pipe, moved onto the watcher's number
    try:
        if r != number:
            os.dup2(r, number)
        os.write(w, b"x")  # readable once: a loop of reads until EAGAIN would block on the second
        tool.unlink()  # an event the stolen number will never report
        assert which.WATCH.changed() is True
        assert which.WATCH.generation != generation
        assert which.WATCH.fd != number
        assert which.resolve("tool", str(tmp_path), str(bindir)) is None
        assert os.read(number, 1) == b"x"  # the pipe's byte is still the pipe owner's
    finally:
        os.close(w)
        if r != number:
            os.close(r)
        os.close(number)
