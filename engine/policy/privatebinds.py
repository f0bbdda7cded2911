"""Where an agent's private dirs appear in its host runs' view: the binds its policy asks for."""

from __future__ import annotations

from engine.commands import hostprivate
from engine.config.model import Config
from engine.statefs import state_dir


def private_binds(
    config: Config, agent_id: str, owner: str | None = None, *, operator: bool = False
) -> tuple[tuple[str, str], ...]:
    """The agent's private dirs in its host runs' view (engine.commands.hostprivate), as (source,
    destination), `owner`'s copy when given (ExecContext.owner), the operator's own for an `operator`
    call (the agent is its policy only); none without a host view."""
    own = config.exec_for(agent_id)
    if own.host_view == "none":
        return ()
    key = hostprivate.space(owner or agent_id, operator=operator)
    return hostprivate.binds(str(state_dir()), key, hostprivate.dests(own.host_private))
