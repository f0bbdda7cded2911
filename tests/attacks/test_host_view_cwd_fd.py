"""The cwd check's directory fd (engine.commands.pinned.in_checked_cwd) was opened in the gateway, in the
host's mount namespace, and stayed open in the command: `/proc/self/fd/N/..` walks the host's mounts,
where the state dir is not covered, so any host command read the operator's token through it. The fd is
checked and closed before the command runs: nothing of the host's namespace is left open in the view."""

from __future__ import annotations

import json
from pathlib import Path

from tests.attacks.harness import attempt
from tests.helpers.bwrap import needs_bwrap

FULL = '[tools.exec]\nhost = "gateway"\nsecurity = "full"\nask = "off"\n'


@needs_bwrap
async def test_no_directory_of_the_hosts_namespace_is_open(state_dir: Path, tmp_path: Path) -> None:
    up = "../" * 32  # past the root of whatever mount the fd is on, to the host's /
    command = (
        f"for f in /proc/self/fd/*; do cat $f/{up}{str(state_dir).lstrip('/')}/operator.json; "
        '[ -d "$f" ] && echo "DIR $f -> $(readlink $f)"; done 2>/dev/null; echo walked'
    )
    details = await attempt(state_dir, command, config=FULL, workdir=str(tmp_path))
    token = str(json.loads((state_dir / "operator.json").read_text())["token"])
    assert details["status"] == "completed" and "walked" in details["_text"]
    assert token not in details["_text"]
    assert "DIR " not in details["_text"], details["_text"]
