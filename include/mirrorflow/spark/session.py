"""Spark sessions for mirrorflow: settings every session gets, wherever it runs.

* in-process or ``spark-submit`` (``local[*]``, ``spark://``, ``yarn``, ``k8s://``):
  mirrorflow's Kafka range source (``jvm/connector``, :func:`connector_jars`) goes in
  ``spark.jars``;
* Spark Connect (``sc://host:port``): a long-lived server that has the range source on
  its classpath already (:mod:`mirrorflow.dev.connect_server` starts one locally); a run
  starts no JVM.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import mirrorflow
from mirrorflow import jvm
from mirrorflow.errors import MirrorflowError

if TYPE_CHECKING:
    from mirrorflow.config.model import FlowConfig, MirrorConfig

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(mirrorflow.__file__).resolve().parent

# Secrets reach Spark only as Kafka client options; these patterns redact them (key or
# value) in the UI, the event log and plans.
REDACTION = (r"(?i)secret|password|passwd|token|access[.]?key|jaas|credential|keytab"
             r"|ssl\.key|oauthbearer|url")
# Plan text (the Connect tab's statements, the SQL tab's plans, the event log, explain)
# holds the Kafka source's options; a Connect statement prints each as a ``key:`` line and
# a ``value:`` line. Spark's Utils.redact replaces each match (a Java regex): the value line
# after a key that ends in a secret-looking word, and any ``password=...`` (JAAS) in text.
STRING_REDACTION = (r'(?i)(?<=jaas\.config|password|passwd|secret|token|keytab|credential'
                    r'|keystore\.key)"\n\s*value: [^\n]*|password\s*=\s*[^\s,;)]+')
SPARK_CONF = {
    "spark.redaction.regex": REDACTION,
    "spark.sql.redaction.options.regex": REDACTION,
    "spark.sql.redaction.string.regex": STRING_REDACTION,
    "spark.ui.showConsoleProgress": "false",
}
# Settings a Spark Connect client may change for its session (the rest are the server's):
# the redaction patterns among them, so that a server of the user's own that lacks them
# still redacts this session's statements and plans before they reach its UI and event log.
SESSION_CONF = ("spark.sql.redaction.options.regex",
                "spark.sql.redaction.string.regex")


# A flow's runs share one Spark Connect session for this long (flow_session_url): the
# server keeps an idle session for spark.connect.session.manager.defaultSessionTimeout
# (60 minutes by default) and refuses a closed one's id afterwards, so a flow moves on to
# a new id well before its old one could have expired.
SESSION_ROTATION_S = 30 * 60
_SESSION_NAMESPACE = uuid.UUID("5f0c1e7a-3b2d-4d7e-9a41-6d8f0b2c9e13")
_SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"


def is_connect(master: str) -> bool:
    return master.startswith("sc://")


# Spark Connect's port where an sc:// URL names none.
CONNECT_PORT = 15002


def connect_address(master: str) -> tuple[str | None, int]:
    """The host (None where none) and port of an ``sc://`` master, without its parameters
    (``;session_id=...``)."""
    from urllib.parse import urlparse

    url = urlparse(master.split(";", 1)[0])
    return url.hostname, url.port or CONNECT_PORT


def spark_cores(master: str) -> int | None:
    """The cores a run's Spark has where its master says so: ``local`` (1), ``local[N]``
    and ``local[N,F]`` (N), ``local[*]`` and a Spark Connect server on a loopback address
    (this machine's; :mod:`mirrorflow.dev.connect_server` runs ``local[*]``); None for a
    cluster or a remote server, whose cores are not known when a run is planned."""
    if is_connect(master):
        return machine_cores() if is_loopback(connect_address(master)[0] or "") else None
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master.strip())
    if found is None:
        return None
    return machine_cores() if found.group(1) == "*" else int(found.group(1) or 1)


def machine_cores() -> int:
    """The cores this process may run on (its affinity, as the JVM's
    ``availableProcessors`` counts them for ``local[*]``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def flow_session_url(master: str, key: str, now: float | None = None) -> str:
    """``master`` (an ``sc://`` URL) with the session id of ``key`` (a flow of a config:
    :func:`flow_session_key`) for the current :data:`SESSION_ROTATION_S` window, unless
    the URL names a session itself.

    Each new Spark Connect session costs the server its session set-up, and new Python
    workers for whatever a session runs in Python (a user's record suite whose
    expectations Great Expectations evaluates with a Python UDF; with the first, Python
    writer this was about 2 CPU-seconds a run). Every Airflow task and ``mirrorflow run``
    is a process of its own, so without a stable id each run would pay that; with it the
    runs of one flow (never two at once: the flow's lease) reuse one session."""
    if "session_id=" in master:
        return master
    window = int((time.time() if now is None else now) // SESSION_ROTATION_S)
    session_id = uuid.uuid5(_SESSION_NAMESPACE, f"{key}/{window}")
    base, sep, params = master.partition(";")
    base = base if base.endswith("/") else base + "/"
    return f"{base};session_id={session_id}" + (f";{params}" if sep else "")


def flow_session_key(config: MirrorConfig, flow: FlowConfig) -> str:
    """A flow's session key: its name, its clusters' bootstrap servers (no secret: the
    session id is in the server's log), so that flows of two deployments that share a
    server and a flow name keep apart, and the digest of mirrorflow's code, so that after
    an upgrade no run works in a session the code before it configured. (No code of
    mirrorflow's runs in a session's Python workers: its records are read, written and
    summed in the JVM, so a remote server is sent no Python.)"""
    clusters = [config.cluster(alias).bootstrap_servers for alias in (flow.source, flow.target)]
    return json.dumps([flow.name, *clusters, package_digest()])


def connector_jars() -> list[str]:
    """mirrorflow's Kafka range source for Spark (``jvm/connector``) and the Kafka client it
    runs (Spark provides the rest)."""
    return jvm.connector_jars()


@functools.lru_cache(maxsize=4)
def package_digest(directory: Path = PACKAGE_DIR) -> str:
    """A digest of the package's sources (the code that configured a session)."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.py")):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def package_zip(directory: Path) -> Path:
    """The mirrorflow package as a zip, for ``--py-files``, so that a ``spark-submit``
    job's driver has it on any master and deploy mode. Each module goes with its bytecode
    for this Python beside it (an unchecked hash-based ``.pyc``, which zipimport uses as it
    is: the zip is made afresh for each job): from sources alone, the job's driver compiled
    each module it imported. A Python of another version ignores the bytecode and
    compiles the source."""
    import py_compile
    import zipfile

    target = directory / "mirrorflow.zip"
    compiled = directory / "module.pyc"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in PACKAGE_DIR.rglob("*.py"):
            name = Path("mirrorflow") / path.relative_to(PACKAGE_DIR)
            archive.write(path, name)
            py_compile.compile(str(path), cfile=str(compiled), dfile=str(name), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
            archive.write(compiled, name.with_suffix(".pyc"))
    compiled.unlink()
    return target


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class SparkConnectUnavailableError(MirrorflowError):
    """The Spark Connect server of a master URL does not accept connections."""


def check_connect_server(master: str, timeout: float = 10.0) -> None:
    """Fail at once, naming the URL, when nothing accepts connections at a Spark Connect
    master (the client would otherwise retry its first call for minutes)."""
    import socket

    try:
        socket.create_connection(connect_address(master), timeout).close()
    except OSError as exc:
        raise SparkConnectUnavailableError(
            f"the Spark Connect server {master.split(';', 1)[0]} does not answer: "
            f"{exc.strerror or exc}") from None


def get_session(master: str, app_name: str = "mirrorflow", session_key: str | None = None):
    """A SparkSession on ``master``: a Spark Connect client for ``sc://`` URLs (the
    session of ``session_key`` where given: :func:`flow_session_url`), else an
    in-process driver with the range source's jars."""
    from pyspark.sql import SparkSession

    if is_connect(master):
        check_connect_server(master)
        # PySpark's own builder refuses a Connect session in a process that has a classic
        # one (SESSION_ALREADY_EXIST: an Airflow worker that ran an in-process task); the
        # Connect builder does not. PySpark's DataFrame API dispatches on this mark, which
        # its own builder sets too.
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        url = flow_session_url(master, session_key) if session_key else master
        session = _configured(url, may_be_closed=url != master)
        if session is None:  # released by another client, or expired on the server
            log.info("the Spark Connect session of %s is closed; this run opens a new one",
                     url.split(";", 1)[0])
            session = _configured(master, may_be_closed=False)
        return session
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**SPARK_CONF, "spark.jars": ",".join(connector_jars())}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _configured(url: str, may_be_closed: bool):
    """The Connect session of ``url`` with mirrorflow's session settings; None, where
    ``may_be_closed``, when the server says the URL's session is closed (its id may not
    be used again): that client is let go without releasing anything."""
    from pyspark.errors import PySparkException
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.builder.remote(url).getOrCreate()
    try:
        for key in SESSION_CONF:
            session.conf.set(key, SPARK_CONF[key])
    except PySparkException as exc:
        if not may_be_closed or _SESSION_CLOSED not in str(exc):
            raise
        session.release_session_on_close = False
        session.stop()
        return None
    return session


def close_connect_sessions() -> None:
    """Stop this process's Spark Connect sessions. A client left open makes a cleanup call
    at interpreter exit, which retries for minutes once its server is gone: call this
    before stopping a server this process used."""
    import sys

    if "pyspark.sql.connect.session" not in sys.modules:
        return
    from pyspark.sql.connect.session import SparkSession

    for session in {SparkSession._get_default_session(), SparkSession.getActiveSession()}:
        if session is not None:
            session.stop()

