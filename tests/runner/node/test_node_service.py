"""`exechost node run`: sessions on a node outlive the SSH link (real sshd dropped and restarted), events
wait for the next link, and `install-service` writes the unit."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from engine.protocol.frames import RemoteError
from tests.helpers.gateway import connect, gateway, wait_until
from tests.helpers.sshd import EXECHOST, REPO, SshdNode

GATEWAY_FULL = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
NODE_FULL = '[tools.exec]\nsecurity = "full"\nask = "off"\n'


def gateway_config(state_dir: Path, nodes: list[SshdNode]) -> None:
    (state_dir / "config.toml").write_text(GATEWAY_FULL + "".join(n.config_toml() for n in nodes))


async def _log_has(agent: object, sid: str, needle: str) -> str | None:
    res = await agent.request("process", {"action": "log", "sessionId": sid})  # type: ignore[attr-defined]
    text = str(res["text"])
    return text if needle in text else None


async def test_sessions_on_a_node_service_survive_the_link(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    service = alpha.run_service()
    # Outside the node's HOME (its root), which is read-only to its host commands (the host view).
    marks = alpha.root.parent / f"{alpha.root.name}-marks"
    marks.mkdir(exist_ok=True)
    go, said, fg_began = marks / "go", marks / "said", marks / "fg-began"
    wait_go = f"while [ ! -e {go} ]; do sleep 0.05; done"
    try:
        async with gateway(state_dir) as server:
            agent = await connect(state_dir, "agent", operator=False)
            started = await agent.request(
                "exec",
                {
                    "command": f"echo before; {wait_go}; echo during-drop; touch {said}; sleep 60",
                    "node": "alpha",
                    "background": True,
                },
            )
            sid = started["details"]["sessionId"]
            quick = await agent.request(
                "exec", {"command": f"{wait_go}; echo bye-from-quick", "node": "alpha", "background": True}
            )
            await wait_until(lambda: _log_has(agent, sid, "before"), timeout=15)
            link = server.services.nodes.links["alpha"]
            # A foreground run in flight when the link drops: its outcome arrives later, as an event. It
            # has begun on the node first (a request dropped on its way is test_node_relink's case).
            foreground = asyncio.ensure_future(
                agent.request(
                    "exec",
                    {
                        "command": f"touch {fg_began}; {wait_go}; echo fg-done",
                        "node": "alpha",
                        "sessionKey": "s1",
                    },
                )
            )
            await wait_until(fg_began.exists, timeout=15)
            assert link.status()["inFlight"] == 1
            assert link.status()["mode"] == "service"
            first_pid = link.hello.node_id if link.hello else None

            alpha.drop_connections()  # sshd and the link's relay die; the service does not
            await wait_until(lambda: link.state != "connected", timeout=15)
            with pytest.raises(RemoteError, match="outcome on the node is unknown"):
                await foreground
            with pytest.raises(RemoteError, match="node alpha"):
                await agent.request("process", {"action": "poll", "sessionId": sid})
            go.touch()  # output and an exit happen while no gateway is linked
            await wait_until(said.exists, timeout=15)
            assert not any("bye-from-quick" in e for e in server.services.events.peek("agent:main"))

            alpha.start()
            await wait_until(lambda: link.state == "connected", timeout=30)
            assert link.hello is not None and link.hello.node_id == first_pid
            polled = await agent.request("process", {"action": "poll", "sessionId": sid})
            assert "during-drop" in polled["text"]
            assert polled["details"]["status"] == "running"
            # The quick session's exit, queued in the service, arrived with the new link.
            events = await wait_until(
                lambda: [e for e in server.services.events.peek("agent:main") if "bye-from-quick" in e],
                timeout=60,
            )
            assert quick["details"]["sessionId"].split(":")[-1] in events[0]
            finished = await wait_until(
                lambda: [e for e in server.services.events.peek("agent:main:s1") if "fg-done" in e],
                timeout=60,  # queued in the service, sent once the new link is through: a bound
            )
            assert finished[0].startswith("Exec finished (node=")
            log = await agent.request("process", {"action": "log", "sessionId": sid})
            assert "before" in log["text"] and "during-drop" in log["text"]
            await agent.request("process", {"action": "kill", "sessionId": sid})
            await agent.close()
    finally:
        service.terminate()
        assert service.wait(timeout=30) == 0
    assert not (alpha.state_dir / "node.sock").exists()


async def test_serve_stdio_without_a_service_still_serves_in_process(
    sshd_nodes: list[SshdNode], state_dir: Path
) -> None:
    """A stale node.sock (the service was SIGKILLed) is not answered: the link serves in-process."""
    alpha = sshd_nodes[0]
    gateway_config(state_dir, sshd_nodes)
    (alpha.state_dir / "config.toml").write_text(NODE_FULL)
    service = alpha.run_service()
    service.kill()
    service.wait()
    assert (alpha.state_dir / "node.sock").exists()  # left behind
    async with gateway(state_dir) as server:
        agent = await connect(state_dir, "agent", operator=False)
        ok = await agent.request("exec", {"command": "echo in-process", "node": "alpha"})
        assert ok["text"].splitlines()[0] == "in-process"
        assert server.services.nodes.links["alpha"].status()["mode"] == "stdio"
        await agent.close()
    # ... and a new service reclaims the stale socket.
    again = alpha.run_service()
    again.terminate()
    assert again.wait(timeout=30) == 0


def _node_env(home: Path, state: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "EXECHOST_HOST_HOME": str(home),  # a node starts only with the home its views protect
        "OPENCLAW_STATE_DIR": str(state),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": REPO,
    }


def test_install_service_writes_a_user_unit(tmp_path: Path, state_dir: Path) -> None:
    env = _node_env(tmp_path, state_dir)
    printed = subprocess.run(
        [EXECHOST, "node", "install-service", "--print"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert not (tmp_path / ".config").exists()  # --print writes nothing
    assert "-m runner node run" in printed and f'Environment="OPENCLAW_STATE_DIR={state_dir}"' in printed
    assert "KillMode=mixed" in printed and "Restart=on-failure" in printed
    assert "WantedBy=default.target" in printed and "User=" not in printed
    subprocess.run([EXECHOST, "node", "install-service"], env=env, capture_output=True, check=True)
    unit = tmp_path / ".config/systemd/user/exechost-node.service"
    assert unit.read_text() == printed
    assert os.stat(unit.parent).st_mode & 0o777 == 0o700
    system = subprocess.run(
        [EXECHOST, "node", "install-service", "--system", "--print"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "User=" in system and "WantedBy=multi-user.target" in system


async def test_the_newest_link_takes_over(state_dir: Path) -> None:
    """Two links of one gateway to one service (it reconnected before its old link was noticed dead): once
    the newer one says whose it is (here: no key, its first request), it gets the service and the older
    one is closed. Another gateway's link is never closed by it (test_gateways)."""
    import socket

    from engine.nodes.wire import Hello, Request, Response, decode, encode
    from runner.node.links import Output
    from runner.node.serve import NodeServer

    server = NodeServer(state_dir, service=True)
    try:
        links = []
        for _ in range(2):
            node_end, gateway_end = socket.socketpair()
            srv_reader, srv_writer = await asyncio.open_connection(sock=node_end)
            reader, writer = await asyncio.open_connection(sock=gateway_end)
            task = asyncio.ensure_future(server.serve(srv_reader, Output(srv_writer)))
            assert isinstance(decode(await reader.readline()), Hello)
            writer.write(encode(Request("p", "ping", {})))
            assert isinstance(decode(await reader.readline()), Response)
            links.append((reader, writer, task))
        old_reader, _, old_task = links[0]
        assert await asyncio.wait_for(old_reader.read(), 10) == b""  # closed by the service
        await asyncio.wait_for(old_task, 10)
        _, new_writer, new_task = links[1]
        assert not new_task.done()
        new_writer.close()
        await asyncio.wait_for(new_task, 10)
    finally:
        await server.sessions.close()
