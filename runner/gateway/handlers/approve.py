"""`approve`: resolve a pending approval by id or unique prefix; aliases and texts of reference §3.11–3.12."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.approvals.grants import GrantLimits
from engine.approvals.request import ApprovalError
from engine.errors import InvalidInput
from engine.protocol.requests import Approve
from engine.results import ToolError
from runner.gateway.handlers.common import require_operator

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services


async def handle(services: Services, conn: Connection, req: Approve) -> dict[str, Any]:
    require_operator(conn, "approve")  # an agent must never answer its own ask
    try:
        grant = GrantLimits.from_json(req.grant)  # allow-always with limits
        record, applied = services.approvals.resolve(
            req.id, req.decision, resolved_by=conn.name, reason=req.reason, grant=grant
        )
    except (ApprovalError, InvalidInput) as exc:
        raise ToolError(str(exc)) from None
    if applied:
        limits = f" ({record.grant.describe()})" if record.grant else ""
        text = f"Approval {record.decision}{limits} submitted for {record.slug}."
    else:
        text = f"Approval {record.slug} was already resolved ({record.decision or 'expired'}); ignored."
    details = {
        "status": "resolved" if applied else "ignored",
        "id": record.id,
        "slug": record.slug,
        "decision": record.decision,
        "resolvedBy": record.resolved_by,
        "command": record.request.command,
    }
    return {"text": text, "details": details}
