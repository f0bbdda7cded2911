"""Who a live connection is now: its principal decided again from the current config and credentials, so
a revoke, a rotation, an unmapped account, an agent removed from `[[agents.list]]`, `anonymous = "none"`
or a replaced gateway or operator token reaches connections already open, not only the next handshake
(issue 27 §1: no credential that no longer holds still acts). The proof a connection's asks carry
(`proof_key`) is decided here too, the same way: an ask whose proof no longer holds is settled, and
nothing it was approved for starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from engine import principals
from engine.approvals.socket.principal import socket_token_id
from engine.commands import hostprivate
from engine.config.model import Config
from runner.gateway.tokenfiles import token_id

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.tokenfiles import GatewayTokens

# What made a connection its agent, as its calls are stamped with it: `uid:<uid>><agent>` (the agents'
# socket's mapping), `anonymous>main@<id>` (the gateway token alone: the id of the very token it proved),
# `listed>ops` (a minted credential, which makes its agent only while the config admits it: Config.admits;
# the credential's own end, a revoke or a rotation, is its agent's generation), or `operator@<id>` (the
# operator token, by the id of the one it proved). A proof made by a secret names that secret (one rule):
# replacing the file ends it, whatever the config says. The `:`/`>`/`@` keep them apart from every agent id
# (principals.NAME_RE) in one Generations.
_UID = "uid:"
_ANONYMOUS = "anonymous>"
_LISTED = "listed>"
_OPERATOR = "operator@"
# `socket>main@<id>`: an exec-approvals.sock ask relayed by the console, made by the socket token of that id
# (the socket's principal, as the gateway token alone makes main): it holds only while exec-approvals.json
# holds that very token, so replacing a leaked one ends its asks already relayed (fresh round 17 b).
_SOCKET = "socket>"
# The operator's calls are stamped as this principal (never an agent's name: hostprivate's own space), so
# no agent's revoke or rotation ends them; only their proof's end does.
OPERATOR_PRINCIPAL = hostprivate.OPERATOR


def principal_now(
    conn: Connection,
    config: Config,
    state_dir: Path,
    *,
    credentials: bool = True,
    tokens: GatewayTokens | None = None,
) -> str | None:
    """The agent `conn` would be if it said hello now with what it proved then; None: nobody. Reads the
    credential files (blocking: call it off the loop) unless `credentials` is False (the config's part
    only, checked on the loop before each request after a config reload). `tokens`: the gateway and
    operator tokens' files, checked by their stat identity (cheap). The handshake decides the same way
    (server.py, handshake.py)."""
    if not conn.other_account and tokens is not None:
        if not tokens.gateway.matches(conn.proved_token):
            return None  # gateway.json was replaced: the token it proved opens nothing now
        if conn.operator and not tokens.operator.matches(conn.proved_operator):
            return None  # operator.json was replaced: the leaked one is nobody's
    if conn.operator:
        return conn.agent
    if conn.other_account:
        return config.agent_for_uid(conn.peer_uid)  # its Unix account is its credential
    if conn.presented:
        agent = principals.lookup(state_dir, conn.presented) if credentials else conn.agent
        return agent if agent is not None and config.admits(agent) else None  # an unlisted agent: nobody
    if config.gateway.anonymous == "none":
        return None  # the gateway token alone is nobody now
    return principals.MAIN_AGENT


def stale(
    conns: list[Connection], config: Config, state_dir: Path, tokens: GatewayTokens | None = None
) -> list[Connection]:
    """The connections that are no longer who they were when they said hello."""
    return [
        conn
        for conn in conns
        if not conn.closed and principal_now(conn, config, state_dir, tokens=tokens) != conn.agent
    ]


def proof_key(conn: Connection) -> str:
    """What made `conn` its agent (or the operator), as its calls are stamped and its asks record it: the
    operator token's id, the credential's listing, the uid mapping, or the anonymous rule with the gateway
    token's id."""
    if conn.operator:
        return f"{_OPERATOR}{token_id(conn.proved_operator)}"
    if conn.presented:
        return f"{_LISTED}{conn.agent}"
    if conn.other_account:
        return f"{_UID}{conn.peer_uid}>{conn.agent}"
    return f"{_ANONYMOUS}{conn.agent}@{token_id(conn.proved_token)}"


def socket_proof(agent: str, socket_token_id: str) -> str:
    """The proof of an ask relayed from exec-approvals.sock, made by the socket token `socket_token_id`."""
    return f"{_SOCKET}{agent}@{socket_token_id}"


def proof_holds(
    key: str,
    config: Config,
    tokens: GatewayTokens | None = None,
    socket_token: Callable[[], str] | None = None,
) -> bool:
    """Whether the proof `key` still makes its agent under `config` and the token files now (`tokens`:
    None, no token-made proof holds), decided as `principal_now` does. An `anonymous>main` journaled
    before proofs named their token (no `@`) names no token: it does not hold."""
    if key.startswith(_UID):
        uid, _, agent = key[len(_UID) :].partition(">")
        return uid.isdigit() and config.agent_for_uid(int(uid)) == agent
    if key.startswith(_LISTED):
        return config.admits(key[len(_LISTED) :])
    if key.startswith(_ANONYMOUS):
        agent, at, made = key[len(_ANONYMOUS) :].partition("@")
        return (
            agent == principals.MAIN_AGENT
            and config.gateway.anonymous != "none"
            and bool(at and made)
            and tokens is not None
            and tokens.gateway.id() == made
        )
    if key.startswith(_SOCKET):
        agent, at, made = key[len(_SOCKET) :].partition("@")
        now = socket_token() if socket_token is not None else ""
        return (
            agent == principals.MAIN_AGENT
            and config.gateway.anonymous != "none"
            and bool(at and made and now)
            and socket_token_id(now) == made
        )
    if key.startswith(_OPERATOR):
        made = key[len(_OPERATOR) :]
        return bool(made) and tokens is not None and tokens.operator.id() == made
    return False


def removed_credentials(state_dir: Path, named: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (agent, credential id) pairs in `named` whose credential is no longer the agent's on disk
    (removed or re-minted by hand): reads the credential files (blocking: call it off the loop)."""
    return [
        (agent, credential)
        for agent, credential in named
        if not (principals.valid_name(agent) and principals.still_holds(state_dir, agent, credential))
    ]
