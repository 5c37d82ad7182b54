"""The settings table is the one description of the configuration: the shipped yaml,
the dataclass defaults and the docs (the generated key table, the ``OTEL_*`` table and
every default the prose states) must say what it says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from otel_spans import semconv
from otel_spans.config import OTEL_VARIABLES, SETTINGS, load_defaults
from otel_spans.config import docs as config_docs
from otel_spans.config.structured import Globs
from otel_spans.config.table import PROMETHEUS_DEFAULT_PORT, Setting
from otel_spans.settings import (
    DEFAULT_COUNT_LIMIT,
    DEFAULT_LOGS_BATCH_WAIT,
    DEFAULT_MAX_ATTRIBUTE_LENGTH,
    DEFAULT_TIMEOUT,
    DEFAULT_TRACES_BATCH_WAIT,
    CaptureSettings,
    ProfileSettings,
    RecordLimits,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Variables the docs list that the OTel SDK or API reads itself (not a row of the table).
READ_BY_THE_SDK = {
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS",
    "OTEL_PROPAGATORS",
    "OTEL_PYTHON_TRACER_PROVIDER",
}
#: Every variable of the OTel SDK configuration specification (environment variables)
#: that applies to a Python SDK's traces, metrics and logs: each is read (a row of the
#: table of variables read) or listed, with the reason, as not read.
SPECIFIED = {
    "OTEL_SDK_DISABLED", "OTEL_ENTITIES", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME",
    "OTEL_LOG_LEVEL", "OTEL_PROPAGATORS", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "OTEL_BLRP_SCHEDULE_DELAY", "OTEL_BLRP_EXPORT_TIMEOUT",
    "OTEL_BLRP_MAX_QUEUE_SIZE", "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT", "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER",
    "OTEL_METRICS_EXEMPLAR_FILTER", "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT",
    "OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT",
    "OTEL_EXPORTER_ZIPKIN_ENDPOINT", "OTEL_EXPORTER_ZIPKIN_TIMEOUT", "OTEL_CONFIG_FILE",
    *(
        f"OTEL_EXPORTER_OTLP{signal}_{option}"
        for signal in ("", "_TRACES", "_METRICS", "_LOGS")
        for option in ("ENDPOINT", "PROTOCOL", "HEADERS", "TIMEOUT", "COMPRESSION",
                       "CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY", "INSECURE")
    ),
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
    "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
}  # fmt: skip


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys of the yaml; a mapping is a section unless the table has its key."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = prefix + key
        if isinstance(value, dict) and dotted not in SETTINGS:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def default_of(row: Setting) -> Any:
    """What the setting is when nothing is set (parsed, as the settings hold it)."""
    return None if row.default is None else row.parse(row.key, row.default)


def test_the_yaml_ships_every_key_of_the_table_and_no_other() -> None:
    shipped = flatten(load_defaults()["otel-spans"])
    assert sorted(shipped) == sorted(SETTINGS)


@pytest.mark.parametrize("key", sorted(SETTINGS))
def test_the_yaml_ships_the_table_default(key: str) -> None:
    """Where a variable applies the yaml ships null (the variable is read), and the
    table's default is what the setting is without one."""
    row = SETTINGS[key]
    assert flatten(load_defaults()["otel-spans"])[key] == row.shipped
    default_of(row)  # the table's default is a valid value


def test_the_dataclass_defaults_are_the_table_defaults() -> None:
    assert default_of(SETTINGS["timeout"]) == DEFAULT_TIMEOUT
    assert default_of(SETTINGS["max-attribute-length"]) == DEFAULT_MAX_ATTRIBUTE_LENGTH
    assert default_of(SETTINGS["traces.batch-wait"]) == DEFAULT_TRACES_BATCH_WAIT
    assert default_of(SETTINGS["logs.batch-wait"]) == DEFAULT_LOGS_BATCH_WAIT
    assert RecordLimits() == RecordLimits(
        *(default_of(SETTINGS[k]) for k in ("max-attribute-length", "max-attribute-count"))
    )
    assert {DEFAULT_COUNT_LIMIT} == {
        default_of(SETTINGS[k]) for k in ("max-attribute-count", "max-events", "max-links")
    }
    assert CaptureSettings() == CaptureSettings(
        default_of(SETTINGS["capture.code"]), default_of(SETTINGS["capture.exceptions"])
    )
    assert ProfileSettings() == ProfileSettings(
        *(default_of(SETTINGS[k]) for k in ("profile", "profile-prefixes", "profile-max-length"))
    )


