"""Fresh attacks on issue 27's constructions (classes 4, 5, 6, 8), through the real gateway.

Each test is an attack: it fails while the hole is open. An allowlisted host tool must never run code
from a tree the agent can write without a human seeing it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.gateway import ALLOWLIST, cli, connect, gateway, write_config

GIT_ID = ["-c", "user.email=a@b", "-c", "user.name=a"]


def allow(state: Path, pattern: str, arg_pattern: str | None = None) -> None:
    args = ["approvals", "allowlist", "add", pattern]
    if arg_pattern is not None:
        args += ["--arg-pattern", arg_pattern]
    done = cli(state, *args)
    assert done.returncode == 0, done.stderr


async def agent_exec(state: Path, command: str, workdir: Path, **extra: Any) -> dict[str, Any]:
    """The agent's exec through a real gateway with nobody to approve: an ask is denied (askFallback)."""
    async with gateway(state):
        client = await connect(state, operator=False)
        try:
            return await client.request(
                "exec", {"command": command, "workdir": str(workdir), "timeout": 60, **extra}
            )
        except Exception as exc:  # a denial: the command did not run
            return {"error": str(exc)}
        finally:
            await client.close()


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True)


async def test_class4_make_remakes_a_missing_makefile_from_the_tree(state_dir: Path, tmp_path: Path) -> None:
    """No Makefile, so nothing for the tree vetting to name; but make's built-in rule `%: %.sh` remakes the
    missing default makefile from `Makefile.sh` and then runs the recipes it holds."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^test$")
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    (work / "Makefile.sh").write_text(f"test:\n\ttouch {marker}\n")
    result = await agent_exec(state_dir, "make test", work)
    assert not marker.exists(), result


async def test_class5_git_recurses_into_a_submodule_no_gitmodules_names(
    state_dir: Path, tmp_path: Path
) -> None:
    """git status recurses into every gitlink of the index that holds a repository, listed in
    .gitmodules or not; the vetting followed .gitmodules only, so the submodule's filter ran unasked."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/git", "^status( --short)?$")
    top = tmp_path / "top"
    marker = tmp_path / "pwned"
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    git(top, "commit", "-q", "--allow-empty", "-m", "init")
    sub = top / "sub"
    subprocess.run(["git", "init", "-q", str(sub)], check=True)
    (sub / "f").write_text("a\n")
    git(sub, "add", "f")
    git(sub, "commit", "-q", "-m", "s")
    git(top, "add", "sub")
    git(top, "commit", "-q", "-m", "gitlink")
    assert not (top / ".gitmodules").exists()
    (sub / ".gitattributes").write_text("* filter=x\n")
    git(sub, "config", "filter.x.clean", f"sh -c 'touch {marker}; cat'")
    (sub / "f").write_text("b\n")
    os.utime(sub / "f", (1_500_000_000, 1_500_000_000))
    result = await agent_exec(state_dir, "git status --short", top)
    assert not marker.exists(), result
