"""Fetch sessions (KIP-227) on the wire: creation, incremental fetches that carry and
answer only what changed, forgotten partitions, closing, Kafka's session error codes,
eviction from a full cache; the cache's eviction ranks; and kafka-python's consumer,
which fetches incrementally, reading through a session."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.fetch_session import (
    CachedPartition,
    FetchSessionCache,
    SessionError,
    next_epoch,
)
from common.errors import Errors
from tests.harness.fake_broker import BrokerThread, wait_until
from tests.harness.raw_protocol import RawClient, batch, fetch, produce

BOTH = [("t", 0, 0, 1 << 20), ("t", 1, 0, 1 << 20)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path)
    b.runtime.add_topic("t", 2)
    yield b
    b.stop()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[RawClient]:
    c = RawClient(broker.host, broker.port)
    yield c
    c.close()


def answered(resp: Any) -> dict[tuple[str | uuid.UUID, int], Any]:
    return {(t.topic, p.partition_index): p for t in resp.responses for p in t.partitions}


def open_session(client: RawClient, parts: list[tuple[str, int, int, int]] = BOTH) -> int:
    resp = client.call(1, 12, fetch(parts, session_id=0, session_epoch=0))
    assert resp.error_code == 0 and resp.session_id != 0
    assert set(answered(resp)) == {(t, p) for t, p, _, _ in parts}  # a full answer
    return int(resp.session_id)


def test_incremental_fetches_answer_only_what_changed(client: RawClient) -> None:
    sid = open_session(client)
    # Nothing changed: an empty request, an empty answer, same session.
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=1))
    assert resp.error_code == 0 and resp.session_id == sid and answered(resp) == {}
    client.call(0, 9, produce("t", 0, batch(3)))
    # The session still fetches t-0 at offset 0: records and a new HW, t-1 left out.
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=2))
    got = answered(resp)
    assert list(got) == [("t", 0)] and got["t", 0].high_watermark == 3
    assert len(got["t", 0].records) > 0
    # The client moves t-0 to offset 3: nothing new to tell about either partition.
    resp = client.call(1, 12, fetch([("t", 0, 3, 1 << 20)], session_id=sid, session_epoch=3))
    assert answered(resp) == {}
    client.call(0, 9, produce("t", 1, batch(2)))
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=4))
    assert list(answered(resp)) == [("t", 1)]


def test_an_incremental_fetch_reads_only_what_changed(tmp_path: Path) -> None:
    """Issue 16: a session of many partitions (a follower's holds thousands) must not
    cost a read of every one of them per fetch, or one acks=all message per partition
    costs O(partitions^2). Only the partitions the request names or that changed since
    (the broker's change feed) are read."""
    b = BrokerThread(tmp_path)
    c = RawClient(b.host, b.port)
    try:
        b.runtime.add_topic("many", 300)
        parts = [("many", i, 0, 1 << 20) for i in range(300)]
        sid = open_session(c, parts)
        calls = b.runtime.fetch_calls
        resp = c.call(1, 12, fetch([], session_id=sid, session_epoch=1))
        assert answered(resp) == {}
        assert b.runtime.fetch_calls - calls < 10
        c.call(0, 9, produce("many", 7, batch(2)))
        calls = b.runtime.fetch_calls
        resp = c.call(1, 12, fetch([("many", 9, 0, 1 << 20)], session_id=sid, session_epoch=2))
        assert list(answered(resp)) == [("many", 7)]  # the news; 9 has none to tell
        assert b.runtime.fetch_calls - calls < 10
    finally:
        c.close()
        b.stop()


def test_forgotten_partitions_leave_the_session(client: RawClient) -> None:
    sid = open_session(client)
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=1, forgotten=[("t", 1)]))
    assert answered(resp) == {}
    client.call(0, 9, produce("t", 1, batch(2)))
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=2))
    assert answered(resp) == {}  # t-1 is no longer fetched
    # ... until an incremental fetch adds it back.
    resp = client.call(1, 12, fetch([("t", 1, 0, 1 << 20)], session_id=sid, session_epoch=3))
    assert list(answered(resp)) == [("t", 1)] and answered(resp)["t", 1].high_watermark == 2


