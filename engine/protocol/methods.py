"""Every control-socket method, pushed event and subscription topic, named once for all clients."""

from __future__ import annotations

from enum import StrEnum


class Method(StrEnum):
    """Request methods; the gateway has exactly one handler per member (runner/gateway/handlers/)."""

    EXEC = "exec"
    PROCESS = "process"
    APPROVE = "approve"
    APPROVALS_PENDING = "approvals.pending"
    APPROVALS_ATTACH = "approvals.attach"
    APPROVALS_DETACH = "approvals.detach"
    APPROVALS_STATUS = "approvals.status"
    APPROVALS_HISTORY = "approvals.history"
    ALLOWLIST_ADD = "approvals.allowlist.add"
    ALLOWLIST_REMOVE = "approvals.allowlist.remove"
    GRANTS_LIST = "approvals.grants"
    GRANTS_REVOKE = "approvals.grants.revoke"
    APPROVALS_RELAY = "approvals.relay"  # an exec-approvals.sock ask, held by the gateway until answered
    EVENTS = "events"
    POLICY_CHECK = "policy.check"
    POLICY_OVERRIDE = "policy.override"
    POLICY_OVERRIDES = "policy.overrides"
    POLICY_AGENTS = "policy.agents"
    SESSIONS_LIST = "sessions.list"
    SESSIONS_OUTPUT = "sessions.output"
    SESSIONS_RESIZE = "sessions.resize"
    SESSIONS_FOLLOW = "sessions.follow"
    SESSIONS_UNFOLLOW = "sessions.unfollow"
    SANDBOX_LIST = "sandbox.list"
    SANDBOX_EXPLAIN = "sandbox.explain"
    SANDBOX_RECREATE = "sandbox.recreate"
    SANDBOX_PRUNE = "sandbox.prune"
    SANDBOX_EGRESS = "sandbox.egress"  # recent egress connections (engine.sandbox.egress)
    BROWSER = "browser"
    BROWSER_START = "browser.start"
    BROWSER_STOP = "browser.stop"
    BROWSER_STATUS = "browser.status"
    BROWSER_URL = "browser.url"
    BROWSER_SCREENSHOT = "browser.screenshot"
    NODES_STATUS = "nodes.status"
    SUBSCRIBE = "subscribe"
    STATUS = "status"
    SHUTDOWN = "shutdown"
    # The operator changed the agent credentials on disk (`exechost agents add|revoke`): live connections
    # whose credential no longer matches are dropped at once (new connections read the files anyway).
    AGENTS_REFRESH = "agents.refresh"
    # `exechost agents revoke NAME` with a gateway running: it stops reading the agent's connections, then
    # removes the credential, then flushes them (nothing the agent sends after the revoke is acted upon).
    AGENTS_REVOKE = "agents.revoke"
    # `exechost agents add NAME --rotate` with a gateway running: revoke's order (stop the agent's
    # connections, mint the new credential, drop them), so the old credential never acts after the mint.
    AGENTS_ROTATE = "agents.rotate"


class EventName(StrEnum):
    """Events the gateway pushes to subscribers (each belongs to one topic)."""

    SESSION_STARTED = "session.started"
    SESSION_EXITED = "session.exited"
    SESSION_OUTPUT = "session.output"
    SESSION_ACTIVITY = "session.activity"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_UPDATED = "approval.updated"
    APPROVAL_RESOLVED = "approval.resolved"
    SYSTEM_EVENT = "system.event"
    SANDBOX_PROGRESS = "sandbox.progress"
    EGRESS_CONNECTION = "egress.connection"  # sandboxes topic: one connection through the egress proxy
    BROWSER_UPDATED = "browser.updated"  # sandboxes topic: a browser started, stopped or changed page
    # Sent only to the connection whose `exec` now waits for a human (no subscription needed); `callId`
    # echoes the exec params' optional `callId`.
    EXEC_WAITING = "exec.waiting"
    GATEWAY_CONFIG = "gateway.config"  # topic events: the config on disk broke ({error}) or was fixed (null)


class Topic(StrEnum):
    """What a client may subscribe to."""

    SESSIONS = "sessions"
    APPROVALS = "approvals"
    EVENTS = "events"
    SANDBOXES = "sandboxes"


TOPICS = tuple(t.value for t in Topic)


class RunStatus(StrEnum):
    """A tool result's `details.status` (exec, process, approvals.status's run) as clients read it."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    DENIED = "denied"
    APPROVAL_PENDING = "approval-pending"  # the call waits for the operator (exec returned at once)
    APPROVAL_UNAVAILABLE = "approval-unavailable"  # an ask was needed and nobody could answer it
