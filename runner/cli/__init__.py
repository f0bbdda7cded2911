"""The `exechost` command line: one module per verb group, each registering its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

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
    "runner.cli.agents",
    "runner.cli.state",
)


class UsageError(Exception):
    """Bad arguments or config: printed on stderr, exit code 2 (and as JSON on stdout under --json)."""


class _ParseError(Exception):
    """argparse's complaint, raised instead of exiting so `--json` callers get it as JSON too."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ParseError(self, message)


def _wants_json(argv: Sequence[str]) -> bool:
    """`--json` among the options (not inside the command after `--`)."""
    head = argv[: list(argv).index("--")] if "--" in argv else argv
    return "--json" in head


def report_failure(message: str, as_json: bool, code: int = 2) -> int:
    """A usage error or a failed verb as the caller asked for it: an agent that asked for JSON gets one
    object on stdout (`details.status = "error"`), as `exec --json` gives for every outcome; the text
    goes to stderr either way."""
    if as_json:
        import json

        shown = {"text": message, "details": {"status": "error", "error": message}}
        sys.stdout.write(json.dumps(shown) + "\n")
        sys.stdout.flush()
    print(f"exechost: {message}", file=sys.stderr)
    return code


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("exechost")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """`--version`, read from the package metadata only when asked (importlib.metadata costs ~40 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"exechost {_version()}")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser, or, when `argv` names a verb, only that verb's module: every verb module pulls in
    its own engine side (asyncssh for nodes, docker for sandbox, Textual for the console), and a verb that
    runs on every agent command (`exec`, `process`) should not pay ~100 ms importing the others."""
    parser = _Parser(prog="exechost", description="An exec host for AI agents, with an operator console.")
    parser.add_argument("--version", action=_VersionAction, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _modules_for(argv):
        importlib.import_module(name).register(sub)
    return parser


def _modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    # The verb is argv[0] (the top-level parser takes no options but --help/--version); anything else gets
    # every module, so help, errors and suggestions list every verb as before.
    if argv:
        module = f"runner.cli.{argv[0]}"
        if module in COMMAND_MODULES:
            return (module,)
    return COMMAND_MODULES


EXIT_PIPE = 141  # 128 + SIGPIPE: what `cat` reports when its reader went away


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:
        # `exechost … | head -0`: the reader is gone. Point stdout at /dev/null so the interpreter's own
        # flush at exit does not raise again, and exit like a program killed by SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE


def _main(argv: list[str]) -> int:
    problem = _not_utf8(argv)
    if problem:
        print(f"exechost: {problem}", file=sys.stderr)
        return 2
    if argv == ["--version"]:  # asked by scripts before every call: no verb module, no parser
        print(f"exechost {_version()}")
        return 0
    parser = build_parser(argv)
    as_json = _wants_json(argv)
    try:
        return _run(parser, argv, as_json)
    except _ParseError as exc:
        if as_json:
            return report_failure(str(exc), True)
        exc.parser.print_usage(sys.stderr)  # argparse's own form: usage line, then the complaint
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, argv: list[str], as_json: bool) -> int:
    args, extras = parser.parse_known_args(argv)
    if extras and getattr(args, "command", None) == "process" and not args.session_id:
        # `process write --agent X node:… --data …`: argparse binds the optional SESSION_ID too early
        # and leaves the id over; it is the session id.
        ids = [e for e in extras if not e.startswith("-")]
        if len(ids) == 1 and len(extras) == 1:
            args.session_id, extras = ids[0], []
    if extras:
        # The subcommand's own usage, not just the top-level one: that is where the typo is.
        _deepest(parser, argv).error(f"unrecognized arguments: {' '.join(extras)}")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    _claim_state_dir()
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        return report_failure(str(exc), as_json)
    except KeyboardInterrupt:
        return 130


def _claim_state_dir() -> None:
    """The operator's verb may write the state dir before any gateway made it (`agents add`): recorded
    first when new or holding no gateway's file, so the gateway adopts it (engine.commands.gatewaydirs;
    a host run's CLI cannot write the home, so records nothing)."""
    from engine.commands import gatewaydirs, hostoutside
    from engine.statefs import state_dir

    gatewaydirs.claim(hostoutside.home_dir(), str(state_dir()))


def _deepest(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The subcommand parser `argv` names (`approvals allowlist add`), for its usage line."""
    words = [w for w in argv if not w.startswith("-")]
    while True:
        action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = next((w for w in words if action is not None and w in action.choices), None)
        if action is None or chosen is None:
            return parser
        words = words[words.index(chosen) + 1 :]
        parser = action.choices[chosen]


def _not_utf8(argv: Sequence[str]) -> str | None:
    """Python hands undecodable argv bytes over as lone surrogates; they cannot be sent as JSON, run, or
    shown for approval faithfully, so they are refused here, by position."""
    for index, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as exc:
            byte = ord(arg[exc.start]) - 0xDC00
            shown = f"byte 0x{byte:02x}" if 0 <= byte < 0x100 else f"character U+{ord(arg[exc.start]):04X}"
            return (
                f"argument {index} is not valid UTF-8 ({shown} at offset {exc.start}); commands, paths "
                "and env values must be UTF-8 text"
            )
    return None


if __name__ == "__main__":
    sys.exit(main())
