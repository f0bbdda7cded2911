"""Each agent's gateway-host runs share a network namespace of their own (engine.commands.hostnet): the
agent's own servers answer its own later runs, the host's loopback answers none, and outward traffic goes
through the sandboxes' egress proxy; `[tools.exec] hostNetwork = "host"` is the operator's way back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from engine.config.loader import load_config
from engine.config.model import ConfigError
from tests.helpers.egress import free_port, origin
from tests.helpers.gateway import FULL, connect, gateway, wait_until, write_config


def _out(result: dict[str, Any]) -> str:
    return str(result["details"].get("aggregated") or result["text"])


async def test_an_agents_own_server_answers_its_own_later_runs_only(state_dir: Path) -> None:
    private = os.environ["EXECHOST_HOST_PRIVATE"]
    port = free_port()
    write_config(state_dir, FULL)
    async with gateway(state_dir):
        operator = await connect(state_dir)
        try:
            ops = {"agentId": "ops"}
            await operator.request("exec", {**ops, "command": f"echo OWN-r12 > {private}/own.txt"})
            served = await operator.request(
                "exec",
                {
                    **ops,
                    "command": f"exec python3 -m http.server -b 127.0.0.1 {port} -d {private}",
                    "background": True,
                },
            )
            sid = served["details"].get("sessionId")
            fetch = f"curl -sS --max-time 5 http://127.0.0.1:{port}/own.txt"

            async def kept_view_reaches_it() -> bool:  # a run in the kept view
                return "OWN-r12" in _out(await operator.request("exec", {**ops, "command": fetch}))

            await wait_until(kept_view_reaches_it, timeout=30)
            # a run in a bwrap of its own (its workdir is in the agent's private /tmp) joins the same one
            own_bwrap = await operator.request("exec", {**ops, "command": fetch, "workdir": private})
            other = await operator.request("exec", {"agentId": "main", "command": fetch})
            await operator.request("process", {"action": "kill", "sessionId": sid, "agentId": "ops"})
        finally:
            await operator.close()
    assert "OWN-r12" in _out(own_bwrap), _out(own_bwrap)
    assert "OWN-r12" not in _out(other), f"agent main reached ops's server: {_out(other)}"
    with pytest.raises(OSError):  # nor does the host's loopback: the server was never there
        import socket

        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _egress(port: int) -> str:
    return (
        "[agents.defaults.sandbox.egress]\n"
        'mode = "allowlist"\n'
        f'allow = ["http://allowed.test:{port}"]\n'
        "ask = false\n"
        'resolve = { "allowed.test" = "127.0.0.1", "other.test" = "127.0.0.1" }\n'
    )


async def test_a_host_runs_way_out_is_the_sandboxes_egress_proxy(state_dir: Path) -> None:
    with origin() as site:
        write_config(state_dir, FULL + _egress(site.port))
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                fetch = "curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' http://{}:{}/x; echo"
                # acting for main (an operator's call naming no agent has a namespace of its own)
                main = {"agentId": "main"}
                allowed = await operator.request(
                    "exec", {"command": fetch.format("allowed.test", site.port), **main}
                )
                refused = await operator.request(
                    "exec", {"command": fetch.format("other.test", site.port), **main}
                )
                direct = await operator.request(
                    "exec", {"command": fetch.format("127.0.0.1", site.port), **main}
                )
                rows = await operator.request("sandbox.egress", {"agentId": "main"})
            finally:
                await operator.close()
    assert _out(allowed).strip().endswith("200"), _out(allowed)  # through the proxy, on the allowlist
    assert _out(refused).strip().endswith("403"), _out(refused)  # the proxy refuses what is not
    assert "200" not in _out(direct), _out(direct)  # the host's loopback is no way round it
    names = {str(r.get("sandbox")) for r in rows.get("connections", [])}
    assert "hostnet.main" in names, rows  # recorded as the sandboxes' connections are


async def test_host_network_host_is_the_operators_way_back(state_dir: Path) -> None:
    with origin() as site:
        write_config(state_dir, FULL + 'hostNetwork = "host"\n')
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                seen = await operator.request(
                    "exec", {"command": f"curl -sS --max-time 10 http://127.0.0.1:{site.port}/"}
                )
            finally:
                await operator.close()
    assert "origin says hello" in _out(seen), _out(seen)


def test_host_network_is_validated_naming_file_key_and_line(state_dir: Path) -> None:
    path = state_dir / "config.toml"
    path.write_text('[tools.exec]\nhost = "gateway"\nhostNetwork = "bridge"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert (err.key, err.line) == ("tools.exec.hostNetwork", 3)
    assert "invalid value 'bridge' (expected own|host)" in err.message
    assert str(path) in str(err)


async def test_a_gateway_started_again_serves_the_namespace_made_before_it(state_dir: Path) -> None:
    with origin() as site:
        write_config(state_dir, FULL + _egress(site.port))
        url = f"http://allowed.test:{site.port}/"
        fetch = f"curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' {url}; echo"
        codes = []
        for _ in range(2):  # the agent's namespace outlives the first gateway's hub in this process
            async with gateway(state_dir):
                operator = await connect(state_dir)
                try:
                    codes.append(_out(await operator.request("exec", {"command": fetch})).strip())
                finally:
                    await operator.close()
    assert [c[-3:] for c in codes] == ["200", "200"], codes


async def test_with_no_helper_a_run_is_cut_off_never_in_the_hosts_network(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXECHOST_HOSTENTER", "")  # none built: every run takes a bwrap of its own
    with origin() as site:
        write_config(state_dir, FULL)
        async with gateway(state_dir):
            operator = await connect(state_dir)
            try:
                seen = await operator.request(
                    "exec", {"command": f"curl -sS --max-time 10 http://127.0.0.1:{site.port}/; echo ran"}
                )
            finally:
                await operator.close()
    assert "ran" in _out(seen) and "origin says hello" not in _out(seen), _out(seen)
