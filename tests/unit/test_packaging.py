"""Package hygiene: one version, a PEP 639 license, every imported distribution declared,
and only the OTel SDK's public API."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import tomllib

import otel_spans

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "otel_spans"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def imported_modules() -> dict[str, set[Path]]:
    """Absolute imports of the package's modules: module name -> files importing it."""
    out: dict[str, set[Path]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                out.setdefault(name, set()).add(path.relative_to(ROOT))
    return out


def requirement_name(requirement: str) -> str:
    name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_version_has_one_source() -> None:
    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "otel_spans.__version__"
    }
    assert importlib.metadata.version("otel-spans") == otel_spans.__version__


def test_the_license_is_a_pep_639_expression_with_its_file() -> None:
    assert PROJECT["license"] == "BSD-3-Clause"
    for name in PROJECT["license-files"]:
        assert "BSD 3-Clause License" in (ROOT / name).read_text()
    requires = PYPROJECT["build-system"]["requires"]
    assert any(
        r.startswith("setuptools>=") and int(r.split(">=")[1].split(".")[0]) >= 77 for r in requires
    )
    assert importlib.metadata.metadata("otel-spans")["License-Expression"] == "BSD-3-Clause"


def test_classifiers_name_every_supported_python() -> None:
    lowest = PROJECT["requires-python"].removeprefix(">=")
    classifiers = PROJECT["classifiers"]
    assert f"Programming Language :: Python :: {lowest}" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the expression
    assert PYPROJECT["tool"]["mypy"]["python_version"] == lowest


def test_the_floor_run_uses_the_lowest_python_and_one_dask_release() -> None:
    """`./run test-floor` is what lets the classifiers claim the lowest Python and the
    dependencies claim the floor: it must run exactly those. distributed pins the dask of
    its own release, so the two floors must name the same release or no install exists."""
    run = (ROOT / "run").read_text()
    (floor_python,) = re.findall(r"^FLOOR_PYTHON_VERSION=(\S+)$", run, re.MULTILINE)
    assert PROJECT["requires-python"] == f">={floor_python}"
    floors = {requirement_name(r): r.split(">=")[1] for r in PROJECT["dependencies"] if ">=" in r}
    assert floors["distributed"] == floors["dask"]
    assert re.fullmatch(r"\d{4}\.\d+\.\d+", floors["distributed"])  # one release, as pinned


def test_every_imported_distribution_is_declared() -> None:
    """A module otel-spans imports must come from a distribution it depends on directly,
    not from one that happens to be installed with another (``grpc`` through the OTLP
    exporter, ``google.protobuf`` through ``opentelemetry-proto``)."""
    declared = {requirement_name(r) for r in PROJECT["dependencies"]}
    optional = {
        extra: {requirement_name(r) for r in reqs}
        for extra, reqs in PROJECT["optional-dependencies"].items()
    }
    providers = importlib.metadata.packages_distributions()
    # Only the demo may import what the demo extra installs.
    demo_only = {Path("otel_spans/demo.py")}
    missing = []
    for module, files in sorted(imported_modules().items()):
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top == "otel_spans":
            continue
        dists = {requirement_name(d) for d in providers.get(top, [])}
        if top == "opentelemetry":  # a namespace package: find the distribution by module
            if not _opentelemetry_module_declared(module, declared):
                missing.append(f"{module} (imported by {sorted(map(str, files))})")
            continue
        allowed = declared | (optional["demo"] if files <= demo_only else set())
        if not dists & allowed:
            missing.append(f"{module} from {sorted(dists)} (imported by {sorted(map(str, files))})")
    assert not missing, "imported but not declared in [project] dependencies:\n" + "\n".join(
        missing
    )


def _opentelemetry_module_declared(module: str, declared: set[str]) -> bool:
    """``opentelemetry.exporter.otlp.proto.common...`` is in the distribution whose files
    hold it; find it among the installed distributions' file lists."""
    path = module.replace(".", "/")
    for dist in importlib.metadata.distributions():
        name = requirement_name(dist.metadata["Name"])
        if not name.startswith("opentelemetry"):
            continue
        for file in dist.files or ():
            text = str(file)
            if text.startswith(path + "/") or text == path + ".py":
                return name in declared
    return False


def test_only_the_public_otel_sdk_api_is_imported() -> None:
    private = {
        module: files
        for module, files in imported_modules().items()
        if module.startswith("opentelemetry")
        and any(part.startswith("_") for part in module.split("."))
    }
    assert not private, f"private OpenTelemetry modules imported: {private}"
