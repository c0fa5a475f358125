"""Local schema registries for a config's loopback registry addresses: ``mirrorflow local
up`` starts one (:mod:`mirrorflow.dev.schema_registry`) for each ``src.`` and ``dest.
schema.registry.url`` of an enabled flow's schema transfer that is on this machine, each
handing out ids from its own thousand (1, 1001, 2001, ...: a transfer that forgot to
rewrite an id would be caught), its schemas kept in the state directory across restarts.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from mirrorflow.config.model import MirrorConfig
from mirrorflow.dev.processes import terminate
from mirrorflow.errors import MirrorflowError
from mirrorflow.spark.session import is_loopback

READY_TIMEOUT_S = 30.0
MODULE = "mirrorflow.dev.schema_registry"


class LocalRegistryError(MirrorflowError):
    """A local schema registry could not be started."""


@dataclass(frozen=True)
class RegistryProcess:
    """A local registry at ``host:port``, its files under ``state_dir``."""

    host: str
    port: int
    state_dir: Path
    first_id: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _file(self, suffix: str) -> Path:
        return self.state_dir / f"schema-registry-{self.port}.{suffix}"

    @property
    def log_file(self) -> Path:
        return self._file("log")

    def pid(self) -> int | None:
        try:
            pid = int(self._file("pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        return pid if MODULE.encode() in cmdline and str(self.port).encode() in cmdline \
            else None

    def answering(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=1) as answer:
                return answer.status == 200
        except OSError:
            return False


def local_registries(config: MirrorConfig, state_dir: Path) -> list[RegistryProcess]:
    """The registries of the enabled flows' transfers that are on loopback, in order."""
    found: dict[tuple[str, int], None] = {}
    for flow in config.enabled_flows():
        transfer = flow.schema_transfer
        for side in (transfer.source, transfer.target) if transfer else ():
            for url in side.urls:
                address = urlparse(url)
                if address.hostname and is_loopback(address.hostname):
                    found[(address.hostname, address.port or 8081)] = None
    return [RegistryProcess(host, port, state_dir, 1 + 1000 * i)
            for i, (host, port) in enumerate(found)]


def start(registry: RegistryProcess) -> int:
    """Start the registry unless it runs; wait until it answers. Its PID."""
    running = registry.pid()
    if running is not None:
        return running
    if registry.answering():
        raise LocalRegistryError(f"{registry.url} answers, but mirrorflow did not start it")
    registry.state_dir.mkdir(parents=True, exist_ok=True)
    with registry.log_file.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", MODULE, "--host", registry.host, "--port",
             str(registry.port), "--first-id", str(registry.first_id), "--store",
             str(registry._file("jsonl"))], stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    registry._file("pid").write_text(str(process.pid))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not registry.answering():
        if process.poll() is not None or time.monotonic() > deadline:
            raise LocalRegistryError(f"the schema registry at {registry.url} did not start "
                                     f"(log: {registry.log_file})")
        time.sleep(0.1)
    return process.pid


def stop(registry: RegistryProcess) -> bool:
    """Stop the registry this module started; whether one was running."""
    pid = registry.pid()
    registry._file("pid").unlink(missing_ok=True)
    if pid is None:
        return False
    terminate(pid, 10.0, Path(f"/proc/{pid}").exists)
    return True
