"""A container process tampering with the ready command slots the host prepared in its control dir.

Every slot dir is writable from inside the container. Whatever a sandboxed process does to the slots
waiting there (swapping the spec or the dir for links into host paths, forging status lines, stopping a
slot's process and filling its in FIFO, killing it, swapping FIFO names for links), the host must never
follow a link or write a host path, never block, and the next commands must still run, each on its own
streams with its own exit code.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.sandbox import SandboxManager, prepare_exec, slots
from engine.sandbox import supervisor as sv
from tests.engine.sandbox.test_sandbox_docker import config, run
from tests.helpers.sandbox import build_test_image, remove_labelled

pytestmark = pytest.mark.docker

RUN_ID = f"slotatt-{os.getpid()}-{secrets.token_hex(3)}"

# Run inside the container: every slot but the one running this gets one kind of tampering, in turn.
TAMPER = r"""
own=$(readlink /proc/$$/fd/1); own=${own%/out}
i=0
for d in /.exechost/x/*; do
  [ "$d" = "$own" ] || [ ! -p "$d/in" ] && continue
  id=${d##*/}
  pid=""
  for p in /proc/[0-9]*; do
    tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q "x/$id/spec" && pid=${p#/proc/}
  done
  [ -n "$pid" ] || continue  # a finished command's dir (its removal pending), not a waiting slot
  # Read-write opens: a FIFO whose reader just went must not block this script.
  case $((i % 6)) in
    0) rm "$d/spec"; ln -s "$HOST_FILE" "$d/spec"; echo spec-link ;;
    1) mv "$d" "$d.moved"; ln -s "$HOST_DIR" "$d"; echo dir-link ;;
    2) echo "exit 0" 1<>"$d/rc"; echo "pid 1" 1<>"$d/rc"; echo forged-status ;;
    3) kill -STOP "$pid"; timeout 5 dd if=/dev/zero bs=4096 count=16 1<>"$d/in" 2>/dev/null; echo in-full ;;
    4) kill -KILL "$pid"; echo killed ;;
    5) rm "$d/out" "$d/err"; ln -s "$HOST_FILE" "$d/out"; mkfifo "$d/err"; echo fifo-names ;;
  esac
  i=$((i + 1))
done
"""


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield build_test_image()
    remove_labelled(RUN_ID)


@pytest.fixture
def mgr(image: str) -> Iterator[SandboxManager]:
    yield SandboxManager(extra_labels={"exechost.test": RUN_ID})
    remove_labelled(RUN_ID)


async def test_tampered_slots_are_never_followed_and_commands_still_run(
    mgr: SandboxManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=slots.__name__)
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    host_file = tmp_path / "host-file"
    host_file.write_text("host data\n")
    monkeypatch.setattr(slots, "TARGET", 7)  # one slot for the tampering command, one per kind of tampering
    sx = await prepare_exec(config(), "a" + secrets.token_hex(4), "s", None, manager=mgr)
    await run(sx, "true")
    pool = slots.pool_for(sv.Channel(sx.container))
    for _ in range(1000):
        if pool.counts[0] == slots.TARGET:
            break
        await asyncio.sleep(0.01)
    assert pool.counts[0] == slots.TARGET
    status, out, err = await run(sx, TAMPER, env={"HOST_FILE": str(host_file), "HOST_DIR": str(host_dir)})
    assert status == (0, None), err
    kinds = out.split()
    assert {"spec-link", "dir-link", "forged-status", "in-full", "killed", "fifo-names"} <= set(kinds)
    async with asyncio.timeout(60):  # never blocked by a stopped slot or a full FIFO
        for i in range(slots.TARGET + 2):
            result = await run(sx, f"echo out{i}; echo err{i} >&2; exit {i % 5}")
            assert result == ((i % 5, None), f"out{i}\n", f"err{i}\n")
    # The swaps of names (spec-link, dir-link, fifo-names) fail in the container: its control dir is
    # read-only there (fresh round 17 a). The rest (a forged status, a full in FIFO, a stopped or killed
    # slot) reach the host, which discards each such slot.
    assert err.count("Read-only file system") >= 3, err
    discarded = {r.args[0] for r in caplog.records if "discarded" in r.getMessage()}  # type: ignore[index]
    assert len(discarded) >= 3
    assert host_file.read_text() == "host data\n"
    assert list(host_dir.iterdir()) == []
