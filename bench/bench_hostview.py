"""The host view's cost at the spawn, hop by hop (issue 31): `sh -c true` plainly, entered into the kept
view (engine.commands.hostkeeper: exechost-hostenter, setns, its own PID namespace, /proc and /dev/pts),
and in a bwrap of its own per run (as every run was before, and as a run with pinned copies still is: the
helper's own-pts before it, check-cwd after); plus what making the keeper costs, once per state dir. The
same three as PTY sessions started the session host's way (engine.sessions.host_spawn.start), in the view
with their terminal made in its own /dev/pts (issue 27). Wall p50 and the children's CPU per run, same run.

Usage: .venv/bin/python bench/bench_hostview.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record
from engine.commands.pinned import PinnedView
from engine.sessions import host_spawn


def spawn(argv: Sequence[str], fds: Sequence[int], runs: int) -> tuple[float, float]:
    """(wall p50 ms, children's CPU ms per run) of `runs` spawns of argv."""
    walls = []
    before = os.times()
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, pass_fds=fds)
        walls.append(time.perf_counter() - t0)
    after = os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return sorted(walls)[len(walls) // 2] * 1000, cpu * 1000 / runs


def spawn_pty(view: PinnedView | None, runs: int) -> tuple[float, float]:
    """(wall p50 ms, children's CPU ms per run) of `runs` PTY sessions of `sh -c true` started as the
    session host starts them (engine.sessions.host_spawn), in `view` (None: plainly), each to its exit."""
    walls = []
    before = os.times()
    for _ in range(runs):
        t0 = time.perf_counter()
        argv = ["/bin/sh", "-c", "true"]
        fds: list[int] = []
        in_view = False
        if view is not None:
            turn = PinnedView(view.prefix, fds=view.fds)  # the same namespace fds every run, kept open
            in_view = turn.terminal()  # the terminal made in the view (as a PTY session has it)
            argv, fds = turn.wrap(argv), list(turn.fds)
        msg = {"argv": argv, "env": dict(os.environ), "pty": True, "ptyInView": in_view, "fds": fds}
        started = host_spawn.start(msg, fds)
        started.popen.wait()
        for fd in started.streams:
            os.close(fd)
        walls.append(time.perf_counter() - t0)
    after = os.times()
    cpu = after.children_user + after.children_system - before.children_user - before.children_system
    return sorted(walls)[len(walls) // 2] * 1000, cpu * 1000 / runs


def ops_cost(runs: int) -> dict[str, float]:
    """ms per call of the view's operations (hostview.view_args, what every run computes before it enters
    the kept view): with no git includes, with three (an include, an includeIf, an include of an include)
    cached by their bytes, and with the cache emptied before each call (git asked per file)."""
    from engine.commands import bindsource, hostoutside, hosttrust, hostview

    state, home = os.environ["OPENCLAW_STATE_DIR"], Path(os.environ["HOME"])

    def per_call(fn: Callable[[], object], n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) * 1000 / n

    found = {"no includes": per_call(lambda: hostview.view_args(state), runs)}
    # what a run in a bwrap of its own adds (round 8 q): every bind's source opened along its path, no
    # link followed, checked on the fd; and the import paths read from the interpreter, alone
    found["by fd, no includes"] = per_call(lambda: bindsource.close(hostview.view_by_fd(state)[1]), runs)
    found["import paths alone"] = per_call(hosttrust.import_paths, runs)
    (home / ".gitconfig").write_text('[include]\n\tpath = a.inc\n[includeIf "gitdir:~/w/"]\n\tpath = b.inc\n')
    (home / "a.inc").write_text("[include]\n\tpath = c.inc\n")
    assert len(hosttrust.git_includes()) == 3
    found["includes, cached"] = per_call(lambda: hostview.view_args(state), runs)
    found["includes, uncached"] = per_call(
        lambda: (hosttrust._INCLUDES.clear(), hostview.view_args(state)), max(runs // 10, 5)
    )
    for name in (".gitconfig", "a.inc"):
        (home / name).unlink()
    # ~/.ssh covered by a read-only copy of its entries (engine.commands.dirshadow): ten files, one hidden key
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    for n in range(10):
        (ssh / f"f{n}").write_text("x\n")
    key = hostoutside.Outside(hidden=(str(ssh / "f0"),))
    found["~/.ssh of 10 files covered"] = per_call(lambda: hostview.view_args(state, None, key), runs)
    for entry in ssh.iterdir():
        entry.unlink()
    ssh.rmdir()
    # the agent's private dirs (engine.commands.hostprivate): found and made per run (host_outside), and
    # their binds among the view's operations
    from engine.commands import hostprivate

    found["private dirs found and made"] = per_call(
        lambda: hostprivate.binds(state, "main", hostprivate.dests(None)), runs
    )
    private = hostoutside.Outside(private=hostprivate.binds(state, "main", hostprivate.dests(None)))
    found["private dirs bound"] = per_call(lambda: hostview.view_args(state, None, private), runs)
    # the container engines' state dirs (engine.tools.enginestate): a stat per known dir and the local
    # engine's flags read from its process, per host_outside; the baseline is the private dirs' row above
    from engine.tools import enginestate

    found["engine state dirs found"] = per_call(enginestate.state_dirs, runs)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehv-", dir="/tmp"))
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(root / "h")
    (root / "s").mkdir(mode=0o700)
    (root / "h").mkdir(mode=0o700)
    from engine.commands import hostkeeper, hostoutside, hostview
    from engine.commands.pinned import pinned_view

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        if hostkeeper.helper_path() is None:
            print("exechost-hostenter is not built (bash scripts/setup.sh): nothing to compare")
            return
        made = []
        for _ in range(5):
            hostkeeper.stop()
            t0 = time.perf_counter()
            pinned_view(None, host=True).close()
            made.append((time.perf_counter() - t0) * 1000)
        kept = pinned_view(None, host=True)
        kept_prefix = hostview.kept_prefix
        # a bwrap of its own per run, as a run with pinned copies has it (the helper inside it)
        hostview.kept_prefix = lambda *_a, **_k: None  # type: ignore[assignment]
        own = pinned_view(None, host=True)
        hostview.kept_prefix = kept_prefix  # type: ignore[assignment]
        # a run whose workdir is a project in the home: read-only there now (only hostWritable is writable),
        # so it enters the kept view (before round 7 n that dir was bound writable in a bwrap of its own)
        (root / "h" / "proj").mkdir()
        home_run = pinned_view(None, host=True, outside=hostoutside.Outside(workdir=str(root / "h" / "proj")))
        # every agent's own /tmp, /var/tmp, /dev/shm, ... (engine.commands.hostprivate: the default set,
        # present here): bound in its kept view; a workdir in one takes a bwrap of its own (--chdir)
        from engine.commands import hostprivate

        binds = hostprivate.binds(str(root / "s"), "main", hostprivate.dests(None))
        private_kept = pinned_view(None, host=True, outside=hostoutside.Outside(private=binds))
        (Path(binds[0][0]) / "proj").mkdir(exist_ok=True)
        in_private = hostoutside.Outside(private=binds, chdir=os.path.join(binds[0][1], "proj"))
        private_cwd = pinned_view(None, host=True, outside=in_private)
        true = ["/bin/sh", "-c", "true"]
        results: dict[str, tuple[list[float], list[float]]] = {}
        for _ in range(3):  # interleaved, so a change in load falls on all of them alike
            for name, argv, fds in (
                ("plain", true, ()),
                ("kept", kept.wrap(true), kept.fds),
                ("own bwrap", own.wrap(true), own.fds),
                ("home workdir", home_run.wrap(true), home_run.fds),
                ("kept, private", private_kept.wrap(true), private_kept.fds),
                ("private cwd", private_cwd.wrap(true), private_cwd.fds),
            ):
                wall, cpu = spawn(argv, fds, args.runs // 3)
                old = results.get(name, ([], []))
                results[name] = (old[0] + [wall], old[1] + [cpu])
            for name, view in (("plain pty", None), ("kept pty", kept), ("own bwrap pty", own)):
                wall, cpu = spawn_pty(view, args.runs // 3)
                old = results.get(name, ([], []))
                results[name] = (old[0] + [wall], old[1] + [cpu])
        kept.close()
        own.close()
        home_run.close()
        private_kept.close()
        private_cwd.close()
        p = {name: sorted(w)[1] for name, (w, _) in results.items()}
        c = {name: sum(cs) / len(cs) for name, (_, cs) in results.items()}
        for name in results:
            print(f"{name:<14} `sh -c true` wall p50 {p[name]:6.2f} ms, children CPU {c[name]:5.2f} ms/run")
        print(f"making the keeper (bwrap + keep + ns fds): median {sorted(made)[2]:.2f} ms of 5")
        rows = [  # (what, measured, its baseline)
            ("host view, kept: `sh -c true` spawned, p50 (vs plain `sh -c true`)", "kept", "plain"),
            (
                "host view, a bwrap per run (pinned runs; every run before issue 31), p50 (vs plain)",
                "own bwrap",
                "plain",
            ),
            (
                "host view, workdir in the home (read-only, not under hostWritable: kept view), p50 "
                "(vs plain)",
                "home workdir",
                "plain",
            ),
            (
                "host view, kept: a PTY session of `sh -c true`, p50 (vs a plain PTY session)",
                "kept pty",
                "plain pty",
            ),
            (
                "host view, a bwrap per run: a PTY session of `sh -c true`, p50 (vs a plain PTY session)",
                "own bwrap pty",
                "plain pty",
            ),
            (
                f"host view, kept, {len(binds)} private dirs of the agent's (/tmp, ...), p50 (vs kept, none)",
                "kept, private",
                "kept",
            ),
            (
                "host view, workdir in a private dir (a bwrap per run, --chdir), p50 (vs a bwrap per run)",
                "private cwd",
                "own bwrap",
            ),
        ]
        for what, name, base in rows:
            record(what, f"{p[name]:.2f} ms", f"{p[base]:.2f} ms", ratio(p[name], p[base]))
        record("  host view: making the keeper, once per state dir and view", f"{sorted(made)[2]:.2f} ms")
        ops = ops_cost(args.runs)
        for name, ms in ops.items():
            print(f"view ops, {name:<34} {ms * 1000:8.1f} us per run")
        record(
            "host view: its operations per run, 3 git includes, cached (vs no includes)",
            f"{ops['includes, cached'] * 1000:.0f} us",
            f"{ops['no includes'] * 1000:.0f} us",
            ratio(ops["includes, cached"], ops["no includes"]),
        )
        record(
            "host view: its operations by fd per run in a bwrap of its own (vs by path)",
            f"{ops['by fd, no includes'] * 1000:.0f} us",
            f"{ops['no includes'] * 1000:.0f} us",
            ratio(ops["by fd, no includes"], ops["no includes"]),
        )
        record(
            "  host view: the gateway's import paths, read per view",
            f"{ops['import paths alone'] * 1000:.0f} us",
        )
        uncached = ops["includes, uncached"] * 1000
        record("  host view: asking git for 3 includes, uncached", f"{uncached:.0f} us")
        record(
            "host view: its operations per run, the agent's private dirs bound (vs none)",
            f"{ops['private dirs bound'] * 1000:.0f} us",
            f"{ops['no includes'] * 1000:.0f} us",
            ratio(ops["private dirs bound"], ops["no includes"]),
        )
        record(
            "  host view: the agent's private dirs found and made, per run",
            f"{ops['private dirs found and made'] * 1000:.0f} us",
        )
        record(
            "host view: its operations per run, ~/.ssh of 10 files covered (vs no ~/.ssh)",
            f"{ops['~/.ssh of 10 files covered'] * 1000:.0f} us",
            f"{ops['no includes'] * 1000:.0f} us",
            ratio(ops["~/.ssh of 10 files covered"], ops["no includes"]),
        )
    finally:
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
