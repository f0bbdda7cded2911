"""An approval's segments, misses and allow-always patterns: the gateway's, else as this host sees them."""

from __future__ import annotations

import os
from typing import Any

from engine.approvals.store import ApprovalsStore
from engine.config.loader import load_config
from engine.config.model import ConfigError


def insight_from_view(view: dict[str, Any]) -> dict[str, Any] | None:
    """The gateway's own analysis (the Decision its exec tool acted on), or None when the view lacks it."""
    segments, patterns = view.get("segments"), view.get("allowAlwaysPatterns")
    if not isinstance(segments, list) or not segments or not isinstance(patterns, list):
        return None
    raw = view.get("decision")
    decision: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "segments": segments,
        "analysisOk": view.get("analysisOk"),
        "analysisReason": view.get("analysisReason"),
        "allowAlwaysPatterns": patterns,
        "trail": decision.get("trail") or [],
        "reason": decision.get("reason"),
        "resolvedPath": view.get("resolvedPath")
        or next(
            (s.get("resolvedPath") for s in segments if isinstance(s, dict) and s.get("resolvedPath")), None
        ),
    }


def explain_approval(view: dict[str, Any], config_path: str | None = None) -> dict[str, Any]:
    """Fallback for views without the gateway's analysis (socket asks, an older gateway): the view's own
    fields win; what it did not send is evaluated here (blocking: call in a thread).

    Returns camelCase keys: segments, analysisOk, analysisReason, allowAlwaysPatterns, resolvedPath, trail.
    """
    from engine.policy.decision import evaluate

    out: dict[str, Any] = {}
    command = str(view.get("command") or "")
    if not command.strip():
        return out
    params = {k: view[k] for k in ("host", "security", "ask") if isinstance(view.get(k), str)}
    try:
        decision = evaluate(
            command,
            config=load_config(config_path),
            agent_id=str(view.get("agentId") or "main"),
            params=params,
            store=ApprovalsStore(),
            cwd=str(view.get("cwd") or os.getcwd()),
        ).to_json()
    except (ConfigError, Exception) as exc:  # shown in the detail view, never fatal
        out["insightError"] = str(exc)
        decision = {}
    for key in ("segments", "analysisOk", "analysisReason", "allowAlwaysPatterns", "trail", "reason"):
        value = view.get(key)
        out[key] = value if value not in (None, []) else decision.get(key)
    segments = out.get("segments") or []
    out["resolvedPath"] = view.get("resolvedPath") or next(
        (s.get("resolvedPath") for s in segments if isinstance(s, dict) and s.get("resolvedPath")), None
    )
    return out


def commands_also_allowed(patterns: list[str], commands: list[str], agent_id: str, cwd: str) -> list[str]:
    """Recent commands that the new allow-always patterns would also let through without asking."""
    from engine.commands.allowlist import AllowlistEntry, evaluate_allowlist
    from engine.commands.analysis import analyze_command

    entries = [AllowlistEntry(pattern=p) for p in patterns]
    hits: list[str] = []
    for command in dict.fromkeys(commands):
        analysis = analyze_command(command)
        if not analysis.ok or not analysis.segments:
            continue
        result = evaluate_allowlist(analysis, entries, cwd=cwd, env=os.environ, safe_bins=())
        if result.satisfied:
            hits.append(command)
    return hits
