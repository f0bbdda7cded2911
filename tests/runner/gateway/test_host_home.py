"""A gateway starts only when $HOME is the home its host views protect: the account's own (its passwd
entry), or one the operator named in EXECHOST_HOST_HOME (fresh round 13 b: a client that autostarted the
daemon with another HOME left the account's real home writable and unhidden to every host run)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from engine.commands import hostoutside
from runner.gateway.server import GatewayServer, HostHomeError

OWN = pwd.getpwuid(os.getuid()).pw_dir


def test_the_accounts_own_home_is_always_fine(tmp_path: Path) -> None:
    assert hostoutside.home_refused({"HOME": OWN}) is None
    assert hostoutside.home_refused({}) is None  # no HOME: ~ is the passwd entry's


def test_another_home_is_refused_unless_the_operator_named_it(tmp_path: Path) -> None:
    other = str(tmp_path / "elsewhere")
    refused = hostoutside.home_refused({"HOME": other})
    assert (
        refused is not None and other in refused and OWN in refused and hostoutside.HOST_HOME_ENV in refused
    )
    assert hostoutside.home_refused({"HOME": other, hostoutside.HOST_HOME_ENV: other}) is None
    # naming some other dir confirms nothing
    assert hostoutside.home_refused({"HOME": other, hostoutside.HOST_HOME_ENV: OWN}) is not None


async def test_the_gateway_does_not_start_with_another_home(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(hostoutside.HOST_HOME_ENV)  # HOME is this test's own dir (tests/conftest.py)
    server = GatewayServer()
    with pytest.raises(HostHomeError, match="not this account's home"):
        await server.start()
    assert not (state_dir / "gateway.sock").exists()  # nothing was listening, nothing left behind


@pytest.mark.parametrize("verb", [["serve", "--stdio"], ["run"]])
def test_a_node_does_not_start_with_another_home(state_dir: Path, verb: list[str]) -> None:
    """A node's runs are host runs too: the same refusal, said on stderr (the gateway shows it), before
    anything is read from the link or listened on."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != hostoutside.HOST_HOME_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "runner", "node", *verb],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1 and "not this account's home" in done.stderr, done
    assert not list(state_dir.glob("*.sock"))
