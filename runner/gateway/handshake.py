"""A peer's hello, read within the handshake timeout, and who it proves to be: never a request field."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from pathlib import Path

from engine import fairpool, principals
from engine.config.model import Config
from engine.protocol.frames import (
    PROTOCOL_VERSION,
    ErrorFrame,
    Hello,
    ProtocolError,
    decode_frame,
    encode_frame,
)
from runner.gateway import limits
from runner.gateway.tokenfiles import GatewayTokens


async def reject(writer: asyncio.StreamWriter, code: str, message: str) -> None:
    with contextlib.suppress(Exception):
        writer.write(encode_frame(ErrorFrame(code=code, message=message)))
        await asyncio.wait_for(writer.drain(), 1.0)
    writer.close()


async def read_hello(
    frames: limits.FrameReader, writer: asyncio.StreamWriter, timeout: float
) -> Hello | None:
    """The hello frame, or None once the peer was told why not (or hung up)."""
    try:
        line = await asyncio.wait_for(frames.line(), timeout)
        frame = decode_frame(line)
    except TimeoutError:
        await reject(writer, "handshake", f"no hello within {timeout:g} s")
        return None
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        writer.close()
        return None
    except ProtocolError as exc:
        await reject(writer, "handshake", f"expected a hello frame: {exc}")
        return None
    if not isinstance(frame, Hello):
        await reject(writer, "handshake", f"expected a hello frame, got {frame.type!r}")
        return None
    if frame.version != PROTOCOL_VERSION:
        await reject(
            writer,
            "version",
            f"protocol version {frame.version} not supported (gateway speaks {PROTOCOL_VERSION})",
        )
        return None
    return frame


async def principal(
    writer: asyncio.StreamWriter,
    hello: Hello,
    mapped: str | None,
    *,
    tokens: GatewayTokens,
    state_dir: Path,
    config: Callable[[], Config],
) -> tuple[str, str] | None:
    """Who this connection is, as (agent, credential's agent or ""): from the peer's Unix account on
    the agents' socket (`mapped`), else from the tokens it proved, each checked against its file as it is
    now (runner.gateway.tokenfiles: a replaced token stops at once, as an agent's credential).
    `config`: the config now, read for `[gateway] anonymous` when a hello presents only the gateway token
    and for `[[agents.list]]` when it presents a credential (Config.admits: once the config lists agents,
    a credential for an agent it does not name is refused, as liveprincipal drops a live one)."""
    if mapped is not None:
        # Another account: its uid is its identity. It cannot have read the operator's tokens, and it
        # may not borrow another agent's credential either.
        if hello.operator or hello.credential:
            await reject(writer, "auth", f"this account is agent {mapped!r}; present no tokens")
            return None
        return mapped, ""
    if not tokens.gateway.matches(hello.token):
        await reject(writer, "auth", "invalid gateway token")
        return None
    if hello.operator:
        if not tokens.operator.matches(hello.operator):
            await reject(writer, "auth", "invalid operator token")
            return None
        if hello.credential:
            await reject(writer, "auth", "present the operator token or an agent credential, not both")
            return None
        return principals.MAIN_AGENT, ""
    if hello.credential:
        agent = await fairpool.credentials.run(
            hello.credential, functools.partial(principals.lookup, state_dir, hello.credential)
        )
        if agent is None:
            await reject(writer, "auth", "invalid or revoked agent credential")
            return None
        now = config()
        if not now.admits(agent):
            await reject(writer, "auth", now.unlisted(agent))
            return None
        return agent, agent
    if config().gateway.anonymous == "none":
        # The operator's switch: no credential, no principal (a credentialed agent that leaves its
        # credential out becomes nobody, not agent main).
        await reject(
            writer,
            "auth",
            "this gateway admits no one on the gateway token alone: present an agent credential",
        )
        return None
    return principals.MAIN_AGENT, ""  # the gateway token alone: the zero-configuration agent
