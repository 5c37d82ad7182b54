"""Shared fixtures: real loopback servers (OTLP receiver, rotel, Prometheus).

Spans are batched for 200 ms in tests, not the default 5 s (``traces.batch-wait``):
most tests wait for a workflow's spans while its cluster runs, and many build their
own configuration or start schedulers and workers in processes of their own (which
inherit the variable). A test's ``otel-spans.traces.batch-wait`` key still wins, and
``clean_otel_env`` removes it with every other ``OTEL_*`` variable; the default
itself is tested in ``tests/unit/test_batch_wait.py``.
"""

import os

os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "200")

pytest_plugins = ["tests.servers.fixtures"]
