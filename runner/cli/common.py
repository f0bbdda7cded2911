"""Helpers shared by the CLI verb modules: common options and the `{text, details}` output shape."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine import principals
from engine.display import REPORT, visible
from engine.errors import InvalidInput

Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it


def escape_controls(text: str, *, keep_lines: bool = False) -> str:
    """Agent text for a terminal: control, bidi and invisible characters written as escapes
    (engine/display.py); `keep_lines` keeps line breaks and tabs (multi-line reports)."""
    return visible(text, newline=REPORT, tabs=True) if keep_lines else visible(text)


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="config.toml (default: $EXECHOST_CONFIG, else <state dir>/config.toml)",
    )


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object {text, details}")


def emit(text: str, details: dict[str, Any], as_json: bool) -> None:
    """Print a tool result: plain text for people, or the same payload the MCP tools return."""
    if as_json:
        json.dump({"text": text, "details": details}, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        # The text carries agent commands and output: nothing in it may drive the terminal.
        text = escape_controls(text, keep_lines=True)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def agent_arg(raw: str) -> str:
    """argparse type for an agent id: `../x`, `*` and `a:b` are refused before anything is sent."""
    try:
        return principals.check_agent(raw)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def node_arg(raw: str) -> str:
    try:
        return principals.check_node(raw)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def node_query_arg(raw: str) -> str:
    """`exec --node`: a node's name, display name, id or IP, never a path."""
    try:
        return principals.check_node_query(raw)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """Aligned columns for people (--json has the same rows): every cell on one line, no control bytes."""
    cells = [[escape_controls(str("" if c is None else c)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in [headers, *cells]) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [headers, *cells]]
    return "\n".join(line.rstrip() for line in lines)
