"""Protocol-level behaviour of the broker's network/codec/apis layers with raw frames:
hand-written responses against kio's reader for every version, tagged-field and
trailing-byte tolerance, long-poll fetch, KIP-74 byte limits, sendfile-sized slices,
metadata, admin and the produce error rules. Same fake runtime as test_broker_wire.
"""

from __future__ import annotations

import io
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from broker.apis import SUPPORTED_VERSIONS
from broker.codec import encode_fetch_response, encode_produce_response
from broker.results import FetchResult, ProduceResult
from common.varint import encode_uvarint
from storage.segment import FileSlice
from tests.harness.fake_broker import BrokerThread, wait_until
from tests.harness.raw_protocol import RawClient, batch, encode_request, fetch, produce, request


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


def part_of(resp: Any, index: int = 0) -> Any:
    return resp.responses[0].partitions[index]


# -- hand-written responses read back by kio -------------------------------------------------


def framed(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def _read_all(api_key: int, version: int, frame: bytes) -> Any:
    cls = load_response_schema(api_key, version)
    header, n = entity_reader(cls.__header_schema__)(frame, 4)
    body, m = entity_reader(cls)(frame, 4 + n)
    assert 4 + n + m == len(frame), "kio did not consume the whole response"
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    return header.correlation_id, body


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_response_reads_back_with_kio(version: int) -> None:
    results = [
        ("a", [(0, ProduceResult(0, 42, -1, 7)), (3, ProduceResult(87, error_message="x"))]),
        ("bb", [(1, ProduceResult(0, 0, 1700000000000, 0))]),
    ]
    cid, body = _read_all(0, version, encode_produce_response(version, 99, results))
    assert cid == 99
    got = [
        (t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
        for t in body.responses
    ]
    assert got == [("a", [(0, 0, 42), (3, 87, -1)]), ("bb", [(1, 0, 0)])]
    if version >= 5:
        assert body.responses[0].partition_responses[0].log_start_offset == 7
    if version >= 8:
        assert body.responses[0].partition_responses[1].error_message == "x"


@pytest.mark.parametrize("version", range(4, 14))
def test_fetch_response_reads_back_with_kio(version: int, tmp_path: Path) -> None:
    data = batch(5) + batch(2)
    path = tmp_path / "seg"
    path.write_bytes(b"junk" + data)
    with io.FileIO(path, "r") as f:
        sl = FileSlice(f, 4, len(data))
        r1 = FetchResult(0, 10, 10, 0, sl, diverging_epoch=(3, 77) if version >= 12 else None)
        topic: str | uuid.UUID = uuid.uuid4() if version >= 13 else "t"
        topics = [(topic, [(0, r1, sl), (1, FetchResult(1, 5, 5, 2), None), (2, r1, b"xyz")])]
        parts = encode_fetch_response(version, 5, 0, topics)
        frame = b"".join(p.read() if isinstance(p, FileSlice) else bytes(p) for p in parts)
    cid, body = _read_all(1, version, frame)
    assert cid == 5
    ps = body.responses[0].partitions
    assert [p.partition_index for p in ps] == [0, 1, 2]
    assert ps[0].records == data and ps[1].records == b"" and ps[2].records == b"xyz"
    assert ps[1].error_code == 1 and ps[1].high_watermark == 5
    if version >= 12:
        assert (ps[0].diverging_epoch.epoch, ps[0].diverging_epoch.end_offset) == (3, 77)
    if version >= 13:
        assert body.responses[0].topic_id == topic


# -- versions, tags, trailing bytes ----------------------------------------------------------


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_advertises_what_is_implemented(client: RawClient, version: int) -> None:
    data = {"client_software_name": "raw", "client_software_version": "1"}
    resp = client.call(18, version, request(18, version, data))
    assert resp.error_code == 0
    got = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
    assert got == SUPPORTED_VERSIONS


def test_api_versions_unsupported_version_answers_v0(client: RawClient) -> None:
    client.send(struct.pack(">ihhih", 12, 18, 99, 7, -1) + b"\x00\x00")
    cid, resp = _read_all(18, 0, framed(client.recv_frame()))
    assert cid == 7 and resp.error_code == 35
    assert {a.api_key for a in resp.api_keys} == set(SUPPORTED_VERSIONS)


def _metadata_v12_with_unknown_tags() -> bytes:
    """Metadata v12 for topic "t", with unknown tags in the header, the topic entry and
    the body (a newer client's fields)."""
    tags = b"\x02" + b"\x07\x02zz" + b"\x63\x00"  # two unknown tags: 7 ("zz"), 99 (empty)
    head = struct.pack(">hhih", 3, 12, 3, 3) + b"raw" + tags
    topic = b"\x00" * 16 + encode_uvarint(2) + b"t" + tags  # topic_id, name, tags
    body = encode_uvarint(2) + topic + b"\x00\x00" + tags  # 1 topic, 2 bools, tags
    return struct.pack(">i", len(head + body)) + head + body


def test_unknown_tagged_fields_are_skipped(client: RawClient) -> None:
    client.send(_metadata_v12_with_unknown_tags())
    _, resp = _read_all(3, 12, framed(client.recv_frame()))
    assert [(t.name, t.error_code, len(t.partitions)) for t in resp.topics] == [("t", 0, 2)]


def test_trailing_bytes_are_ignored(client: RawClient) -> None:
    """librdkafka's Metadata v12 request carries 3 stray bytes."""
    frame = encode_request(
        3,
        12,
        request(
            3,
            12,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        ),
    )
    client.send(struct.pack(">i", len(frame) - 4 + 3) + frame[4:] + b"\x00\x01\x02")
    _, resp = _read_all(3, 12, framed(client.recv_frame()))
    assert [t.name for t in resp.topics] == ["t"]


# -- produce and fetch -----------------------------------------------------------------------


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_every_version(client: RawClient, version: int) -> None:
    resp = client.call(0, version, produce("t", 0, batch(), v=version))
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == 0 and p.base_offset >= 0


def test_produce_errors_per_partition(client: RawClient, broker: BrokerThread) -> None:
    assert (
        client.call(0, 9, produce("nope", 0, batch()))
        .responses[0]
        .partition_responses[0]
        .error_code
        == 3
    )
    two = batch() + batch()
    assert (
        client.call(0, 9, produce("t", 0, two)).responses[0].partition_responses[0].error_code == 87
    )
    assert (
        client.call(0, 9, produce("t", 0, None)).responses[0].partition_responses[0].error_code
        == 87
    )
    assert broker.runtime.produce_calls == 0


def test_produce_acks_zero_sends_no_response_and_keeps_order(client: RawClient) -> None:
    client.send(encode_request(0, 9, produce("t", 0, batch(), acks=0), correlation_id=1))
    resp = client.call(0, 9, produce("t", 0, batch()), correlation_id=2)
    assert resp.responses[0].partition_responses[0].base_offset == 3  # after the acks=0 one


def test_produce_acks_zero_error_closes(client: RawClient) -> None:
    client.send(encode_request(0, 9, produce("nope", 0, batch(), acks=0)))
    assert client.is_closed_by_peer()


def test_produce_handler_failure_is_never_unknown_server_error(
    client: RawClient, broker: BrokerThread
) -> None:
    async def boom(*args: Any) -> ProduceResult:
        raise RuntimeError("replication exploded")

    broker.runtime.produce = boom  # type: ignore[method-assign]
    p = client.call(0, 9, produce("t", 0, batch())).responses[0].partition_responses[0]
    assert p.error_code == 87 and "exploded" in p.error_message
    assert (
        client.call(
            18, 3, request(18, 3, {"client_software_name": "a", "client_software_version": "1"})
        ).error_code
        == 0
    )


@pytest.mark.parametrize("version", range(4, 14))
def test_fetch_every_version(client: RawClient, broker: BrokerThread, version: int) -> None:
    data = batch(4)
    client.call(0, 9, produce("t", 1, data))
    tid = uuid.UUID(broker.runtime.image().topic_ids["t"])
    body = fetch([("t", 1, 0, 1 << 20)], v=version, topic_ids={"t": tid})
    p = part_of(client.call(1, version, body))
    assert p.error_code == 0 and p.high_watermark == 4
    assert p.records[16:] == data[16:]  # bytes 0-15: assigned offset and leader epoch


def test_fetch_long_poll_wakes_on_append(broker: BrokerThread, client: RawClient) -> None:
    waiter = RawClient(broker.host, broker.port, timeout=20)  # far below max_wait
    try:
        waiter.send(encode_request(1, 12, fetch([("t", 0, 0, 1 << 20)], max_wait=60000)))
        wait_until(lambda: broker.runtime._appended is not None, what="the fetch to park")
        client.call(0, 9, produce("t", 0, batch()))
        _, resp = _read_all(1, 12, framed(waiter.recv_frame()))
        assert part_of(resp).high_watermark == 3 and len(part_of(resp).records) > 0
    finally:
        waiter.close()


def test_fetch_max_wait_expires_empty(client: RawClient) -> None:
    p = part_of(client.call(1, 12, fetch([("t", 0, 0, 1 << 20)], max_wait=50)))
    assert p.error_code == 0 and p.records == b"" and p.high_watermark == 0


def test_fetch_kip74_first_batch_whole_and_budget(client: RawClient) -> None:
    big = batch(10, size=1000)
    client.call(0, 9, produce("t", 0, big))
    client.call(0, 9, produce("t", 1, big))
    resp = client.call(1, 12, fetch([("t", 0, 0, 100), ("t", 1, 0, 100)], max_bytes=100))
    p0, p1 = part_of(resp, 0), part_of(resp, 1)
    assert len(p0.records) == len(big)  # larger than both limits: still whole
    assert p1.records == b"" and p1.high_watermark == 10  # budget spent, HW still told


def test_fetch_large_slices_go_through_sendfile(client: RawClient) -> None:
    big = [batch(1, size=900_000, tag=str(i)) for i in range(3)]
    for b in big:
        assert (
            client.call(0, 9, produce("t", 0, b)).responses[0].partition_responses[0].error_code
            == 0
        )
    p = part_of(client.call(1, 12, fetch([("t", 0, 0, 4 << 20)])))
    got = p.records
    assert len(got) == sum(map(len, big))
    pos = 0
    for b in big:  # each batch intact (bytes 0-7 hold the assigned offset, 12-15 epoch)
        assert got[pos + 16 : pos + len(b)] == b[16:]
        pos += len(b)


def test_confluent_reads_large_messages_sent_with_sendfile(broker: BrokerThread) -> None:
    """Batches near max.message.bytes make slices above SENDFILE_MIN_BYTES: a real
    client must read them intact."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    values = [bytes([65 + i]) * 900_000 for i in range(4)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for v in values:
        producer.produce("t", v, partition=1)
        producer.flush(30)  # one batch per message
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "big", "fetch.max.bytes": 4 << 20}
    # no auto-commit: there is no group coordinator yet, and close() would wait for one
    consumer = Consumer({**conf, "max.partition.fetch.bytes": 4 << 20, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("t", 1, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values):
            assert time.monotonic() < deadline, "consumer timed out"
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == values
    finally:
        consumer.close()


def test_fetch_errors(client: RawClient) -> None:
    resp = client.call(1, 12, fetch([("nope", 0, 0, 100), ("t", 0, 99, 100)]))
    assert [p.error_code for t in resp.responses for p in t.partitions] == [3, 1]
    body = fetch([("t", 0, 0, 100)], session_id=5, session_epoch=1)
    assert client.call(1, 12, body).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND


# -- metadata and admin ----------------------------------------------------------------------


def call(client: RawClient, api_key: int, version: int, data: dict[str, Any]) -> Any:
    return client.call(api_key, version, request(api_key, version, data))


# A request body for every version of the rarer APIs (`build` keeps what a version has).
_REQUESTS: dict[int, dict[str, Any]] = {
    2: {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]},
    18: {"client_software_name": "a", "client_software_version": "1"},
    19: {"topics": [{"name": "made", "num_partitions": 1, "replication_factor": 1,
                     "assignments": [], "configs": []}], "timeout": 1000, "validate_only": False},
    20: {"topic_names": ["nope"], "topics": [{"name": "nope", "topic_id": None}], "timeout": 1},
    22: {"transactional_id": None, "transaction_timeout": 1, "producer_id": -1,
         "producer_epoch": -1},
    23: {"replica_id": -1, "topics": [{"topic": "t", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
    32: {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
         "include_synonyms": False, "include_documentation": False},
    33: {"resources": [{"resource_type": 2, "resource_name": "t",
                        "configs": [{"name": "retention.ms", "value": "1"}]}],
         "validate_only": False},
    44: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "1"}]}], "validate_only": False},
    37: {"topics": [{"name": "t", "count": 5, "assignments": None}], "timeout": 1,
         "validate_only": False},
    60: {"include_cluster_authorized_operations": False, "endpoint_type": 1},
}  # fmt: skip


_RANGES = [(k, SUPPORTED_VERSIONS[k]) for k in _REQUESTS]


@pytest.mark.parametrize(
    "api_key,version",
    [(k, v) for k, (lo, hi) in _RANGES for v in range(lo, hi + 1)],
)
def test_every_version_of_the_rarer_apis(client: RawClient, api_key: int, version: int) -> None:
    """Decoded by kio, answered, and the answer reads back with kio for its version."""
    resp = call(client, api_key, version, _REQUESTS[api_key])
    codes = [getattr(resp, "error_code", 0)]
    for group in ("topics", "responses", "results"):
        for item in getattr(resp, group, ()):
            codes += [getattr(item, "error_code", 0)]
            codes += [p.error_code for p in getattr(item, "partitions", ())]
    allowed = {0, 3, 36, 37}  # 3: DeleteTopics of "nope"; 36: "made" twice; 37: the fake
    assert set(codes) <= allowed, codes


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_every_version(client: RawClient, broker: BrokerThread, version: int) -> None:
    topics = [{"name": "t", "topic_id": None}, {"name": "missing", "topic_id": None}]
    flags = {"include_cluster_authorized_operations": False}
    flags |= {"allow_auto_topic_creation": True, "include_topic_authorized_operations": False}
    resp = call(client, 3, version, {"topics": topics, **flags})
    assert [(b.node_id, b.port) for b in resp.brokers] == [(1, broker.port)]
    assert [(t.name, t.error_code) for t in resp.topics] == [("t", 0), ("missing", 3)]
    assert [(p.partition_index, p.leader_id) for p in resp.topics[0].partitions] == [(0, 1), (1, 1)]
    if version >= 2:
        assert resp.cluster_id == "wire-test-cluster"


def test_metadata_auto_create(client: RawClient, broker: BrokerThread) -> None:
    broker.runtime.auto_create_topics_enable = True
    topics = [{"name": "auto", "topic_id": None}, {"name": "bad name!", "topic_id": None}]
    flags = {"allow_auto_topic_creation": True, "include_topic_authorized_operations": False}
    resp = call(client, 3, 12, {"topics": topics, **flags})
    assert [(t.name, t.error_code) for t in resp.topics] == [("auto", 5), ("bad name!", 17)]
    assert "auto" in broker.runtime.image().topic_ids
    resp = call(client, 3, 12, {"topics": topics, **flags, "allow_auto_topic_creation": False})
    assert resp.topics[0].error_code == 0


def test_create_and_delete_topics(client: RawClient, broker: BrokerThread) -> None:
    spec = {"num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
    topics = [{"name": n, **spec} for n in ("new", "dup", "dup")]
    resp = call(client, 19, 7, {"topics": topics, "timeout": 1000, "validate_only": False})
    assert [(t.name, t.error_code) for t in resp.topics] == [("new", 0), ("dup", 42)]
    tid = uuid.UUID(broker.runtime.image().topic_ids["new"])
    targets = [{"name": None, "topic_id": tid}, {"name": None, "topic_id": uuid.uuid4()}]
    resp = call(client, 20, 6, {"topics": targets, "timeout": 1000})
    assert [(r.name, r.error_code) for r in resp.responses] == [("new", 0), (None, 100)]
    resp = call(client, 20, 1, {"topic_names": ["t", "zz"], "timeout": 1000})
    assert [(r.name, r.error_code) for r in resp.responses] == [("t", 0), ("zz", 3)]
    topics = [{"name": "t", "count": 5, "assignments": None}]
    resp = call(client, 37, 3, {"topics": topics, "timeout": 1000, "validate_only": False})
    assert resp.results[0].error_code == 37  # what the fake controller says


def test_describe_configs_cluster_and_producer_id(client: RawClient) -> None:
    resources = [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "1", "configuration_keys": ["num.partitions"]},
    ]
    flags = {"include_synonyms": False, "include_documentation": False}
    resp = call(client, 32, 4, {"resources": resources, **flags})
    assert [r.error_code for r in resp.results] == [0, 3, 0]
    assert [c.name for c in resp.results[2].configs] == ["num.partitions"]
    flags = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    resp = call(client, 60, 1, flags)
    assert resp.error_code == 0 and [b.broker_id for b in resp.brokers] == [1]
    assert call(client, 60, 1, {**flags, "endpoint_type": 2}).error_code == 114
    ids = {"producer_id": -1, "producer_epoch": -1, "transaction_timeout": 1000}
    resp = call(client, 22, 4, {"transactional_id": None, **ids})
    assert resp.error_code == 0 and resp.producer_id >= 1000
    # a transactional id needs __transaction_state, which this fake never creates
    assert call(client, 22, 4, {"transactional_id": "tx", **ids}).error_code == 16


def test_list_offsets_and_offset_for_leader_epoch(client: RawClient) -> None:
    client.call(0, 9, produce("t", 0, batch(5)))
    parts = [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in (-2, -1)]
    data = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "t", "partitions": parts}]}
    resp = call(client, 2, 7, data)
    assert [p.offset for p in resp.topics[0].partitions] == [0, 5]
    parts = [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]
    resp = call(client, 23, 4, {"replica_id": -1, "topics": [{"topic": "t", "partitions": parts}]})
    p = resp.topics[0].partitions[0]
    assert (p.error_code, p.leader_epoch, p.end_offset) == (0, 0, 5)


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path, idle_ms=100)
    try:
        c = RawClient(b.host, b.port)
        assert c.is_closed_by_peer()
        c.close()
    finally:
        b.stop()


@pytest.mark.parametrize("version", range(5))
def test_find_coordinator_every_version_without_an_offsets_topic(
    client: RawClient, version: int
) -> None:
    """No __consumer_offsets (the fake runtime never creates it): every version answers
    COORDINATOR_NOT_AVAILABLE (15), a retriable error, and keeps the connection."""
    body = {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]}
    resp = client.call(10, version, request(10, version, body))
    codes = [c.error_code for c in resp.coordinators] if version >= 4 else [resp.error_code]
    assert codes == [15] * len(codes)
    # and an unknown key type is INVALID_REQUEST (42)
    if version >= 1:
        resp = client.call(10, version, request(10, version, {**body, "key_type": 7}))
        codes = [c.error_code for c in resp.coordinators] if version >= 4 else [resp.error_code]
        assert codes == [42] * len(codes)


_GROUP_REQUESTS: dict[int, dict[str, Any]] = {
    10: {"key": "g", "key_type": 0, "coordinator_keys": ["g"]},
    11: {"group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 10_000,
         "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b""}], "reason": None},
    12: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
    13: {"group_id": "g", "member_id": "m",
         "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]},
    14: {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
         "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
    8: {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
        "group_instance_id": None, "retention_time": -1, "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]},
    9: {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
        "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": None}],
        "require_stable": False},
    15: {"groups": ["g"], "include_authorized_operations": False},
    16: {"states_filter": [], "types_filter": []},
    42: {"groups_names": ["g"]},
    47: {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
    28: {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
         "generation_id": -1, "member_id": "", "group_instance_id": None,
         "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                  "committed_leader_epoch": -1,
                                                  "committed_metadata": ""}]}]},
}  # fmt: skip


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(k, v) for k in _GROUP_REQUESTS for v in sorted(set(SUPPORTED_VERSIONS[k]))],
)
def test_group_apis_answer_a_handler_failure_at_every_version(
    client: RawClient, broker: BrokerThread, api_key: int, version: int
) -> None:
    """A coordinator that blows up still gets a readable answer with an error code
    (never a closed connection), at the lowest and highest version we serve."""
    broker.apis.groups = None  # type: ignore[assignment]  # every handler fails
    resp = client.call(api_key, version, request(api_key, version, _GROUP_REQUESTS[api_key]))
    assert resp is not None
    versions = {"client_software_name": "a", "client_software_version": "1"}
    assert client.call(18, 3, request(18, 3, versions)).error_code == 0
