"""The `python -m trainer` command line: one sub-command per job kind or tool.

Each sub-command is registered by a small `add_<name>` function that builds its parser
and sets `handler`; the handler returns the process exit code. Job kinds read a
`run.json` spec and write one JSON event per line to stdout (DESIGN.md, the job protocol).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description=(
            "agent-flywheel's trainer: verify tool calls, evaluate, and train LoRA adapters. "
            "Plain Python; the web app drives it through the job protocol."
        ),
    )
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))
