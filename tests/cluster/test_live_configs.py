"""Live configs on a real cluster (3 controllers, 3 brokers as processes), through
confluent-kafka's AdminClient: IncrementalAlterConfigs and AlterConfigs on topics, on one
broker and on the cluster default; DescribeConfigs with sources, synonyms and sensitive
values; a changed `retention.ms` deleting old segments at the next retention pass and a
changed `min.insync.replicas` refusing acks=all writes at once, without restarts; bad
values refused with INVALID_CONFIG and Kafka's message. Every wait is a condition under
a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, request

BROKERS = (4, 5, 6)
# Retention passes every 300 ms; a secret to see DescribeConfigs hide.
BROKER_PROPS = {
    "log.retention.check.interval.ms": "300",
    "ssl.keystore.password": "not-shown",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(Path(tmp_path_factory.mktemp("configs")), broker_props=BROKER_PROPS)
    try:
        c.start()
        yield c
    finally:
        c.close()


def admin(c: ProcCluster) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


def create_topic(c: ProcCluster, name: str, rf: int = 3, **configs: str) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(c)
    fs = client.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=rf, config=configs)]
    )
    fs[name].result(30)

    def led() -> bool:
        parts = c.partitions(name)
        return bool(parts) and all(p["leader"] >= 0 for p in parts.values())

    wait_for(led, 30, f"{name} has a leader", c.logs)


def incremental(c: ProcCluster, rtype: Any, name: str, *ops: tuple[str, str, str | None]) -> None:
    """Apply (operation, config, value) operations; raise the resource's KafkaException."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(k, v, incremental_operation=getattr(AlterConfigOpType, op)) for op, k, v in ops
    ]
    client = admin(c)
    fs = client.incremental_alter_configs(
        [ConfigResource(rtype, name, incremental_configs=entries)]
    )
    for f in fs.values():
        f.result(30)