def test_session_errors(client: RawClient) -> None:
    sid = open_session(client)
    # Kafka answers a session error with the top-level code and no partitions.
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=5))
    assert resp.error_code == Errors.INVALID_FETCH_SESSION_EPOCH and resp.responses == ()
    resp = client.call(1, 12, fetch([], session_id=sid ^ 1, session_epoch=1))
    assert resp.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    # The session survives a wrong epoch: the right one still works.
    assert client.call(1, 12, fetch([], session_id=sid, session_epoch=1)).error_code == 0


def test_topic_ids_must_match_the_session(client: RawClient, broker: BrokerThread) -> None:
    sid = open_session(client)  # v12: topics by name
    tid = uuid.UUID(broker.runtime.image().topic_ids["t"])
    body = fetch([], v=13, session_id=sid, session_epoch=1, topic_ids={"t": tid})
    assert client.call(1, 13, body).error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR


def test_session_by_topic_id(client: RawClient, broker: BrokerThread) -> None:
    tid = uuid.UUID(broker.runtime.image().topic_ids["t"])
    resp = client.call(1, 13, fetch(BOTH, v=13, session_epoch=0, topic_ids={"t": tid}))
    sid = resp.session_id
    assert sid != 0
    client.call(0, 9, produce("t", 1, batch(4)))
    resp = client.call(
        1, 13, fetch([], v=13, session_id=sid, session_epoch=1, topic_ids={"t": tid})
    )
    assert [(t.topic_id, p.partition_index) for t in resp.responses for p in t.partitions] == [
        (tid, 1)
    ]


def test_closing_and_replacing_a_session(client: RawClient) -> None:
    sid = open_session(client)
    # (id, -1): the session closes; the fetch is answered in full without one.
    resp = client.call(1, 12, fetch(BOTH, session_id=sid, session_epoch=-1))
    assert resp.session_id == 0 and len(answered(resp)) == 2
    resp = client.call(1, 12, fetch([], session_id=sid, session_epoch=1))
    assert resp.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    # (id, 0): the named session closes and a new one replaces it.
    sid = open_session(client)
    resp = client.call(1, 12, fetch(BOTH, session_id=sid, session_epoch=0))
    assert resp.session_id not in (0, sid)
    assert client.call(1, 12, fetch([], session_id=sid, session_epoch=1)).error_code == 70


def test_full_cache_evicts_only_idle_sessions(client: RawClient, broker: BrokerThread) -> None:
    rt = broker.runtime  # max.incremental.fetch.session.cache.slots = 3 in the fake
    sids = [open_session(client) for _ in range(3)]
    # Full, and every session was used just now: a new client gets no session.
    resp = client.call(1, 12, fetch(BOTH, session_id=0, session_epoch=0))
    assert resp.error_code == 0 and resp.session_id == 0 and len(answered(resp)) == 2
    rt.clock_ms += 60_000
    for sid in sids[1:]:  # sessions 2 and 3 are used again; session 1 idles
        assert client.call(1, 12, fetch([], session_id=sid, session_epoch=1)).error_code == 0
    rt.clock_ms += 61_000  # session 1 idle for 121 s > 120 s: it is evicted
    new = open_session(client)
    assert new not in sids
    resp = client.call(1, 12, fetch([], session_id=sids[0], session_epoch=1))
    assert resp.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    for sid in sids[1:]:
        assert client.call(1, 12, fetch([], session_id=sid, session_epoch=2)).error_code == 0


def parts(n: int) -> dict[tuple[object, int], CachedPartition]:
    return {("t", i): CachedPartition(0, 100) for i in range(n)}


