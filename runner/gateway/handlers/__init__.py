"""One handler per control-protocol verb (pueue's message_handler layout); HANDLERS maps method → handler.

Each handler takes its method's typed request (engine/protocol/requests.py), decoded once by the server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.protocol.methods import Method
from runner.gateway.handlers import (
    agents,
    approvals,
    approve,
    browser,
    events,
    exec,
    grants,
    nodes,
    policy,
    process,
    relay,
    sandbox,
    sessions,
    shutdown,
    status,
    subscribe,
)

if TYPE_CHECKING:
    from runner.gateway.connection import Connection
    from runner.gateway.services import Services

# Each takes its method's message (engine.protocol.requests.REQUESTS[method]); the table cannot say which.
Handler = Callable[["Services", "Connection", Any], Awaitable[dict[str, Any]]]

HANDLERS: dict[str, Handler] = {  # keyed by Method: every member has exactly one handler
    Method.EXEC: exec.handle,
    Method.PROCESS: process.handle,
    Method.APPROVE: approve.handle,
    Method.APPROVALS_PENDING: approvals.pending,
    Method.APPROVALS_ATTACH: approvals.attach,
    Method.APPROVALS_DETACH: approvals.detach,
    Method.APPROVALS_STATUS: approvals.status,
    Method.APPROVALS_HISTORY: approvals.history,
    Method.ALLOWLIST_ADD: approvals.allowlist_add,
    Method.ALLOWLIST_REMOVE: approvals.allowlist_remove,
    Method.GRANTS_LIST: grants.list_,
    Method.GRANTS_REVOKE: grants.revoke,
    Method.APPROVALS_RELAY: relay.relay,
    Method.EVENTS: events.handle,
    Method.POLICY_CHECK: policy.check,
    Method.POLICY_OVERRIDE: policy.override,
    Method.POLICY_OVERRIDES: policy.overrides,
    Method.POLICY_AGENTS: policy.agents,
    Method.SESSIONS_LIST: sessions.list_,
    Method.SESSIONS_OUTPUT: sessions.output,
    Method.SESSIONS_RESIZE: sessions.resize,
    Method.SESSIONS_FOLLOW: sessions.follow,
    Method.SESSIONS_UNFOLLOW: sessions.unfollow,
    Method.SANDBOX_LIST: sandbox.list_,
    Method.SANDBOX_EXPLAIN: sandbox.explain,
    Method.SANDBOX_RECREATE: sandbox.recreate,
    Method.SANDBOX_PRUNE: sandbox.prune,
    Method.SANDBOX_EGRESS: sandbox.egress,
    Method.BROWSER: browser.handle,
    Method.BROWSER_START: browser.start,
    Method.BROWSER_STOP: browser.stop,
    Method.BROWSER_STATUS: browser.status,
    Method.BROWSER_URL: browser.url,
    Method.BROWSER_SCREENSHOT: browser.screenshot,
    Method.NODES_STATUS: nodes.status,
    Method.SUBSCRIBE: subscribe.handle,
    Method.STATUS: status.handle,
    Method.SHUTDOWN: shutdown.handle,
    Method.AGENTS_REFRESH: agents.refresh,
    Method.AGENTS_REVOKE: agents.revoke,
    Method.AGENTS_ROTATE: agents.rotate,
}