def describe(c: ProcCluster, rtype: Any, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    client = admin(c)
    fs = client.describe_configs([ConfigResource(rtype, name)])
    return next(iter(fs.values())).result(30)


def raw_call(c: ProcCluster, key: int, version: int, data: dict[str, Any]) -> Any:
    broker = c.broker(BROKERS[0])
    client = RawClient(broker.host, broker.port)
    try:
        return client.call(key, version, request(key, version, data))
    finally:
        client.close()


def cluster_default(c: ProcCluster, op: str, key: str, value: str | None = None) -> None:
    """Change the cluster default broker config (resource name "", `<default>`) with a
    raw IncrementalAlterConfigs: librdkafka and kafka-python refuse an empty name."""
    ops = {"SET": 0, "DELETE": 1, "APPEND": 2, "SUBTRACT": 3}
    config = {"name": key, "config_operation": ops[op], "value": value}
    resource = {"resource_type": 4, "resource_name": "", "configs": [config]}
    resp = raw_call(c, 44, 1, {"resources": [resource], "validate_only": False})
    assert [(r.error_code, r.error_message) for r in resp.responses] == [(0, None)]


def describe_default(c: ProcCluster) -> dict[str, Any]:
    """DescribeConfigs of `<default>` as a raw request (no client takes an empty name)."""
    data = {
        "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": True,
    }
    (result,) = raw_call(c, 32, 4, data).results
    assert result.error_code == 0, result
    return {x.name: x for x in result.configs}


def topic_value(c: ProcCluster, topic: str, key: str) -> str | None:
    from confluent_kafka.admin import ResourceType

    return describe(c, ResourceType.TOPIC, topic)[key].value


def described(c: ProcCluster, rtype: Any, name: str, **expected: str) -> dict[str, Any]:
    """DescribeConfigs once the change reached the broker that answers (the controller
    acknowledged it; brokers apply it from the metadata log within a second)."""

    def probe() -> dict[str, Any] | None:
        got = describe(c, rtype, name)
        ok = all(got[k.replace("_", ".")].value == v for k, v in expected.items())
        return got if ok else None

    return wait_for(probe, 10, f"{name} configs {expected}", c.logs)


def refusal(fn: Any) -> Any:
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as info:
        fn()
    return info.value.args[0]


def test_incremental_alter_describe_and_refusals(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigSource, ResourceType

    create_topic(cluster, "cfg")
    T = ResourceType.TOPIC
    incremental(
        cluster,
        T,
        "cfg",
        ("SET", "retention.ms", "123456"),
        ("APPEND", "cleanup.policy", "compact"),
    )
    got = described(cluster, T, "cfg", retention_ms="123456")
    assert got["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["cleanup.policy"].value == "delete,compact"
    assert got["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    # Kafka's synonyms: the override, then the broker's layers.
    syn = [(s.name, s.source) for s in got["cleanup.policy"].synonyms.values()]
    assert syn == [
        ("cleanup.policy", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
        ("log.cleanup.policy", ConfigSource.DEFAULT_CONFIG.value),
    ]
    incremental(
        cluster,
        T,
        "cfg",
        ("SUBTRACT", "cleanup.policy", "delete"),
        ("DELETE", "retention.ms", None),
    )
    got = described(cluster, T, "cfg", cleanup_policy="compact")
    assert got["retention.ms"].value == "604800000"
    assert got["retention.ms"].is_default

    # Bad values and names: INVALID_CONFIG with Kafka's message; nothing changes.
    for key, value, why in (
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("retention.ms", "abc", "Not a number of type LONG"),
        ("cleanup.policy", "foo", "String must be one of: compact, delete"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ):
        err = refusal(lambda k=key, v=value: incremental(cluster, T, "cfg", ("SET", k, v)))
        assert err.code() == KafkaError.INVALID_CONFIG, (key, err)
        assert why in err.str(), err.str()
    err = refusal(lambda: incremental(cluster, T, "cfg", ("APPEND", "retention.ms", "1")))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = refusal(lambda: incremental(cluster, T, "nope", ("SET", "retention.ms", "1")))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert topic_value(cluster, "cfg", "min.insync.replicas") == "1"


def test_group_configs_of_a_group_that_need_not_exist(cluster: ProcCluster) -> None:
    """KIP-848 group configs (ConfigResource type 32): stored and described for any group
    name, checked against Kafka's bounds; not applied (our groups are classic)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigSource, ResourceType

    G = ResourceType.GROUP
    incremental(cluster, G, "cfg-group", ("SET", "consumer.session.timeout.ms", "50000"))
    got = described(cluster, G, "cfg-group", consumer_session_timeout_ms="50000")
    assert got["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG.value
    heartbeat = got["consumer.heartbeat.interval.ms"]
    assert (heartbeat.value, heartbeat.source) == ("5000", ConfigSource.DEFAULT_CONFIG.value)
    assert got["share.auto.offset.reset"].value == "latest"
    for key, value, why in (
        ("consumer.session.timeout.ms", "70000", "must be less than or equal to "
         "group.consumer.max.session.timeout.ms"),
        ("consumer.heartbeat.interval.ms", "1", "must be greater than or equal to "
         "group.consumer.min.heartbeat.interval.ms"),
        ("session.timeout.ms", "50000", "Unknown group config name: session.timeout.ms"),
    ):  # fmt: skip
        err = refusal(lambda k=key, v=value: incremental(cluster, G, "cfg-group", ("SET", k, v)))
        assert err.code() == KafkaError.INVALID_CONFIG, (key, err)
        assert why in err.str(), err.str()
    incremental(cluster, G, "cfg-group", ("DELETE", "consumer.session.timeout.ms", None))
    got = described(cluster, G, "cfg-group", consumer_session_timeout_ms="45000")
    assert got["consumer.session.timeout.ms"].is_default


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_validate_only_and_alter_configs_replace(cluster: ProcCluster) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    create_topic(cluster, "legacy")
    T = ResourceType.TOPIC
    incremental(cluster, T, "legacy", ("SET", "retention.ms", "5000"))
    described(cluster, T, "legacy", retention_ms="5000")
    client = admin(cluster)
    resource = ConfigResource(T, "legacy", set_config={"segment.ms": "60000"})
    for f in client.alter_configs([resource], validate_only=True).values():
        f.result(30)
    assert topic_value(cluster, "legacy", "segment.ms") == "604800000"  # only validated
    for f in client.alter_configs([resource]).values():
        f.result(30)
    got = described(cluster, T, "legacy", segment_ms="60000")
    assert got["retention.ms"].value == "604800000"  # AlterConfigs replaced the whole set


def test_retention_change_deletes_old_segments_live(cluster: ProcCluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import ResourceType

    create_topic(cluster, "ret", rf=1, **{"segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for i in range(40):
        producer.produce("ret", value=b"x" * 200, key=str(i).encode())
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ret-probe"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)
        assert (low, high) == (0, 40)
        incremental(cluster, ResourceType.TOPIC, "ret", ("SET", "retention.ms", "1"))

        def trimmed() -> int | None:
            low, _ = consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=10)
            return low if low > 0 else None

        low = wait_for(trimmed, 20, "old segments deleted", cluster.logs)
        assert 0 < low <= 40
    finally:
        consumer.close()


def produce_error(c: ProcCluster, topic: str, size: int = 1) -> Any:
    """The delivery error of one acks=all record, without retries (None: written)."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": c.bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 10000}
    )
    result: list[Any] = []
    producer.produce(topic, value=b"v" * size, on_delivery=lambda err, msg: result.append(err))
    producer.flush(15)
    assert result, "no delivery report"
    return result[0]


def test_min_insync_replicas_change_applies_at_once(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ResourceType

    create_topic(cluster, "isr")
    assert produce_error(cluster, "isr") is None
    incremental(cluster, ResourceType.TOPIC, "isr", ("SET", "min.insync.replicas", "4"))
    wait_for(
        lambda: (
            (e := produce_error(cluster, "isr")) is not None
            and e.code() == KafkaError.NOT_ENOUGH_REPLICAS
        ),
        10,
        "acks=all refused with NOT_ENOUGH_REPLICAS",
        cluster.logs,
    )
    incremental(cluster, ResourceType.TOPIC, "isr", ("DELETE", "min.insync.replicas", None))
    wait_for(lambda: produce_error(cluster, "isr") is None, 10, "acks=all written again")

    # The cluster default reaches every broker: a topic without an override follows it.
    cluster_default(cluster, "SET", "min.insync.replicas", "4")
    wait_for(
        lambda: (
            (e := produce_error(cluster, "isr")) is not None
            and e.code() == KafkaError.NOT_ENOUGH_REPLICAS
        ),
        10,
        "the cluster default applies",
        cluster.logs,
    )
    for b in BROKERS:
        got = described(cluster, ResourceType.BROKER, str(b), min_insync_replicas="4")
        entry = got["min.insync.replicas"]
        assert (entry.value, entry.source) == ("4", 3), b  # DYNAMIC_DEFAULT_BROKER_CONFIG
    cluster_default(cluster, "DELETE", "min.insync.replicas")
    wait_for(lambda: produce_error(cluster, "isr") is None, 10, "default removed")


def test_max_message_bytes_change_applies_at_once(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ResourceType

    create_topic(cluster, "big", rf=1)
    assert produce_error(cluster, "big", 2000) is None
    incremental(cluster, ResourceType.TOPIC, "big", ("SET", "max.message.bytes", "1000"))
    wait_for(
        lambda: (
            (e := produce_error(cluster, "big", 2000)) is not None
            and e.code() == KafkaError.MSG_SIZE_TOO_LARGE
        ),
        10,
        "a 2000-byte batch refused",
        cluster.logs,
    )
    assert produce_error(cluster, "big", 100) is None


def test_broker_configs_per_broker_default_and_refusals(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigSource, ResourceType

    B = ResourceType.BROKER
    cluster_default(cluster, "SET", "log.retention.ms", "7200000")
    incremental(cluster, B, "5", ("SET", "log.retention.ms", "3600000"))

    def everywhere() -> bool:
        values = {b: describe(cluster, B, str(b))["log.retention.ms"] for b in BROKERS}
        return values[4].value == values[6].value == "7200000" and values[5].value == "3600000"

    wait_for(everywhere, 10, "broker configs on every broker", cluster.logs)
    entry = describe(cluster, B, "5")["log.retention.ms"]
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    default = describe_default(cluster)
    assert set(default) == {"log.retention.ms"}
    entry = default["log.retention.ms"]
    assert (entry.value, entry.config_source) == ("7200000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.ms", "7200000", 3)
    ]
    assert entry.documentation and entry.config_type == 5  # LONG
    # A topic without an override takes the broker's value.
    create_topic(cluster, "inherit", rf=1)

    def inherited() -> str | None:
        from confluent_kafka import KafkaException

        try:
            return topic_value(cluster, "inherit", "retention.ms")
        except KafkaException:  # the answering broker has not seen the topic yet
            return None

    assert wait_for(inherited, 10, "inherit described") in ("7200000", "3600000")
    # Secrets are never shown; static configs are read-only.
    secret = describe(cluster, B, "4")["ssl.keystore.password"]
    assert secret.is_sensitive and secret.value is None
    assert describe(cluster, B, "4")["log.dirs"].is_read_only
    err = refusal(lambda: incremental(cluster, B, "4", ("SET", "log.dirs", "/tmp/x")))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(log.dirs)" in err.str()
    err = refusal(lambda: incremental(cluster, B, "6", ("SET", "log.cleaner.threads", "9")))
    assert err.code() == KafkaError.INVALID_REQUEST and "thread count" in err.str()
    cluster_default(cluster, "DELETE", "log.retention.ms")
    incremental(cluster, B, "5", ("DELETE", "log.retention.ms", None))


def test_kraft_configs_tool(cluster: ProcCluster) -> None:
    from tests.harness.cli import kraft, ok, one_line_error

    create_topic(cluster, "tool", rf=1)
    base = ("configs", "--bootstrap-server", cluster.bootstrap)
    topic = (*base, "--entity-type", "topics", "--entity-name", "tool")
    out = ok(
        kraft(
            *topic, "--alter", "--add-config", "retention.ms=5000,cleanup.policy=[delete,compact]"
        )
    )
    assert out == "Completed updating config for topic tool.\n"

    def dynamic() -> str | None:
        out = ok(kraft(*topic, "--describe"))
        return out if "retention.ms" in out else None

    out = wait_for(dynamic, 10, "the topic's dynamic configs", cluster.logs)
    assert out.splitlines() == [
        "Dynamic configs for topic tool are:",
        "  cleanup.policy=delete,compact sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=delete,compact, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000}",
    ]
    every = ok(kraft(*topic, "--describe", "--all")).splitlines()
    assert every[0] == "All configs for topic tool are:"
    assert (
        "  segment.bytes=1073741824 sensitive=false "
        "synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}" in every
    )
    one_line_error(
        kraft(*topic, "--alter", "--delete-config", "segment.ms"), "Invalid config(s): segment.ms"
    )
    one_line_error(
        kraft(*topic, "--alter", "--add-config", "min.insync.replicas=0"),
        "Value must be at least 1",
    )

    brokers = (*base, "--entity-type", "brokers")
    out = ok(
        kraft(
            *brokers, "--entity-default", "--alter", "--add-config", "log.cleaner.backoff.ms=2000"
        )
    )
    assert out == "Completed updating default config for brokers in the cluster.\n"
    out = ok(
        kraft(
            *brokers, "--entity-name", "4", "--alter", "--add-config", "log.cleaner.backoff.ms=3000"
        )
    )
    assert out == "Completed updating config for broker 4.\n"

    def default_everywhere() -> str | None:
        out = ok(kraft(*brokers, "--describe"))
        return out if out.count("log.cleaner.backoff.ms=2000") == 3 else None

    out = wait_for(default_everywhere, 10, "broker configs described", cluster.logs).splitlines()
    assert out[0] == "Dynamic configs for broker 4 are:"
    assert out[1] == (
        "  log.cleaner.backoff.ms=3000 sensitive=false synonyms={"
        "DYNAMIC_BROKER_CONFIG:log.cleaner.backoff.ms=3000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=2000, "
        "DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}"
    )
    assert out[-2:] == [
        "Default configs for brokers in the cluster are:",
        "  log.cleaner.backoff.ms=2000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=2000}",
    ]
    every = ok(kraft(*brokers, "--entity-name", "5", "--describe", "--all"))
    assert (
        "  ssl.keystore.password=null sensitive=true "
        "synonyms={STATIC_BROKER_CONFIG:ssl.keystore.password=null}" in every
    )
    one_line_error(
        kraft(*brokers, "--entity-name", "5", "--alter", "--add-config", "log.dirs=/x"),
        "Cannot update these configs dynamically: Set(log.dirs)",
    )
    ok(kraft(*brokers, "--entity-default", "--alter", "--delete-config", "log.cleaner.backoff.ms"))
    ok(
        kraft(
            *brokers, "--entity-name", "4", "--alter", "--delete-config", "log.cleaner.backoff.ms"
        )
    )


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--describe", "--entity-type", "topics", "--entity-default"], "brokers only"),
        (["--describe", "--entity-type", "brokers", "--entity-name", "x"], "integer broker id"),
        (["--describe", "--entity-type", "topics", "--entity-name", "a b"], "illegal topic name"),
        (["--alter", "--entity-type", "topics", "--entity-name", "t"], "--add-config or"),
        (["--alter", "--entity-type", "brokers", "--entity-name", "1", "--entity-default",
          "--add-config", "a=1"], "exactly one"),
        (["--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a"],
         "expected key=value"),
        (["--describe", "--entity-type", "topics", "--add-config", "a=1"], "go with --alter"),
    ],
)  # fmt: skip
def test_kraft_configs_usage_errors(argv: list[str], fragment: str) -> None:
    from tests.harness.cli import kraft, one_line_error

    one_line_error(kraft("configs", *argv, "--bootstrap-server", "127.0.0.1:1"), fragment)


def test_add_config_lists_in_brackets() -> None:
    from kraft.tools.entity_configs import parse_add_config

    assert parse_add_config("a=1, b=[x,y] ,c=") == {"a": "1", "b": "x,y", "c": ""}


def test_a_broker_resource_names_the_broker_asked(cluster: ProcCluster) -> None:
    """A BROKER resource sent to another broker, or not a number, is refused with
    INVALID_REQUEST and the wording of Kafka's describe and alter paths."""
    me = BROKERS[0]
    out = []
    for name in (str(BROKERS[1]), "x"):
        described = raw_call(cluster, 32, 4, {
            "resources": [{"resource_type": 4, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False,
        }).results[0]  # fmt: skip
        altered = raw_call(cluster, 44, 1, {
            "resources": [{"resource_type": 4, "resource_name": name, "configs": [
                {"name": "log.retention.ms", "config_operation": 0, "value": "1000"}]}],
            "validate_only": True,
        }).responses[0]  # fmt: skip
        out.append((described.error_code, described.error_message))
        out.append((altered.error_code, altered.error_message))
    bad = 42  # INVALID_REQUEST
    assert out == [
        (bad, f"Unexpected broker id, expected {me} or empty string, but received {BROKERS[1]}"),
        (bad, f"Unexpected broker id, expected {me}, but received {BROKERS[1]}"),
        (bad, "Broker id must be an integer, but it is: x"),
        (bad, "Node id must be an integer, but it is: x"),
    ]
