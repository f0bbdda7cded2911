"""Each agent's credential generation: a revoke or a rotation starts a new one, and whatever a run started
under an older one asks afterwards is refused at once (a node run in flight kept filing asks as the agent).

A run is stamped with its agent's generation when its request is taken up (before any await), and every ask
it makes carries that stamp to `ApprovalManager.register`: an ask from an older generation is never filed,
so no human can approve it and no fallback decides it. In memory only: a restart ends every run in flight,
and what was asked before it is settled by the credential each ask recorded (`revoke_record`)."""

from __future__ import annotations

from collections.abc import Callable


class Generations:
    """{agent: generation}, 0 for an agent never revoked or rotated."""

    def __init__(self) -> None:
        self._of: dict[str, int] = {}
        self._listeners: list[Callable[[str], None]] = []

    def listen(self, listener: Callable[[str], None]) -> None:
        """`listener(agent)` after each bump: whoever holds runs of the agent settles what they wait on."""
        self._listeners.append(listener)

    def current(self, agent: str) -> int:
        return self._of.get(agent, 0)

    def bump(self, agent: str) -> int:
        """`agent` was revoked or its credential rotated: runs stamped before are of an older generation."""
        self._of[agent] = self.current(agent) + 1
        for listener in list(self._listeners):
            listener(agent)
        return self._of[agent]

    def stale(self, agent: str, generation: int | None) -> bool:
        """Whether a run stamped `generation` (None: unstamped, e.g. the operator's) began before the
        agent's last revoke or rotation."""
        return generation is not None and generation < self.current(agent)
