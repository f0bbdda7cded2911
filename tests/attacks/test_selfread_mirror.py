"""Class 8 variants (round 10 w): a script or a make that re-reads what it was approved from, after the
agent swapped it by a rename outside the run's namespace, in other spellings than round 9 w's."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.attacks.harness import ALLOWLIST
from tests.helpers.gateway import connect, gateway, wait_until, write_config

SH_READS_ITSELF = '#!/bin/sh -e\necho READY\nread ans\ncat "$0"\n'
PY_READS_ITSELF = (
    "#!/usr/bin/env python3\nimport sys\nprint('READY', flush=True)\n"
    "sys.stdin.readline()\nprint(open(__file__).read(), open(sys.argv[0]).read())\n"
)
REWRITTEN = "#!/bin/sh\necho REWRITTEN-AFTER-THE-ASK\n"


def _rename_over(path: Path, text: str = REWRITTEN) -> None:
    new = path.parent / (path.name + ".new")
    new.write_text(text)
    os.rename(new, path)


async def _approved_then_swapped(state: Path, work: Path, command: str, swap: Callable[[], None]) -> str:
    """Ask for `command` (it prints READY, waits for a line, then re-reads its own file), approve it once,
    `swap` while it waits, let it go on: its output."""
    write_config(state, ALLOWLIST)
    async with gateway(state):
        client = await connect(state)
        try:
            ask = await client.request("exec", {"command": command, "workdir": str(work), "background": True})
            assert ask["details"]["status"] == "approval-pending", ask
            await client.request("approve", {"id": ask["details"]["approvalId"], "decision": "allow-once"})

            async def listed() -> list[dict[str, Any]]:
                # the operator's list also shows a run still starting (not yet backgrounded): wait past it
                found = await client.request("process", {"action": "list"})
                return [row for row in found["details"].get("sessions") or [] if row.get("backgrounded")]

            sid = (await wait_until(listed))[0]["sessionId"]

            async def ready() -> bool:
                log = await client.request("process", {"action": "log", "sessionId": sid})
                return "READY" in str(log["text"])

            await wait_until(ready, timeout=30)
            swap()
            await client.request("process", {"action": "write", "sessionId": sid, "data": "y\n", "eof": True})

            async def ended() -> bool:
                polled = await client.request("process", {"action": "poll", "sessionId": sid})
                return polled["details"]["status"] != "running"

            await wait_until(ended, timeout=30)
            log = await client.request("process", {"action": "log", "sessionId": sid})
            return str(log["text"])
        finally:
            await client.close()


@pytest.mark.parametrize(
    ("command", "name", "body", "runnable"),
    [
        ("sh -e s.sh", "s.sh", SH_READS_ITSELF, False),
        ("python3 -u s.py", "s.py", PY_READS_ITSELF, False),
        ("./s.sh", "s.sh", SH_READS_ITSELF, True),  # `#!/bin/sh -e`: the interpreter's option kept
        ("./s.py", "s.py", PY_READS_ITSELF, True),  # `#!/usr/bin/env python3`
        ("timeout 60 sh s.sh", "s.sh", SH_READS_ITSELF, False),  # behind a wrapper
        ("nice -n 1 python3 s.py", "s.py", PY_READS_ITSELF, False),
    ],
    ids=["sh-e", "python-u", "shebang-option", "shebang-env", "timeout-sh", "nice-python"],
)
async def test_class8_a_script_rereading_itself_after_a_rename_over_reads_the_approved_bytes(
    state_dir: Path, tmp_path: Path, command: str, name: str, body: str, runnable: bool
) -> None:
    script = tmp_path / name
    script.write_text(body)
    if runnable:
        script.chmod(0o755)
    out = await _approved_then_swapped(state_dir, tmp_path, command, lambda: _rename_over(script))
    assert "READY" in out and "REWRITTEN" not in out, out


async def test_class8_a_script_whose_directory_is_renamed_away_rereads_the_approved_bytes(
    state_dir: Path, tmp_path: Path
) -> None:
    """A bind at the script's own path moves with its directory: `mv sub sub.old; mkdir sub` put a new
    `sub/s.sh` at the path a copy bound there would have shown. The mirror's directories are the view's."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "s.sh").write_text(SH_READS_ITSELF)

    def swap() -> None:
        os.rename(tmp_path / "sub", tmp_path / "sub.old")
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "s.sh").write_text(REWRITTEN)

    out = await _approved_then_swapped(state_dir, tmp_path, "sh sub/s.sh", swap)
    assert "READY" in out and "REWRITTEN" not in out, out