def test_cache_ranks_followers_over_clients() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000, rng=random.Random(1))
    client_small = cache.create(False, True, parts(1), now_ms=0)
    follower = cache.create(True, True, parts(1), now_ms=0)
    assert client_small is not None and follower is not None
    # A client cannot take the slot of a young session of the same size or smaller rank.
    assert cache.create(False, True, parts(1), now_ms=10) is None
    # A follower's new session evicts a client's session at once.
    other = cache.create(True, True, parts(1), now_ms=10)
    assert other is not None and cache.get(client_small.id) is None
    # Two young follower sessions: a client gets nothing, even with more partitions.
    assert cache.create(False, True, parts(50), now_ms=20) is None
    # Kafka ranks (privileged, partitions, id): a client never evicts a follower's
    # session that is in use, however old.
    cache.touch(follower, 1500)
    cache.touch(other, 1500)
    assert cache.create(False, True, parts(50), now_ms=1600) is None


def test_cache_old_small_client_sessions_make_way_for_bigger_ones() -> None:
    cache = FetchSessionCache(max_slots=1, eviction_ms=1000)
    small = cache.create(False, True, parts(1), now_ms=0)
    assert small is not None
    assert cache.create(False, True, parts(50), now_ms=500) is None  # too young
    cache.touch(small, 1400)  # in use: not idle, but older than eviction_ms
    big = cache.create(False, True, parts(50), now_ms=1500)
    assert big is not None and cache.get(small.id) is None
    assert cache.create(False, True, parts(1), now_ms=1600) is None  # ranks lower


def test_incremental_checks_and_epochs() -> None:
    cache = FetchSessionCache(max_slots=4)
    s = cache.create(False, False, parts(2), now_ms=0)
    assert s is not None and s.epoch == 1
    with pytest.raises(SessionError) as e:
        cache.incremental(s.id, 2, False)
    assert e.value.error_code == Errors.INVALID_FETCH_SESSION_EPOCH
    assert cache.incremental(s.id, 1, False) is s and s.epoch == 2
    assert next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


def test_kafka_python_consumes_through_an_incremental_session(broker: BrokerThread) -> None:
    from kafka import KafkaConsumer, TopicPartition

    client = RawClient(broker.host, broker.port)
    try:
        for i in range(5):
            client.call(0, 9, produce("t", i % 2, batch(3, tag=f"m{i}-")))
    finally:
        client.close()
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
    )
    try:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        consumer.seek_to_beginning()
        got: list[bytes] = []

        def poll() -> bool:
            for records in consumer.poll(timeout_ms=100).values():
                got.extend(r.value for r in records)
            return len(got) >= 15

        wait_until(poll, what="kafka-python to read 15 records")
        values = sorted(v.rstrip(b".") for v in got)
        assert values == sorted(f"m{i}-{j}".encode() for i in range(5) for j in range(3))
        # It read through a session that moved past its first, full fetch.
        cache = broker.runtime.fetch_sessions

        def incremental() -> bool:
            consumer.poll(timeout_ms=50)  # kafka-python fetches inside poll
            return any(s.epoch > 2 for s in cache._sessions.values())

        wait_until(incremental, what="incremental fetches")
    finally:
        consumer.close()


