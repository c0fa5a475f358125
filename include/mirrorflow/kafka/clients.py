"""Kafka clients (confluent-kafka / librdkafka) built from a cluster's MM2 settings.

MM2 configs are written for the Java client. librdkafka shares most property names;
the ones it spells differently are translated here, and Java-only ones it cannot use
are dropped with a log line naming them, so that one file serves both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from mirrorflow.config.model import ClusterConfig
from mirrorflow.errors import MirrorflowError

log = logging.getLogger(__name__)

# Java client settings with no librdkafka counterpart (serializers are fixed to bytes here;
# login callbacks and JWT validation settings belong to the Java client's login module).
_JAVA_ONLY = re.compile(
    r"^(key\.(de)?serializer|value\.(de)?serializer|buffer\.memory|"
    r"ssl\.(trustmanager|keymanager)\.algorithm|ssl\.protocol|ssl\.provider|"
    r"ssl\.(truststore|keystore)\.type|ssl\.truststore\.password|"
    r"sasl\.login\.(class|callback\.handler\.class|refresh\..+|connect\.timeout\.ms|"
    r"read\.timeout\.ms|retry\.backoff\..+)|sasl\.client\.callback\.handler\.class|"
    r"sasl\.oauthbearer\.(scope\.claim\.name|sub\.claim\.name|jwks\.endpoint\..+|"
    r"expected\..+|clock\.skew\.seconds|header\.urlencode)|"
    r"interceptor\.classes|metric\.reporters|metrics\.(num\.samples|sample\.window\.ms|"
    r"recording\.level)|max\.block\.ms|partitioner\.class|partition\.assignment\.strategy|"
    r"security\.providers|ssl\.enabled\.protocols|ssl\.secure\.random\.implementation|"
    r"ssl\.engine\.factory\.class|socket\.connection\.setup\.timeout\.max\.ms|"
    r"internal\.leave\.group\.on\.close|"
    r"default\.api\.timeout\.ms|retry\.backoff\.max\.ms|client\.dns\.lookup|"
    r"exclude\.internal\.topics|auto\.include\.jmx\.reporter)$"
)
# Java name -> librdkafka name, same meaning and value.
_RENAMED = {
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
}
# Socket buffers: Java's -1 (the OS's default) is librdkafka's 0.
_BUFFERS = {"receive.buffer.bytes": "socket.receive.buffer.bytes",
            "send.buffer.bytes": "socket.send.buffer.bytes"}
_COMPRESSION_LEVEL = re.compile(r"^compression\.(gzip|lz4|zstd)\.level$")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Keys whose values are secrets: never shown, in messages or anywhere else.
SECRET_KEY = re.compile(r"password|secret|jaas|token|credential|\.pem$|\.key$|keytab|"
                        r"sasl\.oauthbearer\.config", re.IGNORECASE)


class ClientConfigError(MirrorflowError):
    """A client setting cannot be used; names cluster, role and property, never a secret."""


def librdkafka_config(props: dict[str, str], where: str = "client") -> dict[str, Any]:
    """Translate Java client properties into librdkafka's. Java-only settings that do not
    matter to librdkafka are dropped with a log line naming them; Java key stores that
    librdkafka cannot read (JKS) fail naming the property, instead of failing later."""
    out: dict[str, Any] = {}
    dropped = []
    for key, value in props.items():
        if key == "sasl.jaas.config":
            out.update(_from_jaas(value))
        elif key in _RENAMED:
            out[_RENAMED[key]] = value
        elif key in _BUFFERS:
            out[_BUFFERS[key]] = "0" if str(value).strip() == "-1" else value
        elif level := _COMPRESSION_LEVEL.match(key):
            # librdkafka has one level, for the codec the client uses.
            if level.group(1) == props.get("compression.type"):
                out["compression.level"] = value
            else:
                dropped.append(key)
        elif key in ("ssl.truststore.location", "ssl.keystore.location"):
            out.update(_store(key, value, props, where))
        elif key == "ssl.keystore.password":
            out[key] = value  # librdkafka's name too (PKCS#12)
        elif key == "ssl.endpoint.identification.algorithm" and not value:
            out[key] = "none"  # Java's empty value switches hostname checks off
        elif _JAVA_ONLY.match(key):
            dropped.append(key)
        else:
            out[key] = value
    if dropped:
        log.info("Java-only client settings not used by librdkafka: %s", ", ".join(dropped))
    return out


def _store(key: str, path: str, props: dict[str, str], where: str) -> dict[str, str]:
    """A Java trust or key store: PEM and PKCS#12 map onto librdkafka, JKS cannot."""
    kind = key.split(".")[1]  # truststore or keystore
    store_type = props.get(f"ssl.{kind}.type", "JKS").upper()
    if kind == "truststore" and store_type == "PEM":
        return {"ssl.ca.location": path}
    if kind == "keystore" and store_type == "PKCS12":
        return {"ssl.keystore.location": path}
    if kind == "keystore" and store_type == "PEM":
        return {"ssl.certificate.location": path, "ssl.key.location": path}
    hint = ("convert it to PEM (ssl.truststore.type = PEM) or set ssl.ca.location"
            if kind == "truststore" else "use PKCS12 or PEM (ssl.keystore.type)")
    raise ClientConfigError(f"{where}: {key} is a {store_type} store, which librdkafka "
                            f"cannot read: {hint}")


