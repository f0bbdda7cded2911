"""How many connections the gateway admits, per principal, and how many bytes may wait for each one: one
agent (or many together) never takes what the operator or the other agents need."""

from __future__ import annotations

MAX_CONNECTIONS = 256  # authenticated, all principals together
OPERATOR_SLOTS = 16  # of those, the last ones: only the operator's connections may take them
MAX_PER_AGENT = 64  # one agent (a credential, a Unix account, or the bare gateway token's "main")
MAX_HANDSHAKING_PER_UID = 16  # connections of one peer account that have not said who they are yet
READ_PAUSE_BYTES = 4 << 20  # past this much waiting for a client, its next request is not read
MAX_BACKLOG_BYTES = 16 << 20  # past this, the client is cut off: responses count, not only events


def refusal(operator: bool, agent: str, admitted: list[tuple[bool, str]]) -> str | None:
    """Why a connection that proved it is `agent` (or the operator) may not join those `admitted`
    ((operator?, agent) each), or None. The operator may use every slot; an agent neither more than its
    own share nor the operator's last slots, whatever the other agents hold."""
    total = len(admitted)
    if operator:
        return None if total < MAX_CONNECTIONS else f"too many connections (all {MAX_CONNECTIONS} in use)"
    mine = sum(1 for op, who in admitted if not op and who == agent)
    if mine >= MAX_PER_AGENT:
        return f"too many connections for agent {agent} ({MAX_PER_AGENT} per agent); close some of them"
    if total >= MAX_CONNECTIONS - OPERATOR_SLOTS:
        return (
            f"too many connections ({total} of {MAX_CONNECTIONS}; the last {OPERATOR_SLOTS} are kept for "
            "the operator)"
        )
    return None
