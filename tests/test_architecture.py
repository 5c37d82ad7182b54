"""The layout's import rules (docs/architecture.md), enforced on the source itself.

Each subpackage of ``otel_spans`` has one rule saying what it must never import. The
test parses every module (imports inside functions and ``TYPE_CHECKING`` blocks
included: a lazy import is still a dependency) and fails naming the file, the line
and the rule broken.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "otel_spans"
SUBPACKAGES = ("scheduler", "telemetry", "export", "worker", "analysis", "report")
#: The shared vocabulary at the top of the package: imported by all, imports none of them.
SHARED = ("config", "semconv", "ids", "records", "context", "throttle", "markup")

#: Where -> (what it must never import, why).
RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "scheduler": (
        ("otel_spans.worker", "otel_spans.report", "otel_spans.export"),
        "the scheduler side hands records to telemetry.Signals, never to exporters",
    ),
    "telemetry": (
        (
            "distributed",
            "dask",
            "tornado",
            "otel_spans.scheduler",
            "otel_spans.worker",
            "otel_spans.report",
        ),
        "records -> OTel never reads Dask objects",
    ),
    "export": (
        (
            "distributed",
            "dask",
            "tornado",
            "otel_spans.scheduler",
            "otel_spans.telemetry",
            "otel_spans.worker",
            "otel_spans.report",
            "otel_spans.analysis",
        ),
        "what leaves the process knows nothing of Dask or of how records became signals",
    ),
    "worker": (
        ("otel_spans.scheduler", "otel_spans.report", "otel_spans.analysis"),
        "the worker side shares the vocabulary, records -> OTel and the exporters, "
        "never the scheduler side",
    ),
    "analysis": (
        (
            "distributed",
            "dask",
            "opentelemetry",
            "otel_spans.scheduler",
            "otel_spans.telemetry",
            "otel_spans.export",
            "otel_spans.worker",
            "otel_spans.report",
        ),
        "pure analysis, used by both the scheduler and the report",
    ),
    "report": (
        (
            "distributed",
            "dask",
            "otel_spans.scheduler",
            "otel_spans.telemetry",
            "otel_spans.export",
            "otel_spans.worker",
        ),
        "the offline tool reads files, never a live cluster",
    ),
    **{
        name: (
            tuple(f"otel_spans.{sub}" for sub in SUBPACKAGES),
            "the shared vocabulary depends on no role",
        )
        for name in SHARED
    },
}


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against the importing package
                package = module[: len(module) - node.level]
                base = ".".join((*package, base) if base else package)
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def rule_of(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0] if parts[0] in RULES else None


def violations(path: Path) -> list[str]:
    where = rule_of(path)
    if where is None:
        return []
    forbidden, why = RULES[where]
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {name} ({where}/: {why})"
        for line, name in imports(path)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_every_module_keeps_its_subpackage_rule() -> None:
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in violations(path)]
    assert found == []


def test_every_module_is_under_a_rule_or_an_entry_point() -> None:
    """A new top-level module must be given a rule (or be one of the entry points)."""
    entry_points = {"__init__", "__main__", "preload", "demo"}
    loose = [
        p.name for p in PACKAGE.glob("*.py") if p.stem not in entry_points and rule_of(p) is None
    ]
    assert loose == []
    assert {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    } == set(SUBPACKAGES)


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("telemetry/new.py", "import distributed\n"),
        ("export/new.py", "from distributed.spans import Span\n"),
        ("export/new.py", "def f():\n    from otel_spans.scheduler import plugin\n"),
        ("analysis/new.py", "from ..telemetry import traces\n"),
        ("records.py", "from otel_spans.export import wire\n"),
    ],
)
def test_the_rule_test_catches_a_forbidden_import(
    where: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "otel_spans"
    path = package / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert violations(path), source
