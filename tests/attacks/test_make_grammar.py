"""make's options, read the way make reads them (class 5: emulating another program).

The tree vetting named `-f FILE`, `-fFILE`, `--file=FILE` and each `-C DIR` on its own: make's getopt
also takes `-kf FILE` (a cluster), `--fil=FILE` (an unambiguous prefix), applies `-C` cumulatively and
reads `-f` relative to where `-C` left it, and a `MAKEFILES=` assignment on its command line names
makefiles it reads first. Each spelling made an allowlisted make run a Makefile nobody was asked about."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.attacks.test_fresh_round3 import agent_exec, allow
from tests.helpers.gateway import ALLOWLIST, connect, gateway, write_config


@pytest.mark.parametrize(
    ("command", "makefile"),
    [
        ("make -kf evil.mk test", "evil.mk"),
        ("make --fil=evil.mk test", "evil.mk"),
        ("make -C a -C b test", "a/b/Makefile"),
        ("make -C a -f evil.mk test", "a/evil.mk"),
        ("make test MAKEFILES=evil.mk", "evil.mk"),
    ],
)
async def test_an_allowlisted_make_reads_no_makefile_the_vetting_missed(
    state_dir: Path, tmp_path: Path, command: str, makefile: str
) -> None:
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make")
    work = tmp_path / "w"
    (work / "a" / "b").mkdir(parents=True)
    marker = tmp_path / "pwned"
    (work / makefile).write_text(f"test:\n\t@touch {marker}\n")
    result = await agent_exec(state_dir, command, work)
    assert not marker.exists(), result


HONEST = """ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
include $(ROOT)common.mk
test:
\t@echo root=$(ROOT) list=$(notdir $(MAKEFILE_LIST)) $(WORD)
"""


@pytest.mark.parametrize(
    ("command", "where"),
    [
        ("make test", "."),
        ("make -C sub test", "sub"),
        ("make -s -f build.mk test", "."),
        ("make -kfbuild.mk test", "."),
    ],
)
async def test_an_approved_make_reads_the_approved_bytes_under_the_makefiles_own_name(
    state_dir: Path, tmp_path: Path, command: str, where: str
) -> None:
    """make now reads a sealed copy (`-f /proc/self/fd/N`); an honest Makefile that finds its project
    from MAKEFILE_LIST (and includes a sibling) works as before, whatever spelling named it."""
    from tests.attacks.test_content_binding import approve_after

    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    name = "build.mk" if "build.mk" in command else "Makefile"
    (work / where / name).write_text(HONEST)
    (work / where / "common.mk").write_text("WORD := included\n")
    text = await approve_after(state_dir, command, work, lambda: None)
    root = os.path.realpath(work / where)
    assert f"root={root}/ list={name} common.mk included" in text, text


async def test_a_makefile_absent_when_vetted_stays_absent(state_dir: Path, tmp_path: Path) -> None:
    """An allowlisted `make -r test` with no makefile has nothing to ask about (no built-in rules either:
    `make test` would run cc over the tree, treecode.BUILTIN_RULES); a Makefile that appears after the
    re-vet must not be read (make is given /dev/null), so make still finds no rule."""
    from engine.commands.makefiles import parse_make, reads

    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^-r test$")
    work = tmp_path / "w"
    work.mkdir()
    result = await agent_exec(state_dir, "make -r test", work)
    assert "No rule to make target" in json.dumps(result), result
    (missing,) = reads(parse_make(["make", "test"]), str(work))
    assert not missing.present and missing.path == str(work / "Makefile")


_RENAMER = r"""
import os, sys
a, b = sys.argv[1], sys.argv[2]
os.rename(a, b); os.rename(b, a)
sys.stdout.write("go\n"); sys.stdout.flush()
n = 0
while True:
    os.rename(a, b); os.rename(b, a); n += 1
    if n % 64 == 0 and os.getppid() == 1:
        break
"""


async def test_a_makefile_renamed_in_after_the_re_vet_is_never_read(state_dir: Path, tmp_path: Path) -> None:
    """The cwd held no makefile when vetted: an allowlisted `make -r test` runs unasked. A racer renaming a
    GNUmakefile in and out of the cwd raced the re-vet against make's own lookup, by path."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make", "^-r test$")
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.mk"
    evil.write_text(f"test:\n\t@touch {marker}\n")
    racer = subprocess.Popen(
        [sys.executable, "-c", _RENAMER, str(evil), str(work / "GNUmakefile")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert racer.stdout is not None and racer.stdout.readline().strip() == "go"
        async with gateway(state_dir):
            agent = await connect(state_dir, operator=False)
            try:
                for _ in range(150):
                    with contextlib.suppress(Exception):  # refused as stale, or asked: the defence held
                        await asyncio.wait_for(
                            agent.request("exec", {"command": "make -r test", "workdir": str(work)}), 30
                        )
                    if marker.exists():
                        break
            finally:
                await agent.close()
    finally:
        racer.kill()
        racer.wait()
    assert not marker.exists(), "make read a makefile that appeared after the tree was vetted"


@pytest.mark.parametrize("spelling", ["-f -", "-f /dev/stdin", "--file=/proc/self/fd/0"])
async def test_an_allowlisted_make_reads_no_makefile_from_the_agents_stdin(
    state_dir: Path, tmp_path: Path, spelling: str
) -> None:
    """`make -f -` reads its makefile from stdin, and a background session's stdin is the agent's to
    write (`process write`): an allowlisted make ran recipes that no file held and nobody was asked
    about. A makefile that is not a regular file in a tree (stdin, a device, a fifo) cannot be vetted."""
    write_config(state_dir, ALLOWLIST)
    allow(state_dir, "/usr/bin/make")
    work = tmp_path / "w"
    work.mkdir()
    marker = tmp_path / "pwned"
    async with gateway(state_dir):
        agent = await connect(state_dir, operator=False)
        try:
            with contextlib.suppress(Exception):  # asked and refused: the defence held
                started = await agent.request(
                    "exec", {"command": f"make {spelling} test", "workdir": str(work), "background": True}
                )
                sid = started["details"]["sessionId"]
                recipe = f"test:\n\t@touch {marker}\n"
                await agent.request(
                    "process", {"action": "write", "sessionId": sid, "data": recipe, "eof": True}
                )
                for _ in range(100):
                    polled = await agent.request(
                        "process", {"action": "poll", "sessionId": sid, "timeout": 1000}
                    )
                    if polled["details"].get("status") != "running":
                        break
        finally:
            await agent.close()
    assert not marker.exists(), "make ran a makefile the agent wrote to its stdin"
