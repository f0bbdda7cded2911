"""Pending asks on disk: an ask waiting for the operator outlives a gateway crash or restart, expiry and all.

`<state>/pending-approvals.json` (0600, atomic rewrite) holds every ask not yet settled: those still waiting,
and those approved whose run has not started yet. Each carries what the next gateway needs to run it as
approved: the call's parameters, the caller's agent and session key, and what the human approved (the
command text that runs, the cwd, and the identity of every file it pins), so a changed file or policy is
refused as `approval-stale` instead of running something nobody saw.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import jsontext
from engine.approvals.grants import GrantLimits
from engine.approvals.pending import ApprovalRecord, ApprovalRequest, unsettled
from engine.statefs import StateFileError, atomic_write, read_text

log = logging.getLogger("exechost.approvals")

PENDING_NAME = "pending-approvals.json"
VERSION = 1


def request_to_json(request: ApprovalRequest) -> dict[str, Any]:
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


def request_from_json(data: dict[str, Any]) -> ApprovalRequest:
    """The request as it was registered (tuples restored: identity, and so coalescing, depends on them)."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(ApprovalRequest):
        if f.name not in data:
            continue
        value = data[f.name]
        if isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[f.name] = value
    return ApprovalRequest(**kwargs)


@dataclass
class StoredAsk:
    """One ask as written to disk, and what restoring it needs."""

    id: str
    request: ApprovalRequest
    created_at_ms: int
    expires_at_ms: int
    count: int = 1
    requester_gone: bool = False
    decision: str | None = None
    resolved_by: str | None = None
    resolved_at_ms: int | None = None
    reason: str | None = None
    resume: dict[str, Any] | None = None
    requesters: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # An allow-always with limits must stay limited when its run starts under the next gateway.
    grant: dict[str, Any] | None = None
    grant_id: str | None = None
    run: dict[str, Any] | None = None  # {"status": "starting", "sessionId": …}: it may be running already

    @classmethod
    def of(cls, record: ApprovalRecord) -> StoredAsk:
        return cls(
            id=record.id,
            request=record.request,
            created_at_ms=record.created_at_ms,
            expires_at_ms=record.expires_at_ms,
            count=record.count,
            requester_gone=record.requester_gone,
            decision=record.decision,
            resolved_by=record.resolved_by,
            resolved_at_ms=record.resolved_at_ms,
            reason=record.reason,
            resume=record.resume,
            requesters=list(record.requesters),
            grant=record.grant.to_json() if record.grant else None,
            grant_id=record.grant_id,
            run=record.run,
        )

    def to_json(self) -> dict[str, Any]:
        # Field by field, not dataclasses.asdict: that deep-copies the resume params on every save.
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["request"] = request_to_json(self.request)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredAsk:
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in fields and k != "request"}
        GrantLimits.from_json(kwargs.get("grant"))  # a malformed grant fails the load, not the restore
        return cls(request=request_from_json(dict(data["request"])), **kwargs)


class PendingFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None

    def save(self, records: list[ApprovalRecord]) -> None:
        self.write(self.encode(records))

    @staticmethod
    def encode(records: list[ApprovalRecord]) -> bytes:
        asks = [StoredAsk.of(r).to_json() for r in records if unsettled(r)]
        return json.dumps({"version": VERSION, "asks": asks}, ensure_ascii=False).encode(
            "utf-8", "surrogatepass"
        )

    def write(self, data: bytes) -> None:
        try:
            atomic_write(self.path, data)
            self.problem = None
        except (OSError, StateFileError) as exc:
            self.problem = f"pending approvals not saved to {self.path}: {exc}"
            log.error("%s", self.problem)

    def load(self) -> list[StoredAsk]:
        """What the last gateway left; an unreadable file is reported and moved aside, never replaced."""
        try:
            raw = read_text(self.path)
        except (OSError, StateFileError, UnicodeDecodeError) as exc:
            self.problem = f"pending approvals not loaded from {self.path}: {exc}"
            log.error("%s", self.problem)
            return []
        if raw is None:
            return []
        try:
            data = jsontext.loads(raw)
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError("not a pending-approvals file")
            return [StoredAsk.from_json(a) for a in data.get("asks") or []]
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.bad")
            self.path.replace(aside)
            self.problem = f"pending approvals in {self.path} unreadable ({exc}); kept as {aside}"
            log.error("%s", self.problem)
            return []
