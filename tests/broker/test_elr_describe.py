"""DescribeTopicPartitions names a partition's eligible leader replicas (KIP-966)."""

from __future__ import annotations

from broker.apis_describe import _partition
from metadata_log.image import PartitionRegistration


def test_describe_topic_partitions_fills_the_elr_and_last_known_elr() -> None:
    reg = PartitionRegistration((1, 2, 3), (), -1, 4, 9, elr=(2, 3), last_known_elr=(1,))
    out = _partition(reg, 0, live={2})
    assert out["eligible_leader_replicas"] == [2, 3] and out["last_known_elr"] == [1]
    assert out["isr_nodes"] == [] and out["leader_id"] == -1
    assert out["offline_replicas"] == [1, 3]
