"""The MCP tools' contract: descriptions, input and output schemas, annotations, and argument validation.

Every duration is in milliseconds and says so in its name (`yieldMs`, `timeoutMs`). Enums are closed,
unknown properties and wrong types are refused before anything reaches the gateway.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import mcp_types as types

from engine.modes import ASKS, HOSTS, SECURITIES
from engine.sessions.actions import ACTIONS
from engine.tools.browser import ACTIONS as BROWSER_ACTIONS

EXEC_DESCRIPTION = """\
Run a shell command on this exec host, under the operator's policy.

Where: host=sandbox (a Docker container), gateway (this machine) or node (a remote machine); the default \
comes from the operator's config. Whether: under security=allowlist a command runs without asking only \
when it is a plain chain of simple commands (&&, ||, ;, |) and every program in it is on the operator's \
allowlist or is a safe filter (wc, head, cut, …) with safe arguments. Anything else asks the operator \
first: $VARIABLES, globs (*.py), ~, redirections (> file), $(…), backticks, subshells, heredocs, shell \
keywords, several lines, or a program not on the allowlist. Quote literal text ('*.py', '$HOME') to avoid \
asking. Say why you need the command in `reason`: the operator sees it next to the command.

While the operator decides, this call waits (progress notifications are sent). When nobody is there to \
ask, it returns status "approval-pending" with an approval id at once; the command then runs only once \
approved, detached, and `process` with action "approval" and that id tells what became of it (decision, \
the operator's reason, the session it ran as and its exit code). Use yieldMs/background to continue long \
commands later with the process tool; pty=true for programs that need a terminal."""

PROCESS_DESCRIPTION = """\
Manage exec sessions: list, poll (new output, waiting up to timeoutMs), log (offset/limit lines), write \
(stdin), send-keys (tmux-style keys), paste, submit (Enter), kill (the whole process tree), clear, remove. \
Action "approval" with approvalId reports what became of a command that waited for approval: pending, \
allow-once / allow-always / deny (with the operator's reason) or expired, and the sessionId and exit code \
of the run it started."""

BROWSER_DESCRIPTION = """\
Drive a Chromium running in this agent's browser sandbox (a hardened container; the operator can watch it \
over noVNC). Actions: navigate (url; file:///workspace/... shows files from the sandbox workspace), \
snapshot (the page as text: its accessibility tree with roles, names and link targets), screenshot (an \
image of the viewport, or fullPage), click (selector), type (selector, text; submit=true presses Enter), \
evaluate (a JavaScript expression; its JSON result). Selectors are Playwright's: CSS, text="…", \
role=button[name="…"]. The browser starts on first use when the operator allows it."""

_DETAILS = {"type": "object", "description": "Machine-readable result; `status` says what happened."}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "details": _DETAILS},
    "required": ["text", "details"],
}

EXEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "minLength": 1, "description": "Shell command to execute"},
        "reason": {
            "type": "string",
            "maxLength": 500,
            "description": "Why you run this (shown to the operator with the approval request)",
        },
        "workdir": {"type": "string", "description": "Working directory (defaults to the server's cwd)"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "yieldMs": {
            "type": "integer",
            "minimum": 0,
            "description": "Milliseconds to wait before backgrounding (default 10000)",
        },
        "background": {"type": "boolean", "description": "Run in background immediately"},
        "timeoutMs": {
            "type": "integer",
            "minimum": 1,
            "description": "Kill the command after this many milliseconds (default: the config's timeoutSec)",
        },
        "pty": {
            "type": "boolean",
            "description": "Run in a pseudo-terminal (PTY) when available (TTY-required CLIs, coding agents)",
        },
        "elevated": {
            "type": "boolean",
            "description": "Run on the host with elevated permissions (only if the operator allows it)",
        },
        "host": {"type": "string", "enum": list(HOSTS), "description": "Where to run"},
        "security": {
            "type": "string",
            "enum": list(SECURITIES),
            "description": "Security mode; may only tighten the operator's",
        },
        "ask": {
            "type": "string",
            "enum": list(ASKS),
            "description": "When to ask the operator; may only ask more",
        },
        "node": {
            "type": "string",
            "description": "Node id/name for host=node, or for host=sandbox: run in a sandbox on that node",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}

PROCESS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": [*ACTIONS, "approval"], "description": "Process action"},
        "sessionId": {"type": "string", "description": "Session id for actions other than list"},
        "node": {
            "type": "string",
            "minLength": 1,
            "description": "For list: only this node's sessions (by name); their ids are node:<name>:<id>",
        },
        "approvalId": {"type": "string", "description": "For approval: the id (or its 8-char slug)"},
        "data": {"type": "string", "description": "Data to write for write"},
        "keys": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Key tokens to send for send-keys",
        },
        "hex": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Hex bytes to send for send-keys",
        },
        "literal": {"type": "string", "description": "Literal string for send-keys"},
        "text": {"type": "string", "description": "Text to paste for paste"},
        "bracketed": {"type": "boolean", "description": "Wrap paste in bracketed mode"},
        "eof": {"type": "boolean", "description": "Close stdin after write"},
        "offset": {"type": "integer", "minimum": 0, "description": "For log: first line"},
        "limit": {"type": "integer", "minimum": 1, "description": "For log: how many lines"},
        "cursor": {"type": "string", "description": "For list: continue after this page (its `next`)"},
        "timeoutMs": {
            "type": "integer",
            "minimum": 0,
            "description": "For poll: wait up to this many milliseconds for new output",
        },
    },
    "required": ["action"],
    "additionalProperties": False,
}