def _makefile(work: Path, submake: str, name: str = "Makefile") -> Path:
    path = work / name
    path.write_text(f"all:\n\t@echo READY; read x; {submake}\nsecond:\n\t@echo APPROVED-SECOND\n")
    return path


REWRITTEN_MAKEFILE = "all:\n\t@echo other\nsecond:\n\t@echo REWRITTEN\n"


@pytest.mark.parametrize(
    ("submake", "name"),
    [
        ("$(MAKE) -s -C . second", "Makefile"),
        ("$(MAKE) -s -f Makefile second", "Makefile"),
        ("$(MAKE) --no-print-directory --file=./Makefile second", "Makefile"),
        ("$(MAKE) -s second", "makefile"),
        ("cd . && $(MAKE) -s second", "GNUmakefile"),
        ("make -s second", "Makefile"),  # make by its name, not $(MAKE)
        ("/usr/bin/make -s second", "Makefile"),
        ("MAKEFLAGS= sh -c 'exec make -s second'", "Makefile"),
    ],
    ids=["dash-C-dot", "dash-f", "long-file", "lowercase", "gnumakefile", "bare", "by-path", "sh-c"],
)
async def test_class8_a_sub_make_reads_the_approved_makefile_after_a_rename_over(
    state_dir: Path, tmp_path: Path, submake: str, name: str
) -> None:
    path = _makefile(tmp_path, submake, name)
    out = await _approved_then_swapped(
        state_dir, tmp_path, "make -s", lambda: _rename_over(path, REWRITTEN_MAKEFILE)
    )
    assert "APPROVED-SECOND" in out and "REWRITTEN" not in out, out


async def test_class8_a_sub_make_ignores_a_default_makefile_planted_before_the_approved_one(
    state_dir: Path, tmp_path: Path
) -> None:
    """make's default lookup takes GNUmakefile before Makefile: one planted after the ask would be what a
    sub-make reads by its lookup; the sub-make reads the one the lookup found when it was vetted."""
    _makefile(tmp_path, "$(MAKE) -s second")
    out = await _approved_then_swapped(
        state_dir, tmp_path, "make -s", lambda: (tmp_path / "GNUmakefile").write_text(REWRITTEN_MAKEFILE)
    )
    assert "APPROVED-SECOND" in out and "REWRITTEN" not in out, out


async def test_class8_a_sub_make_whose_options_exechost_cannot_model_is_refused(
    state_dir: Path, tmp_path: Path
) -> None:
    """`--eval` is make code given on the command line: what that sub-make reads cannot be told, so it is
    refused, never run reading the makefile by its path."""
    path = _makefile(tmp_path, "$(MAKE) -s --eval=x:= second")
    out = await _approved_then_swapped(
        state_dir, tmp_path, "make -s", lambda: _rename_over(path, REWRITTEN_MAKEFILE)
    )
    assert "REWRITTEN" not in out and "exechost: refused: a sub-make" in out, out


async def test_a_sub_make_in_the_approved_tree_still_works(state_dir: Path, tmp_path: Path) -> None:
    """Regression: nothing swapped, a sub-make into another directory and one back reads what it would:
    the other directory's own makefile, MAKEFILE_LIST naming the makefile, jobs, targets and variables."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "Makefile").write_text("x:\n\t@echo SUB-$(V)\n")
    (tmp_path / "Makefile").write_text(
        "all:\n\t@echo READY; read x; $(MAKE) -s -j2 -C sub x V=1; $(MAKE) -s second\n"
        "second:\n\t@echo APPROVED-SECOND $(notdir $(lastword $(MAKEFILE_LIST))) MF=[$(MAKEFLAGS)]\n"
    )
    out = await _approved_then_swapped(state_dir, tmp_path, "make -s", lambda: None)
    # MAKEFLAGS as make would have it: `$(findstring s,$(MAKEFLAGS))` reads no path of the view's
    assert "SUB-1" in out and "APPROVED-SECOND Makefile MF=[s]" in out, out


@pytest.mark.parametrize("url", ["3x://host/repo", "0://h/r", "9p+x://h/r"])
def test_class5_a_url_scheme_starting_with_a_digit_names_a_transport_helper(url: str) -> None:
    """git takes `[A-Za-z0-9][A-Za-z0-9+.-]*://` for a URL (url.c is_urlschemechar) and runs
    git-remote-<scheme> for one it does not speak itself: `3x://` was read as no URL at all."""
    from engine.commands.gitargv import argv_programs, url_problem

    assert "helper" in (url_problem(url) or "")
    assert argv_programs("ls-remote", [url]) and argv_programs("fetch", ["-q", url])
