"""The options of Spark's Kafka source, parsed and checked on the driver.

Names, defaults and error wording follow Spark's `KafkaSourceProvider`: exactly one of
`assign`, `subscribe`, `subscribePattern`; `kafka.bootstrap.servers`; starting and
ending positions as "earliest"/"latest", per-partition JSON, a global timestamp
(`startingTimestamp`) or per-partition timestamps (`startingOffsetsByTimestamp`), where
a timestamp wins over an offset. Options are case-insensitive, as in Spark.

Pure: no Spark, no sockets, so every rule has a plain unit test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spark_jobs.security import ClientSecurity, SecurityOptionError, parse_security

TP = tuple[str, int]

EARLIEST = -2  # Kafka's ListOffsets sentinels, as Spark's JSON offsets use them
LATEST = -1


class SourceOptionError(ValueError):
    """An option Spark's Kafka source would refuse; the message says which and why."""


@dataclass(frozen=True)
class Subscription:
    kind: Literal["assign", "subscribe", "subscribePattern"]
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern (a Java regex, matched against the whole name)
    partitions: tuple[TP, ...] = ()  # assign


@dataclass(frozen=True)
class Position:
    """Where a range starts or ends.

    kind "earliest"/"latest": for every partition. "offsets": `offsets` per partition
    (-2 earliest, -1 latest). "timestamp": `timestamp` for every partition.
    "timestamps": `timestamps` per partition.
    """

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: dict[TP, int] = field(default_factory=dict)
    timestamp: int = -1
    timestamps: dict[TP, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: Position
    ending: Position
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    # "error" (Spark's default) or "latest": a starting timestamp past every record
    starting_timestamp_strategy: str = "error"
    request_timeout_ms: int = 30_000  # kafka.request.timeout.ms
    api_timeout_ms: int = 60_000  # kafka.default.api.timeout.ms: all retries of one call
    max_partition_fetch_bytes: int = 1_048_576  # kafka.max.partition.fetch.bytes
    read_committed: bool = False  # kafka.isolation.level
    client_id: str = "kraft-spark"
    # kafka.security.protocol, kafka.sasl.*, kafka.ssl.* (spark_jobs/security.py)
    security: ClientSecurity = field(default_factory=ClientSecurity)

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        return parse_bootstrap(self.bootstrap_servers)


# Consumer settings the source owns itself; Spark refuses them with these words.
_UNSUPPORTED_KAFKA = {
    "group.id": None,  # allowed by Spark 3+, ignored here: no group is joined
    "auto.offset.reset": "Use startingOffsets or endingOffsets instead",
    "key.deserializer": "keys are always read as byte arrays",
    "value.deserializer": "values are always read as byte arrays",
    "enable.auto.commit": "the source does not commit any offsets",
    "interceptor.classes": "interceptors could modify the records",
}


def parse_options(raw: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    opts = {k.lower(): v for k, v in raw.items()}
    for key, why in _UNSUPPORTED_KAFKA.items():
        if why and f"kafka.{key}" in opts:
            raise SourceOptionError(f"Kafka option '{key}' is not supported as {why}.")
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise SourceOptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka consumer"
        )
    parse_bootstrap(servers)
    subscription = _subscription(opts)
    starting = _position(opts, "starting", default="latest" if streaming else "earliest")
    ending = _position(opts, "ending", default="latest")
    if not streaming:
        if starting.kind == "latest" or LATEST in starting.offsets.values():
            raise SourceOptionError("starting offset can't be latest for batch queries on Kafka")
        if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
            raise SourceOptionError("ending offset can't be earliest for batch queries on Kafka")
    elif any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise SourceOptionError("Ending offset not valid in streaming queries")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise SourceOptionError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', not {strategy!r}"
        )
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=subscription,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition"),
        include_headers=_bool(opts, "includeheaders", False),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
        starting_timestamp_strategy=strategy,
        request_timeout_ms=_positive(opts, "kafka.request.timeout.ms") or 30_000,
        api_timeout_ms=_positive(opts, "kafka.default.api.timeout.ms") or 60_000,
        max_partition_fetch_bytes=_positive(opts, "kafka.max.partition.fetch.bytes") or 1_048_576,
        read_committed=_isolation(opts),
        client_id=opts.get("kafka.client.id", "kraft-spark"),
        security=_security(opts),
    )


