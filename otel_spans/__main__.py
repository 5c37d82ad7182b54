"""``otel-spans`` / ``python -m otel_spans``: the command line."""

from __future__ import annotations

import argparse
import sys

from otel_spans.report import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="otel-spans", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo_command = commands.add_parser(
        "demo", help="run a nested-span Dask workflow and show its trace"
    )
    demo_command.add_argument(
        "--compare",
        action="store_true",
        help="run it twice, the second time with one stage made slower, and compare",
    )
    demo_command.add_argument(
        "--history",
        type=int,
        nargs="?",
        const=8,
        metavar="RUNS",
        help="run it RUNS times (default 8), the last time with one stage made slower,"
        " and judge the last run against the others",
    )
    # One run of --compare or --history, in a process of its own.
    demo_command.add_argument("--run-into", help=argparse.SUPPRESS)
    demo_command.add_argument("--slower-by", type=float, default=0.0, help=argparse.SUPPRESS)
    # The offline commands (tree, report) are defined and run by report/cli.py.
    cli.add_commands(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from otel_spans.demo import main as demo
        from otel_spans.demo import run_into

        if args.run_into:
            return run_into(args.run_into, args.slower_by)
        return demo(compare=args.compare, history=args.history)
    return cli.run(args, parser)


if __name__ == "__main__":
    sys.exit(main())
