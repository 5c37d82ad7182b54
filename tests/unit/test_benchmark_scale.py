"""The scale benchmark measures what it says: its graph has the task count asked for, in
the shape its docstring gives; its variants are valid configurations of the mode they
name; and its held-memory walk counts otel-spans' objects and stops at anyone else's."""

from __future__ import annotations

import sys
from collections import Counter
from itertools import pairwise
from typing import Any

import dask.config
import pytest

from benchmarks.held_memory import held_bytes
from benchmarks.scale import MODES, scale_graph
from benchmarks.scheduler_cpu import variant_config
from otel_spans.config import Settings
from tests.unit.test_benchmark_configs import ENDPOINT, dotted


@pytest.mark.parametrize("n", [5, 20_000, 200_000])
def test_the_graph_has_n_tasks_and_every_input_is_in_it(n: int) -> None:
    graph, root = scale_graph(n)
    assert len(graph) == n
    assert root in graph
    for task in graph.values():
        arguments = task[1] if isinstance(task[1], list) else task[1:]
        for argument in arguments:
            assert not isinstance(argument, tuple) or argument in graph


def test_the_graph_is_two_maps_and_a_tree_one_group_a_level() -> None:
    graph, _ = scale_graph(200_000)
    groups = Counter(name.rsplit("-", 1)[0] for name, _ in graph)
    assert groups["load"] == groups["transform"] > 90_000
    levels = [groups[f"combine-{depth}"] for depth in range(len(groups) - 2)]
    assert levels[-1] == 1 and all(a > b for a, b in pairwise(levels))


@pytest.mark.parametrize("mode", MODES)
def test_each_variant_loads_otel_spans_in_its_mode(mode: str) -> None:
    with dask.config.set(dotted(variant_config(mode, ENDPOINT))):
        settings = Settings.from_config()
        assert "otel_spans" in dask.config.get("distributed.scheduler.preload")
    assert settings.traces.tasks.mode == {"default": "sampled", "all": "all"}[mode]


class Ours:
    """A stand-in for a class of otel-spans (the walk goes by the defining module)."""


Ours.__module__ = "otel_spans.stand_in"


class Dasks:
    def __init__(self) -> None:
        self.payload = list(range(100_000))


def test_the_walk_counts_our_objects_and_stops_at_others() -> None:
    ours = Ours()
    foreign_list = list(range(50_000))
    fields: dict[str, Any] = {"keys": ["a", "b"], "dask": Dasks(), "tasks": foreign_list}
    ours.__dict__.update(fields)
    size, objects = held_bytes(ours, foreign={id(foreign_list)})
    assert objects == 4  # ours (with its __dict__), the list and its two strings
    assert size < sys.getsizeof(foreign_list) + sys.getsizeof(Dasks().payload)
    own = sys.getsizeof(ours) + sys.getsizeof(ours.__dict__) + sys.getsizeof(fields["keys"])
    assert size == own + 2 * sys.getsizeof("a")
