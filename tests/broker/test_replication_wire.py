"""Two brokers' replica managers wired together over the real Kafka protocol layer
(network + apis) on 127.0.0.1: the follower fetcher replicates over the wire, acks=all
completes, leadership moves, a diverged follower truncates. Metadata comes from records
replayed in memory (no controller); logs are real, under tmp_path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from broker.network import KafkaServer
from broker.server import BrokerServer
from metadata_log.records import PartitionChangeRecord, Record
from tests.harness.replicas import (
    TID,
    TOPIC,
    Metadata,
    batch,
    broker_config,
    checked,
    eventually,
    fp,
    register,
    run,
    topic,
    values_in,
)


@run
async def test_the_runtime_tells_a_follower_wait_from_a_consumer_wait(tmp_path: Path) -> None:
    """A follower's fetch waits for data up to the LEO, a consumer's up to the HW: the
    protocol layer passes the request's replica id to wait_for_data."""
    server = BrokerServer(broker_config(tmp_path))
    server.log_manager.startup()
    md = Metadata()
    await server.replica_manager.on_metadata_update(*md.update(*topic(replicas=(1, 2))))

    async def request(replica_id: int) -> None:
        server.replica_manager.fetch(fp(0), replica_id, 0)
        await server.replica_manager.wait_for_data([fp(0)], 1, 30_000, replica_id)

    follower = asyncio.create_task(request(2))
    consumer = asyncio.create_task(request(-1))
    await asyncio.sleep(0)
    await server.replica_manager.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    await asyncio.wait_for(follower, 5)  # the LEO moved
    assert not consumer.done()  # the HW did not
    consumer.cancel()
    server.log_manager.shutdown()


# -- two brokers over the wire: the follower fetcher ---------------------------------------------


async def _two_brokers(tmp_path: Path) -> tuple[Any, Any, Metadata, Callable[[], Awaitable[None]]]:
    servers = [BrokerServer(broker_config(tmp_path, i)) for i in (1, 2)]
    listeners = []
    for s in servers:
        s.log_manager.startup()
        kafka = KafkaServer(s.apis.handle, "127.0.0.1", 0, max_request_bytes=1 << 24)
        await kafka.start()
        listeners.append(kafka)
    md = Metadata(brokers=())
    md.pending = [register(i, k.port) for i, k in zip((1, 2), listeners, strict=True)]

    async def close() -> None:
        for s, k in zip(servers, listeners, strict=True):
            await k.close()
            await s.fetchers.shutdown()
            s.log_manager.shutdown()

    return servers[0], servers[1], md, close


async def _apply(md: Metadata, *servers: Any, records: list[Record]) -> None:
    update = md.update(*records)
    for s in servers:
        await s.replica_manager.on_metadata_update(*update)


@run
async def test_a_follower_replicates_over_the_wire_and_acks_all_completes(tmp_path: Path) -> None:
    b1, b2, md, close = await _two_brokers(tmp_path)
    try:
        await _apply(md, b1, b2, records=topic(replicas=(1, 2)))
        for i in range(5):
            r = await asyncio.wait_for(
                b1.replica_manager.produce(TOPIC, 0, checked(batch(b"v%d" % i)), -1, 10_000), 10
            )
            assert (r.error_code, r.base_offset) == (0, i)
        f = b2.replica_manager.partition(TOPIC, 0)
        await eventually(lambda: f.core.high_watermark == 5, 10, "the follower's HW")
        assert values_in(f.log.read(0, 1 << 20).read()) == [b"v%d" % i for i in range(5)]
        # leadership moves to broker 2 (epoch 1); broker 1 follows it from there
        await _apply(md, b1, b2, records=[PartitionChangeRecord(TID, 0, (1, 2), 2, 1, 1)])
        r = await asyncio.wait_for(
            b2.replica_manager.produce(TOPIC, 0, checked(batch(b"w")), -1, 10_000), 10
        )
        assert (r.error_code, r.base_offset) == (0, 5)
        old = b1.replica_manager.partition(TOPIC, 0)
        await eventually(lambda: old.log.log_end_offset == 6, 10, "broker 1 to catch up")
        assert old.log.leader_epoch_cache.latest_epoch == 1
    finally:
        await close()


