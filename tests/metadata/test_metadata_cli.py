"""`kraft metadata` end to end: against a real 3-controller quorum
(kraft/tools/local_cluster.py, three processes on 127.0.0.1), on a snapshot file, and
against nobody.

The quorum is started once for the module. Every wait is a condition polled under a
deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kraft.tools.cli import main as kraft_main
from kraft.tools.launcher import (
    NodeProcess,
    describe_logs,
    free_ports,
    stop_nodes,
    wait_for_active,
    wait_until_caught_up,
)
from kraft.tools.local_cluster import start_controllers
from metadata_log.delta import replay
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ConfigRecord,
    ControllerEpochRecord,
    Endpoint,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from metadata_log.snapshot import decode_snapshot, write_snapshot

TOPIC = "cli-topic"
T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def post(c: NodeProcess, path: str, body: object) -> dict[str, Any] | None:
    """POST to `c`; the JSON answer if 200, else None (not active yet, lost leadership)."""
    req = urllib.request.Request(
        c.url(path),
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read()) if resp.status == 200 else None
    except (urllib.error.URLError, OSError):
        return None


def write(controllers: list[NodeProcess], path: str, body: object) -> dict[str, Any]:
    """Send `body` to whichever controller is active, retrying until one answers 200."""

    def attempt() -> dict[str, Any] | None:
        return post(wait_for_active(controllers, 10), path, body)

    return eventually(attempt, 20, f"POST {path}")


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    base = tmp_path_factory.mktemp("quorum")
    # Long sessions: the one broker below never heartbeats again.
    controllers = start_controllers(3, base, properties={"broker.session.timeout.ms": "600000"})
    try:
        try:
            create_topic_with_a_broker(controllers)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{describe_logs(controllers)}") from None
        yield controllers
    finally:
        stop_nodes(controllers)


def create_topic_with_a_broker(controllers: list[NodeProcess]) -> None:
    """Register and unfence broker 1 (so a partition can be placed), then create TOPIC
    with one partition, replication factor 1."""
    reg = write(
        controllers,
        "/v1/brokers/register",
        {
            "broker_id": 1,
            "incarnation_id": "cli-test-broker-1",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
        },
    )
    assert reg["error_code"] == 0, reg
    hb = write(
        controllers,
        "/v1/brokers/heartbeat",
        {"broker_id": 1, "broker_epoch": reg["broker_epoch"], "current_metadata_offset": 1 << 40},
    )
    assert hb["error_code"] == 0 and not hb["is_fenced"], hb
    created = write(
        controllers,
        "/v1/topics",
        {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1}]},
    )
    # 36 TOPIC_ALREADY_EXISTS: a retried request whose first answer was lost.
    assert created["topics"][0]["error_code"] in (0, 36), created
    wait_until_caught_up(controllers, 20)


def test_cluster_json_shows_a_topic_created_over_http(
    quorum: list[NodeProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    # Any controller answers reads from its committed image: ask a follower.
    active = wait_for_active(quorum)
    follower = next(c for c in quorum if c is not active)
    assert kraft_main(["metadata", "--controller", follower.address]) == 0
    cluster = json.loads(capsys.readouterr().out)
    topics = {t["name"]: t for t in cluster["topics"]}
    assert TOPIC in topics, cluster
    (partition,) = topics[TOPIC]["partitions"]
    assert partition["replicas"] == [1] and partition["leader"] == 1
    assert [b["broker_id"] for b in cluster["brokers"]] == [1]
    # Who wrote the last barrier (a re-election between the two reads could change it).
    assert cluster["controller_id"] in {c.node_id for c in quorum}
    assert cluster["quorum"]["node_id"] == follower.node_id


def test_records_are_printed_one_json_per_line_with_offsets(
    quorum: list[NodeProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    active = wait_for_active(quorum)
    assert kraft_main(["metadata", "--controller", active.address, "--records"]) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["offset"] for r in records] == list(range(len(records)))
    topics = [r for r in records if r["type"] == "topic"]
    assert [t["name"] for t in topics] == [TOPIC]
    partitions = [r for r in records if r["type"] == "partition"]
    assert [p["topic_id"] for p in partitions] == [topics[0]["topic_id"]]
    assert records[0]["type"] == "controller_epoch"

    # --from skips the records before it.
    start = topics[0]["offset"]
    assert (
        kraft_main(
            ["metadata", "--controller", active.address, "--records", "--from", str(start)]
        )
        == 0
    )
    tail = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert tail[0] == topics[0] and tail == records[start : start + len(tail)]


def test_snapshot_of_the_live_quorum_prints_image_and_records(
    quorum: list[NodeProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    active = wait_for_active(quorum)
    with urllib.request.urlopen(active.url("/v1/metadata/snapshot"), timeout=5) as resp:  # noqa: S310
        image = decode_snapshot(resp.read())
    path = tmp_path / "metadata.snapshot"
    write_snapshot(path, image)

    assert kraft_main(["metadata", "--snapshot", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["offset"] == image.offset >= 0
    assert printed["topic_ids"] == {TOPIC: image.topic_ids[TOPIC]}
    assert printed["topics"][image.topic_ids[TOPIC]]["name"] == TOPIC

    assert kraft_main(["metadata", "--snapshot", str(path), "--records"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"type": "topic", "name": TOPIC, "topic_id": image.topic_ids[TOPIC]} in records
    assert [r["type"] for r in records].count("register_broker") == 1


EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
TID = "00000000-0000-0000-0000-000000000001"


def snapshot_image(*, with_config: bool) -> MetadataImage:
    records = [
        ControllerEpochRecord(3, 2),
        RegisterBrokerRecord(1, "i1", 1, EP, "r1", fenced=False),
        TopicRecord("t", TID),
        PartitionRecord(TID, 0, (1,), (1,), 1),
    ]
    if with_config:
        records.append(ConfigRecord(2, "t", "retention.ms", "1000"))
    return replay(MetadataImage(), enumerate(records))


def test_snapshot_records_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.snapshot"
    write_snapshot(path, snapshot_image(with_config=True))
    assert kraft_main(["metadata", "--snapshot", str(path), "--records"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["type"] for r in records] == [
        "controller_epoch",
        "register_broker",
        "topic",
        "partition",
        "config",
    ]
    assert records[2] == {"type": "topic", "name": "t", "topic_id": TID}


def test_snapshot_image_with_a_config_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.snapshot"
    write_snapshot(path, snapshot_image(with_config=True))
    assert kraft_main(["metadata", "--snapshot", str(path)]) == 0
    assert "retention.ms" in capsys.readouterr().out


def test_unreachable_controller_returns_1_with_a_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (port,) = free_ports(1)  # free a moment ago: nothing listens there
    for extra in ([], ["--records"]):
        assert kraft_main(["metadata", "--controller", f"127.0.0.1:{port}", *extra]) == 1
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err.startswith("kraft metadata: ") and "refused" in out.err.lower()


def test_missing_or_corrupt_snapshot_returns_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kraft_main(["metadata", "--snapshot", str(tmp_path / "nope")]) == 1
    assert "kraft metadata: " in capsys.readouterr().err
    bad = tmp_path / "bad.snapshot"
    bad.write_bytes(b"not a snapshot")
    assert kraft_main(["metadata", "--snapshot", str(bad)]) == 1
    assert "bad magic" in capsys.readouterr().err
