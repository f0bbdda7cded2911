"""Helpers shared by the CLI verb modules: common options and the `{text, details}` output shape."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROLS_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str, *, keep_lines: bool = False) -> str:
    """Escape control and bidi characters so hostile text cannot move the cursor or reorder a line;
    `keep_lines` leaves tab and newline alone (multi-line reports)."""
    pattern = _CONTROLS_BUT_LINES if keep_lines else _CONTROLS
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


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
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
