"""Issue 28, the landlock layer: a host file a sandbox process holds open is not reopened for writing.

bwrap's init (pid 1) and the supervisor hold the sandbox's failure log (the keeper's stderr, a file in the
state dir) as fd 2, and a sandbox command may open /proc/<pid>/fd/2 of a process of its own uid: without the
layer it appends to a host file with no tmpfs cap on its size (the host's disk) and writes what `sandbox
explain`/a failed start shows the operator. Under landlock the file is in no rule: refused.
"""

from __future__ import annotations

import pytest

from engine.sandbox import SandboxManager, bwrap, landlock, prepare_exec
from tests.helpers.bwrap import bwrap_config, bwrap_mgr, needs_bwrap, run

needs_landlock = pytest.mark.skipif(landlock.kernel_abi()[0] < 1, reason="this kernel offers no landlock")
needs_cc = pytest.mark.skipif(landlock._compiler() is None, reason="no C compiler to build the helper")
pytestmark = [pytest.mark.bwrap, needs_bwrap, needs_landlock, needs_cc]
__all__ = ["bwrap_mgr"]


async def test_the_sandbox_log_is_not_reopened_through_proc(bwrap_mgr: SandboxManager) -> None:
    sx = await prepare_exec(bwrap_config(), "main", "s", None, manager=bwrap_mgr)
    _, out, _ = await run(
        sx,
        "for p in /proc/[0-9]*; do case $(readlink $p/fd/2) in *.log) "
        "echo held; echo pwned >> $p/fd/2 && echo wrote ;; esac; done",
    )
    assert "held" in out and "wrote" not in out, out
    assert "pwned" not in bwrap.failure(sx.container)