@run
async def test_a_diverged_follower_truncates_to_the_leader(tmp_path: Path) -> None:
    b1, b2, md, close = await _two_brokers(tmp_path)
    try:
        # broker 2 leads alone at epoch 0 and writes a tail nobody else has
        await _apply(md, b1, b2, records=topic(replicas=(2, 1), isr=(2,), leader=2))
        await b1.fetchers.remove_partitions([(TOPIC, 0)])  # broker 1 hears nothing of it
        await b2.replica_manager.produce(TOPIC, 0, checked(batch(b"lost-1", b"lost-2")), 1, 1000)
        # broker 1 becomes leader at epoch 1 (unclean), writes its own data
        await _apply(md, b1, b2, records=[PartitionChangeRecord(TID, 0, (1,), 1, 1, 1)])
        await b1.replica_manager.produce(TOPIC, 0, checked(batch(b"kept")), 1, 1000)
        f = b2.replica_manager.partition(TOPIC, 0)
        await eventually(
            lambda: values_in(f.log.read(0, 1 << 20).read()) == [b"kept"], 10, "truncation"
        )
    finally:
        await close()


@run
async def test_a_new_leader_answers_a_retried_idempotent_batch_with_its_original_offset(
    tmp_path: Path,
) -> None:
    """An idempotent batch written on the old leader and replicated, whose ack the producer
    never saw, is retried on the new leader: the follower built its producer state from
    the replicated batches, so the retry (the last batch, or an older one of the last
    five) is answered with the original offsets and nothing is appended twice."""
    b1, b2, md, close = await _two_brokers(tmp_path)
    try:
        await _apply(md, b1, b2, records=topic(replicas=(1, 2)))
        sent = [batch(b"a%d" % i, b"b%d" % i, pid=7, epoch=0, seq=2 * i) for i in range(3)]
        for i, records in enumerate(sent):
            r = await asyncio.wait_for(
                b1.replica_manager.produce(TOPIC, 0, checked(records), -1, 10_000), 10
            )
            assert (r.error_code, r.base_offset) == (0, 2 * i)
        f = b2.replica_manager.partition(TOPIC, 0)
        await eventually(lambda: f.log.log_end_offset == 6, 10, "broker 2 to replicate")
        await _apply(md, b1, b2, records=[PartitionChangeRecord(TID, 0, (1, 2), 2, 1, 1)])
        for i in (2, 1):  # the last batch, then an older one
            r = await asyncio.wait_for(
                b2.replica_manager.produce(TOPIC, 0, checked(sent[i]), -1, 10_000), 10
            )
            assert (r.error_code, r.base_offset) == (0, 2 * i)
        assert f.log.log_end_offset == 6
        r = await asyncio.wait_for(
            b2.replica_manager.produce(
                TOPIC, 0, checked(batch(b"c", pid=7, epoch=0, seq=6)), -1, 10_000
            ),
            10,
        )
        assert (r.error_code, r.base_offset) == (0, 6)
    finally:
        await close()


@run
async def test_the_follower_fetches_incrementally_and_survives_losing_its_session(
    tmp_path: Path,
) -> None:
    """KIP-227 between brokers: the follower's fetcher holds one privileged session on
    the leader and its fetches move the epoch on; when the leader drops the session
    (evicted), the follower hears FETCH_SESSION_ID_NOT_FOUND, starts a new one, and
    acks=all produces keep completing."""
    b1, b2, md, close = await _two_brokers(tmp_path)
    try:
        await _apply(md, b1, b2, records=topic(replicas=(1, 2), partitions=3))
        cache = b1.replica_manager.fetch_sessions

        async def produce_all(tag: bytes) -> None:
            for p in range(3):
                r = await asyncio.wait_for(
                    b1.replica_manager.produce(TOPIC, p, checked(batch(tag)), -1, 10_000), 10
                )
                assert r.error_code == 0

        await produce_all(b"a")
        fetcher = b2.fetchers._fetchers[1]
        first = fetcher.session.id
        assert first != 0 and len(cache) == 1
        session = cache.get(first)
        assert session is not None and session.privileged and len(session.partitions) == 3
        assert session.epoch > 1  # incremental fetches followed the full one
        cache.remove(first)  # as an eviction would
        await produce_all(b"b")
        await eventually(lambda: fetcher.session.id not in (0, first), 10, "a new session")
        assert len(cache) == 1
        for p in range(3):
            f = b2.replica_manager.partition(TOPIC, p)
            await eventually(lambda f=f: f.core.high_watermark == 2, 10, "the follower's HW")
    finally:
        await close()
