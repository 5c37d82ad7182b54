"""The task-span budget: never over the cap, every task decided once, must-keeps kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from otel_spans.scheduler.sampling import ERRED, Policy, TaskSampler

tasks = st.lists(
    st.tuples(
        st.integers(0, 3),  # group
        st.floats(0, 10, allow_nan=False),  # duration
        st.booleans(),  # erred
    ),
    max_size=300,
)


@given(
    tasks,
    st.integers(0, 6),
    st.integers(0, 40),
    st.sampled_from(["sampled", "all", "none"]),
    st.sampled_from([0.0, 0.001, 5.0]),
)
def test_budget(
    runs: list[tuple[int, float, bool]], slowest: int, cap: int, mode: str, min_duration: float
) -> None:
    policy = Policy(mode, slowest, 0.0, cap, min_duration)  # type: ignore[arg-type]
    sampler: TaskSampler[int] = TaskSampler()
    emitted: list[int] = []
    for i, (group, duration, erred) in enumerate(runs):
        decision = sampler.offer(group, 1, policy, duration, ERRED if erred else None, i)
        if decision == "hold":
            sampler.hold(group, 1, policy, duration, i)
        elif decision is not None:
            emitted.append(i)
    kept = dropped = 0
    for group in range(4):
        held, group_kept, group_dropped = sampler.flush(group)
        emitted.extend(record for _, record in held)
        kept += group_kept
        dropped += group_dropped
        assert len(held) <= slowest
    assert len(emitted) == len(set(emitted)) == kept
    assert kept + dropped == len(runs)
    assert kept <= cap
    if mode == "none":
        assert kept == 0
    if mode == "sampled":
        # a short run is kept only for a reason (here: it erred)
        assert all(runs[i][1] >= min_duration or runs[i][2] for i in emitted)
        erred = [i for i, (_, _, e) in enumerate(runs) if e]
        # erred runs are kept while the trace has room (they are decided first-come)
        assert set(erred[: max(0, cap - slowest * 4)]) <= set(emitted)
