"""The one rule for names from user code (``otel_spans.names.clean``), and the bounds of
the workflows page that follow from it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from otel_spans import semconv
from otel_spans.markup import printable
from otel_spans.names import LABEL_LENGTH, clean
from otel_spans.records import workflow_attributes
from otel_spans.scheduler import workflows_page
from otel_spans.scheduler.span_state import MAX_FINISHED_ROOTS

ROCKET = "\U0001f680"
#: The rocket as a str holding its UTF-16 surrogate pair as two code points.
ROCKET_PAIR = "\ud83d\ude80"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("plain", "plain"),
        ("", ""),
        ("données-处理-✓-" + ROCKET, "données-处理-✓-" + ROCKET),
        # control characters are valid UTF-8: kept (pages draw them, see markup.escape)
        ("tab\tnew\nline\x00\x1b[31m\x7f", "tab\tnew\nline\x00\x1b[31m\x7f"),
        ("lone-\ud800-high", "lone-\ufffd-high"),
        ("lone-\udc80-low", "lone-\ufffd-low"),
        ("\udfff\ud800", "\ufffd\ufffd"),  # reversed: two lone ones
        (ROCKET_PAIR + "-pair", ROCKET + "-pair"),
        ("a\ud800\ud800b", "a\ufffd\ufffdb"),
    ],
)
def test_clean_makes_any_name_valid_utf8(name: str, expected: str) -> None:
    got = clean(name)
    assert got == expected
    got.encode("utf-8")  # what every exporter, page and file does with it
    assert printable(name) == expected  # the pages' rule is the same


def test_clean_cuts_to_the_limit_in_characters() -> None:
    assert clean("x" * 1_000_000, 4096) == "x" * 4096
    assert clean("é" * 300, LABEL_LENGTH) == "é" * LABEL_LENGTH
    assert clean("ok", LABEL_LENGTH) == "ok"
    assert clean("abc", 0) == ""
    # a pair counts as its one character; a pair the cut splits is no lone surrogate
    assert clean(ROCKET_PAIR * 3, 2) == ROCKET * 2
    assert clean("a" + ROCKET_PAIR, 2) == "a" + ROCKET
    assert clean("ab" + ROCKET_PAIR, 3) == "ab" + ROCKET
    assert clean("\ud800" * 1_000_000, 5) == "\ufffd" * 5


def test_cleaning_twice_is_cleaning_once_with_the_shorter_limit() -> None:
    """Names are cleaned where they enter (``max-attribute-length``) and metric labels
    again (256): the label must be what one cut at 256 gives."""
    pieces = ["a", "é", ROCKET, "\ud83d", "\ude80", "\ud800", "\udfff"]
    for n in range(200):
        name = "".join(pieces[(n * 7 + i * i) % len(pieces)] for i in range(n % 23))
        for long, short in ((20, 5), (9, 9), (4, 1)):
            assert clean(clean(name, long), short) == clean(name, short) == clean(name)[:short]


def test_a_valid_name_is_returned_as_it_is() -> None:
    name = "données" * 10
    assert clean(name) is name and clean(name, 1000) is name


def test_workflow_attributes_are_cleaned_and_stay_unique() -> None:
    given = dict([("te\ud800am", "ri\udc80sk"), ("n", 3), ("te\udfffam", "other")])
    attrs = workflow_attributes(given)
    assert attrs == (("n", 3), ("te\ufffdam", "ri\ufffdsk"))


# -- the workflows page ----------------------------------------------------------------------


def _worst_row(trace_url: str, char: str) -> dict[str, Any]:
    """A row as long as the page lets one be: a name of ``LABEL_LENGTH`` characters
    that escape longest (``char``), every state counted in the billions."""
    trace_id = f"{2**128 - 1:032x}"
    return {
        "name": clean(char * LABEL_LENGTH, LABEL_LENGTH),
        "status": "running",
        "tasks": dict.fromkeys(semconv.PROGRESS_STATES, 9_999_999_999),
        "tasks_partial": True,
        "start": 1e9,
        "duration": 1e9,
        "trace_id": trace_id,
        "trace_url": trace_url.format(trace_id=trace_id),
        "exported": False,
    }


#: The characters that escape longest: in HTML ``"`` (``&quot;``), in JSON an astral
#: character (two ``\\uXXXX``) and a control character (``\\u0000``).
@pytest.mark.parametrize("char", ['"', ROCKET, "\x00"])
def test_the_page_stays_under_its_bound_with_every_row_at_its_longest(char: str) -> None:
    template = ("&" * workflows_page.BOUNDED_TRACE_URL)[: -len("{trace_id}")] + "{trace_id}"
    assert len(template) == workflows_page.BOUNDED_TRACE_URL
    listed = workflows_page.MAX_RUNNING + MAX_FINISHED_ROOTS
    rows = [_worst_row(template, char) for _ in range(listed)]
    assert len(rows[0]["name"]) == LABEL_LENGTH
    html = workflows_page.render(rows).encode("utf-8")
    body = json.dumps({"workflows": rows}).encode("utf-8")
    assert len(html) < workflows_page.MAX_BODY_BYTES
    assert len(body) < workflows_page.MAX_BODY_BYTES
    assert b"at least" in html and b"are partial" in html


def _span(groups: int, children: tuple[Any, ...] = ()) -> Any:
    """A stand-in for Dask's ``Span``: what the walk reads (groups and their states)."""
    states = {"processing": 1, "memory": 2, "released": 5}
    return SimpleNamespace(
        groups=[SimpleNamespace(states=states) for _ in range(groups)], children=children
    )


def test_task_states_reads_at_most_its_budget() -> None:
    # a root of 3 groups with 4 children of 2 groups each: 5 spans + 11 groups = 16 steps
    tree = _span(3, tuple(_span(2) for _ in range(4)))
    counts, left, complete = workflows_page.task_states(tree, 16)
    assert complete and left == 0
    assert counts["processing"] == 11 and counts["memory"] == 22
    counts, left, complete = workflows_page.task_states(tree, 100)
    assert complete and left == 84
    # cut short: the root and its 3 groups, one child and 1 of its groups
    counts, left, complete = workflows_page.task_states(tree, 6)
    assert not complete and left == 0
    assert counts["processing"] == 4
    counts, _, complete = workflows_page.task_states(tree, 0)
    assert not complete and counts["processing"] == 0


def test_task_states_of_a_very_wide_tree_costs_the_budget_only() -> None:
    class Children:
        """100,000 children, counted as they are read."""

        read = 0

        def __iter__(self) -> Any:
            for _ in range(100_000):
                Children.read += 1
                yield _span(1)

    root = SimpleNamespace(groups=[], children=Children())
    _, _, complete = workflows_page.task_states(root, 1_000)
    assert not complete
    assert Children.read <= 1_000
