"""``otel-spans`` / ``python -m otel_spans``: the command line."""

from __future__ import annotations

import argparse
import sys


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
    # One run of --compare, in a process of its own.
    demo_command.add_argument("--run-into", help=argparse.SUPPRESS)
    demo_command.add_argument("--slower-by", type=float, default=0.0, help=argparse.SUPPRESS)
    tree = commands.add_parser("tree", help="print the traces in OTLP/JSON files as a timeline")
    tree.add_argument("path", help="an OTLP/JSON lines file or a directory of them")
    rep = commands.add_parser(
        "report",
        help="critical path, bottlenecks, efficiency; writes a Perfetto trace and an HTML report",
    )
    rep.add_argument("path", nargs="?", help="an OTLP/JSON lines file, or a directory of them")
    rep.add_argument("-o", "--out", help="where to write (default: <path>/otel-spans-report)")
    rep.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASELINE", "CURRENT"),
        help="compare two runs (files or directories): wall, compute, bytes, counts per span"
        " and task group, with a verdict each",
    )
    rep.add_argument("--workflow", help="with --compare: the root span name to compare")
    rep.add_argument("--json", help="with --compare: also write the comparison as JSON here")
    rep.add_argument(
        "--fail-if-slower",
        metavar="PERCENT",
        help="with --compare: exit 3 when a workflow's wall time grew by more (e.g. 20%%)",
    )
    one = rep.add_mutually_exclusive_group()
    one.add_argument("--key", help="print everything recorded for one task (its Dask key)")
    one.add_argument(
        "--group", help="print everything recorded for one task group (its name or prefix)"
    )
    args = parser.parse_args(argv)
    if args.command == "report" and args.compare:
        from pathlib import Path

        from otel_spans.report.compare import run

        baseline, current = args.compare
        return run(
            Path(baseline),
            Path(current),
            workflow=args.workflow,
            json_out=Path(args.json) if args.json else None,
            out_dir=Path(args.out) if args.out else None,
            fail_if_slower=args.fail_if_slower,
            stdout=sys.stdout,
            stderr=sys.stderr,
        )
    if args.command == "report":
        if args.path is None:
            parser.error("report: give a PATH, or --compare BASELINE CURRENT")
        from otel_spans.report.cli import main as report

        return report(args.path, args.out, key=args.key, group=args.group)
    if args.command == "demo":
        from otel_spans.demo import main as demo
        from otel_spans.demo import run_into

        if args.run_into:
            return run_into(args.run_into, args.slower_by)
        return demo(compare=args.compare)
    from pathlib import Path

    from otel_spans.report.load import InputError, load_spans
    from otel_spans.report.tree import render_tree

    try:
        print(render_tree(load_spans(Path(args.path))))
    except InputError as e:
        print(f"otel-spans: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
