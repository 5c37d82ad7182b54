"""The embedded default's size settings: defaults, sizes as Dask writes them, and
errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from otel_spans.config import ConfigError
from tests.support.settings import resolve

pytestmark = pytest.mark.usefixtures("clean_config")


def test_defaults_are_256_mib_in_all_and_16_mib_per_file() -> None:
    for target in (resolve().traces.target, resolve().metrics.target, resolve().logs.target):
        assert (target.directory_max_bytes, target.directory_max_file_bytes) == (
            256 * 1024**2,
            16 * 1024**2,
        )


def test_sizes_take_units_or_bytes() -> None:
    target = resolve(directory_max_bytes="1GiB", directory_max_file_bytes=4096).logs.target
    assert (target.directory_max_bytes, target.directory_max_file_bytes) == (1024**3, 4096)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"directory_max_bytes": "lots"}, r"otel-spans\.directory-max-bytes: invalid value 'lots'"),
        ({"directory_max_bytes": 1023}, r"otel-spans\.directory-max-bytes: .* at least 1KiB"),
        ({"directory_max_bytes": True}, r"otel-spans\.directory-max-bytes: invalid value True"),
        (
            {"directory_max_bytes": "1MiB", "directory_max_file_bytes": "2MiB"},
            r"otel-spans\.directory-max-file-bytes: .* at most directory-max-bytes \(1048576\)",
        ),
    ],
)
def test_bad_sizes_name_the_key(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(**overrides)