def test_the_docs_key_table_is_the_table() -> None:
    """Regenerate with ``python -m otel_spans.config.docs``."""
    text = (DOCS / "configuration.md").read_text()
    assert config_docs.render() in text
    assert config_docs.updated(text) == text


def variables_table() -> list[list[str]]:
    """The hand-written ``OTEL_*`` table of docs/configuration.md, as rows of cells."""
    text = (DOCS / "configuration.md").read_text()
    section = text.split("## Every `OTEL_*` variable otel-spans reads", 1)[1]
    section = section.split("\n## ", 1)[0]
    return [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in section.splitlines()
        if line.startswith("| `OTEL_")
    ]


def named(cell: str) -> list[str]:
    """The variables a cell names, ``..._X`` read as ``OTEL_EXPORTER_OTLP_X``."""
    names = re.findall(r"`((?:OTEL|\.\.\.)_[A-Z_{}]+)`", cell)
    return [n.replace("...", "OTEL_EXPORTER_OTLP", 1) for n in names]


def test_the_docs_list_every_variable_read_and_no_other() -> None:
    in_docs = {name for cells in variables_table() for name in named(cells[0])}
    in_docs.discard("OTEL_{SIGNAL}_EXPORTER")
    in_docs |= {f"OTEL_{s}_EXPORTER" for s in ("TRACES", "METRICS", "LOGS")}
    in_code = {name for pair in OTEL_VARIABLES.values() for name in pair if name}
    assert in_docs - READ_BY_THE_SDK == in_code


def not_read() -> set[str]:
    """The variables docs/configuration.md lists as not read, each with its reason."""
    text = (DOCS / "configuration.md").read_text()
    section = text.split("## `OTEL_*` variables otel-spans does not read, and why", 1)[1]
    section = section.split("\n## ", 1)[0]
    names: set[str] = set()
    for item in re.split(r"\n(?=\* )", section):
        listed, _, reason = item.partition("`: ")
        if item.startswith("* "):
            assert len(reason.split()) >= 5, f"no reason given for {listed}"
            names |= set(re.findall(r"`(OTEL_[A-Z_]+)", listed + "`"))
    return names


def test_every_specified_variable_is_read_or_listed_as_not_read() -> None:
    """Each variable of the specification does what it says, or is listed with the
    reason it is not read; none is both."""
    read = {
        name.replace("{SIGNAL}", signal)
        for cells in variables_table()
        for name in named(cells[0])
        for signal in ("TRACES", "METRICS", "LOGS")
    }
    listed = not_read()
    assert not read & listed, read & listed
    assert SPECIFIED - read - listed == set()


# -- defaults stated in prose -----------------------------------------------------------
_KEY_SUFFIXES: dict[str, list[str]] = {}
for _key in SETTINGS:
    for _i in range(len(_key.split("."))):
        _KEY_SUFFIXES.setdefault(".".join(_key.split(".")[_i:]), []).append(_key)
_BY_VARIABLE = {
    name.replace("{SIGNAL}", signal): key
    for key, pair in OTEL_VARIABLES.items()
    for name in pair
    if name
    for signal in ("TRACES", "METRICS", "LOGS", "{SIGNAL}")
}
#: Defaults that are not the setting's own: what the resource says without a service
#: name, and the port OTEL_METRICS_EXPORTER=prometheus serves when no key or port is set.
_EFFECTIVE = {
    "service-name": semconv.DEFAULT_SERVICE_NAME,
    "metrics.prometheus-port": PROMETHEUS_DEFAULT_PORT,
}


def setting_named(token: str) -> str | None:
    """The key a backticked token names: a key, a unique key suffix or a variable."""
    token = token.removeprefix("otel-spans.").split(":")[0]
    if token in _BY_VARIABLE:
        return _BY_VARIABLE[token]
    keys = _KEY_SUFFIXES.get(token, [])
    return keys[0] if len(keys) == 1 else None


