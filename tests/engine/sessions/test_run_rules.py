"""The timeout rule and the yield clamp, written once (engine/sessions/launcher.py) for exec and manager."""

from __future__ import annotations

from engine.sessions.launcher import clamp_yield_ms, run_timeout


def test_the_timeout_rule() -> None:
    assert run_timeout(5, background=True, yields=True, default=1800) == 5.0  # given wins
    assert run_timeout(None, background=True, yields=False, default=1800) is None  # backgroundTimeoutBypass
    assert run_timeout(None, background=False, yields=True, default=1800) is None
    assert run_timeout(None, background=False, yields=False, default=1800) == 1800.0
    assert run_timeout(0, background=False, yields=False, default=0) is None  # 0: none
    assert run_timeout(True, background=False, yields=False, default=30) == 30.0  # a bool is no number
    assert run_timeout(-1, background=False, yields=False, default=30) == 30.0


def test_the_yield_clamp() -> None:
    assert clamp_yield_ms(None, 10_000) == 10_000
    assert clamp_yield_ms(True, 10_000) == 10_000
    assert clamp_yield_ms("5", 10_000) == 10_000
    assert clamp_yield_ms(1, 10_000) == 10
    assert clamp_yield_ms(10**9, 10_000) == 120_000
    assert clamp_yield_ms(2500.7, 10_000) == 2500
