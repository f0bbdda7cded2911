"""A node run's later asks carry the proof of the call that started it: an ask a node relays for a run the
gateway token alone started (agent main under `anonymous`) ends when the config stops admitting the gateway
token alone, as the gateway's own asks do (fix15ops's proofs). Before, a node's ask carried no proof, and
stayed pending (approvable) for a principal the config had cut off — or carried the proof of whichever
call happened to open the node's link (its reader inherited that call's context)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.gateway import connect, gateway, wait_until, write_config
from tests.helpers.sshd import SshdNode, sshd_nodes  # noqa: F401

ASKING = '[tools.exec]\nsecurity = "allowlist"\nask = "on-miss"\naskFallback = "deny"\n'
GATEWAY_NODE = '[tools.exec]\nhost = "node"\nsecurity = "full"\nask = "off"\n'
NONE = '\n[gateway]\nanonymous = "none"\n'


async def test_a_node_ask_ends_with_the_proof_of_the_call_that_started_its_run(
    state_dir: Path,
    sshd_nodes: list[SshdNode],  # noqa: F811
) -> None:
    node = sshd_nodes[0]
    (node.state_dir / "config.toml").write_text(ASKING)
    nodes = "".join(n.config_toml() for n in sshd_nodes)
    write_config(state_dir, GATEWAY_NODE + nodes)
    ran = node.marks / "ran-after-cut"
    async with gateway(state_dir) as server:
        operator = await connect(state_dir, "op")
        anonymous = await connect(state_dir, "anon", operator=False)
        try:
            # The link is opened by someone else first (here the gateway itself, unstamped): what its node
            # sends later is no call's, and must take no caller's context with it.
            await server.services.nodes.sync()[node.name].ensure()
            got = await anonymous.request(
                "exec", {"command": f"touch {ran}", "node": node.name, "background": True}
            )
            assert got["details"]["status"] == "approval-pending", got
            ask = got["details"]["approvalId"]
            [record] = server.services.approvals.pending()
            assert record.id == ask and record.request.node_id  # the node's relayed ask
            write_config(state_dir, GATEWAY_NODE + nodes + NONE)
            await operator.request("agents.refresh")
            await wait_until(lambda: ask not in [r.id for r in server.services.approvals.pending()])
            assert server.services.approvals.get(ask).decision == "deny"
        finally:
            await anonymous.close()
            await operator.close()
    assert not ran.exists()