def test_the_follower_decoder_reads_the_broker_encoder_without_copying() -> None:
    """broker/fetcher.py decodes Fetch v15 by hand: it must read what broker/codec.py
    writes (aborted transactions, diverging epochs, unknown topics skipped), with the
    records as views into the frame."""
    from broker.codec import encode_fetch_response
    from broker.fetcher import decode_fetch
    from broker.results import FetchResult
    from storage.txn_index import AbortedTxn

    known, unknown = uuid.uuid4(), uuid.uuid4()
    data = batch(3)
    topics: list[Any] = [
        (unknown, [(0, FetchResult(0, 9, 9, 0, data), data)]),
        (
            known,
            [
                (0, FetchResult(0, 5, 4, 1, data, aborted=(AbortedTxn(7, 2, 3, 4),)), data),
                (1, FetchResult(0, 5, 5, 0, diverging_epoch=(3, 42)), None),
                (2, FetchResult(Errors.NOT_LEADER_OR_FOLLOWER), None),
            ],
        ),
    ]
    parts = encode_fetch_response(15, 77, 0, topics, read_committed=True, session_id=1234)
    frame = b"".join(bytes(p) for p in parts)[4:]
    answer = decode_fetch(frame, {known: "k"})
    assert (answer.correlation_id, answer.error_code, answer.session_id) == (77, 0, 1234)
    a = answer.answers
    assert set(a) == {("k", 0), ("k", 1), ("k", 2)}
    assert (a["k", 0].high_watermark, a["k", 0].log_start_offset) == (5, 1)
    assert isinstance(a["k", 0].records, memoryview) and a["k", 0].records.obj is frame
    assert bytes(a["k", 0].records) == data
    assert a["k", 1].diverging_epoch == (3, 42) and a["k", 1].records is None
    assert a["k", 2].error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert a["k", 0].diverging_epoch is None


def test_the_client_session_sends_only_changes() -> None:
    from broker.fetch_session import ClientSession

    s: ClientSession[str, int] = ClientSession()
    assert s.request({"a": 1, "b": 2}) == ((0, 0), {"a": 1, "b": 2}, [])
    s.answered(55, {"a": 1, "b": 2})
    assert s.request({"a": 1, "b": 3}) == ((55, 1), {"b": 3}, [])
    s.answered(55, {"a": 1, "b": 3})
    assert s.request({"b": 3}) == ((55, 2), {}, ["a"])
    s.answered(0, {"b": 3})  # an answer outside the session (an error): start again
    assert s.request({"b": 3}) == ((0, 0), {"b": 3}, [])
    s.answered(55, {"b": 3})
    s.reset(close_existing=True)  # a lost connection: (55, 0) replaces the session
    assert s.request({"b": 3}) == ((55, 0), {"b": 3}, [])
    s.reset(close_existing=False)  # the leader lost it: (0, 0)
    assert s.request({"b": 3})[0] == (0, 0)
    s.answered(0, {"b": 3})  # no slot for us: full fetches go on
    assert s.request({"b": 3}) == ((0, 0), {"b": 3}, [])


def test_the_fetchers_frame_receiver_reads_frames_in_any_chunks() -> None:
    """broker/connection.py's FrameReceiver (the follower's side of a connection):
    frames split anywhere, several in one read, a big one read into its own buffer,
    and a bad size or a closed connection raised to the reader. Buffers are filled the
    way SSLProtocol fills them (through a slice of the buffer given)."""
    import asyncio
    import struct

    from broker.connection import FrameReceiver

    def framed(body: bytes) -> bytes:
        return struct.pack(">i", len(body)) + body

    async def main() -> None:
        big = bytes(range(256)) * 1000
        stream = framed(b"one") + framed(b"") + framed(big) + framed(b"two")
        r = FrameReceiver(1 << 20, leftover=stream[:2])
        pos = 2
        for step in (1, 5, 3, 70_000, 7, 200_000, 10_000):  # arbitrary reads
            chunk = stream[pos : pos + step]
            pos += len(chunk)
            while chunk:
                buf = r.get_buffer(-1)
                n = min(len(buf), len(chunk))
                half = n // 2
                buf[:half] = chunk[:half]
                tail = buf[half:]  # as SSLProtocol fills the rest: must not be a copy
                tail[: n - half] = chunk[half:n]
                chunk = chunk[n:]
                r.buffer_updated(n)
        assert pos == len(stream)
        got = [bytes(await r.read_frame()) for _ in range(4)]
        assert got == [b"one", b"", big, b"two"]
        r.connection_lost(None)
        with pytest.raises(ConnectionResetError):
            await r.read_frame()
        bad = FrameReceiver(10, leftover=struct.pack(">i", 11))
        with pytest.raises(ConnectionError):
            await bad.read_frame()

    asyncio.run(main())
