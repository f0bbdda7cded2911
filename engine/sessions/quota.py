"""Per-agent caps on sessions, on the output bytes they keep on disk and on the input bytes their commands
have not read yet: one agent never fills the session table, the disk, or the session host's memory (one
process for every agent's held sessions) that the operator and the other agents share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from engine.principals import key_owner
from engine.results import ToolError

if TYPE_CHECKING:
    from engine.sessions.registry import Session

MAX_SESSIONS_PER_AGENT = 64  # running and finished-but-kept together
# Every session's output log on disk (its host spool mirrors it while it runs): at the default 64 MiB log
# cap, 32 running sessions of one agent, or more that have finished with less.
MAX_OUTPUT_BYTES_PER_AGENT = 2 << 30
MIN_SESSION_BYTES = 1 << 20  # less room than this left for a new session: refused, not started half-blind
# Input written to an agent's sessions that their commands have not read, held by the session host for
# them all together (below the host's own per-session cap, host_main.MAX_INPUT_BACKLOG, so the host never
# drops a write the gateway answered as written).
MAX_INPUT_BYTES_PER_AGENT = 4 << 20


class Held(Protocol):
    def get(self, session_id: str) -> Session | None: ...


@dataclass
class Quota:
    sessions: int = MAX_SESSIONS_PER_AGENT
    output_bytes: int = MAX_OUTPUT_BYTES_PER_AGENT
    input_bytes: int = MAX_INPUT_BYTES_PER_AGENT  # unread input its sessions' commands hold, together
    # (sessions, output bytes) for one agent, read at each grant (the gateway's config, with the agent's
    # overrides, so an edit applies to the next start); None: the two fields above for every agent.
    per_agent: Callable[[str], tuple[int, int]] | None = field(default=None, repr=False)
    # Each agent's sessions, by id, as admitted; a session the registry no longer holds is dropped at
    # that agent's next grant. A start costs what that agent holds, not what the whole gateway holds.
    _held: dict[str, dict[str, Session]] = field(default_factory=dict, repr=False)
    # Sessions an agent keeps outside this manager, counted against the same cap: the gateway's count of
    # those it started on nodes (runner/gateway/node_sessions.py), whose own tables have no agents' caps.
    elsewhere: Callable[[str], int] | None = field(default=None, repr=False)

    def caps(self, owner: str) -> tuple[int, int]:
        """(sessions, output bytes) `owner` may keep."""
        return (self.sessions, self.output_bytes) if self.per_agent is None else self.per_agent(owner)

    def held_here(self, owner: str, registry: Held) -> int:
        """How many of this manager's sessions `owner` keeps (those the registry no longer holds dropped)."""
        held = self._held.setdefault(owner, {})
        for sid, session in list(held.items()):
            if registry.get(sid) is not session:
                del held[sid]
        return len(held)

    def grant(self, scope_key: str, registry: Held, default_cap: int) -> int:
        """The output cap a new session in `scope_key` gets (its share of its agent's budget), or a
        ToolError saying which cap is reached. A running session holds its whole cap, a finished one what
        it wrote: the caps granted never add up to more than the budget, whatever the sessions write."""
        owner = key_owner(scope_key)
        if owner is None:  # an ownerless key is the operator's (principals.key_owner): no agent's budget
            return default_cap
        most, budget = self.caps(owner)
        count = self.held_here(owner, registry) + (self.elsewhere(owner) if self.elsewhere is not None else 0)
        if count >= most:
            raise too_many_sessions(owner, count)
        held = self._held[owner]
        used = sum(s.output.log_bytes if s.exited else s.output.log_cap for s in held.values())
        room = budget - used
        if room < min(default_cap, MIN_SESSION_BYTES):
            raise ToolError(
                f"agent {owner}'s sessions hold {used >> 20} MiB of output on disk, its whole budget "
                f"({budget >> 20} MiB); remove finished sessions (process remove) or kill running "
                "ones before starting another."
            )
        return min(default_cap, room)

    def charge_input(self, session: Session, size: int, registry: Held) -> None:
        """Before `size` bytes are written to `session`'s stdin: a ToolError when its agent's sessions
        would then hold more unread input than its budget (the whole write refused, nothing sent)."""
        owner = key_owner(session.spec.scope_key)
        if owner is None or session.spec.operator:
            return  # the operator's: no agent's budget
        self.held_here(owner, registry)
        mine = dict(self._held.get(owner, {}))
        mine[session.id] = session  # (one admitted elsewhere, a node's: counted all the same)
        held = sum(_input_held(s) for s in mine.values())
        if held + size > self.input_bytes:
            raise ToolError(
                f"agent {owner}'s sessions hold {held} bytes of input their commands have not read; "
                f"{size} more would pass its budget ({self.input_bytes >> 20} MiB), so none of it was "
                "written. Wait for the command to read its input (poll), or kill it."
            )

    def admit(self, session: Session) -> None:
        """Count a session that was granted its cap (and is now in the registry) against its agent."""
        owner = key_owner(session.spec.scope_key)
        if not session.spec.operator and owner is not None:
            self._held.setdefault(owner, {})[session.id] = session


def too_many_sessions(owner: str, count: int) -> ToolError:
    return ToolError(
        f"agent {owner} has {count} sessions, the most one agent may keep; remove finished ones "
        "(process remove) or kill some before starting another."
    )


def _input_held(session: Session) -> int:
    """What the session host keeps of the input written to `session` (a handle that writes straight to
    the command's pipe, waiting for room, holds none)."""
    held = getattr(session.handle, "input_held", 0)
    return held if isinstance(held, int) else 0
