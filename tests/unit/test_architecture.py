"""The layout's import rules (docs/architecture.md), enforced on the source itself.

Each subpackage of ``otel_spans`` has one rule saying what it must never import. The
test parses every module (imports inside functions and ``TYPE_CHECKING`` blocks
included: a lazy import is still a dependency) and fails naming the file, the line
and the rule broken.

The rules hold transitively: what a module imports from ``otel_spans`` is followed, and
everything reached must keep the importing module's rule too (``export/`` importing a
shared module that imports dask imports dask). Importing ``otel_spans.a.b`` also runs
``otel_spans/a/__init__.py``, so that is followed as well; only the root package's
``__init__`` (the public API, an entry point) is not. Third-party names (dask,
distributed, tornado, opentelemetry) are forbidden along every chain; a forbidden
``otel_spans`` subpackage along chains through the shared vocabulary and the module's
own subpackage (``scheduler/`` reaches ``export/`` through ``telemetry/``, by design:
that hop keeps ``telemetry/``'s rule).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "otel_spans"
SUBPACKAGES = ("scheduler", "telemetry", "export", "worker", "analysis", "report")
#: The shared vocabulary at the top of the package: imported by all, imports none of them.
SHARED = (
    "config",
    "settings",
    "semconv",
    "ids",
    "records",
    "task_records",
    "context",
    "traceparent",
    "task_trace",
    "sampler",
    "propagation",
    "throttle",
    "error_budget",
    "markup",
    "redact",
    "names",
)
#: Shared modules that are packages (a package of modules with one job each).
SHARED_PACKAGES = ("config",)

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


@functools.cache
def parsed(source: str, filename: str) -> tuple[ast.AST, ...]:
    """Every node of a module (cached by its text: the transitive walk revisits many)."""
    return tuple(ast.walk(ast.parse(source, filename)))


def imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, absolute, with its line."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    out = []
    for node in parsed(path.read_text(), str(path)):
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


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def internal_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``otel_spans`` modules that importing ``path`` loads, directly."""
    out = set()
    for _, name in imports(path):
        parts = name.split(".")
        # ``from otel_spans.config import Settings``: the longest prefix that is a module
        while parts and ".".join(parts) not in modules:
            parts.pop()
        # importing a.b.c runs a/__init__ and a/b/__init__ first (not the root's)
        out |= {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
    return out


def reached(path: Path, within: str | None = None) -> dict[str, list[str]]:
    """Every ``otel_spans`` module ``path`` loads, transitively, with the import chain.

    ``within``: follow only the shared vocabulary and that subpackage.
    """
    modules = module_files()

    def followed(name: str) -> bool:
        top = name.split(".")[1] if "." in name else ""
        return within is None or top == within or top not in SUBPACKAGES

    chains: dict[str, list[str]] = {}
    todo = [(name, [name]) for name in sorted(internal_imports(path, modules)) if followed(name)]
    while todo:
        name, chain = todo.pop()
        if name in chains:
            continue
        chains[name] = chain
        todo += [
            (n, [*chain, n])
            for n in sorted(internal_imports(modules[name], modules))
            if n not in chains and followed(n)
        ]
    return chains


def forbidden_in(names: list[tuple[int, str]], forbidden: tuple[str, ...]) -> list[tuple[int, str]]:
    return [
        (line, name)
        for line, name in names
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def violations(path: Path) -> list[str]:
    where = rule_of(path)
    if where is None:
        return []
    forbidden, why = RULES[where]
    here = path.relative_to(PACKAGE.parent)
    found = [
        f"{here}:{line}: imports {name} ({where}/: {why})"
        for line, name in forbidden_in(imports(path), forbidden)
    ]
    modules = module_files()
    external = tuple(f for f in forbidden if not f.startswith("otel_spans."))
    internal = tuple(f for f in forbidden if f.startswith("otel_spans."))
    for names, within in ((external, None), (internal, where)):
        for module, chain in sorted(reached(path, within).items()):
            found += [
                f"{here}: imports {name} through {' -> '.join(chain)} (line {line} of "
                f"{modules[module].relative_to(PACKAGE.parent)}; {where}/: {why})"
                for line, name in forbidden_in(imports(modules[module]), names)
            ]
    return found


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
    } == set(SUBPACKAGES) | set(SHARED_PACKAGES)


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


@pytest.mark.parametrize(
    ("where", "source", "shared", "shared_source"),
    [
        # export/ -> a shared module -> dask
        ("export/new.py", "from otel_spans.shared import X\n", "shared.py", "import dask\n"),
        # telemetry/ -> a shared package's submodule -> its __init__ -> distributed
        (
            "telemetry/new.py",
            "from otel_spans.vocab.leaf import X\n",
            "vocab/__init__.py",
            "from distributed import Client\n",
        ),
        # export/ -> a shared module -> a lazy import of the scheduler side
        (
            "export/new.py",
            "from otel_spans import shared\n",
            "shared.py",
            "def f():\n    from otel_spans.scheduler import plugin\n",
        ),
    ],
)
def test_the_rule_test_follows_imports_transitively(
    where: str,
    source: str,
    shared: str,
    shared_source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = tmp_path / "otel_spans"
    for name, text in [
        ("__init__.py", "import dask\n"),  # the root's __init__ is not followed
        ("vocab/leaf.py", "X = 1\n"),
        ("shared.py", "X = 1\n"),
        (shared, shared_source),
        (where, source),
    ]:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    for sub in ("export", "telemetry", "vocab"):
        (package / sub).mkdir(exist_ok=True)
        (package / sub / "__init__.py").touch()
    monkeypatch.setitem(globals(), "PACKAGE", package)
    problems = violations(package / where)
    assert problems and all(" through otel_spans." in p for p in problems), problems
    # the same module without the shared import keeps its rule
    (package / where).write_text("X = 1\n")
    assert violations(package / where) == []


def test_export_and_telemetry_reach_no_dask_through_the_settings() -> None:
    """The settings dataclasses come from the Dask-free module, not from ``config``."""
    for sub in ("export", "telemetry"):
        for path in sorted((PACKAGE / sub).glob("*.py")):
            assert "otel_spans.config" not in reached(path), path
