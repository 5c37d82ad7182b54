"""``otel-spans report --compare --json``: the comparisons as one JSON document, for
CI jobs that act on a verdict (``noise`` says what counted as ``same``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict

from otel_spans.report.compare import NOISE_RATIO, NOISE_SECONDS, Comparison


def render(comparisons: Iterable[Comparison]) -> str:
    """Every comparison, rows and numbers as they are, indented."""
    return json.dumps(
        {
            "noise": {"ratio": NOISE_RATIO, "seconds": NOISE_SECONDS},
            "workflows": [asdict(c) for c in comparisons],
        },
        indent=2,
    )
