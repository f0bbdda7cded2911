"""Messages from the gateway link and the approval socket to the UI (facts past tense, asks as requests)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from engine.approvals.socket.server import PromptRequest


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
    """A pushed event other than session output (output goes straight into the pane buffers)."""

    event: str
    data: dict[str, Any]


@dataclass
class SocketApprovalRequested(Message):
    """An ask from exec-approvals.sock: the handler resolves `future` with the operator's decision (toad)."""

    request: PromptRequest
    future: asyncio.Future[str]
