"""One typed request per control-socket method, shared by the gateway and its clients (pueue's shape).

A client builds one of these and sends `msg.params()`; the gateway decodes a request's params once, in
`server._dispatch`, into the method's message (`decode`), and its handler takes that object. Decoding
checks each field's type and names the method and the field when one is wrong (BadParams, `bad_params`);
what a handler still checks is meaning (a range, an agent's right), never a type.

The wire stays what it was: camelCase keys, an absent field and `null` alike mean "not given", and
`params()` sends back exactly the fields that were given (a decoded request encodes to its params, minus
nulls and the fields its method does not know). `process` and `browser` pass their action's own fields
through untouched (`args`): the session actions and the browser tool check those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from engine import jsontext
from engine.errors import InvalidInput
from engine.protocol.methods import Method


class BadParams(InvalidInput):
    """A request's params do not fit its method's message; the message names the method and the field."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# kind -> (admits the value, what the error says it must be)
KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "path": (lambda v: isinstance(v, str), "a string"),  # reaches the OS: a NUL byte is refused too
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "int": (_is_int, "an integer"),
    "number": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "id": (lambda v: _is_int(v) or isinstance(v, str), "a string or an integer"),
    "strs": (lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "a list of strings"),
    "env": (
        lambda v: (
            isinstance(v, dict) and all(isinstance(k, str) and isinstance(s, str) for k, s in v.items())
        ),
        "an object of string values",
    ),
    "object": (lambda v: isinstance(v, dict), "an object"),
}


def wire(kind: str, *, name: str | None = None, required: bool = False) -> Any:
    """A message field: its wire kind, its wire name (default: the attribute in camelCase) and whether it
    must be given (a required string must also be non-blank)."""
    meta = {"kind": kind, "wire": name, "required": required}
    if required:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=None, metadata=meta)


def _camel(attr: str) -> str:
    head, *rest = attr.rstrip("_").split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class _Spec:
    attr: str
    wire: str
    kind: str
    required: bool


REQUESTS: dict[str, type[Message]] = {}
"""Method → its message class: every Method has exactly one (tests/engine/protocol/test_requests.py)."""


@dataclass(frozen=True, kw_only=True)
class Message:
    """A request's params, typed. `agentId` is every method's: an agent naming another agent is refused
    for every verb alike (runner/gateway/server.py)."""

    METHOD: ClassVar[Method]
    PASS_THROUGH: ClassVar[bool] = False  # fields not named below are kept in `args` (process, browser)
    # Which of them: None, every one (the browser tool checks its own); else only these, and a field the
    # verb does not read is dropped as a named one is, never held while the request runs (fresh round 17 b)
    PASS_FIELDS: ClassVar[frozenset[str] | None] = None
    SPECS: ClassVar[tuple[_Spec, ...]] = ()

    agent_id: str | None = wire("str")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        method = cls.__dict__.get("METHOD")
        if method is not None:
            REQUESTS[method] = cls

    @classmethod
    def specs(cls) -> tuple[_Spec, ...]:
        if "SPECS" not in cls.__dict__:  # computed once per class, on first use
            cls.SPECS = tuple(
                _Spec(
                    f.name, f.metadata["wire"] or _camel(f.name), f.metadata["kind"], f.metadata["required"]
                )
                for f in dataclasses.fields(cls)
                if "kind" in f.metadata
            )
        return cls.SPECS

    @classmethod
    def decode(cls, params: dict[str, Any]) -> Self:
        """The message for these params, or BadParams naming the method and the first wrong field."""
        values: dict[str, Any] = {}
        for spec in cls.specs():
            value = params.get(spec.wire)
            if value is None:
                if spec.required:
                    raise BadParams(f"{cls.METHOD}: {spec.wire} is required")
                continue
            admits, must = KINDS[spec.kind]
            if not admits(value):
                raise BadParams(f"{cls.METHOD}: {spec.wire} must be {must}")
            if spec.kind == "path" and "\x00" in value:
                raise BadParams(f"{cls.METHOD}: {spec.wire} contains a NUL byte")
            if spec.required and spec.kind in ("str", "path") and not value.strip():
                raise BadParams(f"{cls.METHOD}: {spec.wire} is required")
            values[spec.attr] = value
        if cls.PASS_THROUGH:
            known = {spec.wire for spec in cls.specs()}
            kept = cls.PASS_FIELDS
            values["args"] = {
                k: v for k, v in params.items() if k not in known and (kept is None or k in kept)
            }
        return cls(**values)

    def held_bytes(self) -> int:
        """What this request's values hold in Python (jsontext.held_bytes of each field given): what the
        gateway charges to its sender's request budget while it runs, not its frame's bytes alone."""
        held = jsontext.held_bytes
        values = [getattr(self, s.attr) for s in self.specs()]
        total = sum(held(v) for v in values if v is not None)  # a field not given holds nothing of its own
        if self.PASS_THROUGH:
            total += held(getattr(self, "args", {}))
        return total

    def params(self) -> dict[str, Any]:
        """The wire params: every field given, by its wire name (pass-through fields after them)."""
        out = {s.wire: getattr(self, s.attr) for s in self.specs() if getattr(self, s.attr) is not None}
        if self.PASS_THROUGH:
            extra: dict[str, Any] = getattr(self, "args", {})
            out.update({k: v for k, v in extra.items() if k not in out})
        return out


