"""deploy/jobqueue/otel-spans-jobqueue.yaml: the dask-jobqueue recipe, run for real.

dask-jobqueue's local job runner (``dask_jobqueue.LocalCluster``) writes the same job
scripts as the SLURM/PBS ones and starts them as local processes. With the recipe's
``local`` section (the same preload settings as ``slurm`` and ``pbs``), a tiny workflow
must leave otel-spans' OTLP/JSON files (no endpoint: the embedded default): the
scheduler's trace of the Dask span, and the worker's span that task code started.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import dask.config
import pytest
import yaml

from tests.support.requirements import require_module

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "deploy" / "jobqueue" / "otel-spans-jobqueue.yaml"
SHARED_KEYS = ("worker-extra-args", "scheduler-options")


def recipe() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(RECIPE.read_text())
    return data


def test_every_batch_system_gets_the_same_preloads() -> None:
    sections = recipe()["jobqueue"]
    assert {"slurm", "pbs", "local"} <= set(sections)
    for name, section in sections.items():
        assert section["worker-extra-args"] == ["--preload", "otel_spans"], name
        assert section["scheduler-options"]["preload"] == ["otel_spans"], name
    for name in ("slurm", "pbs"):
        prologue = "\n".join(sections[name]["job-script-prologue"])
        assert "OTEL_EXPORTER_OTLP_ENDPOINT=" in prologue, name
        assert prologue.count("export ") == len(sections[name]["job-script-prologue"])
    assert recipe()["otel-spans"]["endpoint"].endswith(":4317")


def task_with_its_own_span(x: int) -> int:
    from opentelemetry import trace

    with trace.get_tracer("jobqueue-test").start_as_current_span("inside the task"):
        return x + 1


def read_records(directory: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(directory.rglob("*.jsonl")))


def test_the_local_runner_exports_scheduler_and_worker_spans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    LocalCluster = require_module("dask_jobqueue.local").LocalCluster
    from distributed import Client, span

    data = recipe()
    local = data["jobqueue"]["local"]
    scheduler_dir, worker_dir = tmp_path / "scheduler", tmp_path / "worker"
    # No collector here: both sides write OTLP/JSON files instead.
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("DASK_OTEL_SPANS__DIRECTORY", str(worker_dir))
    monkeypatch.setenv("OTEL_SERVICE_NAME", "dask")
    # The local runner stops workers with SIGKILL: export their spans without delay.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    otel_spans = {**data["otel-spans"], "endpoint": None, "directory": str(scheduler_dir)}
    local = {
        **local,
        "local-directory": str(tmp_path / "jobs"),
        # A free dashboard port on loopback, on a shared machine; the preload is the
        # recipe's.
        "scheduler-options": {
            **local["scheduler-options"],
            "dashboard_address": ":0",
            "host": "127.0.0.1",
        },
    }
    # Key by key: over dask-jobqueue's defaults for the section, not instead of them.
    config = {f"jobqueue.local.{key}": value for key, value in local.items()}
    config |= {"otel-spans": otel_spans, "otel-spans.traces.linger": "200ms"}
    with dask.config.set(config):
        cluster = LocalCluster()
        try:
            assert "--preload otel_spans" in cluster.job_script()
            cluster.scale(jobs=1)
            with Client(cluster) as client:  # type: ignore[no-untyped-call]
                client.wait_for_workers(1, timeout=45)
                plugins = client.run(lambda dask_worker: sorted(dask_worker.plugins))
                assert all("otel-spans" in names for names in plugins.values()), plugins
                with span("jobqueue recipe"):
                    assert client.submit(task_with_its_own_span, 1).result() == 2
                deadline = time.monotonic() + 30
                while "jobqueue recipe" not in read_records(scheduler_dir) or (
                    "inside the task" not in read_records(worker_dir)
                ):
                    assert time.monotonic() < deadline, (
                        f"scheduler: {list(scheduler_dir.rglob('*'))},"
                        f" worker: {list(worker_dir.rglob('*'))}"
                    )
                    time.sleep(0.2)
        finally:
            cluster.close()
    scheduler_records = read_records(scheduler_dir)
    assert '"hpc"' in scheduler_records  # cluster-name from the recipe
    worker_span = next(
        line for line in read_records(worker_dir).splitlines() if "inside the task" in line
    )
    assert json.loads(worker_span)["resourceSpans"]
