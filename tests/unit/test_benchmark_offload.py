"""``benchmarks.offload`` routes the work where each mode says: nowhere, on the loop, or
to a thread that finishes it."""

from __future__ import annotations

import argparse
import asyncio

from benchmarks import offload

SHAPE = {"work": 50.0, "period": 5.0, "chunk": 100.0, "seconds": 0.3}


def test_each_mode_does_the_work_where_it_says() -> None:
    runs = {mode: asyncio.run(offload.run(mode, **SHAPE)) for mode in offload.MODES}
    assert runs["none"]["works"] == 0
    # Every 5 ms over 0.3 s: at most 60 works, and the loop does each one it starts.
    assert 1 <= runs["loop"]["works"] <= 60
    assert runs["loop"]["works_on_thread"] == 0
    assert runs["thread"]["works"] == runs["thread"]["works_on_thread"] <= 60
    for result in runs.values():
        assert result["steps"] > 0
        assert 0 <= result["lag_median"] <= result["lag_max"]
    args = argparse.Namespace(rounds=1, **SHAPE)
    table = offload.report({mode: [result] for mode, result in runs.items()}, args)
    assert [line.split(" |")[0] for line in table.splitlines()[-3:]] == [
        "| none",
        "| loop",
        "| thread",
    ]