# ---- exec and process: the agent's tools -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ExecRequest(Message):
    """The exec tool's call (reference §1.2) plus the caller's session key and an optional call id."""

    METHOD = Method.EXEC
    command: str | None = wire("str")
    workdir: str | None = wire("path")
    default_workdir: str | None = wire("path")  # the calling CLI/MCP process's cwd
    env: dict[str, str] | None = wire("env")
    host: str | None = wire("str")
    security: str | None = wire("str")
    ask: str | None = wire("str")
    node: str | None = wire("str")
    elevated: bool | None = wire("bool")
    pty: bool | None = wire("bool")
    background: bool | None = wire("bool")
    timeout: int | float | None = wire("number")
    yield_ms: int | float | None = wire("number")
    reason: str | None = wire("str")
    call_id: int | str | None = wire("id")  # echoed in `exec.waiting`
    session_key: str | None = wire("str")

    def policy_params(self) -> dict[str, Any]:
        """The per-call params that choose the policy (each may only tighten what the config allows)."""
        return policy_params(self)


POLICY_PARAMS = ("host", "security", "ask", "node", "elevated")


def policy_params(msg: ExecRequest | PolicyCheck) -> dict[str, Any]:
    return {k: getattr(msg, k) for k in POLICY_PARAMS if getattr(msg, k) is not None}


# What the session actions read besides action, sessionId and node (engine/sessions/actions.py; a node's
# runs the same actions): the process tool's fields (runner/mcp_schema.PROCESS_SCHEMA, timeoutMs sent as
# timeout).
PROCESS_FIELDS = frozenset(
    {"timeout", "offset", "limit", "cursor", "data", "eof", "text", "bracketed", "keys", "hex", "literal"}
    | {"delayMs"}
)


@dataclass(frozen=True, kw_only=True)
class ProcessRequest(Message):
    """The process tool's call (reference §2.1): `action`, the session, and the action's own fields."""

    METHOD = Method.PROCESS
    PASS_THROUGH = True
    PASS_FIELDS = PROCESS_FIELDS
    action: str = wire("str", required=True)
    session_id: str | None = wire("str")
    node: str | None = wire("str")
    session_key: str | None = wire("str")
    args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def tool_params(self) -> dict[str, Any]:
        """What the session actions read: the action's fields, with the session and node."""
        named = {"sessionId": self.session_id, "node": self.node}
        return {**self.args, **{k: v for k, v in named.items() if v is not None}}


# ---- approvals -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Approve(Message):
    METHOD = Method.APPROVE
    id: str = wire("str", required=True)
    decision: str = wire("str", required=True)
    reason: str | None = wire("str")
    grant: dict[str, Any] | None = wire("object")  # allow-always with limits (engine.approvals.grants)


@dataclass(frozen=True, kw_only=True)
class ApprovalsPending(Message):
    METHOD = Method.APPROVALS_PENDING
    cursor: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class ApprovalsAttach(Message):
    METHOD = Method.APPROVALS_ATTACH


