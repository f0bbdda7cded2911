"""Proofs bound to the token that made them (fix16tokproof): an anonymous call's stamp now names the gateway
token's id (`anonymous>main@<id>`), decided at each point of use against gateway.json as it is now (a stat,
the token's digest) as well as the config; and every event sent is gated by a look at the token files and
the config (GatewayServer.listeners: three stats per event, not per connection). Each against its raw
baseline in the same run, three repeats of interleaved rounds (medians).

Run: .venv/bin/python bench/bench_token_proof.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.approvals.generations import Generations, Stamp
from engine.protocol.frames import OPERATOR_TOKEN_NAME, ensure_token
from runner.gateway.live_config import LiveConfig
from runner.gateway.liveprincipal import proof_holds
from runner.gateway.tokenfiles import GatewayTokens


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        ensure_token(state)
        ensure_token(state, OPERATOR_TOKEN_NAME)
        path = state / "config.toml"
        path.write_text('[tools.exec]\nsecurity = "allowlist"\n')
        live = LiveConfig(path, lambda _error: None)
        tokens = GatewayTokens(state)
        owner = Generations()
        owner.holds = lambda key: proof_holds(key, live.get(), tokens)  # as runner/gateway/server.py sets it
        bound = f"anonymous>main@{tokens.gateway.id()}"
        anonymous = Stamp("main", 0, owner, bound, owner.proof(bound, "main"))
        listed = Stamp("main", 0, owner, "listed>main", owner.proof("listed>main", "main"))  # config only
        assert not anonymous.stale() and not listed.stale()
        conns = list(range(20))

        def look() -> list[int]:  # GatewayServer.listeners' look, before its per-connection compare
            live.get()
            tokens.generation()
            return list(conns)

        def raw() -> list[int]:
            return list(conns)

        token_stamp, config_stamp, gated, plain = [], [], [], []
        for _ in range(3):
            token_stamp.append(per_call_us(anonymous.stale, 20_000, 5))
            config_stamp.append(per_call_us(listed.stale, 20_000, 5))
            gated.append(per_call_us(look, 20_000, 5))
            plain.append(per_call_us(raw, 20_000, 5))
    record(
        "anonymous stamp check bound to gateway.json's token (stat + digest + config), per call",
        " · ".join(f"{v:.3f}" for v in token_stamp) + " µs",
        " · ".join(f"{v:.3f}" for v in config_stamp) + " µs (a config-only proof's check)",
        ratio(statistics.median(token_stamp), statistics.median(config_stamp)),
    )
    record(
        "event send gate: token files + config looked at per event (20 connections), per event",
        " · ".join(f"{v:.3f}" for v in gated) + " µs",
        " · ".join(f"{v:.3f}" for v in plain) + " µs (the connections listed, no look)",
        ratio(statistics.median(gated), statistics.median(plain)),
    )


if __name__ == "__main__":
    main()
