"""Metadata updates that touch many partitions at once run their file work on a thread
pool (broker/replica_changes.py: FILE_WORKERS): every replica must come out the same
as one by one, and a recreated topic's old logs must go before its new ones open."""

from __future__ import annotations

from pathlib import Path

from broker import replica_changes
from broker.replica_manager import ReplicaManager
from metadata_log.records import PartitionChangeRecord, RemoveTopicRecord
from storage.log_manager import LogManager
from tests.harness.replicas import TID, TOPIC, Metadata, batch, broker_config, checked, run, topic

TID2 = "7f1c2b63-4e6c-4e8f-8b66-1b5c3a4d2e21"
N = 3 * replica_changes.PARALLEL_FILE_WORK_FROM  # enough for the parallel path


def manager(tmp_path: Path) -> ReplicaManager:
    cfg = broker_config(tmp_path, 1)
    lm = LogManager(cfg.log_dirs, cfg.log_config, cfg.log_manager_config)
    lm.startup()
    return ReplicaManager(cfg, lm)


@run
async def test_many_partitions_in_one_update(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    # We follow all of them (leader 2), then lead all of them at epoch 1.
    await rm.on_metadata_update(*md.update(*topic(replicas=(2, 1), leader=2, partitions=N)))
    assert len(rm.partitions) == N
    assert not any(h.core.is_leader for h in rm.partitions.values())
    changes = [PartitionChangeRecord(TID, p, (1, 2), 1, 1, 1) for p in range(N)]
    await rm.on_metadata_update(*md.update(*changes))
    for p in range(N):
        h = rm.partition(TOPIC, p)
        assert h is not None and h.core.is_leader and h.core.leader_epoch == 1
        assert h.log.leader_epoch_cache.latest_epoch == 1  # the file step ran for each


@run
async def test_recreated_topic_in_one_snapshot_loses_old_data(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(partitions=N)))
    for p in range(N):
        await rm.produce(TOPIC, p, checked(batch(b"old")), 1, 1000)
    md.update(RemoveTopicRecord(TID))
    md.update(*topic(topic_id=TID2, partitions=N))
    await rm.on_metadata_update(*md.snapshot())  # delete + create of N partitions at once
    for p in range(N):
        h = rm.partition(TOPIC, p)
        assert h is not None and h.core.topic_id == TID2 and h.log.log_end_offset == 0
        assert rm.log_manager.get_log(TOPIC, p) is h.log