@dataclass(frozen=True, kw_only=True)
class ApprovalsDetach(Message):
    METHOD = Method.APPROVALS_DETACH


@dataclass(frozen=True, kw_only=True)
class ApprovalsStatus(Message):
    METHOD = Method.APPROVALS_STATUS
    approval_id: str = wire("str", required=True)
    session_key: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class ApprovalsHistory(Message):
    METHOD = Method.APPROVALS_HISTORY
    cursor: str | None = wire("str")  # how many entries to skip: the `next` of the page before


@dataclass(frozen=True, kw_only=True)
class AllowlistAdd(Message):
    METHOD = Method.ALLOWLIST_ADD
    pattern: str = wire("str", required=True)
    arg_pattern: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class AllowlistRemove(Message):
    METHOD = Method.ALLOWLIST_REMOVE
    pattern: str = wire("str", required=True)


@dataclass(frozen=True, kw_only=True)
class GrantsList(Message):
    METHOD = Method.GRANTS_LIST


@dataclass(frozen=True, kw_only=True)
class GrantsRevoke(Message):
    METHOD = Method.GRANTS_REVOKE
    id: str = wire("str", required=True)


@dataclass(frozen=True, kw_only=True)
class ApprovalsRelay(Message):
    """An exec-approvals.sock ask the console hands over (or withdraws: `withdraw: true`)."""

    METHOD = Method.APPROVALS_RELAY
    id: str = wire("str", required=True)
    withdraw: bool | None = wire("bool")
    command: str | None = wire("path")
    cwd: str | None = wire("path")
    allowed_decisions: list[str] | None = wire("strs")
    timeout_ms: int | None = wire("int")
    session_key: str | None = wire("str")
    security: str | None = wire("str")
    ask: str | None = wire("str")
    resolved_path: str | None = wire("path")
    env: dict[str, str] | None = wire("env")  # the exec frame's env overrides: shown and decided on
    warnings: list[str] | None = wire("strs")  # the socket side's decision warnings, shown with the ask
    # The id of the exec-approvals.sock token the ask's frame proved (PromptRequest.token_id): the ask is
    # filed under it and nothing is saved for it once that token is replaced. Required for an ask (a relay
    # naming none proves nobody: refused); a withdraw needs none.
    socket_token: str | None = wire("str")
    # The ask is an `exec` frame's: the console's host runs the command on the yes, so the answer is that
    # run's own (allow-once) and what lasts of an allow-always (its grant with its limits, or its patterns)
    # is saved here, in the gateway's stores alone, never turned into a second, permanent save there.
    runs: bool | None = wire("bool")


# ---- events and policy -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Events(Message):
    METHOD = Method.EVENTS
    session_key: str | None = wire("str")
    drain: bool | None = wire("bool")
    cursor: int | None = wire("int")


@dataclass(frozen=True, kw_only=True)
class PolicyCheck(Message):
    """What `exec` with these params would decide (`cwd` stands for exec's workdir)."""

    METHOD = Method.POLICY_CHECK
    command: str = wire("path", required=True)
    cwd: str | None = wire("path")
    env: dict[str, str] | None = wire("env")
    host: str | None = wire("str")
    security: str | None = wire("str")
    ask: str | None = wire("str")
    node: str | None = wire("str")
    elevated: bool | None = wire("bool")
    session_key: str | None = wire("str")

    def policy_params(self) -> dict[str, Any]:
        return policy_params(self)


@dataclass(frozen=True, kw_only=True)
class PolicyOverride(Message):
    METHOD = Method.POLICY_OVERRIDE
    directive: str = wire("str", required=True)
    session_key: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class PolicyOverrides(Message):
    METHOD = Method.POLICY_OVERRIDES
    after: str | None = wire("str")  # the previous page's `next`


@dataclass(frozen=True, kw_only=True)
class PolicyAgents(Message):
    METHOD = Method.POLICY_AGENTS


# ---- sessions --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SessionsList(Message):
    METHOD = Method.SESSIONS_LIST
    session_key: str | None = wire("str")
    cursor: str | None = wire("str")  # how many rows to skip: the `next` of the page before


