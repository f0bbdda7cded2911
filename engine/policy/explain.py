"""A decision told for a human (`exechost policy explain`): the layer deciding, its segments, its trail."""

from __future__ import annotations

from engine.commands.analysis import redirections
from engine.policy.decision import Decision


def explain(decision: Decision) -> str:
    """A readable account: the decision, the layer and key that decided it, each segment, the trail."""
    d = decision
    lines = [
        f"Decision: {d.verdict.upper()} — {d.reason}",
        f"Decided by: {d.decided_by}",
    ]
    if d.policy is not None:
        p = d.policy
        host = p.host + (" (sandboxed)" if p.sandboxed else " (direct on the gateway)" if p.direct else "")
        lines.append(
            f"Agent: {d.agent_id}  Host: {host}  Security: {p.security}  Ask: {p.ask}  "
            f"Ask fallback: {p.ask_fallback}"
            + (f"  Node: {p.node}" if p.node else "")
            + (f"  Elevated: {p.elevated}" if p.elevated != "off" else "")
        )
    lines.append(f"Command: {d.command}")
    if not d.analysis_ok:
        reason = d.analysis_reason or "unparseable"
        found = redirections(d.command) if reason == "redirection" else []
        if found:  # which one: the operator should not have to find it in the command
            reason += ": " + ", ".join(found)
        lines.append(f"Analysis: failed closed ({reason})")
    if d.segments:
        lines.append("Segments:")
        for i, seg in enumerate(d.segments, 1):
            words = " ".join(seg["argv"]) or "(empty)"
            where = seg["resolvedPath"] or "(not found)"
            if seg["satisfiedBy"]:
                verdict = seg["satisfiedBy"] + (f" {seg['matchedPattern']}" if seg["matchedPattern"] else "")
            else:
                verdict = "MISS" + (f" ({seg['reason']})" if seg.get("reason") else "")
            lines.append(f"  {i}. {words}  →  {where}  [{verdict}]")
    if d.enforced_command:
        lines.append(f"Enforced command: {d.enforced_command}")
    if d.content is not None and d.content.items:
        lines.append("Content (sha256, checked again just before the run):")
        for item in d.content.items:
            digest = item.sha256[:16] if item.sha256 else "(absent: must stay absent)"
            if item.sha256 == "":
                digest = "(unreadable: the run is refused)"
            mark = "  agent-writable: runs from a sealed copy" if item.writable and item.sha256 else ""
            lines.append(f"  {item.role} {item.path}  {digest}  {item.size} B{mark}")
    if d.durable:
        lines.append("Durable allow-always approval: yes")
    if d.allowed_decisions:
        lines.append(
            f"Allowed decisions: {'|'.join(d.allowed_decisions)}"
            + (f"  (no approver: askFallback={d.ask_fallback})" if d.ask_fallback else "")
        )
    if d.allow_always_patterns:
        lines.append(f"Allow-always would persist: {', '.join(d.allow_always_patterns)}")
    lines.extend(d.warnings)
    if d.policy is not None and d.policy.trail:
        lines.append("Policy trail:")
        lines.extend(f"  {step}" for step in d.policy.trail)
    return "\n".join(lines)