def _from_jaas(jaas: str) -> dict[str, str]:
    """librdkafka settings from a JAAS line: PLAIN and SCRAM credentials, OAUTHBEARER
    client credentials (OIDC) or an unsecured principal, Kerberos keytab and principal."""
    options = dict(_JAAS_OPTION.findall(jaas))
    out = {}
    if "OAuthBearerLoginModule" in jaas:
        if "clientId" in options:
            out.update({"sasl.oauthbearer.method": "oidc",
                        "sasl.oauthbearer.client.id": options["clientId"],
                        "sasl.oauthbearer.client.secret": options.get("clientSecret", "")})
            if "scope" in options:
                out["sasl.oauthbearer.scope"] = options["scope"]
        elif "unsecuredLoginStringClaim_sub" in options:
            out.update({"enable.sasl.oauthbearer.unsecure.jwt": "true",
                        "sasl.oauthbearer.config":
                            f"principal={options['unsecuredLoginStringClaim_sub']}"})
        return out
    if "Krb5LoginModule" in jaas:
        if "keyTab" in options:
            out["sasl.kerberos.keytab"] = options["keyTab"]
        if "principal" in options:
            out["sasl.kerberos.principal"] = options["principal"]
        return out
    if "username" in options:
        out["sasl.username"] = options["username"]
    if "password" in options:
        out["sasl.password"] = options["password"]
    return out


def redact(text: str, config: dict[str, Any]) -> str:
    """``text`` with the value of every secret setting of ``config`` blanked out."""
    for key, value in config.items():
        if SECRET_KEY.search(key) and isinstance(value, str) and len(value) >= 3:
            text = text.replace(value, "[redacted]")
    return text


# librdkafka drops its bootstrap connection once the metadata names the brokers and, with
# sparse connections (its default), connects to the broker that a transaction or group
# coordinator lookup needs only when a 500 ms timer next fires: a transactional
# producer's init_transactions took 510 ms on a local broker more often than not, 11 ms
# with every known broker connected at once.
SPARSE_OFF = {"enable.sparse.connections": False}