def stated_value(text: str, row: Setting) -> Any:
    """A default as prose states it ("2 s", "10 000", "on", "all"), parsed like the key."""
    text = text.strip().strip("`")
    number = re.match(r"(\d[\d  ]*(?:\.\d+)?)\s*(ms|s|[KMG]iB)?$", text)
    if number:
        value = number[1].replace(" ", "").replace(" ", "")
        return row.parse(row.key, value + (number[2] or "")) if number[2] else float(value)
    word = text.split()[0]
    if isinstance(row.parse, Globs):
        return {"all": ("*",), "none": ()}[word]
    if word in ("on", "off"):
        return word == "on"
    return row.parse(row.key, word)


#: "default 10 000", "default: 15 s", "default 256 MiB", "default `dask`", "default on"
_DEFAULT = re.compile(
    r"(?<=[(\s])default:? (\d+(?:[  ]\d{3})*(?:\.\d+)?(?: ms| s| [KMG]iB)?|`?[\w.-]+`?)"
)


def is_a_value(text: str, row: Setting) -> bool:
    """Whether the words after "default" state a value (not "the default is kept")."""
    words = {"on", "off", "true", "false", "all", "none", *getattr(row.parse, "choices", ())}
    return text[0].isdigit() or text.startswith("`") or text in words


def stated_defaults(path: Path) -> list[tuple[str, str, str]]:
    """(setting, stated default, where) for each "`key` ... default X" in the file.

    The setting is the nearest backticked name before "default" that names one, in the
    same table cell; in the ``OTEL_*`` table, else each setting of the row's variables.
    """
    text = path.read_text()
    text = re.sub(
        re.escape(config_docs.BEGIN) + ".*?" + re.escape(config_docs.END), "", text, flags=re.S
    )
    found = []
    for paragraph in re.split(r"\n\s*\n|\n(?=\|)|\n(?=\s*[*-] )", text):
        paragraph = " ".join(paragraph.split())
        cells = paragraph.split(" | ")
        for cell in cells:
            for match in re.finditer(_DEFAULT, cell):
                before = [
                    token[1]
                    for token in re.finditer(r"`([^`]+)`", cell[: match.start()])
                    if token.end() > match.start() - 140
                ]
                keys = [k for k in map(setting_named, before) if k][-1:]
                if not keys and cells[0].startswith("| `OTEL_"):  # each of the row's
                    keys = list(dict.fromkeys(filter(None, map(setting_named, named(cells[0])))))
                found += [
                    (key, match[1], f"{path.name}: ...{match[0]}")
                    for key in keys
                    if is_a_value(match[1], SETTINGS[key])
                ]
    return found


@pytest.mark.parametrize("doc", ["telemetry.md", "configuration.md"])
def test_the_defaults_the_docs_state_are_the_table_defaults(doc: str) -> None:
    stated = stated_defaults(DOCS / doc)
    wrong = [
        (where, key)
        for key, value, where in stated
        if stated_value(value, SETTINGS[key]) != _EFFECTIVE.get(key, default_of(SETTINGS[key]))
    ]
    assert wrong == []
    # the scan finds what it is meant to (a broken pattern would check nothing)
    must = {
        "telemetry.md": {"shutdown-timeout", "traces.linger", "metrics.interval",
                         "traces.tasks.slowest", "traces.tasks.max-per-trace",
                         "logs.erred-tasks", "logs.topics", "profile-max-length"},
        "configuration.md": {"timeout", "metrics.interval", "max-attribute-length",
                             "max-links", "service-name"},
    }[doc]  # fmt: skip
    assert must <= {key for key, _, _ in stated}


def test_a_wrong_default_in_the_docs_is_caught(tmp_path: Path) -> None:
    doc = tmp_path / "telemetry.md"
    doc.write_text("flushed within `otel-spans.shutdown-timeout` (default 10 s); what\n")
    ((key, value, _),) = stated_defaults(doc)
    assert key == "shutdown-timeout"
    assert stated_value(value, SETTINGS[key]) == 10.0 != default_of(SETTINGS[key])
