"""The egress proxy with the real forwarder and a real origin, outside any sandbox: the wire behaviour."""

from __future__ import annotations

import os
from pathlib import Path

from engine.config.egress import EgressPolicy, decide
from engine.sandbox.egress.proxy import Connection, Decision, EgressProxy, Request
from tests.helpers.egress import curl, host_forwarder, origin


def _proxy(policy: EgressPolicy, records: list[Connection]) -> EgressProxy:
    async def decide_it(req: Request) -> Decision:
        verdict = decide(policy, req.name, req.port, tunnel=req.tunnel)
        return Decision(verdict.action == "allow", verdict.rule, "policy", dict(policy.resolve))

    return EgressProxy(decide_it, records.append)


async def test_allowed_name_plain_and_connect_other_name_refused(tmp_path: Path) -> None:
    records: list[Connection] = []
    with origin() as o:
        policy = EgressPolicy.from_config(
            {
                "mode": "allowlist",
                "allow": [f"allowed.test:{o.port}"],
                "ask": False,
                "resolve": {"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"},
            }
        )
        proxy = _proxy(policy, records)
        d = tmp_path / "eg"
        d.mkdir(mode=0o700)
        await proxy.listen("sbx", "main", d)
        try:
            with host_forwarder(d) as port:
                via = f"http://127.0.0.1:{port}"
                code, out, err = await curl("-x", via, f"http://allowed.test:{o.port}/plain")
                assert code == 0, err
                assert out == f"origin says hello to allowed.test:{o.port} at /plain\n"
                code, out, err = await curl("-p", "-x", via, f"http://Allowed.Test.:{o.port}/tunnel")
                assert code == 0, err
                assert "at /tunnel" in out
                code, out, err = await curl("-i", "-x", via, f"http://other.test:{o.port}/x")
                assert " 403 " in out.splitlines()[0]
                assert "other.test" in out and "not in the allowlist" in out
                code, out, err = await curl("-i", "-x", via, f"http://127.0.0.1:{o.port}/x")
                assert " 403 " in out.splitlines()[0]
        finally:
            await proxy.close()
    by_name = [(r.name, r.method, r.decision) for r in records]
    assert ("allowed.test", "GET", "allowed") in by_name
    assert ("allowed.test", "CONNECT", "allowed") in by_name
    assert ("other.test", "GET", "refused") in by_name
    assert ("127.0.0.1", "GET", "refused") in by_name
    ok = next(r for r in records if r.method == "CONNECT")
    assert ok.bytesDown > 0 and ok.bytesUp > 0 and ok.address == "127.0.0.1"
    assert not os.path.exists("/nonexistent")


async def test_an_agents_share_of_the_proxy_follows_its_cap_up_to_a_bound(tmp_path: Path) -> None:
    """Per principal, connections from accept to close: its maxConnections and the headroom for heads
    still coming (a bigger cap is a bigger share), but never the whole proxy, whatever the cap says."""
    from engine.sandbox.egress.proxy import MAX_PER_PRINCIPAL, MAX_TOTAL, UNREAD_HEADROOM

    caps = {"small": 8, "default": 256, "greedy": 1024}
    proxy = EgressProxy(_proxy(EgressPolicy(), []).decide, [].append, caps.__getitem__)
    try:
        assert proxy.open_limit("small") == 8 + UNREAD_HEADROOM
        assert proxy.open_limit("default") == 256 + UNREAD_HEADROOM
        assert proxy.open_limit("greedy") == MAX_PER_PRINCIPAL < MAX_TOTAL
    finally:
        await proxy.close()
