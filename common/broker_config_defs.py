"""The broker configs Kafka lets an operator change without a restart (DynamicBrokerConfig:
the log defaults of DynamicLogConfig, the log cleaner's, the thread pools', the socket
server's), per broker (`--entity-name 1`) or for the whole cluster (`--entity-default`),
with Kafka's types, defaults and validation.

Kafka's rules, as its broker checks an AlterConfigs/IncrementalAlterConfigs on a BROKER
resource (ConfigAdminManager.preprocess, DynamicBrokerConfig.validateConfigs): a config
Kafka knows but cannot change live is refused ("Cannot update these configs dynamically:
Set(log.dirs)"), a bad value is refused with ConfigDef's message, a thread count may at
most double or halve; all as INVALID_REQUEST (KAFKA-13609 keeps that code). Names Kafka
does not know are accepted and stored (custom configs), as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from common.config_def import ConfigKey, ConfigType, InvalidConfigValue
from common.topic_config_defs import COMPRESSION_TYPES, TOPIC_CONFIG_KEYS

T = ConfigType

DYNAMIC_BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        # DynamicLogConfig: the broker-level defaults of topic configs.
        ConfigKey(
            "log.segment.bytes",
            T.INT,
            "1073741824",
            "size at which a segment is rolled",
            at_least=14,
        ),
        ConfigKey(
            "log.roll.ms",
            T.LONG,
            None,
            "time after which a segment is rolled (over log.roll.hours)",
        ),
        ConfigKey("log.roll.jitter.ms", T.LONG, None, "jitter subtracted from the roll time"),
        ConfigKey(
            "log.index.size.max.bytes",
            T.INT,
            "10485760",
            "size of a segment's offset index",
            at_least=4,
        ),
        ConfigKey(
            "log.flush.interval.messages",
            T.LONG,
            "9223372036854775807",
            "fsync after this many messages",
            at_least=1,
        ),
        ConfigKey("log.flush.interval.ms", T.LONG, None, "fsync after this much time"),
        ConfigKey("log.retention.bytes", T.LONG, "-1", "largest a partition grows (-1: no limit)"),
        ConfigKey(
            "log.retention.ms",
            T.LONG,
            None,
            "longest a segment is kept (over minutes and hours; -1: forever)",
        ),
        ConfigKey(
            "log.index.interval.bytes",
            T.INT,
            "4096",
            "bytes between offset index entries",
            at_least=0,
        ),
        ConfigKey(
            "log.cleaner.delete.retention.ms",
            T.LONG,
            "86400000",
            "how long tombstones stay",
            at_least=0,
        ),
        ConfigKey(
            "log.cleaner.min.compaction.lag.ms",
            T.LONG,
            "0",
            "shortest a record stays uncompacted",
            at_least=0,
        ),
        ConfigKey(
            "log.cleaner.max.compaction.lag.ms",
            T.LONG,
            "9223372036854775807",
            "longest a record stays uncompacted",
            at_least=1,
        ),
        ConfigKey(
            "log.segment.delete.delay.ms",
            T.LONG,
            "60000",
            "wait before deleted segment files go",
            at_least=0,
        ),
        ConfigKey(
            "log.cleaner.min.cleanable.ratio",
            T.DOUBLE,
            "0.5",
            "dirty share before a log is compacted",
            at_least=0,
            at_most=1,
        ),
        ConfigKey(
            "log.cleanup.policy",
            T.LIST,
            "delete",
            "default cleanup policy of topics",
            valid=("compact", "delete"),
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            T.BOOLEAN,
            "false",
            "let an out-of-sync replica lead as a last resort",
        ),
        ConfigKey(
            "min.insync.replicas",
            T.INT,
            "1",
            "replicas that must have a write for acks=all",
            at_least=1,
        ),
        ConfigKey(
            "compression.type",
            T.STRING,
            "producer",
            "how batches are stored",
            valid=COMPRESSION_TYPES,
        ),
        ConfigKey("log.preallocate", T.BOOLEAN, "false", "preallocate segment files"),
        ConfigKey(
            "log.message.timestamp.type",
            T.STRING,
            "CreateTime",
            "CreateTime or LogAppendTime",
            valid=("CreateTime", "LogAppendTime"),
        ),
        ConfigKey(
            "message.max.bytes",
            T.INT,
            "1048588",
            "largest record batch a topic accepts by default",
            at_least=0,
        ),
        # LogCleaner.
        ConfigKey("log.cleaner.threads", T.INT, "1", "threads compacting logs", at_least=0),
        ConfigKey(
            "log.cleaner.dedupe.buffer.size",
            T.LONG,
            "134217728",
            "memory for the cleaner's offset map",
        ),
        ConfigKey(
            "log.cleaner.io.buffer.size", T.INT, "524288", "the cleaner's I/O buffers", at_least=0
        ),
        ConfigKey(
            "log.cleaner.io.buffer.load.factor", T.DOUBLE, "0.9", "fill factor of the offset map"
        ),
        ConfigKey(
            "log.cleaner.io.max.bytes.per.second",
            T.DOUBLE,
            "1.7976931348623157E308",
            "the cleaner's I/O throttle",
        ),
        ConfigKey(
            "log.cleaner.backoff.ms",
            T.LONG,
            "15000",
            "pause when there is nothing to clean",
            at_least=0,
        ),
        # DynamicThreadPool and the socket server's cluster-level settings.
        ConfigKey("num.io.threads", T.INT, "8", "request handler threads", at_least=1),
        ConfigKey("num.replica.fetchers", T.INT, "1", "fetcher threads per source broker"),
        ConfigKey(
            "num.recovery.threads.per.data.dir",
            T.INT,
            "2",
            "threads recovering logs at start-up",
            at_least=1,
        ),
        ConfigKey("background.threads", T.INT, "10", "threads for background work", at_least=1),
        ConfigKey("num.network.threads", T.INT, "3", "threads serving the network", at_least=1),
        ConfigKey(
            "max.connections", T.INT, "2147483647", "connections the broker accepts", at_least=0
        ),
        ConfigKey(
            "max.connections.per.ip",
            T.INT,
            "2147483647",
            "connections per client address",
            at_least=0,
        ),
        ConfigKey(
            "max.connection.creation.rate",
            T.INT,
            "2147483647",
            "new connections per second",
            at_least=0,
        ),
        # DynamicReplicationConfig: the byte rate of the replicas a reassignment adds
        # (the follower side; broker/replication_quota.py).
        ConfigKey(
            "follower.replication.throttled.rate",
            T.LONG,
            "9223372036854775807",
            "bytes/s the replicas being added fetch at, at most",
            at_least=0,
        ),
        # Producer state.
        ConfigKey(
            "producer.id.expiration.ms",
            T.INT,
            "86400000",
            "how long an idle producer id is remembered",
            at_least=1,
        ),
        ConfigKey(
            "transaction.partition.verification.enable",
            T.BOOLEAN,
            "true",
            "verify a transaction's partitions before appending",
        ),
    )
}

THREAD_POOL_CONFIGS = frozenset(
    {
        "num.io.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "num.network.threads",
        "log.cleaner.threads",
    }
)

# Broker configs Kafka knows and never changes live (a sample of KafkaConfig's names
# beyond the ones a broker reads; the broker adds its own static names).
STATIC_BROKER_CONFIGS = frozenset(
    {
        "broker.id", "node.id", "process.roles", "log.dirs", "log.dir", "listeners",
        "advertised.listeners", "controller.listener.names", "controller.quorum.voters",
        "controller.quorum.bootstrap.servers", "inter.broker.listener.name",
        "listener.security.protocol.map", "broker.rack", "log.retention.hours",
        "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours",
        "log.retention.check.interval.ms", "num.partitions", "default.replication.factor",
        "auto.create.topics.enable", "offsets.topic.replication.factor",
        "offsets.topic.num.partitions", "replica.lag.time.max.ms", "zookeeper.connect",
        "log.cleaner.enable", "authorizer.class.name", "super.users",
        "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr", "transaction.state.log.segment.bytes",
        "transaction.max.timeout.ms", "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
    }
)  # fmt: skip


def kafka_set(names: Iterable[str]) -> str:
    """Scala's Set toString, as Kafka's messages print a set of names."""
    return "Set(" + ", ".join(sorted(names)) + ")"


def invalid_dynamic_broker_config(
    props: Mapping[str, str],
    per_broker: bool,
    static_names: Iterable[str] = (),
    current: Mapping[str, str] | None = None,
) -> str | None:
    """Why Kafka refuses these dynamic broker configs (INVALID_REQUEST), or None.
    `static_names`: this broker's own configs that cannot change live; `current`: the
    effective values now, for the thread-count bounds (Kafka's DynamicThreadPool)."""
    static = (STATIC_BROKER_CONFIGS | set(static_names)) - DYNAMIC_BROKER_CONFIG_KEYS.keys()
    fixed = [n for n in props if n in static]
    if fixed:
        return f"Cannot update these configs dynamically: {kafka_set(fixed)}"
    for name, value in props.items():
        key = DYNAMIC_BROKER_CONFIG_KEYS.get(name)
        if key is None:
            continue  # a custom config: Kafka keeps it
        try:
            key.check(value)
        except InvalidConfigValue as exc:
            return str(exc)
        if name in THREAD_POOL_CONFIGS and current is not None:
            why = _thread_count_change(name, value, current.get(name, key.default))
            if why:
                return why
    del per_broker  # every config we change live may also be set cluster-wide
    return None


def _thread_count_change(name: str, value: str, old_raw: str | None) -> str | None:
    new = int(value.strip())
    try:
        old = int(old_raw) if old_raw is not None else None
    except ValueError:
        old = None
    if old is None or new == old:
        return None
    msg = f"Dynamic thread count update validation failed for {name}={value}"
    if new <= 0:
        return f"{msg}, value should be at least 1"
    if new < old // 2:
        return f"{msg}, value should be at least half the current value {old}"
    if new > old * 2:
        return f"{msg}, value should not be greater than double the current value {old}"
    return None


def config_key(resource_type: int, name: str) -> ConfigKey | None:
    """The key of a topic (2) or dynamic broker (4) config, None when Kafka has none."""
    table = TOPIC_CONFIG_KEYS if resource_type == 2 else DYNAMIC_BROKER_CONFIG_KEYS
    return table.get(name)
