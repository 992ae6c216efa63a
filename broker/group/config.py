"""The group coordinator's settings and where a group lives (which partition of
`__consumer_offsets`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupConfig:
    """Kafka's broker properties for groups, with Kafka's defaults."""

    num_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4_096  # offset.metadata.max.bytes
    new_member_join_timeout_ms: int = 300_000  # Kafka's fixed 5 minutes


def _big_endian_units(s: str) -> list[int]:
    b = s.encode("utf-16-be")
    return [(b[i] << 8) | b[i + 1] for i in range(0, len(b), 2)]


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`, so a group
    lands on the same partition number as on a Kafka cluster."""
    h = 0
    for unit in _big_endian_units(group_id):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(2**31) else abs(signed)) % num_partitions
