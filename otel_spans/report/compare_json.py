"""``otel-spans report --compare --json``: the comparisons as one JSON document, for
CI jobs that act on a verdict (``noise`` says what counted as ``same``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict

# compare.NOISE_*, read when rendering: the thresholds the verdicts were given
from otel_spans.report import compare
from otel_spans.report.compare import Comparison


def render(comparisons: Iterable[Comparison]) -> str:
    """Every comparison, rows and numbers as they are, indented."""
    return json.dumps(
        {
            "noise": {"ratio": compare.NOISE_RATIO, "seconds": compare.NOISE_SECONDS},
            "workflows": [asdict(c) for c in comparisons],
        },
        indent=2,
    )
