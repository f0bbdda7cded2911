"""Issue 28: a host file a sandbox process holds open is not reopened for writing.

bwrap's init (pid 1) and the supervisor held the sandbox's failure log (the keeper's stderr, a file in the
state dir) as fd 2, and a sandbox command may open /proc/<pid>/fd/2 of a process of its own uid: it
appended to a host file with no tmpfs cap on its size (the host's disk). bwrap's stderr is now a pipe whose
last 4 KiB reach the log when the sandbox ends, on any kernel (landlock refused that reopen too, but not
every kernel has it).
"""

from __future__ import annotations

import os

import pytest

from engine.sandbox import SandboxManager, bwraprecords, prepare_exec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

pytestmark = [pytest.mark.bwrap, needs_bwrap]
__all__ = ["bwrap_mgr"]

FLOOD = (
    "for p in /proc/[0-9]*; do t=$(readlink $p/fd/2); case $t in pipe:*|*.log) echo held; "
    "head -c 1048576 /dev/zero >> $p/fd/2 && echo wrote; echo pwned >> $p/fd/2 ;; esac; done"
)


@pytest.mark.parametrize("layer", ["true", "false"])
async def test_the_sandbox_log_takes_no_flood_through_proc(bwrap_mgr: SandboxManager, layer: str) -> None:
    config = bwrap_config(f"[agents.defaults.sandbox.bwrap]\nlandlock = {layer}")
    sx = await prepare_exec(config, "main", "s", None, manager=bwrap_mgr)
    _, out, _ = await run(sx, FLOOD)
    assert "held" in out, out
    assert os.path.getsize(bwraprecords.runtime_dir() / f"{sx.container}.log") <= 4096  # not the host's disk
