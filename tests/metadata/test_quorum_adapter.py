"""The Quorum adapter in-process (three pysyncobj voters on one event loop) for what the
HTTP API cannot reach: retries with the same (writer, seq) apply once, stale epochs are
refused, and the state survives compaction and a lone restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraft.quorum import Quorum
from kraft.state_machine import AppendStatus
from kraft.tools.launcher import free_ports
from metadata_log.records import ControllerEpochRecord, NoOpRecord, encode_batch
from tests.harness.quorum_wait import PASSWORD, eventually


async def start_quorums(root: Path) -> list[Quorum]:
    ports = free_ports(3)
    voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
    quorums = [Quorum(i, voters, root / f"q{i}", PASSWORD) for i in voters]
    for q in quorums:
        await q.start()
    return quorums


async def elected(quorums: list[Quorum]) -> Quorum:
    async def leader() -> Quorum | None:
        leaders = [q for q in quorums if q.is_leader]
        if len(leaders) == 1 and all(q.leader_id == leaders[0].node_id for q in quorums):
            return leaders[0]
        return None

    return await eventually(leader, 20, "a Raft leader")


def test_quorum_retry_applies_once_and_stale_epoch_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        quorums = await start_quorums(tmp_path)
        try:
            leader = await elected(quorums)
            follower = next(q for q in quorums if q is not leader)
            term = leader.term
            barrier = await leader.append(term, [ControllerEpochRecord(term, leader.node_id)])
            assert barrier.status == AppendStatus.OK

            # A retry (same writer and seq), here through a follower, is applied once.
            batch = encode_batch([NoOpRecord(), NoOpRecord()])
            first = await leader.append_raw(term, "client:1", 7, batch)
            again = await follower.append_raw(term, "client:1", 7, batch)
            both = await asyncio.gather(
                leader.append_raw(term, "client:1", 7, batch),
                follower.append_raw(term, "client:1", 7, batch),
            )
            assert first.status == AppendStatus.OK
            assert again == first and all(r == first for r in both)
            end = first.last_offset + 1
            for q in quorums:
                assert await q.wait_for_offset(end - 1, 5)
                assert q.next_offset == end

            # A stale controller epoch is refused, and so is an epoch with no barrier.
            stale = await leader.append(term - 1, [NoOpRecord()])
            assert stale.status == AppendStatus.STALE_CONTROLLER_EPOCH
            old_barrier = await leader.append(term - 1, [ControllerEpochRecord(term - 1, 9)])
            assert old_barrier.status == AppendStatus.STALE_CONTROLLER_EPOCH
            no_barrier = await leader.append(term + 1, [NoOpRecord()])
            assert no_barrier.status == AppendStatus.STALE_CONTROLLER_EPOCH
            assert all(q.next_offset == end for q in quorums)

            # wait_for_offset long-polls: it wakes on the apply, and times out otherwise.
            waiter = asyncio.create_task(follower.wait_for_offset(end, 10))
            assert (await leader.append(term, [NoOpRecord()])).status == AppendStatus.OK
            assert await asyncio.wait_for(waiter, 5)
            assert not await follower.wait_for_offset(end + 100, 0.2)
            assert [r for _, r in follower.records_from(0, 100)] == [
                r for _, r in leader.records_from(0, 100)
            ]
        finally:
            for q in quorums:
                await q.stop()

    asyncio.run(main())


def test_quorum_state_survives_compaction_and_a_lone_restart(tmp_path: Path) -> None:
    """pysyncobj snapshots only the consumer attributes set after its __init__: check the
    state machine is in the dump (the journal before it is gone after compaction)."""

    async def main() -> None:
        quorums = await start_quorums(tmp_path)
        try:
            leader = await elected(quorums)
            term = leader.term
            await leader.append(term, [ControllerEpochRecord(term, leader.node_id)])
            for _ in range(50):
                assert (await leader.append(term, [NoOpRecord()])).status == AppendStatus.OK
            end = leader.next_offset
            q = next(q for q in quorums if q is not leader)
            assert await q.wait_for_offset(end - 1, 5)
            # pysyncobj's own compaction switch (it only sets a flag: safe from the loop).
            raft = q._syncobj
            assert raft is not None
            size_before = raft._getRaftLogSize()
            raft.forceLogCompaction()
            await eventually(
                lambda: asyncio.sleep(0, raft._getRaftLogSize() < size_before), 10, "compaction"
            )
            expected = q.records_from(0, 1000)
            image = q.image()
        finally:
            for x in quorums:
                await x.stop()
        # Alone (no quorum, no leader), it restores the dump plus the committed journal.
        alone = Quorum(q.node_id, q.voters, q.data_dir, PASSWORD)
        await alone.start()
        try:
            await eventually(
                lambda: asyncio.sleep(0, alone.next_offset == end), 10, "the restored state"
            )
            assert alone.records_from(0, 1000) == expected
            assert alone.image() == image
        finally:
            await alone.stop()

    asyncio.run(main())
