"""Who a client says it is and where it dials: shared by the asyncio client and the blocking CLI client, so
both present exactly the same proof (and neither imports the other's I/O stack)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from engine import principals, unixsock
from engine.errors import InvalidInput
from engine.protocol.frames import (
    OPERATOR_TOKEN_NAME,
    PROTOCOL_VERSION,
    ErrorFrame,
    Frame,
    GatewayForeign,
    GatewayUnavailable,
    Hello,
    RemoteError,
    Welcome,
    ensure_token,
    read_token,
    socket_path,
    token_path,
)
from engine.unixsock import SUN_PATH_MAX


def credential_for(state: Path, agent: str | None, explicit: str | None) -> str:
    """The agent credential this client presents ("" = none: the gateway token alone is agent main)."""
    if explicit:
        return explicit
    try:
        found = principals.token_from_env(os.environ.get("EXECHOST_AGENT_TOKEN_FILE") or None)
    except InvalidInput as exc:
        raise GatewayUnavailable(str(exc)) from None
    if found:
        return found
    if agent and agent != principals.MAIN_AGENT:
        # The operator's own terminal acting as an agent: the minted file it can read (agents sharing the
        # operator's account are given $EXECHOST_AGENT_TOKEN instead; see docs/SECURITY.md).
        if not principals.valid_name(agent):
            raise RemoteError("auth", f"invalid agent id {agent!r}")
        stored = principals.read_token(state, agent)
        if stored is None:
            raise RemoteError(
                "auth",
                f"agent {agent!r} has no credential (the operator mints one: `exechost agents add {agent}`)",
            )
        return stored
    return ""


def shared_socket(operator: bool = False) -> str:
    """$EXECHOST_GATEWAY_SOCKET: the agents' socket of another account's gateway ("" when unset). Never
    for the operator role: its token goes to the state dir's own socket only (an agents' socket refuses
    every token anyway; the variable must not be able to send it elsewhere)."""
    return "" if operator else os.environ.get(principals.SOCKET_ENV, "").strip()


def identity(state: Path, *, operator: bool, agent: str | None, credential: str | None) -> tuple[str, str]:
    """(operator token, agent credential) to present; the operator role is claimed only by the console and
    the operator's CLI verbs, never by agents. On the agents' socket the account is the proof, so an
    explicit credential is sent only to be refused."""
    if operator:
        return ensure_token(state, OPERATOR_TOKEN_NAME), ""
    if shared_socket():
        return "", credential or ""
    return "", credential_for(state, agent, credential)


def dial_path(state: Path, *, operator: bool = False) -> Path:
    """The socket to dial: the agents' shared socket when set (never for the operator), else the state
    dir's."""
    shared = shared_socket(operator)
    path = Path(shared) if shared else socket_path(state)
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise GatewayUnavailable(f"socket path too long ({len(os.fsencode(path))} bytes): {path}")
    return path


def foreign_server(
    sock: socket.socket | None, path: Path, *, operator: bool = False
) -> GatewayForeign | None:
    """Asked of the kernel before any token leaves, by both clients: the server is this account's (or
    root's), as the gateway asks of its clients and of its session host; another account's socket at this
    path (a state dir it may write, a link on the way it re-pointed) gets nothing. The agents' socket of
    another account's gateway is that account's by design and takes no token."""
    if shared_socket(operator):
        return None
    peer = unixsock.peer_info(sock)
    if peer is not None and peer.uid in (0, os.geteuid()):
        return None
    return GatewayForeign(
        f"{path} is served by uid {peer.uid if peer else '?'}, not by this account's gateway "
        f"(uid {os.geteuid()}): no token is sent to it. Check who may write {path.parent}"
    )


def gateway_secret(state: Path, token: str | None, *, operator: bool = False) -> str:
    """The gateway token to present (checked once connected, so "nothing listening" is said first). On the
    agents' socket the peer's uid is the proof: there is no token this account could read."""
    shared = shared_socket(operator)
    secret = token or ("" if shared else read_token(state))
    if not secret and not shared:
        raise GatewayUnavailable(f"no gateway token in {token_path(state)}")
    return secret or ""


def hello(secret: str, client: str, name: str, role: str, cred: str) -> Hello:
    return Hello(token=secret, client=client, name=name or client, operator=role, credential=cred)


def welcome_or_raise(frame: Frame) -> Welcome:
    """The gateway's answer to our hello: a Welcome in our protocol version, else RemoteError."""
    if isinstance(frame, ErrorFrame):
        raise RemoteError(frame.code, frame.message)
    if not isinstance(frame, Welcome) or frame.version != PROTOCOL_VERSION:
        raise RemoteError("version", f"gateway speaks an unexpected protocol: {frame!r}")
    return frame
