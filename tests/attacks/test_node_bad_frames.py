"""One principal's refused frames spend only its own budget on a node link. Was open: the node answered
each request it could not read (an int past int64, nesting too deep) INVALID_REQUEST and counted it
against the link, and the 65th closed the link that every agent's runs and the operator's share (a
`serve --stdio` node ends every session with it). The gateway checks what it sends, but one gap there
(one value an agent controls that the node reads differently) was enough for one agent to cut off all of
them. The gateway now names each request's principal in its id, and the node keeps one budget each: the
principal past it is refused on this link, everyone else is served."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

from engine.nodes.wire import Hello, Request, Response, decode, encode
from runner.node.budget import MAX_BAD_FRAMES
from runner.node.links import Output
from runner.node.serve import NodeServer


def _unreadable(rid: str) -> bytes:
    """A request whose id is sound but that the node's strict reader refuses (an int past int64)."""
    return b'{"type":"req","id":"%s","method":"ping","params":{"n":99999999999999999999999}}\n' % rid.encode()


async def _answer(reader: asyncio.StreamReader) -> Response:
    frame = decode(await asyncio.wait_for(reader.readline(), 30))
    assert isinstance(frame, Response), frame
    return frame


async def test_one_agents_unreadable_requests_never_close_the_link_for_the_others(state_dir: Path) -> None:
    server = NodeServer(state_dir, service=True)
    node_end, gateway_end = socket.socketpair()
    srv_reader, srv_writer = await asyncio.open_connection(sock=node_end)
    reader, writer = await asyncio.open_connection(sock=gateway_end)
    serving = asyncio.ensure_future(server.serve(srv_reader, Output(srv_writer)))
    try:
        assert isinstance(decode(await reader.readline()), Hello)
        for i in range(MAX_BAD_FRAMES + 6):
            writer.write(_unreadable(f"evil/{i}"))
            answer = await _answer(reader)
            assert answer.id == f"evil/{i}" and not answer.ok
            assert (answer.error or {}).get("code") == "INVALID_REQUEST"
        # Everyone else is still served on this link, the operator's traffic too ...
        for rid in ("victim/1", "7"):
            writer.write(encode(Request(rid, "ping", {})))
            answer = await _answer(reader)
            assert answer.id == rid and answer.ok, answer
        # ... and the principal past its budget is refused here, even for a sound request.
        writer.write(encode(Request("evil/x", "ping", {})))
        answer = await _answer(reader)
        assert answer.id == "evil/x" and not answer.ok
        assert "too many" in (answer.error or {}).get("message", "")
        assert not serving.done()
    finally:
        writer.close()
        await asyncio.wait_for(serving, 10)
        srv_writer.close()
        await server.close_tools()
        await server.sessions.close()


async def test_the_gateway_names_each_requests_principal_in_its_id() -> None:
    """The other half: what the node counts by is what the gateway says, and an agent cannot pick it."""
    from engine.config.model import NodeConfig
    from engine.nodes.link import NodeError, NodeLink

    link = NodeLink(NodeConfig(name="alpha", host="127.0.0.2"), reconnect=False)
    sent: list[str] = []

    async def ensure() -> None:
        return None

    async def send(data: bytes) -> None:
        frame = decode(data)
        assert isinstance(frame, Request)
        sent.append(frame.id)
        raise NodeError("not sent")

    link.ensure = ensure  # type: ignore[method-assign]
    link._send = send  # type: ignore[method-assign]
    for principal in ("evil", "ev/il\n", None):
        with contextlib.suppress(NodeError):
            await link.call("ping", {}, timeout=1, principal=principal)
    assert sent == ["evil/1", "ev_il_/2", "3"]  # the agent's own `/` cannot name another principal
    await link.close()