BROWSER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(BROWSER_ACTIONS), "description": "What to do"},
        "url": {"type": "string", "minLength": 1, "description": "For navigate: the URL"},
        "selector": {"type": "string", "minLength": 1, "description": "For click and type"},
        "text": {"type": "string", "description": "For type: the text to enter"},
        "submit": {"type": "boolean", "description": "For type: press Enter afterwards"},
        "expression": {"type": "string", "minLength": 1, "description": "For evaluate: JavaScript"},
        "fullPage": {"type": "boolean", "description": "For screenshot: the whole page, not the viewport"},
        "timeoutMs": {
            "type": "integer",
            "minimum": 100,
            "maximum": 120_000,
            "description": "Give up on the action after this many milliseconds (default 15000)",
        },
    },
    "required": ["action"],
    "additionalProperties": False,
    "allOf": [
        {"if": {"properties": {"action": {"const": a}}}, "then": {"required": [k]}}
        for a, k in (
            ("navigate", "url"),
            ("click", "selector"),
            ("type", "selector"),
            ("evaluate", "expression"),
        )
    ]
    + [{"if": {"properties": {"action": {"const": "type"}}}, "then": {"required": ["text"]}}],
}

TOOLS = [
    types.Tool(
        name="exec",
        description=EXEC_DESCRIPTION,
        input_schema=EXEC_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Run a shell command",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
    types.Tool(
        name="process",
        description=PROCESS_DESCRIPTION,
        input_schema=PROCESS_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Manage exec sessions",
            read_only_hint=False,
            destructive_hint=True,  # kill, remove
            idempotent_hint=False,
            open_world_hint=False,
        ),
    ),
    types.Tool(
        name="browser",
        description=BROWSER_DESCRIPTION,
        input_schema=BROWSER_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
        annotations=types.ToolAnnotations(
            title="Drive the sandboxed browser",
            read_only_hint=False,
            destructive_hint=False,  # it acts inside its own container only
            idempotent_hint=False,
            open_world_hint=True,
        ),
    ),
]

SCHEMAS = {"exec": EXEC_SCHEMA, "process": PROCESS_SCHEMA, "browser": BROWSER_SCHEMA}


def invalid_arguments(tool: str, args: dict[str, Any]) -> str | None:
    """Why `args` do not fit the tool's input schema (one readable line), or None."""
    errors = sorted(
        jsonschema.Draft202012Validator(SCHEMAS[tool]).iter_errors(args), key=lambda e: list(e.path)
    )
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.path) or "arguments"
    return f"invalid {tool} arguments: {where}: {first.message}"


def to_gateway(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """MCP names (every duration in ms) to the gateway's exec/process params."""
    params = dict(args)
    if "timeoutMs" in params:
        ms = params.pop("timeoutMs")
        if tool == "browser":
            params["timeoutMs"] = ms  # the browser verb takes milliseconds as they are
        else:
            params["timeout"] = ms / 1000 if tool == "exec" else ms  # exec takes seconds, poll milliseconds
    return params
