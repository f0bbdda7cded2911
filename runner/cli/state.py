"""`exechost state claim`: the operator's word that an unrecorded state dir they filled is theirs."""

from __future__ import annotations

import argparse
import sys

from runner.cli import UsageError
from runner.cli.common import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "state",
        help="the state dir: claim one you filled before its first start",
        description="A gateway or node adopts an existing state dir no gateway of this account recorded "
        "only when it is empty: a file of this account in it may be a host command's.",
    )
    actions = parser.add_subparsers(dest="state_action", metavar="ACTION", required=True)
    claim = actions.add_parser(
        "claim",
        help="record DIR as this account's state dir, whatever it holds (inspect it first)",
        description="Record DIR (default: $OPENCLAW_STATE_DIR or ~/.openclaw) in ~/.exechost-gateways, "
        "so a gateway or node started there adopts it with the config.toml / exec-approvals.json you "
        "wrote in it. Run it as the account the gateway or node runs as, outside any agent's command.",
    )
    claim.add_argument("dir", nargs="?", metavar="DIR", help="the state dir (default: the current one)")
    claim.set_defaults(func=cmd_claim)


def cmd_claim(args: argparse.Namespace) -> int:
    from engine.commands import gatewaydirs, hostoutside
    from engine.statefs import state_dir

    target = args.dir or str(state_dir())
    try:
        real = gatewaydirs.claim_state(hostoutside.home_dir(), target)
    except (gatewaydirs.StateDirRefusedError, gatewaydirs.RecordError) as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"{target}: could not record it in ~/{gatewaydirs.NAME}: {exc}") from exc
    print(f"claimed {real}", file=sys.stdout)
    return 0
