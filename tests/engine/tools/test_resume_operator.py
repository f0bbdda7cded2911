"""A restored ask keeps whose it was: the operator's runs, resumed after a restart, as the operator's."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from engine.tools.exec_asks import resume_data
from engine.tools.exec_request import ExecContext


def _data(ctx: ExecContext) -> dict[str, Any]:
    prepared: Any = SimpleNamespace(
        host="gateway",
        cwd="/tmp",
        decision=SimpleNamespace(identity=()),
        command_to_run=lambda approved: "true",
    )
    call: Any = SimpleNamespace(params=lambda: {"command": "true"})
    return resume_data(prepared, call, ctx)


def test_the_operators_ask_is_persisted_as_the_operators() -> None:
    assert _data(ExecContext(agent_id="ops", operator=True))["operator"] is True


def test_an_agents_ask_and_an_old_record_are_not_the_operators() -> None:
    assert "operator" not in _data(ExecContext(agent_id="ops"))  # an old record has no key either
