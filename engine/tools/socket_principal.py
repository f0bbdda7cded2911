"""Who an exec-approvals.sock `exec` frame runs as: decided by what its client proved, never by its agentId.

The socket's client proves two things: it runs as the operator's Unix account (SO_PEERCRED) and it holds
the socket token from exec-approvals.json. Neither names an agent: every agent on the operator's account
can read that token, as it can read the gateway token. So the socket's principal is the one the gateway
gives a connection that proves only the shared gateway token: agent `main` by default, nobody with
`[gateway] anonymous = "none"`. A frame's `agentId` may only repeat that principal; naming another agent
is refused (a misconfigured client learns of it), never switched to (SECURITY.md, Principals)."""

from __future__ import annotations

from engine.config.model import Config
from engine.principals import MAIN_AGENT


class NotThisPrincipal(Exception):
    """The frame asks to run as someone its client did not prove to be; the message says why."""


def socket_principal(config: Config) -> str | None:
    """The agent an approval-socket client is: `main`, or None (nobody) under `anonymous = "none"`."""
    return None if config.gateway.anonymous == "none" else MAIN_AGENT


def frame_agent(config: Config, named: str | None) -> str:
    """The agent an `exec` frame runs as, or NotThisPrincipal: the socket's principal, whatever the
    frame names; a frame naming any other agent, or any frame when the socket proves nobody, is refused."""
    principal = socket_principal(config)
    if principal is None:
        raise NotThisPrincipal(
            'exec-approvals.sock proves no agent (its token is shared; [gateway] anonymous = "none"): '
            "exec frames are refused here; an agent runs commands through the gateway with its own credential"
        )
    if named is not None and named != principal:
        shown = named if len(named) <= 64 and named.isprintable() else repr(named[:64])
        raise NotThisPrincipal(
            f"this exec frame names agent {shown}, but exec-approvals.sock proves only its shared token, "
            f"which is agent {principal}: refused (an agent is who its client proved, not a frame's agentId)"
        )
    return principal
