"""Nothing a node says is lost with a link: its events wait, numbered, until the gateway acknowledges them
(a write that succeeded may still sit in a dead relay's buffer), each is handled once, and a run the link
dropped before the node ever received it is said to be lost, not waited on for ever."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

import pytest

from engine.config.model import NodeConfig
from engine.nodes.link import NodeLink
from engine.nodes.wire import ACK_EVENT, Hello, NodeEvent, Request, Response, decode, encode
from engine.protocol.frames import RemoteError
from runner.node.links import Output
from runner.node.serve import NodeServer
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import SshdNode, _descendants
from tests.runner.node.test_node_service import NODE_FULL, gateway_config

Link = tuple[asyncio.StreamReader, asyncio.StreamWriter, "asyncio.Future[None]"]


async def _link(server: NodeServer) -> Link:
    """A gateway's end of a new link to `server`, past its hello."""
    node_end, gateway_end = socket.socketpair()
    srv_reader, srv_writer = await asyncio.open_connection(sock=node_end)
    reader, writer = await asyncio.open_connection(sock=gateway_end)
    task = asyncio.ensure_future(server.serve(srv_reader, Output(srv_writer)))
    assert isinstance(decode(await reader.readline()), Hello)
    return reader, writer, task


async def _drop(link: Link) -> None:
    link[1].close()
    await asyncio.wait_for(link[2], 10)


async def test_an_event_is_sent_again_on_each_link_until_the_gateway_acknowledges_it(state_dir: Path) -> None:
    server = NodeServer(state_dir, service=True)
    try:
        first = await _link(server)
        # A link that proves no gateway key says whose it is with its first request: only then do events
        # go out on it (runner.node.links: Output.resend_pending).
        first[1].write(encode(Request("p0", "ping", {})))
        assert isinstance(decode(await first[0].readline()), Response)  # nothing waited
        await server.links.emit(NodeEvent("system.event", {"sessionKey": "agent:main", "text": "bye"}))
        sent = decode(await first[0].readline())
        assert isinstance(sent, NodeEvent) and sent.seq is not None
        await _drop(first)  # written, read even: but the gateway never said it has it

        second = await _link(server)
        second[1].write(encode(Request("p1", "ping", {})))
        assert decode(await second[0].readline()) == sent  # sent again before anything else
        assert isinstance(decode(await second[0].readline()), Response)
        second[1].write(encode(NodeEvent(ACK_EVENT, {"upTo": sent.seq})))
        second[1].write(
            encode(Request("p", "ping", {}))
        )  # read after the ack: its answer says the ack was taken
        assert isinstance(decode(await second[0].readline()), Response)
        await _drop(second)

        third = await _link(server)
        third[1].write(encode(Request("p2", "ping", {})))
        frame = decode(await third[0].readline())
        assert isinstance(frame, Response) and frame.id == "p2"  # nothing sent again
        await _drop(third)
    finally:
        await server.close_tools()
        await server.sessions.close()


async def test_an_event_sent_again_is_handled_once_and_acknowledged_again() -> None:
    got: list[NodeEvent] = []
    link = NodeLink(NodeConfig(name="alpha", host="127.0.0.2"), on_event=lambda _l, ev: got.append(ev))
    event = NodeEvent("system.event", {"sessionKey": "agent:main", "text": "bye"}, seq=1)
    link._take_event(event)
    link._take_event(event)  # the node never heard the ack: sent again on a new link
    link._take_event(NodeEvent("system.event", {"text": "unnumbered"}))
    link._take_event(NodeEvent("system.event", {"text": "unnumbered"}))  # not numbered: each is new
    assert [e.payload["text"] for e in got] == ["bye", "unnumbered", "unnumbered"]
    await link.close()


def _relays(node: SshdNode) -> list[int]:
    """The `node serve --stdio` processes sshd started for the links (each relays to the service)."""
    assert node.proc is not None
    out = []
    for pid in _descendants(node.proc.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and b"--stdio" in argv and not any(a.endswith(b"sh") for a in argv[:1]):
            out.append(pid)
    return out


async def test_a_run_the_link_dropped_before_the_node_received_it_is_told_lost(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    service = alpha.run_service()
    ran = alpha.marks / "ran"
    try:
        async with gateway(state_dir) as server:
            agent = await connect(state_dir, "agent", operator=False)
            ok = await agent.request("exec", {"command": f"touch {alpha.marks}/up; echo up", "node": "alpha"})
            assert ok["text"].startswith("up") and (alpha.marks / "up").exists()  # where `ran` would be
            link = server.services.nodes.links["alpha"]
            relays = _relays(alpha)
            assert relays
            for pid in relays:
                os.kill(pid, signal.SIGSTOP)  # the request will wait in its pipe, never read
            lost = asyncio.ensure_future(
                agent.request("exec", {"command": f"touch {ran}", "node": "alpha", "sessionKey": "s2"})
            )
            await wait_until(lambda: link.status()["calls"].get("system.run") == 1)
            alpha.drop_connections()  # the stopped relay dies with the request unread
            with pytest.raises(RemoteError, match="outcome on the node is unknown"):
                await lost
            alpha.start()
            told = await wait_until(
                lambda: [
                    e for e in server.services.events.peek("agent:main:s2") if e.startswith("Exec lost")
                ],
                timeout=60,
            )
            assert "never received it" in told[0] and "it did not run" in told[0]
            assert not ran.exists()
            assert not server.services.nodes.orphans.waiting("alpha")
            await agent.close()
    finally:
        service.terminate()
        assert service.wait(timeout=30) == 0
