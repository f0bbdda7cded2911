"""What fresh round 10 b's constructions cost: a session's output log that looks at its filesystem's room
(engine.sessions.diskroom) against the same log with the room never looked at, in the same run; a bwrap
sandbox's user namespace made with its inotify maxima (engine.sandbox.usershare) against a bare
`unshare --user --map-root-user true`; an agent's capped private dirs mounted (engine.commands.privatefs,
once per agent) against a plain mkdir."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.commands import privatefs
from engine.sandbox import usershare
from engine.sessions import diskroom
from engine.sessions.output import SessionOutput

CHUNK = b"x" * (1 << 20)
CHUNKS = 256  # 256 MiB through the log, as the session host's reader hands it over


def millis(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e6)
    return statistics.median(samples)


def flood(where: Path, room: bool) -> None:
    out = SessionOutput(where / "s.log", log_cap=1 << 40)
    if not room:
        out._room.take = lambda fd, size: True  # type: ignore[method-assign]
        out._room.holds = lambda size: True  # type: ignore[method-assign]
    for _ in range(CHUNKS):
        out.feed("stdout", CHUNK)
    out.close(delete=True)


def main() -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR", "/tmp")) as tmp:
        where = Path(tmp)
        for run in range(3):
            base = millis(lambda: flood(where, False), 3)
            room = millis(lambda: flood(where, True), 3)
            print(f"run {run + 1}: 256 MiB logged: {room:.1f} ms looking at the room, {base:.1f} ms not")
        print(f"reserve here: {diskroom.reserve(os.statvfs(where))[0] >> 10} KiB")
    unshare = shutil.which("unshare")
    if os.geteuid() == 0 and unshare:
        for run in range(3):
            bare = millis(
                lambda: subprocess.run([unshare, "--user", "--map-root-user", "true"], check=True), 20
            )
            made = millis(lambda: os.close(usershare.user_namespace() or os.open("/", os.O_RDONLY)), 20)
            print(f"run {run + 1}: a sandbox's user namespace: {made:.2f} ms (bare unshare: {bare:.2f} ms)")
        with tempfile.TemporaryDirectory() as tmp:
            made = [0]

            def mount_once() -> None:
                made[0] += 1
                top = os.path.join(tmp, f"a{made[0]}")
                os.mkdir(top, 0o700)
                privatefs.ensure(top, tmp)
                subprocess.run(["umount", top], check=True)

            for run in range(3):
                plain = millis(lambda: os.rmdir(tempfile.mkdtemp(dir=tmp)), 20)
                mounted = millis(mount_once, 20)
                print(f"run {run + 1}: private dirs mounted: {mounted:.2f} ms (mkdir: {plain:.3f} ms)")


if __name__ == "__main__":
    main()
