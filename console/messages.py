"""Messages from the gateway link and the approval socket to the UI (facts past tense, asks as requests)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.message import Message

from engine.approvals.socket.server import PromptRequest
from engine.protocol.methods import EventName


@dataclass
class GatewayConnected(Message):
    """Handshake done, attached as approver, subscribed; `pending` and `sessions` are the fresh state."""

    pid: int
    pending: list[dict[str, Any]]
    sessions: list[dict[str, Any]]


@dataclass
class GatewayLost(Message):
    """The control connection is down (the link keeps retrying)."""

    reason: str


@dataclass
class GatewayEvent(Message):
    """A pushed event other than session output (output goes straight into the pane buffers), as the typed
    message of its `EventName` (`GatewayEvent.of`): each is handled by its own `@on` handler."""

    event: str
    data: dict[str, Any]

    EVENT: ClassVar[EventName | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.EVENT is not None:
            _BY_EVENT[cls.EVENT] = cls

    @staticmethod
    def of(event: str, data: dict[str, Any]) -> GatewayEvent | None:
        """The typed message of a pushed event; None for one the console does not show."""
        cls = _BY_EVENT.get(event)
        return cls(event, data) if cls is not None else None


_BY_EVENT: dict[str, type[GatewayEvent]] = {}


class ApprovalRequested(GatewayEvent):
    """A new ask (its view): a row in the inbox."""

    EVENT = EventName.APPROVAL_REQUESTED


class ApprovalUpdated(GatewayEvent):
    """An identical ask was coalesced into this one (count), or its requester went away."""

    EVENT = EventName.APPROVAL_UPDATED


class ApprovalResolved(GatewayEvent):
    EVENT = EventName.APPROVAL_RESOLVED


class SessionStarted(GatewayEvent):
    EVENT = EventName.SESSION_STARTED


class SessionExited(GatewayEvent):
    EVENT = EventName.SESSION_EXITED


class SandboxProgress(GatewayEvent):
    EVENT = EventName.SANDBOX_PROGRESS


class BrowserUpdated(GatewayEvent):
    EVENT = EventName.BROWSER_UPDATED


class GatewayConfig(GatewayEvent):
    """The config on disk broke (`error`) or was fixed (null)."""

    EVENT = EventName.GATEWAY_CONFIG


class SystemEvent(GatewayEvent):
    EVENT = EventName.SYSTEM_EVENT


@dataclass
class SocketApprovalRequested(Message):
    """An ask from exec-approvals.sock: the handler resolves `future` with the operator's decision (toad)."""

    request: PromptRequest
    future: asyncio.Future[str]
