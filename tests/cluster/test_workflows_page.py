"""``/otel-spans/workflows`` on the scheduler's real HTTP server: running and finished
workflows as JSON and HTML, and what a browser shows."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from distributed import Event

import otel_spans
from otel_spans import ids
from otel_spans.scheduler import workflows_page
from tests.servers.otlp_receiver import OtlpReceiver
from tests.support.browser import CHROMIUM, chromium_command
from tests.support.cluster import FAST, await_until, cluster_test, traced_cluster
from tests.support.html import HOSTILE as HOSTILE_HTML
from tests.support.html import HOSTILE_SHOWN as HOSTILE_HTML_SHOWN
from tests.support.html import parse
from tests.support.requirements import require_file
from tests.support.tasks import inc, wait_for

TEMPLATE = "http://jaeger:16686/trace/{trace_id}"
HOSTILE = '<b>bold</b> & "quoted"'


pytestmark = pytest.mark.usefixtures("default_otel_config")


def fetch(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def chromium(url: str, tmp_path: Path) -> tuple[str, Path]:
    """The DOM Chromium builds from the page, and a screenshot of it."""
    shot = tmp_path / "workflows.png"
    window = "1100,420"
    dom = subprocess.run(
        chromium_command(tmp_path, "--dump-dom", url, window=window),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    subprocess.run(
        chromium_command(tmp_path, f"--screenshot={shot}", url, window=window),
        capture_output=True,
        timeout=120,
        check=True,
    )
    return dom, shot


@cluster_test(120)
async def test_the_page_lists_running_and_finished_workflows(
    otlp_receiver: OtlpReceiver, tmp_path: Path
) -> None:
    require_file(CHROMIUM, "Debian's chromium shows the workflows page headless")
    config: dict[str, Any] = {
        **FAST,
        "otel-spans.endpoint": otlp_receiver.grpc_endpoint,
        "otel-spans.trace-url": TEMPLATE,
    }
    gate = f"gate-{uuid.uuid4()}"
    async with traced_cluster(config) as (client, scheduler, _):
        base = f"http://127.0.0.1:{scheduler.http_server.port}/otel-spans/workflows"
        with otel_spans.span(HOSTILE) as finished_id:
            assert await client.submit(inc, 1, key="quick-0") == 2
        await await_until(lambda: any(s.name == HOSTILE for s in otlp_receiver.spans()), 30)
        with otel_spans.span("nightly") as running_id:
            blocked = client.submit(wait_for, gate, key="fit-0", pure=False)
            waiting = client.submit(inc, blocked, key="score-0")

            def listed() -> dict[str, Any] | None:
                _, text = fetch(f"{base}?format=json")
                rows = {r["name"]: r for r in json.loads(text)["workflows"]}
                running = rows.get("nightly")
                ok = running and running["tasks"] == {"waiting": 1, "processing": 1}
                return rows if ok else None

            rows = await await_until(lambda: asyncio.to_thread(listed), 30)
            content_type, page = await asyncio.to_thread(fetch, base)
            dom, shot = await asyncio.to_thread(chromium, base, tmp_path)
            await Event(gate, client=client).set()
            assert await waiting == 2
    running, finished = rows["nightly"], rows[HOSTILE]
    assert list(rows) == ["nightly", HOSTILE]  # running first, then finished
    assert running["status"] == "running" and finished["status"] == "finished"
    assert finished["tasks"] == {"memory": 1}
    trace = f"{ids.workflow_trace_id(running_id):032x}"
    assert running["trace_id"] == trace
    assert running["trace_url"] == TEMPLATE.format(trace_id=trace)
    assert finished["trace_id"] == f"{ids.workflow_trace_id(finished_id):032x}"
    assert 0 < finished["duration"] < 30 and running["duration"] > 0
    # HTML: every value escaped; a browser shows the name as text
    assert content_type.startswith("text/html")
    assert HOSTILE not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    cells = [td.text() for td in parse(dom).all("td")]
    assert HOSTILE in cells and "nightly" in cells
    assert any("1 waiting" in c and "1 processing" in c for c in cells)
    links = [a.attrs.get("href") for a in parse(dom).all("a")]
    assert TEMPLATE.format(trace_id=trace) in links
    assert shot.stat().st_size > 5_000
    print(f"screenshot: {shot}")


def test_render_shows_a_hostile_name_as_text() -> None:
    """A workflow named with markup, control characters and a lone surrogate: the page
    encodes as UTF-8 (tornado writes it so; with ``html.escape`` alone the surrogate
    raised UnicodeEncodeError and the page failed) and a parser reads the name as
    text (an escaper that missed ``<`` or quotes would let it become markup)."""
    url = 'http://jaeger/trace?id=1&q="x"'
    row = {
        "name": HOSTILE_HTML,
        "status": "finished",
        "tasks": {"memory": 1},
        "start": 0.0,
        "duration": 1.5,
        "trace_id": "ab" * 16,
        "trace_url": url,
        "exported": True,
    }
    page = workflows_page.render([row])
    page.encode("utf-8")
    doc = parse(page)
    assert not doc.all("script")
    cells = [td.text() for td in doc.all("td")]
    assert cells[0] == HOSTILE_HTML_SHOWN and cells[1:3] == ["finished", "1 memory"]
    assert [a.attrs.get("href") for a in doc.all("a")] == ["?format=json", url]