@dataclass(frozen=True, kw_only=True)
class SessionsOutput(Message):
    METHOD = Method.SESSIONS_OUTPUT
    session_id: str = wire("str", required=True)
    offset: int | None = wire("int")
    limit: int | None = wire("int")


@dataclass(frozen=True, kw_only=True)
class SessionsResize(Message):
    METHOD = Method.SESSIONS_RESIZE
    session_id: str = wire("str", required=True)
    cols: int | None = wire("int")
    rows: int | None = wire("int")


@dataclass(frozen=True, kw_only=True)
class SessionsFollow(Message):
    METHOD = Method.SESSIONS_FOLLOW
    session_id: str = wire("str", required=True)
    only: bool | None = wire("bool")


@dataclass(frozen=True, kw_only=True)
class SessionsUnfollow(Message):
    METHOD = Method.SESSIONS_UNFOLLOW
    session_id: str | None = wire("str")


# ---- sandboxes and browsers ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SandboxList(Message):
    METHOD = Method.SANDBOX_LIST
    node: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class SandboxExplain(Message):
    METHOD = Method.SANDBOX_EXPLAIN
    node: str | None = wire("str")
    session_key: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class SandboxRecreate(Message):
    """Exactly one selector: `all`, `sessionKey`, `agentId` or `containerName`."""

    METHOD = Method.SANDBOX_RECREATE
    all_: bool | None = wire("bool")
    session_key: str | None = wire("str")
    container_name: str | None = wire("str")
    node: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class SandboxPrune(Message):
    METHOD = Method.SANDBOX_PRUNE
    node: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class SandboxEgress(Message):
    METHOD = Method.SANDBOX_EGRESS
    limit: int | None = wire("int")


@dataclass(frozen=True, kw_only=True)
class BrowserCall(Message):
    """The browser tool's call: its action and fields go to engine/tools/browser.py as they came."""

    METHOD = Method.BROWSER
    PASS_THROUGH = True
    session_key: str | None = wire("str")
    args: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BrowserStart(Message):
    METHOD = Method.BROWSER_START
    session_key: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class BrowserStop(Message):
    METHOD = Method.BROWSER_STOP
    session_key: str | None = wire("str")
    container_name: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class BrowserStatus(Message):
    METHOD = Method.BROWSER_STATUS


@dataclass(frozen=True, kw_only=True)
class BrowserUrl(Message):
    METHOD = Method.BROWSER_URL
    session_key: str | None = wire("str")


@dataclass(frozen=True, kw_only=True)
class BrowserScreenshot(Message):
    METHOD = Method.BROWSER_SCREENSHOT
    container_name: str = wire("str", required=True)
    fresh: bool | None = wire("bool")  # take a new screenshot of the page now


# ---- the gateway itself --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NodesStatus(Message):
    METHOD = Method.NODES_STATUS
    ping: bool | None = wire("bool")  # connect where needed and measure RTT (operator only)


@dataclass(frozen=True, kw_only=True)
class Subscribe(Message):
    METHOD = Method.SUBSCRIBE
    topics: list[str] | None = wire("strs")  # none given: every topic
    follow: list[str] | None = wire("strs")  # limits `session.output` to these sessions


@dataclass(frozen=True, kw_only=True)
class Status(Message):
    METHOD = Method.STATUS


@dataclass(frozen=True, kw_only=True)
class Shutdown(Message):
    METHOD = Method.SHUTDOWN
    kill_sessions: bool | None = wire("bool")


@dataclass(frozen=True, kw_only=True)
class AgentsRefresh(Message):
    METHOD = Method.AGENTS_REFRESH


@dataclass(frozen=True, kw_only=True)
class AgentsRevoke(Message):
    METHOD = Method.AGENTS_REVOKE
    agent: str = wire("str", required=True)


@dataclass(frozen=True, kw_only=True)
class AgentsRotate(Message):
    METHOD = Method.AGENTS_ROTATE
    agent: str = wire("str", required=True)


def method_and_params(method: str | Message, params: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """What a client sends for `request(msg)` (the typed way) or `request(method, params)` (raw frames:
    tests, and requests relayed as they came)."""
    if isinstance(method, Message):
        return method.METHOD, method.params()
    return method, params or {}
