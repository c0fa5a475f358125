"""MirrorMaker 2 itself, in dedicated mode, from ``jvm/pom.xml``'s ``mm2`` classpath.

Started from the same ``mm2.properties`` mirrorflow reads (``connect-mirror-maker.sh``
runs the same class), for the tests that hold mirrorflow against MM2, the benchmark and
migration rehearsals. MM2's formatters decode internal topics through Kafka's console
consumer, as an operator would check them. A development helper, not a runtime part.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mirrorflow import jvm
from mirrorflow.errors import MirrorflowError

MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
HEAP = ("-Xms256M", "-Xmx2G")  # connect-mirror-maker.sh's KAFKA_HEAP_OPTS
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
FORMATTERS = {
    "offset-syncs": "org.apache.kafka.connect.mirror.formatters.OffsetSyncFormatter",
    "checkpoints": "org.apache.kafka.connect.mirror.formatters.CheckpointFormatter",
    "heartbeats": "org.apache.kafka.connect.mirror.formatters.HeartbeatFormatter",
}


class MirrorMakerError(MirrorflowError):
    """MirrorMaker 2 could not be started or stopped, or a console read failed."""


@dataclass
class MirrorMaker:
    """One dedicated-mode MM2 process; ``clusters`` limits it to flows into those targets
    (MM2's ``--clusters``), as one would run it beside mirrorflow's flows."""

    config_path: Path
    home: Path
    clusters: tuple[str, ...] = ()
    jvm_options: tuple[str, ...] = ()  # beside the heap of connect-mirror-maker.sh
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def log_file(self) -> Path:
        return self.home / "mm2.log"

    def start(self) -> MirrorMaker:
        self.home.mkdir(parents=True, exist_ok=True)
        log4j = self.home / "log4j2.properties"
        log4j.write_text(jvm.log4j_config(self.log_file))
        args = [str(Path(self.config_path).resolve())]
        if self.clusters:
            args += ["--clusters", *self.clusters]
        with open(self.home / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(
                ["java", *HEAP, *self.jvm_options,
                 f"-Dlog4j2.configurationFile={log4j.resolve()}",
                 "-cp", jvm.classpath("mm2"), MAIN, *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> int:
        """A clean shutdown (SIGTERM: Connect stops its tasks and commits their offsets);
        SIGKILL after ``timeout``. Returns the exit status."""
        if self.process is None:
            raise MirrorMakerError("MirrorMaker 2 was not started")
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running():
            self.stop()


def formatted(bootstrap: str, topic: str, kind: str, timeout_ms: int = 8000) -> list[str]:
    """The topic's records as MM2's own formatter (``kind``: offset-syncs, checkpoints,
    heartbeats) prints them through Kafka's console consumer, one line per record (its
    own log goes to a file, not between the records)."""
    log_dir = Path(tempfile.mkdtemp(prefix="mirrorflow-console-"))
    log4j = log_dir / "log4j2.properties"
    log4j.write_text(jvm.log4j_config(log_dir / "console-consumer.log"))
    proc = subprocess.run(
        ["java", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={log4j}",
         "-cp", jvm.classpath("mm2"), CONSOLE_CONSUMER,
         "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
         "--formatter", FORMATTERS[kind], "--timeout-ms", str(timeout_ms)],
        capture_output=True, text=True, check=False, timeout=120)
    log = log_dir / "console-consumer.log"
    # The console consumer ends on its idle timeout with a TimeoutException (status 1).
    if proc.returncode != 0 and "TimeoutException" not in (
            log.read_text() if log.exists() else ""):
        raise MirrorMakerError(f"console consumer on {topic!r} at {bootstrap} failed "
                               f"(status {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return [line for line in proc.stdout.splitlines() if line.strip()]
