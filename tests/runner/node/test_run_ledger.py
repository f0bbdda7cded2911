"""The node's ledger of the gateway's runs: what `runs.status` says of a run it let go."""

from __future__ import annotations

import pytest

from runner.node import runs
from runner.node.runs import RunLedger


def _answer(ledger: RunLedger, run_id: str) -> None:
    ledger.began(run_id)
    ledger.answered(run_id, {"state": "ended"})


def test_a_run_answered_long_ago_is_forgotten_never_unknown() -> None:
    """Past MAX_ANSWERED answers the oldest outcome was let go and `runs.status` said `unknown`, which the
    gateway reads as "the node never received it; it did not run": false for a run that ran."""
    ledger = RunLedger()
    for n in range(runs.MAX_ANSWERED + 1):
        _answer(ledger, f"r{n}")
    said = ledger.status(["r0", "r1", f"r{runs.MAX_ANSWERED}", "never"])["runs"]
    assert said == {
        "r0": {"state": "forgotten"},
        "r1": {"state": "ended"},
        f"r{runs.MAX_ANSWERED}": {"state": "ended"},
        "never": {"state": "unknown"},
    }


def test_once_even_the_ids_are_let_go_no_run_is_said_never_received(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "MAX_ANSWERED", 2)
    monkeypatch.setattr(runs, "MAX_FORGOTTEN", 2)
    ledger = RunLedger()
    for n in range(5):
        _answer(ledger, f"r{n}")
    said = ledger.status(["r0", "r2", "r4", "never"])["runs"]
    assert said["r4"] == {"state": "ended"}
    assert said["r2"] == said["r0"] == said["never"] == {"state": "forgotten"}
    ledger.began("live")
    assert ledger.status(["live"])["runs"]["live"] == {"state": "in-flight"}
