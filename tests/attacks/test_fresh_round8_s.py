"""Fresh round 8, attacker s: exechost's emulation of interpreters' option parsing (class 5), sealed copies of
approved scripts and what re-reads them (classes 6 and 8), and exechost's own durable state."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.helpers.bwrap import needs_bwrap
from tests.helpers.gateway import connect, gateway, wait_until, write_config

pytestmark = needs_bwrap


@pytest.fixture
def tree() -> Iterator[Path]:
    """The agent's work tree: outside the state dir and every workspace, owned by the gateway's user."""
    path = Path(tempfile.mkdtemp(prefix="r8s-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _always_then_again(
    state: Path, tree: Path, command: str, ran: Path, rewrite: Any
) -> dict[str, Any]:
    """Ask for `command`, have the operator answer allow-always, wait for the approved run (it makes `ran`),
    let the agent `rewrite()` its files, and run `command` again: its result's details."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            first = await client.request(
                "exec", {"command": command, "workdir": str(tree), "agentId": "main"}
            )
            assert first["details"]["status"] == "approval-pending", first["text"]
            assert "allow-always" in first["details"]["allowedDecisions"]
            await client.request(
                "approve", {"id": first["details"]["approvalId"], "decision": "allow-always"}
            )
            await wait_until(ran.exists, timeout=60)
            rewrite()
            again = await client.request(
                "exec", {"command": command, "workdir": str(tree), "agentId": "main"}
            )
        finally:
            await client.close()
    details: dict[str, Any] = again["details"]
    details["_text"] = again["text"]
    return details


def _unapproved_ran(details: dict[str, Any]) -> bool:
    return details["status"] == "completed" and "UNAPPROVED" in details.get("aggregated", "")


@pytest.mark.xfail(
    strict=True,
    reason="open: a `#!/usr/bin/node --require=./hook.js` line preloads hook.js, but the binder reads a #! "
    "line's option only through bindproof (which finds a FILE source and proves it bound), never through "
    "loaded_values as it does `node -r ./hook.js s.js` in the argv: hook.js is not bound, allow-always is "
    "offered, and a rewritten hook.js runs unasked under the saved approval",
)
async def test_class5_shebang_preload_of_an_executable_script_is_not_bound(
    tmp_path: Path, tree: Path
) -> None:
    script = tree / "s.js"
    script.write_text("#!/usr/bin/node --require=./hook.js\nconsole.log('approved s.js')\n")
    os.chmod(script, 0o755)
    hook = tree / "hook.js"
    hook.write_text("require('fs').writeFileSync('ran', 'x')\n")

    def rewrite() -> None:
        hook.write_text("console.log('hook UNAPPROVED')\n")

    details = await _always_then_again(tmp_path, tree, "./s.js", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details["_text"]


@pytest.mark.xfail(
    strict=True,
    reason="open: a `#!/usr/bin/python3 -mevilmod` line makes python run the module evilmod (from the cwd, "
    "sys.path[0] under -m) and never the script; in the argv `python3 -m x` is a program from a search path "
    "(no allow-always), but a #! line's MODULE source is read by nobody: allow-always is offered bound to "
    "s.py's bytes, which never run, and a rewritten evilmod.py runs unasked",
)
async def test_class5_shebang_dash_m_runs_a_module_the_approval_never_bound(
    tmp_path: Path, tree: Path
) -> None:
    script = tree / "s.py"
    script.write_text("#!/usr/bin/python3 -mevilmod\nprint('approved s.py')\n")
    os.chmod(script, 0o755)
    module = tree / "evilmod.py"
    module.write_text("import pathlib\npathlib.Path('ran').write_text('x')\n")

    def rewrite() -> None:
        module.write_text("print('evilmod UNAPPROVED')\n")

    details = await _always_then_again(tmp_path, tree, "./s.py", tree / "ran", rewrite)
    assert not _unapproved_ran(details), details["_text"]
