"""The host view's /proc hole (issue 27 residue, issue 31): a gateway-host command saw the state dir as an
empty tmpfs, yet /proc/<gateway pid>/root (and the cwd and fds of the gateway and its session hosts) led
into the host's mount namespace, where it is not covered: the operator's token was one `cat` away. Every
host command now has a PID namespace and a /proc of its own, where no such pid exists."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from engine.commands.pinned import pinned_view
from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


def _walk(state: Path) -> str:
    """Every pid's root, cwd and open files, searched for the state dir's files."""
    return (
        "for p in /proc/[0-9]*; do "
        f"cat $p/root{state}/operator.json $p/cwd/operator.json; "
        'for f in $p/fd/*; do l=$(readlink "$f"); '
        f'case "$l" in {state}*) echo "FD $f -> $l"; [ -f "$f" ] && head -c 65536 "$f";; esac; done; '
        "done 2>/dev/null; echo walked"
    )


@needs_bwrap
async def test_proc_of_the_gateway_and_session_hosts_leads_nowhere(state_dir: Path, tmp_path: Path) -> None:
    # The session host running it holds this very command's spool file, in the state dir, open.
    details = await attempt(state_dir, _walk(state_dir), config=FULL, workdir=str(tmp_path))
    text = details["_text"]
    token = str(json.loads((state_dir / "operator.json").read_text())["token"])
    assert details["status"] == "completed" and text.rstrip().endswith("walked"), text
    assert token not in text
    assert "FD " not in text  # no open file of the state dir is in reach


@needs_bwrap
def test_a_pinned_run_has_its_own_proc_too(state_dir: Path, tmp_path: Path) -> None:
    """A run with pinned copies takes its own bwrap: the same /proc of its own there."""
    (state_dir / "operator.json").write_text('{"token": "pinned-secret"}')
    holder = os.open(state_dir / "operator.json", os.O_RDONLY)  # this process: the gateway's place
    script = tmp_path / "s.sh"
    script.write_text("true\n")
    view = pinned_view(None, [(str(script), b"true\n")], host=True)
    try:
        argv = view.wrap(["/bin/sh", "-c", _walk(state_dir)])
        done = subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, check=False, pass_fds=view.fds
        )
    finally:
        view.close()
        os.close(holder)
    assert done.stdout.rstrip().endswith("walked"), done.stderr
    assert "pinned-secret" not in done.stdout and "FD " not in done.stdout
