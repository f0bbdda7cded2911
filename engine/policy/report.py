"""Each agent's effective policy, the layer behind every value, and its allowlist: the console's Policy pane.

Computed by the gateway (`policy.agents`) from the config and approvals file it enforces, so the operator
sees the policy that applies, not a second reading of files that may differ from the daemon's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.approvals.schema import ApprovalsFile
from engine.config.model import Config
from engine.policy.precedence import PolicyError, SessionOverrides, resolve_policy


def agent_policies(
    config: Config, approvals: ApprovalsFile, overrides: Mapping[str, SessionOverrides]
) -> list[dict[str, Any]]:
    """One JSON row per agent (main, the config's, the approvals file's): policy, trail, allowlist."""
    agent_ids = list(dict.fromkeys(["main", *config.agents, *(a for a in approvals.agents if a != "*")]))
    wildcard = approvals.agents.get("*")
    shared = {e.id for e in wildcard.allowlist} if wildcard is not None else set()
    rows: list[dict[str, Any]] = []
    for agent_id in agent_ids:
        file_policy = approvals.agent(agent_id)
        key = f"agent:{agent_id}"
        row: dict[str, Any] = {
            "agentId": agent_id,
            "allowlist": [
                {
                    "id": r.id,
                    "scope": "*" if r.id in shared else agent_id,  # `*`: an entry for every agent
                    "pattern": r.pattern,
                    "argPattern": r.arg_pattern,
                    "lastUsedAt": r.last_used_at,
                    "lastUsedCommand": r.last_used_command,
                    "source": r.source,
                }
                for r in file_policy.allowlist
            ],
            "overrides": {k: vars(v) for k, v in overrides.items() if k in (key, agent_id)},
            "policy": {},
            "trail": [],
            "error": None,
        }
        try:
            policy = resolve_policy(
                config,
                agent_id,
                None,
                overrides.get(key),
                file_policy,
                False,
                file_defaults=approvals.defaults,
                session_key=key,
            )
        except PolicyError as exc:
            row["error"] = str(exc)
        else:
            row["policy"] = {
                "host": policy.host,
                "security": policy.security,
                "ask": policy.ask,
                "askFallback": policy.ask_fallback,
                "elevated": policy.elevated,
                "node": policy.node,
                "direct": policy.direct,
            }
            row["trail"] = [step.to_json() for step in policy.trail]
        rows.append(row)
    return rows
