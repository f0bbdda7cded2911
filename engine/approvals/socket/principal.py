"""Who an exec-approvals.sock frame is: decided by what its client proved, never by the frame's agentId.

The socket's client proves two things: it runs as the operator's Unix account (SO_PEERCRED) and it holds
the socket token from exec-approvals.json. Neither names an agent: every agent on the operator's account
can read that token, as it can read the gateway token. So the socket's principal is the one the gateway
gives a connection that proves only the shared gateway token: agent `main` by default, nobody with
`[gateway] anonymous = "none"`. It is the principal of every frame, `request` and `exec` alike: the human
is shown that agent, allow-always saves for it, and a command runs as it. A frame's `agentId` may only
repeat it, and its `sessionKey` may only be in that agent's namespace (a plain key is moved there, as the
gateway does for an agent's connection); naming another agent either way is refused (a misconfigured
client learns of it), never switched to (SECURITY.md, Principals). The server decides this once per
frame, before anything else reads it; the gateway's `approvals.relay` decides it again from its own config
(an older console cannot widen it)."""

from __future__ import annotations

from engine.config.model import Config
from engine.principals import MAIN_AGENT, credential_id, key_owner, own_key

REASON = "principal"  # the `reason` of every refusal here, on both frame kinds


class NotThisPrincipal(Exception):
    """The frame asks to act as someone its client did not prove to be; the message says why."""


def socket_token_id(token: str) -> str:
    """Which socket token a frame proved: a digest (64 bits, as the gateway's token ids), never the token.
    A relayed ask is filed under it (the gateway's `socket>` proof), so it ends when the token is replaced."""
    return credential_id(token)[:16]


def socket_principal(config: Config) -> str | None:
    """The agent an approval-socket client is: `main`, or None (nobody) under `anonymous = "none"`."""
    return None if config.gateway.anonymous == "none" else MAIN_AGENT


def frame_agent(config: Config, named: object, kind: str = "exec") -> str:
    """The agent a `kind` frame (`request` or `exec`) acts as, or NotThisPrincipal: the socket's principal,
    whatever the frame names; a frame naming any other agent (or naming one with anything but a string),
    or any frame when the socket proves nobody, is refused."""
    principal = socket_principal(config)
    if principal is None:
        raise NotThisPrincipal(
            'exec-approvals.sock proves no agent (its token is shared; [gateway] anonymous = "none"): '
            f"{kind} frames are refused here; an agent asks and runs commands through the gateway with its "
            "own credential"
        )
    if named is not None and named != principal:
        text = named if isinstance(named, str) else repr(named)
        shown = text if len(text) <= 64 and text.isprintable() else repr(text[:64])
        raise NotThisPrincipal(
            f"this {kind} frame names agent {shown}, but exec-approvals.sock proves only its shared token, "
            f"which is agent {principal}: refused (an agent is who its client proved, not a frame's agentId)"
        )
    return principal


def frame_key(agent: str, key: object, kind: str = "exec") -> str | None:
    """The session key a `kind` frame of `agent` carries: None when it gives none, its own key, or a plain key
    moved into `agent`'s namespace (principals.own_key); a key in another agent's namespace is refused, so
    no human is shown the frame as that agent's session."""
    if key is None or key == "":
        return None
    if not isinstance(key, str):
        raise NotThisPrincipal(f"this {kind} frame's sessionKey is not a string")
    owner = key_owner(key.strip())
    if owner is not None and owner != agent:
        shown = owner if len(owner) <= 64 and owner.isprintable() else repr(owner[:64])
        raise NotThisPrincipal(
            f"this {kind} frame's sessionKey is agent {shown}'s, but exec-approvals.sock proves only its "
            f"shared token, which is agent {agent}: refused (an agent is who its client proved)"
        )
    return own_key(agent, key) or None
