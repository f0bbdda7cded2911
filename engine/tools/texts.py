"""The exec tool's texts for the agent: the approval-pending message (reference §1.13) and output tails."""

from __future__ import annotations

import re

from engine.approvals.request import ApprovalRecord
from engine.display import node_label

FOLLOWUP_OUTPUT_CHARS = 400


def fence(command: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", command)), default=0)
    return "`" * max(3, longest + 1)


def approval_pending_text(record: ApprovalRecord, warnings: list[str]) -> str:
    """Reference §1.13 `buildApprovalPendingMessage`, with what is true here: this text is only returned
    when no approver is attached (else the call waits), so it never promises interactive approval, and it
    says how to approve from a shell as well as in chat (issue 10)."""
    req = record.request
    bar = fence(req.command)
    lines: list[str] = []
    if warnings:
        lines += [*warnings, ""]
    lines.append(f"Approval required (id {record.slug}, full {record.id}).")
    lines.append(f"Host: {req.host}")
    if req.node_id:
        lines.append(f"Node: {node_label(req.node_name, req.node_id)}")
    lines.append(f"CWD: {req.cwd or '(node default)'}")
    lines += ["Command:", f"{bar}sh", req.command, bar]
    lines.append(
        "No approver is attached: nothing runs until someone approves. Once approved, the command runs "
        "detached and its result arrives as a system event (exechost events)."
    )
    if "allow-always" not in req.allowed_decisions:
        lines.append(
            "The effective approval policy requires approval every time, so Allow Always is unavailable."
        )
    lines.append(f"Reply with: /approve {record.slug} {'|'.join(req.allowed_decisions)}")
    lines.append(f"From a shell: exechost approve {record.slug} allow-once")
    lines.append("If the short code is ambiguous, use the full id.")
    return "\n".join(lines)


def compact(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
