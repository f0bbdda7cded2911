"""A node's decision record is shown, never trusted: it keeps the gateway's own shape and types."""

from __future__ import annotations

from engine.config.loader import load_config_text
from engine.policy.decision import evaluate
from runner.gateway.node_limits import decision_json


def test_our_own_record_passes_whole() -> None:
    config = load_config_text('[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\n')
    record = evaluate("ls -la | head -n 3", config=config, cwd="/").to_json()
    assert decision_json(record) == record


def test_a_hostile_record_keeps_only_what_fits() -> None:
    hostile = {
        "command": "ls",
        "segments": ["x", {"argv": ["ls", 3, None], "reason": 5, "entryId": None}],
        "allowAlwaysPatterns": ["ok", {"no": 1}],
        "contentDigests": [{"role": "script", "size": True, "sha256": "ab"}],
        "analysisOk": 1,  # an int is not a bool
        "sandboxed": "yes",
        "unknown": {"x": 1},
    }
    assert decision_json(hostile) == {
        "command": "ls",
        "segments": [{"argv": ["ls"], "entryId": None}],
        "allowAlwaysPatterns": ["ok"],
        "contentDigests": [{"role": "script", "sha256": "ab"}],
    }
