"""`exechost state claim`: the operator's word for a state dir they filled before its first start."""

from __future__ import annotations

import os
from pathlib import Path

from engine.commands import gatewaydirs
from tests.helpers.gateway import ALLOWLIST, cli, connect, gateway


async def test_a_dir_filled_before_its_first_start_is_refused_until_claimed(state_dir: Path) -> None:
    """The operator writes a config into a new state dir by hand (no exechost verb recorded it): the
    gateway refuses it, naming the dir, the file and the command; after `exechost state claim DIR` it is
    adopted with that config."""
    filled = state_dir.parent / "filled"
    filled.mkdir(mode=0o700)
    (filled / "config.toml").write_text(ALLOWLIST)
    os.chmod(filled / "config.toml", 0o600)
    try:
        async with gateway(filled):
            raise AssertionError("an unrecorded dir holding a config was adopted")
    except gatewaydirs.StateDirRefusedError as exc:
        assert str(filled) in str(exc) and "config.toml" in str(exc)
        assert f"exechost state claim {filled}" in str(exc)
    done = cli(filled, "state", "claim", str(filled))
    assert done.returncode == 0, done.stderr
    assert str(filled) in gatewaydirs.recorded(os.environ["HOME"])
    async with gateway(filled):
        client = await connect(filled)
        try:
            assert (await client.request("status"))["stateDir"] == str(filled)
        finally:
            await client.close()


def test_a_dir_another_account_may_write_is_never_claimed(state_dir: Path) -> None:
    shared = state_dir.parent / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # the point: a dir others may write
    done = cli(state_dir, "state", "claim", str(shared))
    assert done.returncode == 2 and "another account may write" in done.stderr
    assert str(shared) not in gatewaydirs.recorded(os.environ["HOME"])
