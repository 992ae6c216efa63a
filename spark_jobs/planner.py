"""Driver-side planning: which partitions, which offsets, how many Spark partitions.

`resolve_partitions` turns a subscription into topic-partitions, `resolve_offsets`
turns a starting or ending `Position` into offsets (ListOffsets for earliest, latest
and timestamps), and `split_ranges` is Spark's `KafkaOffsetRangeCalculator`: one range
per topic-partition, or, with `minPartitions` above that count, ranges cut in
proportion to their size, so the pieces cover each range exactly, without overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_jobs.kafka_client import KafkaClient, java_full_match
from spark_jobs.options import (
    EARLIEST,
    LATEST,
    TP,
    Position,
    SourceOptionError,
    SourceOptions,
    Subscription,
)


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int  # inclusive
    until_offset: int  # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def client_for(o: SourceOptions) -> KafkaClient:
    """The driver's client for planning (and for a stream's offsets), from the options."""
    return KafkaClient(o.bootstrap, o.client_id, o.request_timeout_ms, o.api_timeout_ms, o.security)


def resolve_partitions(client: KafkaClient, sub: Subscription) -> list[TP]:
    if sub.kind == "assign":
        meta = client.metadata({t for t, _ in sub.partitions})
        missing = [tp for tp in sub.partitions if tp not in meta.partitions]
        if missing:
            raise SourceOptionError(
                "assign: partitions not in the cluster: "
                + ", ".join(f"{t}-{p}" for t, p in missing)
            )
        return list(sub.partitions)
    if sub.kind == "subscribe":
        meta = client.metadata(sub.topics)
        wanted = set(sub.topics)
    else:
        # A pattern never matches internal topics (the consumer's exclude.internal.topics).
        meta = client.metadata(None)
        wanted = {
            t
            for t in meta.topics()
            if t not in meta.internal_topics and java_full_match(sub.pattern, t)
        }
    return sorted(tp for tp in meta.partitions if tp[0] in wanted)


def resolve_offsets(
    client: KafkaClient,
    tps: list[TP],
    pos: Position,
    *,
    starting: bool,
    read_committed: bool = False,
    timestamp_strategy: str = "error",
) -> dict[TP, int]:
    """Offsets for `pos` on every partition of `tps` (what the range starts or ends at)."""
    which = "startingOffsets" if starting else "endingOffsets"
    if pos.kind in ("earliest", "latest"):
        sentinel = EARLIEST if pos.kind == "earliest" else LATEST
        return client.list_offsets(dict.fromkeys(tps, sentinel), read_committed)
    if pos.kind == "offsets":
        if set(pos.offsets) != set(tps):
            raise SourceOptionError(
                f"If {which} contains specific offsets, you must specify all "
                f"TopicPartitions.\nUse -1 for latest, -2 for earliest.\n"
                f"Specified: {_names(pos.offsets)} Assigned: {_names(tps)}"
            )
        out = dict(pos.offsets)
        sentinels = {tp: n for tp, n in out.items() if n in (EARLIEST, LATEST)}
        bad = {tp: n for tp, n in out.items() if n < EARLIEST}
        if bad:
            raise SourceOptionError(f"{which}: offsets must be >= -2, got {_names(bad)}")
        if sentinels:
            out.update(client.list_offsets(sentinels, read_committed))
        return out
    if pos.kind == "timestamp":
        stamps = dict.fromkeys(tps, pos.timestamp)
    else:
        if set(pos.timestamps) != set(tps):
            raise SourceOptionError(
                f"If {which}ByTimestamp contains specific timestamps, you must specify "
                f"all TopicPartitions.\nSpecified: {_names(pos.timestamps)} "
                f"Assigned: {_names(tps)}"
            )
        stamps = dict(pos.timestamps)
    if any(ts < 0 for ts in stamps.values()):
        raise SourceOptionError(f"{which}ByTimestamp: timestamps must be >= 0")
    found = client.list_offsets(stamps, read_committed)
    missing = [tp for tp, off in found.items() if off < 0]
    if missing:
        if starting and timestamp_strategy == "error":
            raise SourceOptionError(
                "No offset matched the starting timestamp for "
                f"{_names(missing)}: every record there is older. Set "
                "startingOffsetsByTimestampStrategy to 'latest' to start at the end instead."
            )
        # Kafka's rule for an ending timestamp past every record: read to the latest.
        found.update(client.list_offsets(dict.fromkeys(missing, LATEST), read_committed))
    return found


def starting_offsets(client: KafkaClient, o: SourceOptions) -> tuple[list[TP], dict[TP, int]]:
    """The subscription's partitions and where reading them starts (batch and stream)."""
    tps = resolve_partitions(client, o.subscription)
    start = resolve_offsets(
        client,
        tps,
        o.starting,
        starting=True,
        read_committed=o.read_committed,
        timestamp_strategy=o.starting_timestamp_strategy,
    )
    return tps, start


def offset_ranges(tps: list[TP], start: dict[TP, int], end: dict[TP, int]) -> list[OffsetRange]:
    ranges = []
    for tp in tps:
        if end[tp] < start[tp]:
            raise SourceOptionError(
                f"Beginning offset {start[tp]} is after the ending offset {end[tp]} for "
                f"topic {tp[0]} partition {tp[1]}. You either provided an invalid "
                "fromOffset, or the Kafka topic has been damaged"
            )
        ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp]))
    return ranges


def split_ranges(
    ranges: list[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator.getRanges."""
    if max_records_per_partition:
        ranges = [
            piece
            for r in ranges
            for piece in _divide(r, max(-(-r.size // max_records_per_partition), 1))
        ]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    nonempty = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in nonempty)
    if total == 0:
        return ranges
    ideal = total / min_partitions
    pieces = [
        piece for r in nonempty for piece in _divide(r, max(_round_half_up(r.size / ideal), 1))
    ]
    return [p for p in pieces if p.size > 0]  # more parts than offsets leaves empty pieces


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    # Integer cut points: piece i is [start + size*i//parts, start + size*(i+1)//parts).
    cuts = [r.from_offset + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(cuts, cuts[1:], strict=False)]


def _round_half_up(x: float) -> int:
    return int(x + 0.5)  # Scala's math.round on positive doubles


def _names(tps: object) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"  # type: ignore[attr-defined]
