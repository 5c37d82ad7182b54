"""Rounds of variants in alternating order: the loop every comparing benchmark runs,
the fresh process each variant of a round runs in, and how a figure's spread over the
rounds is written.

Each round runs every variant once; odd rounds run them in reverse, so that drift over
the run (caches warming, thermal throttling, other load on a shared machine) falls on
the baseline and on the variants alike. Results stay per round, so that a variant is
compared with the baseline of its own round.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def alternating(
    rounds: int, variants: Sequence[str], run: Callable[[str], T]
) -> dict[str, list[T]]:
    """``run(variant)`` for every variant, ``rounds`` times; per variant, one result a
    round, in round order. Progress goes to stderr."""
    results: dict[str, list[T]] = {variant: [] for variant in variants}
    for r in range(rounds):
        order = list(variants)
        if r % 2:
            order.reverse()
        for variant in order:
            results[variant].append(run(variant))
        print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    return results


def summarise(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    """``values`` over the rounds as median [min–max], each written with ``fmt``: how
    every benchmark reports a figure with its spread."""
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{fmt.format(median)} [{fmt.format(low)}–{fmt.format(high)}]"


def child(command: list[str], name: str) -> dict[str, Any]:
    """Run a benchmark's child process; its result is its last line of stdout, as JSON.
    A child that fails raises with the end of its stderr, named ``name``."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
