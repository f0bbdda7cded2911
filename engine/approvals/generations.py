"""Each agent's credential generation: a revoke or a rotation starts a new one, and whatever a run started
under an older one asks afterwards is refused at once (a node run in flight kept filing asks as the agent).

A run is stamped with its agent's generation when its request is taken up (before any await), and every ask
it makes carries that stamp to `ApprovalManager.register`: an ask from an older generation is never filed,
so no human can approve it and no fallback decides it. In memory only: a restart ends every run in flight,
and what was asked before it is settled by the credential each ask recorded (`revoke_record`).

The stamp is the one owner of "which generation authorized this act": the gateway sets it (`authorize`)
as it takes a request up, and it flows with the request's context (tasks, `asyncio.to_thread`) to every
point of use, where it is checked against the generation now, not the one at dispatch: a spawn (before and
after the process is made: engine.sessions.manager), a sandbox's egress listener (served under the run's
stamp, never the generation current when the run happens to enter it), an ask (register, and settled at
the bump: engine.approvals.pending), and the host runs' network namespace and egress listener (one per
generation: engine.commands.hostnet)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass


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


class AuthorityEnded(RuntimeError):
    """The credential generation that authorized this act was ended by a revoke or rotation."""


@dataclass(frozen=True)
class Stamp:
    """The generation of `agent`'s credential an act was authorized under, and whose count it is."""

    agent: str
    generation: int
    owner: Generations

    def stale(self) -> bool:
        return self.owner.stale(self.agent, self.generation)

    def check(self, what: str) -> None:
        """Raise AuthorityEnded when the generation ended (the act is then never done)."""
        if self.stale():
            raise AuthorityEnded(
                f"{what} refused: agent {self.agent} was revoked (or its credential rotated) after this "
                "call was taken up"
            )


_STAMP: contextvars.ContextVar[Stamp | None] = contextvars.ContextVar("exechost_generation", default=None)


def authorize(stamp: Stamp | None) -> contextvars.Token[Stamp | None]:
    """The current context acts under `stamp` (None: unstamped, the operator's) until `reset`."""
    return _STAMP.set(stamp)


def reset(token: contextvars.Token[Stamp | None]) -> None:
    _STAMP.reset(token)


def stamped() -> Stamp | None:
    """The stamp this context acts under (None: the operator's, or no request's)."""
    return _STAMP.get()


def check(what: str) -> None:
    """A point of use: refused when the stamp this context acts under is of an ended generation."""
    stamp = _STAMP.get()
    if stamp is not None:
        stamp.check(what)
