"""The credentials a node link logs in with, named only by the node's table (identityFile, identityAgent):
one list, read by the link to log in and by the host view to hide, so no gateway-host command can read
what speaks to a node as the gateway. Nothing ambient: no default key, no ~/.ssh/config IdentityFile, no
ssh-agent the operator did not name; and the gateway's own ssh-agent is never a host run's."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, MutableMapping

from engine.config.model import NodeConfig

AGENT_FROM_ENV = "SSH_AUTH_SOCK"  # identityAgent's word for "the agent in the gateway's environment"


def identity_path(cfg: NodeConfig) -> str | None:
    return os.path.abspath(os.path.expanduser(cfg.identity_file)) if cfg.identity_file else None


def agent_path(cfg: NodeConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The agent socket the node logs in through: identityAgent's path, or the gateway's $SSH_AUTH_SOCK
    when it says so; None when it names none (or that variable is unset)."""
    value = cfg.identity_agent
    if not value:
        return None
    if value == AGENT_FROM_ENV:
        value = (os.environ if environ is None else environ).get(AGENT_FROM_ENV, "")
        if not value:
            return None
    return os.path.abspath(os.path.expanduser(value))


def hidden_paths(nodes: Iterable[NodeConfig], environ: Mapping[str, str] | None = None) -> list[str]:
    """Every file a node link may log in with (its key, its agent's socket), and the ssh-agent of the
    gateway's own environment whether a node names it or not (the operator's agent signs with whatever
    keys they added to it, a node's key among them: fresh round 8 r), as named and resolved: what the
    host view puts an empty file over, and what no host run's environment names."""
    found: set[str] = set()
    own = (os.environ if environ is None else environ).get(AGENT_FROM_ENV, "")
    if own.startswith(os.sep):
        found |= {os.path.abspath(own), os.path.realpath(own)}
    for cfg in nodes:
        for path in (identity_path(cfg), agent_path(cfg, environ)):
            if path:
                found |= {path, os.path.realpath(path)}
    return sorted(found)


def missing(cfg: NodeConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the node cannot log in (no credential named, or the agent it names is not there), in words a
    new user can act on; None when it has one."""
    if cfg.identity_agent == AGENT_FROM_ENV and agent_path(cfg, environ) is None and not cfg.identity_file:
        return (
            f'node {cfg.name}: identityAgent = "{AGENT_FROM_ENV}" but the gateway has no {AGENT_FROM_ENV} '
            f"in its environment: start the gateway where your ssh-agent is, set nodes.{cfg.name}."
            "identityAgent to the agent's socket path, or set identityFile"
        )
    if cfg.identity_file or cfg.identity_agent:
        return None
    return (
        f"node {cfg.name}: no login key is set. exechost logs in to a node only with the key its table names "
        "(and hides that key from gateway-host commands), never with ~/.ssh's default keys, ~/.ssh/config's "
        "IdentityFile or an ssh-agent (gateway-host commands could read those and speak to the node as the "
        f'gateway). Set nodes.{cfg.name}.identityFile = "~/.ssh/<the key you log in with>" (a key of its '
        f'own is best), or nodes.{cfg.name}.identityAgent = "{AGENT_FROM_ENV}" to log in through your '
        "ssh-agent (its socket is then hidden from gateway-host commands)"
    )


def drop_hidden_agent(env: MutableMapping[str, str], hidden: Iterable[str]) -> None:
    """A host run's environment never names a hidden agent socket (a node's, or the gateway's own): the
    socket is hidden in the view, and the variable would only point at it."""
    sock = env.get(AGENT_FROM_ENV)
    if sock and {sock, os.path.realpath(sock)} & set(hidden):
        del env[AGENT_FROM_ENV]
