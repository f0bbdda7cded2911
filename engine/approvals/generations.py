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
generation: engine.commands.hostnet).

A stamp also names the proof that made its connection the agent when that proof is not a minted credential
(a Unix account's uid mapping, the gateway token alone under `anonymous`: runner.gateway.liveprincipal):
a config change that cuts that proof off ends its generation as a revoke ends the agent's (`end_proofs`),
so what it asked is settled and nothing it was approved for starts; at a point of use the proof is also
decided again against the config now (`holds`), so no config change waits for a recheck to count."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass


class Generations:
    """{agent: generation}, 0 for an agent never revoked or rotated."""

    def __init__(self) -> None:
        self._of: dict[str, int] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._proofs: dict[str, str] = {}  # proof keys stamped since their last end, to their agent
        # Whether a proof key still makes its agent under the config now (set by the gateway): None, all do.
        self.holds: Callable[[str], bool] | None = None

    def listen(self, listener: Callable[[str], None]) -> None:
        """`listener(key)` after each bump: whoever holds runs of the agent settles what they wait on. `key`
        is the agent (a revoke, a rotation) or a proof key the config cut off (`end_proofs`: only what
        was stamped under that proof ends, e.g. the egress connections its runs hold)."""
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

    def proof(self, key: str, agent: str) -> int:
        """A call of `agent` is taken up under the proof `key`: its generation now (kept to be ended)."""
        self._proofs[key] = agent
        return self.current(key)

    def proof_ended(self, key: str, generation: int, *, live: bool = False) -> bool:
        """Whether the proof `key` stamped `generation` was ended since (`end_proofs`); `live`: or no longer
        holds under the config now (a point of use decides it again, as the handshake would)."""
        if not key:
            return False
        if generation < self.current(key):
            return True
        return live and self.holds is not None and not self.holds(key)

    def end_proofs(self, holds: Callable[[str], bool]) -> list[str]:
        """A config change: every stamped proof that no longer `holds` gets a new generation, so what was
        stamped under it is ended as a revoke ends a credential's; the agents those proofs made."""
        ended = [key for key in self._proofs if not holds(key)]
        agents = []
        for key in ended:
            agents.append(self._proofs.pop(key))
            self._of[key] = self.current(key) + 1
            for listener in list(self._listeners):
                listener(key)
        return agents


class AuthorityEnded(RuntimeError):
    """The credential generation that authorized this act was ended by a revoke or rotation."""


@dataclass(frozen=True)
class Stamp:
    """The generation of `agent`'s credential an act was authorized under, and whose count it is; and
    the proof that made its caller the agent when not a credential (`proof`, at `proof_generation`)."""

    agent: str
    generation: int
    owner: Generations
    proof: str = ""
    proof_generation: int = 0

    def stale(self) -> bool:
        return self.owner.stale(self.agent, self.generation) or self.owner.proof_ended(
            self.proof, self.proof_generation, live=True
        )

    def check(self, what: str) -> None:
        """Raise AuthorityEnded when the generation ended (the act is then never done)."""
        if self.stale():
            raise AuthorityEnded(
                f"{what} refused: agent {self.agent} was revoked (or its credential rotated, or what made "
                "its caller this agent was cut off by the config) after this call was taken up"
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
