"""What fresh round 10 a's constructions cost a gateway-host run (issue 27 §1): the kept view's `sh -c
true` with this tree's exechost-hostenter (a fresh session keyring, an IPC namespace of its own, a private
mount namespace) against the same with the helper built from the tree at git ref `--base` (main); a bwrap
per run with `--unshare-ipc` against without; and the view's new per-run reads (the programs the
operator's git and ssh configs run, the home's bound sockets, missing PATH dirs) against `view_args` whole.

Usage: .venv/bin/python bench/bench_round10a.py [--runs N] [--base main]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import ratio, record, spawn_ms

ROOT = Path(__file__).resolve().parent.parent


def per_call_us(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm: caches filled as a running gateway has them
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t0) * 1e6 / runs


def build(tree: Path, out: Path) -> str:
    """The helper of the checkout at `tree`: its engine/commands/hostenter/*.c, or the one hostenter.c of a
    tree from before the split."""
    split = sorted(str(c) for c in (tree / "engine" / "commands" / "hostenter").glob("*.c"))
    sources = split or [str(tree / "engine" / "commands" / "hostenter.c")]
    subprocess.run(["cc", "-O2", "-Wall", "-o", str(out), *sources], check=True)
    return str(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--base", default="main")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ehr-", dir="/tmp"))
    (root / "s").mkdir(mode=0o700)
    home = root / "h"
    home.mkdir(mode=0o700)
    os.environ["OPENCLAW_STATE_DIR"] = str(root / "s")
    os.environ["HOME"] = str(home)
    team = root / "team"
    team.mkdir()
    (home / ".gitconfig").write_text(
        f"[credential]\n\thelper = {team}/cred\n[core]\n\tpager = {team}/pager\n"
        f"[diff]\n\texternal = sh {team}/d\n"
    )
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "config").write_text(f'Match exec "{team}/on-vpn"\n  ProxyCommand {team}/proxy %h\n')
    (home / ".cache").mkdir()
    master = socket.socket(socket.AF_UNIX)
    master.bind(str(home / ".cache" / "cm"))  # an ssh master under the home: one socket to cover
    from engine.commands import homesockets, hostkeeper, hosttrust, hostview
    from engine.commands.pinned import pinned_view

    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}")
        bwrap = shutil.which("bwrap")
        if bwrap is None or shutil.which("cc") is None:
            print("needs bwrap and cc")
            return
        # the base's engine/commands as it was (one hostenter.c, or the hostenter/ dir after the split)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.base, "engine/commands"], capture_output=True, check=True
        ).stdout
        (root / "base-tree").mkdir()
        subprocess.run(["tar", "-x", "-C", str(root / "base-tree")], input=archive, check=True)
        helpers = {"this": build(ROOT, root / "this"), "base": build(root / "base-tree", root / "base")}
        true = ["/bin/sh", "-c", "true"]
        # one kept view (made and sealed by this helper), entered by this helper or by the base's: the
        # base's `enter` is the same words, without the keyring, the IPC namespace and the private copy
        os.environ[hostkeeper.HELPER_ENV] = helpers["this"]
        hostkeeper.stop()
        view = pinned_view(None, host=True)
        this_argv = view.wrap(true)
        assert this_argv[0] == os.path.realpath(helpers["this"]) and this_argv[1] == "enter", this_argv
        argvs = {"this": this_argv, "base": [os.path.realpath(helpers["base"]), *this_argv[1:]]}
        plain_bwrap = [bwrap, "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--", "/bin/true"]
        ipc_bwrap = [*plain_bwrap[:5], "--unshare-ipc", *plain_bwrap[5:]]
        res: dict[str, list[float]] = {}
        for _ in range(3):  # interleaved: a change in load falls on all alike
            for name, argv in argvs.items():
                res.setdefault(name, []).append(spawn_ms(argv, args.runs // 3, view.fds))
            res.setdefault("bwrap", []).append(spawn_ms(plain_bwrap, args.runs // 3))
            res.setdefault("bwrap ipc", []).append(spawn_ms(ipc_bwrap, args.runs // 3))
        # the seal, once per keeper made: one more helper spawn (its setns and one mount call)
        (keeper,) = hostkeeper._keepers.values()
        user = "-" if keeper.user is None else str(keeper.user)
        fds = (keeper.ns,) if keeper.user is None else (keeper.ns, keeper.user)
        seal = spawn_ms([helpers["this"], "seal", str(keeper.ns), user], args.runs, fds)
        spawn = spawn_ms(["/bin/true"], args.runs)
        view.close()
        hostkeeper.stop()
        m = {k: sorted(v)[1] for k, v in res.items()}
        record(
            "kept view `sh -c true` with keyring, IPC ns, private mounts, p50 (vs the base's helper)",
            f"{m['this']:.2f} ms", f"{m['base']:.2f} ms", ratio(m["this"], m["base"]),
        )  # fmt: skip
        record(
            "a bwrap per run with --unshare-ipc, p50 (vs without)",
            f"{m['bwrap ipc']:.2f} ms", f"{m['bwrap']:.2f} ms", ratio(m["bwrap ipc"], m["bwrap"]),
        )  # fmt: skip
        record(
            "sealing a keeper's namespace private, once per keeper made, p50 (vs spawning /bin/true)",
            f"{seal:.2f} ms", f"{spawn:.2f} ms", ratio(seal, spawn),
        )  # fmt: skip
        state = str(root / "s")
        whole = per_call_us(lambda: hostview.view_args(state), args.runs)
        programs = per_call_us(hosttrust.config_programs, args.runs)
        sockets = per_call_us(lambda: homesockets.home_sockets(str(home), [state]), args.runs)
        paths = per_call_us(lambda: hostview._make_path_dirs(str(home), state, None), args.runs)
        for what, us in (
            ("the programs the configs run (5 named, cached)", programs),
            ("the home's bound sockets (/proc/net/unix, 1 dir read)", sockets),
            ("missing PATH dirs (one stat each)", paths),
        ):
            metric = f"view_args' part: {what}, per run (vs view_args whole)"
            record(metric, f"{us:.0f} us", f"{whole:.0f} us", ratio(us, whole))
    finally:
        master.close()
        hostkeeper.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
