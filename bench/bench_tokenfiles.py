"""The gateway and operator tokens read live (fresh round 15 a): what looking at gateway.json and
operator.json costs where the gateway used to compare against tokens read once at its start. Per handshake
(`TokenFile.matches`: a stat, the cached token compared) and per request (`GatewayTokens.generation`: a stat
of each file) against the old in-memory compare, in the same run; and a stamped proof's live check at a
point of use (`Stamp.stale` with a uid-mapping proof, the config's stat and lookup) against a credential's.

Run: .venv/bin/python bench/bench_tokenfiles.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import hmac
import os
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


def _row(metric: str, new: list[float], old: list[float], baseline: str) -> None:
    record(
        metric,
        " · ".join(f"{v:.2f}" for v in new) + " µs",
        " · ".join(f"{v:.2f}" for v in old) + f" µs ({baseline})",
        ratio(statistics.median(new), statistics.median(old)),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    n = args.calls
    with tempfile.TemporaryDirectory(prefix="ehb-") as tmp:
        state = Path(tmp)
        token = ensure_token(state)
        operator = ensure_token(state, OPERATOR_TOKEN_NAME)
        tokens = GatewayTokens(state)
        assert tokens.gateway.matches(token) and tokens.operator.matches(operator)

        def once() -> bool:  # the gateway before: both tokens in memory since its start
            a = hmac.compare_digest(token.encode(), token.encode())
            return a and hmac.compare_digest(operator.encode(), operator.encode())

        def live() -> bool:
            return tokens.gateway.matches(token) and tokens.operator.matches(operator)

        hs = [per_call_us(live, n, 5) for _ in range(3)]
        base = [per_call_us(once, n, 5) for _ in range(3)]
        _row("operator handshake: both tokens checked against their files (stat each)", hs, base, "in memory")
        paths = (str(state / "gateway.json"), str(state / OPERATOR_TOKEN_NAME))

        def bare() -> None:  # the raw floor: the two stats alone
            os.stat(paths[0])
            os.stat(paths[1])

        req = [per_call_us(tokens.generation, n, 5) for _ in range(3)]
        floor = [per_call_us(bare, n, 5) for _ in range(3)]
        _row("per request: the tokens' files looked at (two stats)", req, floor, "two bare os.stat")

        config = state / "exechost.toml"
        config.write_text('[[agents.list]]\nid = "ops"\nuid = 47123\n')
        live_config = LiveConfig(config, lambda _e: None)
        owner = Generations()
        owner.holds = lambda key: proof_holds(key, live_config.get())
        mapped = Stamp("ops", 0, owner, "uid:47123>ops", owner.proof("uid:47123>ops", "ops"))
        credential = Stamp("ops", 0, owner)
        assert not mapped.stale()
        proof = [per_call_us(mapped.stale, n, 5) for _ in range(3)]
        plain = [per_call_us(credential.stale, n, 5) for _ in range(3)]
        what = "Stamp.stale at a spawn, a uid mapping's proof (the config's stat)"
        _row(what, proof, plain, "a credential's")


if __name__ == "__main__":
    main()