def new_client(kind, config: dict[str, Any], where: str):
    """``kind(config)`` (Producer, Consumer, AdminClient); a refused setting is reported
    naming ``where`` with every secret value redacted (librdkafka quotes values)."""
    from confluent_kafka import KafkaException

    # librdkafka's own log lines go through Python logging, not straight to stderr.
    config = {"logger": logging.getLogger("mirrorflow.librdkafka"), **SPARSE_OFF, **config}
    try:
        return kind(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ClientConfigError(f"{where}: {redact(str(exc), config)}") from None


def java_client_config(cluster: ClusterConfig, role: str) -> dict[str, str]:
    """The Java client's settings for a role on a cluster, as the MM2 file writes them,
    with ``${provider:path:key}`` secrets resolved (errors name the property, not the
    value): what the range source (a Java client) takes as ``kafka.*`` options."""
    from mirrorflow.config.secrets import SecretError, resolve

    resolved = {}
    for key, value in cluster.client_config(role).items():
        try:
            resolved[key] = resolve(value, cluster.providers)
        except SecretError as exc:
            raise SecretError(f"cluster {cluster.alias!r}, {role} setting {key!r}: {exc}") from None
    return resolved


# The Java client's defaults where librdkafka's differ in what an MM2 user sees: a client
# whose broker was down retries its connection every second at most, as MM2's do
# (librdkafka's backoff grows to 10 s, so a run's clients would find a restarted broker up
# to 10 s late). A setting in the file wins.
_JAVA_DEFAULTS = {"reconnect.backoff.ms": "50", "reconnect.backoff.max.ms": "1000"}


def client_config(cluster: ClusterConfig, role: str, **extra: Any) -> dict[str, Any]:
    """Full librdkafka config for a role on a cluster (extra settings win), secrets
    resolved, Java names translated and the Java client's defaults kept."""
    config = {**_JAVA_DEFAULTS, **librdkafka_config(java_client_config(cluster, role),
                                                    f"cluster {cluster.alias!r}, {role} client")}
    config.update(extra)
    return config


# Admin clients and the internal topics' producer are kept per cluster and settings for
# the life of the process: a run makes dozens of small calls, and a new client costs a
# connection, a metadata round trip and, for a producer, its start (0.1-0.5 s each).
_SHARED: dict[tuple, Any] = {}


def _shared(kind, cluster: ClusterConfig, role: str, extra: dict[str, Any], where: str):
    key = (kind.__name__, cluster.alias, cluster.bootstrap_servers,
           tuple(sorted(cluster.client_config(role).items())), tuple(sorted(extra.items())))
    client = _SHARED.get(key)
    if client is None:
        client = _SHARED[key] = new_client(kind, client_config(cluster, role, **extra), where)
    return client


def close_shared() -> None:
    """Forget the shared clients (after their clusters were torn down)."""
    for client in _SHARED.values():
        if hasattr(client, "flush"):
            client.flush(5)
    _SHARED.clear()


def admin_client(cluster: ClusterConfig, **extra: Any):
    """The cluster's admin client: shared, unless ``extra`` holds callbacks."""
    from confluent_kafka.admin import AdminClient

    where = f"cluster {cluster.alias!r}, admin client"
    if any(callable(v) for v in extra.values()):
        return new_client(AdminClient, client_config(cluster, "admin", **extra), where)
    return _shared(AdminClient, cluster, "admin", extra, where)


METADATA_READ = "mirrorflow_metadata_read"  # the mark cluster_metadata leaves on a client


def cluster_metadata(admin, timeout: float):
    """The cluster's metadata (every topic) read through ``admin``, which is marked as
    holding it: its first ListOffsets then finds the leaders in its cache instead of
    racing librdkafka's own thread to look them up (:mod:`mirrorflow.kafka.watermarks`),
    and a task that listed the topics already is not made to read them again."""
    metadata = admin.list_topics(timeout=timeout)
    setattr(admin, METADATA_READ, True)
    return metadata


def holds_metadata(admin) -> bool:
    """Whether ``admin`` read its cluster's metadata through :func:`cluster_metadata`
    (or was marked as if it had, by a reader that gave up on it)."""
    return getattr(admin, METADATA_READ, False)


def renewed_admin_client(cluster: ClusterConfig):
    """A new shared admin client for the cluster, the old one dropped: after a broker
    restart the old one's cached metadata can keep a stale leader epoch, which every
    request it sends is refused for (FENCED_LEADER_EPOCH) until its next refresh."""
    for key in [k for k in _SHARED if k[:2] == ("AdminClient", cluster.alias)]:
        del _SHARED[key]
    return admin_client(cluster)


def producer(cluster: ClusterConfig, **extra: Any):
    """A producer for the cluster, shared per settings (callers flush what they send)."""
    from confluent_kafka import Producer

    return _shared(Producer, cluster, "producer", extra, f"cluster {cluster.alias!r}, producer")


def consumer(cluster: ClusterConfig, **extra: Any):
    from confluent_kafka import Consumer

    extra.setdefault("group.id", "mirrorflow-reader")
    extra.setdefault("enable.auto.commit", False)
    # mirrorflow's readers assign the offsets they read; the cluster's auto.offset.reset
    # says where a flow starts a new source partition (the plan), not where they read.
    extra.setdefault("auto.offset.reset", "earliest")
    return new_client(Consumer, client_config(cluster, "consumer", **extra),
                      f"cluster {cluster.alias!r}, consumer")


def take(consumer, timeout: float) -> list:
    """The messages ``consumer`` has for its caller now: waits up to ``timeout`` for the
    first, then takes what it already fetched without waiting. (``consume(n, timeout)``
    waits out its whole timeout unless ``n`` messages arrive.)"""
    first = consumer.poll(timeout)
    return [] if first is None else [first, *consumer.consume(10_000, timeout=0)]


class TopicCreationError(MirrorflowError):
    """The cluster refused to create a topic mirrorflow needs."""


class ClusterUnreachableError(MirrorflowError):
    """A cluster does not answer; the message names its alias and address. ``cause``:
    ``down`` (no broker takes a connection: stopped, restarting), ``closed`` (one took the
    connection and closed it before any request: a listener of another protocol, or a
    broker still starting) or ``refused`` (credentials, TLS, an unknown host name)."""

    def __init__(self, message: str, cause: str = "refused"):
        super().__init__(message)
        self.cause = cause


# How much longer than its request's own timeout an admin answer is awaited: librdkafka's
# timeout, an error that names what failed, comes first.
ANSWER_MARGIN_S = 5.0


def answer(future: Any, cluster: ClusterConfig, asked: str, timeout: float) -> Any:
    """The result of an admin request sent with the timeout ``timeout``, awaited
    :data:`ANSWER_MARGIN_S` longer. A wait that runs out anyway (a broker that keeps its
    connections and answers nothing, as a stopped process or a network dropping packets
    does) is a :class:`ClusterUnreachableError` naming the cluster and what was
    ``asked``, not a bare ``TimeoutError`` (which a soak's task met)."""
    try:
        return future.result(timeout + ANSWER_MARGIN_S)
    except TimeoutError:
        raise ClusterUnreachableError(
            f"cluster {cluster.alias!r} ({cluster.bootstrap_servers}): no answer within "
            f"{timeout + ANSWER_MARGIN_S:g} s {asked}", cause="down") from None


def refuses_transactions(error) -> bool:
    """Whether a KafkaError says the cluster will not run this producer's transactions
    (no TransactionalId grant, no cluster grant, a broker without transactions)."""
    from confluent_kafka import KafkaError

    return error.code() in (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                            KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE)


def transactions_refused(cluster: ClusterConfig, transactional_id: str,
                         timeout: float = 30.0) -> str | None:
    """Why ``cluster`` will not run transactions of ``transactional_id`` for this client's
    principal, or None when it will (an ``init_transactions`` of an id nothing else uses:
    it fences nobody)."""
    from confluent_kafka import KafkaException, Producer

    producer = new_client(Producer, client_config(cluster, "producer", **{
        "transactional.id": transactional_id}), f"cluster {cluster.alias!r}")
    try:
        producer.init_transactions(timeout)
    except KafkaException as exc:
        if refuses_transactions(exc.args[0]):
            return exc.args[0].str()
        raise
    return None


def ensure_topic(cluster: ClusterConfig, topic: str, partitions: int,
                 replication_factor: int = 1, timeout: float = 15.0,
                 config: dict[str, str] | None = None) -> bool:
    """Create ``topic`` unless it exists. Returns True when this call created it; a
    refusal is a :class:`TopicCreationError` naming the cluster, topic and request."""
    from confluent_kafka.admin import NewTopic

    return bool(ensure_topics(cluster, [NewTopic(topic, num_partitions=partitions,
                                                 replication_factor=replication_factor,
                                                 config=config or {})], timeout))


def ensure_topics(cluster: ClusterConfig, topics: list[Any], timeout: float = 15.0
                  ) -> set[str]:
    """Create those of ``topics`` (each a ``NewTopic``) that do not exist: one describe
    request, then one create request for the missing. Returns the names this call
    created; a refusal is a :class:`TopicCreationError` naming the cluster, topic and
    request."""
    from confluent_kafka import KafkaError, KafkaException

    found = describe_topics(cluster, [t.topic for t in topics], timeout)
    missing = [t for t in topics if t.topic not in found]
    if not missing:
        return set()
    created = set()
    futures = admin_client(cluster).create_topics(missing, operation_timeout=timeout,
                                                  request_timeout=timeout)
    for new in missing:
        try:
            answer(futures[new.topic], cluster, f"creating topic {new.topic!r}", timeout)
            created.add(new.topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise TopicCreationError(
                    f"cluster {cluster.alias!r}: cannot create topic {new.topic!r} "
                    f"({new.num_partitions} partitions, replication factor "
                    f"{new.replication_factor}): {exc.args[0].str()}") from None
    return created


def describe_topics(cluster: ClusterConfig, topics: list[str],
                    timeout: float = 30.0) -> dict[str, Any]:
    """Each topic's ``TopicDescription`` (id, partitions), in one describe request: its
    cost follows ``topics``, not the cluster's size (as a full metadata request's does),
    and it never creates a topic (a producer-side metadata request may). Topics that do
    not exist are absent."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    if not topics:
        return {}
    futures = admin_client(cluster).describe_topics(TopicCollection(sorted(set(topics))),
                                                    request_timeout=timeout)
    out = {}
    for name, future in futures.items():
        try:
            out[name] = answer(future, cluster, f"describing topic {name!r}", timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ClusterUnreachableError(
                    f"cluster {cluster.alias!r}: cannot describe topic {name!r}: "
                    f"{exc.args[0].str()}") from None
    return out


def topic_ids(cluster: ClusterConfig, topics: list[str], timeout: float = 30.0) -> dict[str, str]:
    """Each topic's id (KIP-516): a topic deleted and created again under its name gets a
    new one. Topics that do not exist are absent."""
    return {name: str(d.topic_id) for name, d in describe_topics(cluster, topics,
                                                                   timeout).items()}


# A KRaft controller refuses a request that would write more than 10,000 metadata records
# (POLICY_VIOLATION "Unable to perform excessively large batch operation"): a new topic is
# a record, each of its partitions and configs one more. A first run of 2,500 topics of 4
# partitions met it; topics are created and grown in requests of at most this many.
METADATA_RECORDS_PER_REQUEST = 5_000


def metadata_requests(items: list, records: Callable[[Any], int]) -> list[list]:
    """``items`` in order, cut into admin requests of at most
    :data:`METADATA_RECORDS_PER_REQUEST` metadata records each (``records`` of an item);
    an item larger than that alone."""
    requests: list[list] = []
    weight = 0
    for item in items:
        size = records(item)
        if not requests or weight + size > METADATA_RECORDS_PER_REQUEST:
            requests.append([])
            weight = 0
        requests[-1].append(item)
        weight += size
    return requests
