"""Where the JVM classpaths of ``jvm/pom.xml`` are: one folder of jars per use.

``make jvm`` copies each Maven profile's classpath into ``.jvm/<name>`` of the checkout
(``broker``: Apache Kafka; ``mm2``: MirrorMaker 2; ``MIRRORFLOW_JVM_DIR`` points
elsewhere), and builds mirrorflow's Kafka range source for Spark (``jvm/connector``) into
the package's own ``jars/``, which a wheel carries as PySpark's carries its jars
(:func:`connector_jars`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mirrorflow.errors import MirrorflowError

JVM_DIR_ENV = "MIRRORFLOW_JVM_DIR"
_CHECKOUT_JVM_DIR = Path(__file__).resolve().parents[2] / ".jvm"
PACKAGE_JARS = Path(__file__).resolve().parent / "jars"


class JvmError(MirrorflowError):
    """A JVM classpath is missing."""


def jvm_dir() -> Path:
    return Path(os.environ.get(JVM_DIR_ENV) or _CHECKOUT_JVM_DIR)


def classpath_dir(name: str) -> Path:
    """The folder of one classpath, checked to hold jars."""
    folder = jvm_dir() / name
    if not any(folder.glob("*.jar")):
        raise JvmError(f"no jars in {folder}: run `make jvm` (Maven fetches jvm/pom.xml's "
                       f"'{name}' profile), or set {JVM_DIR_ENV}")
    return folder


def classpath(name: str) -> str:
    """A ``java -cp`` argument for one classpath."""
    return str(classpath_dir(name) / "*")


def jars(name: str) -> list[str]:
    """Every jar of one classpath (for ``spark.jars``)."""
    return sorted(str(p) for p in classpath_dir(name).glob("*.jar"))


def connector_jars() -> list[str]:
    """mirrorflow's Kafka range source for Spark and the Kafka client it runs (for
    ``spark.jars``), from the package."""
    found = sorted(str(p) for p in PACKAGE_JARS.glob("*.jar"))
    if not found:
        raise JvmError(f"no jars in {PACKAGE_JARS}: run `make jvm` (Maven builds "
                       "jvm/connector), or install mirrorflow from a wheel built after it")
    return found


def kafka_version() -> str:
    """The Apache Kafka version of the broker classpath, from its jar's name."""
    for path in classpath_dir("broker").glob("kafka_2.13-*.jar"):
        match = re.fullmatch(r"kafka_2\.13-(.+)\.jar", path.name)
        if match:
            return match.group(1)
    raise JvmError(f"no kafka_2.13 jar in {classpath_dir('broker')}")


_LOG4J = """\
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def log4j_config(log_file: Path) -> str:
    """A log4j2 configuration that sends a JVM's whole log to ``log_file``, not to the
    terminal or the test output."""
    return _LOG4J.format(log_file=log_file.resolve())
