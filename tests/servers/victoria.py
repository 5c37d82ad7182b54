"""What the VictoriaMetrics and VictoriaLogs test servers share: one single-node binary
on a free loopback port, with a storage directory of its own and a day's retention,
ready once ``/health`` answers."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar

from .ports import LOOPBACK, free_port
from .process import ServerProcess, answers_ok


class VictoriaServer(ServerProcess):
    """A Victoria* server; subclasses name it and add their own flags."""

    #: The server's name in errors.
    label: ClassVar[str]
    #: Its temporary directory's prefix and its log file's name.
    tmp_prefix: ClassVar[str]
    log_name: ClassVar[str]

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.port = free_port()
        self._tmpdir = Path(tempfile.mkdtemp(prefix=self.tmp_prefix))
        self.log_path = self._tmpdir / self.log_name
        self._log_fh = None
        self._proc = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start_with(self, flags: list[str], timeout: float) -> None:
        """Launch with the common flags and ``flags``; wait until it is healthy."""
        self.launch(
            [
                str(self.binary),
                f"-httpListenAddr={LOOPBACK}:{self.port}",
                f"-storageDataPath={self._tmpdir / 'data'}",
                "-retentionPeriod=1d",
                *flags,
            ]
        )
        self.wait_ready(lambda: answers_ok(f"{self.url}/health"), self.label, timeout)
