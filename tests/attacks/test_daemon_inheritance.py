"""What an agent's client hands the gateway it autostarts: nothing but its environment's allowed keys. A
client that starts it with no address-space randomisation, a blocked SIGTERM, an ignored SIGCHLD, core dumps
on and a tiny file-size limit once gave all of that to the gateway (its memory holds every token; an ignored
SIGCHLD takes every run's exit status; a blocked SIGTERM makes `gateway stop` wait out its grace) and to
every run it starts. The daemon now settles its own process state first (runner/daemonproc.py)."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers.gateway import FULL, REPO, cli, write_config

ADDR_NO_RANDOMIZE = 0x0040000
SMALL = 1 << 20


def _hostile_starter() -> None:
    """In the client's process before it execs: what a hostile agent controls about its own process."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.personality(ADDR_NO_RANDOMIZE)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_FSIZE, (SMALL, resource.RLIM_INFINITY))


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (ln.partition(":") for ln in lines)}


def _limit(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return line[len(name) :].split()[0]
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


def test_an_autostarted_gateway_takes_nothing_of_its_starters_process_state(state_dir: Path) -> None:
    write_config(state_dir, FULL)
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state_dir), "PYTHONPATH": str(REPO)}
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "runner", "exec", "--json", "--", "echo $$; exit 3"],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_hostile_starter,
        )
        assert ran.returncode == 3, ran.stdout + ran.stderr  # a run's exit status is known (no SIGCHLD lost)
        status = json.loads(cli(state_dir, "gateway", "status", "--json").stdout)
        pid = int(status["details"]["pid"])
        personality = int(Path(f"/proc/{pid}/personality").read_text(), 16)
        assert personality & ADDR_NO_RANDOMIZE == 0, hex(personality)
        proc = _status(pid)
        ignored, blocked = int(proc["SigIgn"], 16), int(proc["SigBlk"], 16)
        for sig in (signal.SIGCHLD, signal.SIGHUP):
            assert not ignored & (1 << (sig - 1)), f"{sig.name} ignored: {proc['SigIgn']}"
        assert blocked == 0, proc["SigBlk"]
        assert _limit(pid, "Max core file size") == "0"
        assert _limit(pid, "Max file size") == "unlimited"
        # and a run it starts takes none of it either
        probe = "cat /proc/self/personality; grep -E '^Sig(Blk|Ign)' /proc/self/status"
        child = cli(state_dir, "exec", "--workdir", "/tmp", "--", probe)
        text = child.stdout
        assert int(text.split()[0], 16) & ADDR_NO_RANDOMIZE == 0, text
        assert "SigBlk:\t0000000000000000" in text, text
    finally:
        stopped = cli(state_dir, "gateway", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
