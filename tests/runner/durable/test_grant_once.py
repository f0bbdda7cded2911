"""An allow-always with limits across a crash: the grant the decision named (its id journaled with it) is
made once, whether the gateway died before or after making it, and never again once it ran out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.approvals.grants import GRANTS_NAME, GrantLimits, GrantStore
from engine.protocol.client import ControlClient
from tests.helpers.daemon import Daemon
from tests.helpers.gateway import ALLOWLIST, connect, wait_until, write_config
from tests.helpers.pending import fold_pending


@pytest.mark.parametrize("made", ["not-made", "made", "used-up"])
async def test_the_grant_a_decision_named_is_made_once_across_a_crash(tmp_path: Path, made: str) -> None:
    state = tmp_path / "s"
    state.mkdir(mode=0o700)
    write_config(state, ALLOWLIST)
    marker = tmp_path / "granted"
    daemon = Daemon(state).start()
    try:
        agent = await ControlClient.connect(state, client="a", name="a", autostart=False, operator=False)
        try:
            asked = await agent.request("exec", {"command": f"touch {marker}"})
        finally:
            await agent.close()
        assert asked["details"]["status"] == "approval-pending"
        daemon.kill()
        # What the journal holds once the operator's allow-always for 2 uses was decided: its grant's id.
        path = fold_pending(state)
        data = json.loads(path.read_text())
        (ask,) = data["asks"]
        limits = GrantLimits(uses=2)
        ask.update(
            decision="allow-always",
            resolved_by="operator",
            resolved_at_ms=ask["created_at_ms"] + 1,
            grant=limits.to_json(),
            grant_id="feedc0ffee00",
        )
        path.write_text(json.dumps(data))
        patterns = ask["request"]["decision_json"]["allowAlwaysPatterns"]
        grants = GrantStore(state / GRANTS_NAME)
        if made != "not-made":  # the gateway died after making the grant (and, maybe, after it ran out)
            grants.ensure("feedc0ffee00", "main", patterns, f"touch {marker}", limits)
        if made == "used-up":
            assert grants.consume(["feedc0ffee00"]) and grants.consume(["feedc0ffee00"])
        daemon.start()
        operator = await connect(state)

        async def ran() -> bool:
            got = await operator.request("approvals.status", {"approvalId": ask["id"]})
            return (got["details"]["run"] or {}).get("status") == "completed"

        try:
            await wait_until(ran, 30)
        finally:
            await operator.close()
        assert marker.exists()
        live = grants.active("main")
        if made == "used-up":
            assert live == [], "a grant that ran out came back"
        else:
            assert [(g.id, g.uses_left) for g in live] == [("feedc0ffee00", 2)]
    finally:
        daemon.stop()


def test_a_damaged_grants_file_is_never_overwritten(state_dir: Path) -> None:
    """A grants file that fails to parse grants nothing, and is left exactly as it is: the next grant
    raises naming the file and the line, rather than writing over its spent list (fresh round 10 d)."""
    from engine.approvals.grants import GRANTS_NAME, GrantLimits, GrantStore
    from engine.approvals.schema import ApprovalsFileError

    path = state_dir / GRANTS_NAME
    damaged = '{"version": 1, "grants": [], "spent": ["g-1"]\n'
    path.write_text(damaged)
    store = GrantStore(path)
    assert store.active("main") == []
    with pytest.raises(ApprovalsFileError, match=r"exec-grants\.json: line 2: cannot be read"):
        store.add("main", ["=command:ls"], "ls", GrantLimits(uses=1))
    assert path.read_text() == damaged
