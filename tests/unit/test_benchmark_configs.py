"""The scheduler-CPU benchmark measures what it says: each variant's dask.config is a
valid otel-spans configuration and loads otel-spans where the variant says."""

from __future__ import annotations

from typing import Any

import dask.config
import pytest

from benchmarks.scheduler_cpu import VARIANTS, WORKER, variant_config
from otel_spans.config import Settings, TaskMode

ENDPOINT = "http://127.0.0.1:4317"


def dotted(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The benchmark writes its config as a YAML file (merged with the defaults); here the
    same keys are set one by one, which dask.config.set does not do for nested dicts."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("variant", [*VARIANTS, WORKER])
def test_each_variant_is_a_valid_configuration(variant: str) -> None:
    config = variant_config(variant, ENDPOINT)
    with dask.config.set(dotted(config)):
        settings = Settings.from_config()
        scheduler_preload = dask.config.get("distributed.scheduler.preload")
        worker_preload = dask.config.get("distributed.worker.preload")
        saturation = dask.config.get("distributed.scheduler.worker-saturation")
    assert saturation == float("inf")  # the scheduler is the bottleneck
    assert ("otel_spans" in scheduler_preload) is (variant != WORKER)
    assert ("otel_spans.worker" in worker_preload) is (variant == WORKER)
    expected_mode: TaskMode | None = {"all": "all", "metrics": "none"}.get(variant)
    if expected_mode is not None:
        assert settings.traces.tasks.mode == expected_mode


def test_the_baseline_loads_nothing_of_ours() -> None:
    with dask.config.set(dotted(variant_config("baseline", ENDPOINT))):
        assert "otel_spans" not in dask.config.get("distributed.scheduler.preload")
        assert not dask.config.get("distributed.worker.preload")
