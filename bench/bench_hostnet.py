"""What an agent's own network namespace costs a gateway-host run (engine.commands.hostnet): `sh -c true`
spawned plainly, in the kept host view in the host's network (hostNetwork = "host"), in the kept view in
the agent's own (hostNetwork = "own": exechost-hostenter `netns` first, a setns), and in a bwrap of its own
with and without it; plus making the namespace, once per agent and gateway. Same run, three rounds
interleaved; wall p50 (the middle round's) and the children's CPU per run.

Usage: .venv/bin/python bench/bench_hostnet.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record, scratch_state, spawn_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    root = scratch_state("ehn-")
    from engine.commands import hostkeeper, hostnet, hostoutside, hostview
    from engine.commands.pinned import pinned_view

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        helper = hostkeeper.helper_path()
        if helper is None:
            print("exechost-hostenter is not built (bash scripts/setup.sh): nothing to compare")
            return
        state = str(root / "s")
        made = []
        for n in range(5):
            t0 = time.perf_counter()
            hostnet.ensure(state, f"a{n}", helper)
            made.append((time.perf_counter() - t0) * 1000)
        shared = hostoutside.Outside()
        own = hostoutside.Outside(net_agent="main")
        views = {
            "kept, host network": pinned_view(None, host=True, outside=shared),
            "kept, own network": pinned_view(None, host=True, outside=own),
        }
        kept_prefix = hostview.kept_prefix
        hostview.kept_prefix = lambda *_a, **_k: None  # type: ignore[assignment]  # a bwrap per run
        views["bwrap, host network"] = pinned_view(None, host=True, outside=shared)
        views["bwrap, own network"] = pinned_view(None, host=True, outside=own)
        hostview.kept_prefix = kept_prefix  # type: ignore[assignment]
        true = ["/bin/sh", "-c", "true"]
        results: dict[str, tuple[list[float], list[float]]] = {}
        for _ in range(3):  # interleaved, so a change in load falls on all of them alike
            runs = [("plain", true, ())] + [(k, v.wrap(true), v.fds) for k, v in views.items()]
            for name, argv, fds in runs:
                wall, cpu = spawn_cost(argv, fds, args.runs // 3)
                old = results.get(name, ([], []))
                results[name] = (old[0] + [wall], old[1] + [cpu])
        for view in views.values():
            view.close()
        p = {name: sorted(w)[1] for name, (w, _) in results.items()}
        c = {name: sum(cs) / len(cs) for name, (_, cs) in results.items()}
        for name in results:
            print(f"{name:<20} `sh -c true` wall p50 {p[name]:6.2f} ms, children CPU {c[name]:5.2f} ms/run")
        making = sorted(made)[2]
        print(f"making an agent's network namespace (netkeep, no egress hub): median {making:.2f} ms of 5")
        for name, base in (
            ("kept, own network", "kept, host network"),
            ("kept, own network", "plain"),
            ("bwrap, own network", "bwrap, host network"),
        ):
            record(
                f"host run in the agent's own netns: {name}, p50 (vs {base})",
                f"{p[name]:.2f} ms",
                f"{p[base]:.2f} ms",
                ratio(p[name], p[base]),
            )
    finally:
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