def _security(opts: dict[str, str]) -> ClientSecurity:
    try:
        return parse_security(opts)
    except SecurityOptionError as e:
        raise SourceOptionError(str(e)) from None


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SourceOptionError(f"kafka.bootstrap.servers: {item.strip()!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


def _subscription(opts: dict[str, str]) -> Subscription:
    given = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if len(given) != 1:
        raise SourceOptionError(
            "One of the following options must be specified for Kafka source: "
            "subscribe, subscribePattern, assign. See the docs for more details."
            if not given
            else f"Only one of the following options may be specified: {', '.join(given)}"
        )
    kind = given[0]
    value = opts[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SourceOptionError(f"No topics to subscribe to as specified value is {value!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not value.strip():
            raise SourceOptionError(
                f"Pattern to subscribe is empty as specified value is {value!r}"
            )
        try:
            re.compile(value)
        except re.error as e:
            raise SourceOptionError(f"subscribePattern {value!r} is not a valid regex: {e}") from e
        return Subscription("subscribePattern", pattern=value.strip())
    doc = _json(value, "assign")
    parts: list[TP] = []
    if not isinstance(doc, dict) or not doc:
        raise SourceOptionError(_ASSIGN_SHAPE.format(value))
    for topic, ps in doc.items():
        if not isinstance(ps, list) or not all(_is_int(p) and p >= 0 for p in ps):
            raise SourceOptionError(_ASSIGN_SHAPE.format(value))
        parts.extend((topic, p) for p in ps)
    return Subscription("assign", partitions=tuple(sorted(set(parts))))


_ASSIGN_SHAPE = 'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {}'


def _position(opts: dict[str, str], which: str, default: str) -> Position:
    # Spark's precedence: a global timestamp, then per-partition timestamps, then offsets.
    if f"{which}timestamp" in opts:
        ts = opts[f"{which}timestamp"].strip()
        if not ts.lstrip("-").isdigit():
            raise SourceOptionError(f"{which}Timestamp must be a number of ms, got {ts!r}")
        return Position("timestamp", timestamp=int(ts))
    if f"{which}offsetsbytimestamp" in opts:
        return Position(
            "timestamps",
            timestamps=_partition_map(opts[f"{which}offsetsbytimestamp"], "ByTimestamp"),
        )
    value = opts.get(f"{which}offsets", default).strip()
    if value.lower() in ("earliest", "latest"):
        return Position(value.lower())  # type: ignore[arg-type]
    return Position("offsets", offsets=_partition_map(value, ""))


def _partition_map(value: str, what: str) -> dict[TP, int]:
    doc = _json(value, f"offsets{what}")
    shape = f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {value}'
    if not isinstance(doc, dict):
        raise SourceOptionError(shape)
    out: dict[TP, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise SourceOptionError(shape)
        for p, n in parts.items():
            if not str(p).isdigit() or not _is_int(n):
                raise SourceOptionError(shape)
            out[(topic, int(p))] = n
    return out


def _json(value: str, what: str) -> object:
    try:
        return json.loads(value)
    except ValueError as e:
        raise SourceOptionError(f"{what}: {value!r} is not valid JSON ({e})") from e


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    v = str(opts[key]).strip().lower()
    if v not in ("true", "false"):
        raise SourceOptionError(f"{key} must be true or false, got {opts[key]!r}")
    return v == "true"


def _positive(opts: dict[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    v = str(opts[key]).strip()
    if not v.isdigit() or int(v) <= 0:
        raise SourceOptionError(f"{key} must be a positive integer, got {opts[key]!r}")
    return int(v)


def _isolation(opts: dict[str, str]) -> bool:
    level = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise SourceOptionError(
            f"kafka.isolation.level must be read_uncommitted or read_committed, got {level!r}"
        )
    return level == "read_committed"
