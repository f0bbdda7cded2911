"""A credential's listing proof (fix16agents): every credentialed call's stamp now names `listed>AGENT`,
decided again at each point of use (a spawn, an ask, an egress decision) against the config now, as the
gateway sets `Generations.holds` (the live config looked at, `Config.admits`). The stamp check with that
proof against the same check with none (what a credentialed call's stamp was before), in the same run,
three repeats of interleaved rounds (medians).

Run: .venv/bin/python bench/bench_listed_proof.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.table import per_call_us, ratio, record
from engine.approvals.generations import Generations, Stamp
from runner.gateway.live_config import LiveConfig
from runner.gateway.liveprincipal import proof_holds


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        agents = "".join(f'\n[[agents.list]]\nid = "a{n}"\n' for n in range(50))
        path.write_text('[tools.exec]\nsecurity = "allowlist"\n' + agents + '\n[[agents.list]]\nid = "ops"\n')
        live = LiveConfig(path, lambda _error: None)
        owner = Generations()
        owner.holds = lambda key: proof_holds(key, live.get())  # as runner/gateway/server.py sets it
        listed = Stamp("ops", 0, owner, "listed>ops", owner.proof("listed>ops", "ops"))
        bare = Stamp("ops", 0, owner)  # a credential's stamp before: no proof
        assert not listed.stale() and not bare.stale()
        with_proof, without = [], []
        for _ in range(3):
            with_proof.append(per_call_us(listed.stale, 50_000, 5))
            without.append(per_call_us(bare.stale, 50_000, 5))
    record(
        "credential stamp check with its listing proof (live config, 51 entries), per call",
        " · ".join(f"{v:.3f}" for v in with_proof) + " µs",
        " · ".join(f"{v:.3f}" for v in without) + " µs (the stamp with no proof)",
        ratio(statistics.median(with_proof), statistics.median(without)),
    )


if __name__ == "__main__":
    main()
