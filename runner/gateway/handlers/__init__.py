"""One handler per control-protocol verb (pueue's message_handler layout); HANDLERS maps method → handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from runner.gateway.handlers import (
    approvals,
    approve,
    events,
    exec,
    policy,
    process,
    sandbox,
    sessions,
    shutdown,
    status,
    subscribe,
)

if TYPE_CHECKING:
    from runner.gateway.server import Connection
    from runner.gateway.services import Services

Handler = Callable[["Services", "Connection", dict[str, Any]], Awaitable[dict[str, Any]]]

HANDLERS: dict[str, Handler] = {
    "exec": exec.handle,
    "process": process.handle,
    "approve": approve.handle,
    "approvals.pending": approvals.pending,
    "approvals.attach": approvals.attach,
    "approvals.detach": approvals.detach,
    "events": events.handle,
    "policy.check": policy.check,
    "policy.override": policy.override,
    "policy.overrides": policy.overrides,
    "sessions.list": sessions.list_,
    "sessions.output": sessions.output,
    "sessions.resize": sessions.resize,
    "sessions.follow": sessions.follow,
    "sessions.unfollow": sessions.unfollow,
    "sandbox.list": sandbox.list_,
    "sandbox.explain": sandbox.explain,
    "sandbox.recreate": sandbox.recreate,
    "sandbox.prune": sandbox.prune,
    "subscribe": subscribe.handle,
    "status": status.handle,
    "shutdown": shutdown.handle,
}
