"""Whether a cluster answers: one check (:func:`check_reachable`) that names the cluster
and what failed, and a wait through a broker's restart (:func:`await_reachable`) for the
tasks of a scheduled run."""

from __future__ import annotations

import logging

from mirrorflow.config.model import ClusterConfig
from mirrorflow.kafka.clients import ClusterUnreachableError, admin_client, client_config, redact

log = logging.getLogger(__name__)

# A Kafka broker binds its port before it serves requests: while it starts, a connection
# is taken and closed unanswered, as by a listener of another protocol.
STARTING_GRACE_S = 10.0


def check_reachable(cluster: ClusterConfig, timeout: float = 10.0, quiet: bool = False) -> None:
    """Raise :class:`ClusterUnreachableError` unless the cluster answers a metadata
    request made with its own admin settings (security included); ``quiet``: without
    librdkafka's log lines of each failed connection (a check asked again)."""
    import time

    from confluent_kafka import KafkaError, KafkaException

    # librdkafka retries until the timeout; its error callback says at once when every
    # broker refused the connection or the credentials were rejected.
    hopeless = (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION,
                KafkaError._SSL, KafkaError._RESOLVE)
    seen: list = []
    quieter = {"log_level": 2} if quiet else {}  # syslog's: critical lines only
    admin = admin_client(cluster, **{"socket.timeout.ms": int(timeout * 1000),
                                     "error_cb": seen.append, **quieter})
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(1.0, max(deadline - time.monotonic(), 0.1)))
            return
        except KafkaException as exc:
            last = exc.args[0]
        admin.poll(0)
        known = [e for e in seen if e.code() in hopeless]
        if known or time.monotonic() >= deadline:
            error = known[-1] if known else last
            down = error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                                    KafkaError._TIMED_OUT)
            mismatch = _protocol_mismatch(cluster, error, down)
            reason = mismatch or ("no broker answers there" if down else error.str())
            raise ClusterUnreachableError(
                f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}) is not reachable: "
                f"{redact(reason, client_config(cluster, 'admin'))}",
                cause="refused" if not down else "closed" if mismatch else "down") from None


def await_reachable(cluster: ClusterConfig, wait_s: float) -> None:
    """:func:`check_reachable`, asked again every second for up to ``wait_s`` while no
    broker of the cluster answers (a restart: a task goes on within a second of its
    return, not at its next retry). A connection closed before any request counts as a
    restart once the cluster was down in this wait (a starting broker takes connections
    before it serves them), else after :data:`STARTING_GRACE_S` as the listener of another
    protocol it then is; a refusal (credentials, TLS, host name) fails at once. So does the
    end of the wait, saying how long it asked."""
    import time

    began = time.monotonic()
    seen_down = logged = False
    while True:
        try:
            check_reachable(cluster, quiet=logged)  # its first failure's lines once
            if logged:
                log.info("cluster %r answers again", cluster.alias)
            return
        except ClusterUnreachableError as exc:
            seen_down = seen_down or exc.cause == "down"
            waited = time.monotonic() - began
            patient = exc.cause == "down" or (exc.cause == "closed" and (
                seen_down or waited < STARTING_GRACE_S))
            if not patient or wait_s <= 0:
                raise
            if waited >= wait_s:
                raise ClusterUnreachableError(f"{exc} (asked for {wait_s:g} s)",
                                              cause=exc.cause) from None
            if not logged:
                log.warning("%s; asking every second for up to %g s", exc, wait_s)
                logged = True
        time.sleep(1.0)


def _protocol_mismatch(cluster: ClusterConfig, error, down: bool) -> str | None:
    """Why a broker that answered took no request: its listener speaks another protocol
    (PLAINTEXT to a TLS listener is dropped at its first request; TLS to a PLAINTEXT one
    fails the handshake). None when nothing took a connection or what took it answers
    nothing (a broker down: stopped, or too busy). ``down``: ``error``
    says no broker answered (a connection failed, or none was made)."""
    from confluent_kafka import KafkaError

    if error.code() == KafkaError._SSL:
        text = error.str()
    elif down and _refuses_requests(cluster):
        text = "the broker closed it at the first request"
    else:
        return None
    protocol = client_config(cluster, "admin").get("security.protocol", "PLAINTEXT")
    return (f"a broker answered but the connection failed before any request ({text}): "
            f"its listener speaks another protocol than '{cluster.alias}.security.protocol' "
            f"({protocol}) says; check it and the cluster's ssl.* settings")


def _refuses_requests(cluster: ClusterConfig, timeout: float = 2.0) -> bool:
    """Whether something at one of the cluster's bootstrap addresses takes a connection
    and then does not serve a Kafka request on it: it closes the connection at the
    request (a listener of another protocol, a broker still starting) or answers it where
    librdkafka could not go on (a handshake of another protocol). A process that holds the
    connection and answers nothing within ``timeout`` (stopped, as by SIGSTOP, or too busy)
    is not: that broker is down, though the kernel takes its connections."""
    import socket
    import struct

    client_id = b"mirrorflow-reachability"
    # ApiVersions v0 (key 18), correlation id 1: every Kafka listener answers it first.
    header = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    request = struct.pack(">i", len(header)) + header
    for address in cluster.bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
                sock.sendall(request)
                sock.recv(1)  # bytes, or b"" when closed: either way not silent
                return True
        except ConnectionRefusedError:
            continue  # nothing listens
        except ConnectionError:
            return True  # reset at the request
        except (OSError, ValueError):
            continue  # silent within the timeout (a broker down), or no such address
    return False
