"""The `exechost` command line: one module per verb group, each registering its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers)`; the parser it adds sets `func(args) -> int`.
COMMAND_MODULES: tuple[str, ...] = (
    "runner.cli.approvals",
    "runner.cli.policy",
    "runner.cli.gateway",
    "runner.cli.exec",
    "runner.cli.process",
    "runner.cli.approve",
    "runner.cli.events",
    "runner.cli.mcp",
    "runner.cli.sandbox",
    "runner.cli.console",
    "runner.cli.node",
    "runner.cli.nodes",
)


class UsageError(Exception):
    """Bad arguments or config: printed on stderr, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="exechost", description="An exec host for AI agents, with an operator console."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        print(f"exechost: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
