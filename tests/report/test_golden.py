"""Every report output, byte for byte, against golden files of a designed run.

The golden files in ``tests/report/golden/`` were written by the report as it was before its
renderers were reshaped (one ``render`` per output, one markup module); reshaping is
not meant to change a byte of what the report writes, and this test holds it to that.
A renderer that reorders rows, rounds differently, escapes differently or drops a
section fails here with the name of the file that changed.

To rewrite them after a deliberate change of output: ``python -m tests.report.test_golden``
(then read the diff: it is the change a user will see).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from otel_spans.__main__ import main as cli_main
from otel_spans.analysis.workflow import analyse
from otel_spans.report import html, perfetto
from otel_spans.report.cli import report
from otel_spans.report.compare_cli import compare as compare_run
from tests.support.golden import golden_run, hostile_run
from tests.support.golden_trace import write_run

GOLDEN = Path(__file__).resolve().parent / "golden"
#: The slowdown of each ``sums`` task in the compared run: far beyond the noise.
SLOWER = 0.9


def _report(path: Path, out: Path | None, **lookup: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = report(path, out, stdout=stdout, stderr=stderr, **lookup)
    return code, stdout.getvalue(), stderr.getvalue()


def outputs(tmp: Path) -> dict[str, str]:
    """Every output of the report for the designed run, by golden file name."""
    run = write_run(tmp / "baseline")
    slower = write_run(tmp / "slower", slower=SLOWER)
    out: dict[str, str] = {}

    code, stdout, stderr = _report(run, tmp / "report")
    assert (code, stderr) == (0, "")
    out["summary.txt"] = stdout.replace(str(tmp), "<tmp>")
    for file in sorted((tmp / "report").iterdir()):
        out[f"report-{file.name}"] = file.read_text(encoding="utf-8")

    for name, lookup in (("key", {"key": "sums-0"}), ("group", {"group": "fit"})):
        code, stdout, stderr = _report(run, None, **lookup)
        assert (code, stderr) == (0, "")
        out[f"lookup-{name}.txt"] = stdout

    tree = io.StringIO()
    with contextlib.redirect_stdout(tree):
        assert cli_main(["tree", str(run / "traces.jsonl")]) == 0
    out["tree.txt"] = tree.getvalue()

    stdout, stderr = io.StringIO(), io.StringIO()
    code = compare_run(
        run,
        slower,
        workflow=None,
        json_out=tmp / "compare.json",
        out_dir=tmp / "compare",
        fail_if_slower=None,
        stdout=stdout,
        stderr=stderr,
    )
    assert (code, stderr.getvalue()) == (0, "")
    out["compare.txt"] = stdout.getvalue().replace(str(tmp), "<tmp>")
    out["compare.json"] = (tmp / "compare.json").read_text(encoding="utf-8")
    out["compare.html"] = (tmp / "compare" / "compare.html").read_text(encoding="utf-8")

    # The in-memory workflows of the HTML and Perfetto tests, hostile names included.
    for name, (workflow, spans) in (("golden", golden_run()), ("hostile", hostile_run())):
        analysis = analyse(workflow)
        out[f"{name}.html"] = html.render(workflow, analysis, spans)
        out[f"{name}.perfetto.json"] = perfetto.render(workflow, analysis, spans)
    # Before: the dict of an encode() beside the file; its JSON must not differ either.
    workflow, spans = golden_run()
    out["golden.perfetto.encoded.json"] = json.dumps(
        json.loads(perfetto.render(workflow, analyse(workflow), spans)), indent=1
    )
    return out


EXPECTED = sorted(p.name for p in GOLDEN.glob("*") if p.is_file())


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return outputs(tmp_path_factory.mktemp("golden"))


def test_the_golden_files_cover_every_output(produced: dict[str, str]) -> None:
    assert sorted(produced) == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_output_is_byte_identical_to_its_golden_file(name: str, produced: dict[str, str]) -> None:
    assert produced[name].encode("utf-8") == (GOLDEN / name).read_bytes(), name


if __name__ == "__main__":
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in outputs(Path(tmp)).items():
            (GOLDEN / name).write_bytes(text.encode("utf-8"))
            print(f"wrote {GOLDEN / name}", file=sys.stderr)


def _hostile_run(directory: Path, slower: float = 0.0) -> Path:
    """The designed run with a lone surrogate and markup in the ``sums`` task keys and
    group name and in the aggregate span's name (a Dask key may hold a lone
    surrogate: JSON carries it as an escape, and loading gives it back)."""
    run = write_run(directory, slower=slower)
    traces = run / "traces.jsonl"
    text = traces.read_text(encoding="utf-8")
    text = text.replace('"sums-', '"sums-<b>\\udcff&-')
    text = text.replace('"aggregate"', '"agg\\udcff"').replace("/aggregate", "/agg\\udcff")
    traces.write_text(text, encoding="utf-8")
    return run


def test_names_with_a_lone_surrogate_reach_every_output_encodable(tmp_path: Path) -> None:
    """Every file the report and the comparison write, and all they print, encode as
    UTF-8 with the hostile names in them. Catches a page escaped by ``html.escape``
    alone (the comparison page raised on writing) and text printed as it came (a
    real stdout raises on a lone surrogate)."""
    base, cur = _hostile_run(tmp_path / "a"), _hostile_run(tmp_path / "b", slower=SLOWER)
    code, stdout, stderr = _report(base, tmp_path / "report")
    assert (code, stderr) == (0, "")
    stdout.encode("utf-8")
    assert "sums-<b>\ufffd&-1" in stdout  # on the critical path
    out, err = io.StringIO(), io.StringIO()
    code = compare_run(
        base,
        cur,
        workflow=None,
        json_out=tmp_path / "compare.json",
        out_dir=tmp_path / "report",
        fail_if_slower=None,
        stdout=out,
        stderr=err,
    )
    assert (code, err.getvalue()) == (0, "")
    out.getvalue().encode("utf-8")
    assert "nightly/agg\ufffd" in out.getvalue()
    pages = sorted(p.name for p in (tmp_path / "report").iterdir())
    assert pages == [
        "compare.html",
        "nightly.html",
        "nightly.perfetto.json",
        "sampled-etl.html",
        "sampled-etl.perfetto.json",
    ]
    compare_page = (tmp_path / "report" / "compare.html").read_text(encoding="utf-8")
    assert "<td>nightly/agg\ufffd</td>" in compare_page
    assert "sums-&lt;b&gt;\ufffd&amp;-1" in compare_page and "<b>" not in compare_page
    json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
