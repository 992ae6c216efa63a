"""Checkpoint files in Kafka's text formats, and LogConfig with Kafka's names and defaults."""

from __future__ import annotations

import base64
import os
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import checkpoint
from storage.checkpoint import (
    CheckpointError,
    read_leader_epochs,
    read_offsets,
    read_partition_metadata,
    topic_id_from_str,
    topic_id_to_str,
    write_leader_epochs,
    write_offsets,
    write_partition_metadata,
)
from storage.config import ConfigError, LogConfig

# -- offset checkpoints ------------------------------------------------------------------------


def test_write_offsets_uses_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets(path, {("orders", 3): 42})
    assert path.read_text() == "0\n1\norders 3 42\n"


def test_write_offsets_with_several_entries(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {("b", 1): 7, ("a", 0): 5, ("a", 10): 0})
    lines = path.read_text().split("\n")
    assert lines[:2] == ["0", "3"]
    assert lines[-1] == ""  # newline-terminated
    assert sorted(lines[2:-1]) == ["a 0 5", "a 10 0", "b 1 7"]


def test_empty_offsets_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offsets(path) == {}


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert read_offsets(tmp_path / "nope") == {}
    assert read_leader_epochs(tmp_path / "nope") is None


topics = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=40,
)


@given(
    offsets=st.dictionaries(
        st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(0, 2**63 - 1), max_size=20
    )
)
def test_offsets_round_trip(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict[tuple[str, int], int]
) -> None:
    path = tmp_path_factory.mktemp("cp") / "replication-offset-checkpoint"
    write_offsets(path, offsets)
    assert read_offsets(path) == offsets
    assert not path.with_name(path.name + ".tmp").exists()


def test_a_kafka_written_file_reads(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\n__consumer_offsets 17 1234\nmy.topic-x 0 9\n")
    assert read_offsets(path) == {("__consumer_offsets", 17): 1234, ("my.topic-x", 0): 9}


def test_a_leftover_tmp_file_is_ignored_by_readers_and_replaced_by_writers(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {("t", 0): 5})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("0\n1\nt 0 999\n")  # a newer write that never got renamed
    assert read_offsets(path) == {("t", 0): 5}
    tmp.write_text("torn garb")
    assert read_offsets(path) == {("t", 0): 5}
    write_offsets(path, {("t", 0): 6})
    assert read_offsets(path) == {("t", 0): 6}
    assert not tmp.exists()


def test_a_write_that_fails_before_the_rename_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {("t", 0): 5, ("t", 1): 6})
    before = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError("simulated crash before rename")

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write_offsets(path, {("t", 0): 100})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert read_offsets(path) == {("t", 0): 5, ("t", 1): 6}


def test_the_write_is_fsynced_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cp"
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(checkpoint.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(
        checkpoint.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))
    )
    write_offsets(path, {("t", 0): 1})
    monkeypatch.undo()
    # file fsync, rename, then the directory fsync
    assert events == ["fsync", "replace", "fsync"]


MALFORMED = {
    "wrong version": b"1\n1\nt 0 5\n",
    "non-integer version": b"v0\n1\nt 0 5\n",
    "count too high": b"0\n2\nt 0 5\n",
    "count too low": b"0\n0\nt 0 5\n",
    "negative count": b"0\n-1\n",
    "non-integer count": b"0\none\nt 0 5\n",
    "non-integer offset": b"0\n1\nt 0 five\n",
    "non-integer partition": b"0\n1\nt p 5\n",
    "missing offset": b"0\n1\nt 0\n",
    "missing everything": b"0\n1\n\n",
    "extra field": b"0\n1\nt 0 5 6\n",
    "empty file": b"",
    "version only": b"0\n",
    "not utf-8": b"0\n1\n\xff\xfe 0 5\n",
    "garbage": b"\x00\x01garbage\x02",
}


@pytest.mark.parametrize("content", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_offsets_raise_checkpoint_error_naming_the_file(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        read_offsets(path)


def test_leader_epochs_round_trip_and_refuse_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epochs(path, [(0, 0), (3, 117)])
    assert path.read_text() == "0\n2\n0 0\n3 117\n"
    assert read_leader_epochs(path) == [(0, 0), (3, 117)]
    for bad in ("0\n1\n3\n", "0\n1\n3 117 1\n", "0\n1\nx 117\n", "7\n0\n"):
        path.write_text(bad)
        with pytest.raises(CheckpointError, match=re.escape(str(path))):
            read_leader_epochs(path)


# -- topic ids and partition.metadata ----------------------------------------------------------


def test_topic_id_strings_are_kafkas_url_safe_base64_without_padding() -> None:
    assert topic_id_to_str(uuid.UUID(int=0)) == "A" * 22
    special = uuid.UUID(bytes=b"\xfb\xef\xff" * 5 + b"\x00")
    assert topic_id_to_str(special) == "--__" * 5 + "AA"
    assert topic_id_from_str("--__" * 5 + "AA") == special
    # A Kafka-printed id (Uuid.toString) decodes to the same 16 bytes.
    kafka_id = "vjvRTVKqRWOG7b_Xyz3C-A"
    parsed = topic_id_from_str(kafka_id)
    assert parsed.bytes == base64.urlsafe_b64decode(kafka_id + "==")
    assert topic_id_to_str(parsed) == kafka_id


@given(st.uuids())
def test_topic_id_round_trip(topic_id: uuid.UUID) -> None:
    text = topic_id_to_str(topic_id)
    assert len(text) == 22
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", text)
    assert topic_id_from_str(text) == topic_id


def test_partition_metadata_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    topic_id = uuid.UUID(bytes=b"\xfb\xef\xff" * 5 + b"\x00")
    write_partition_metadata(path, topic_id)
    assert path.read_text() == "version: 0\ntopic_id: --__--__--__--__--__AA\n"
    assert read_partition_metadata(path) == topic_id
    assert read_partition_metadata(tmp_path / "missing") is None


@pytest.mark.parametrize(
    "content", ["version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", "version: 0\n", "junk"]
)
def test_malformed_partition_metadata_raises(tmp_path: Path, content: str) -> None:
    path = tmp_path / "partition.metadata"
    path.write_text(content)
    with pytest.raises(CheckpointError, match=re.escape(str(path))):
        read_partition_metadata(path)


# -- LogConfig ---------------------------------------------------------------------------------

KAFKA_DEFAULTS = {
    "segment_bytes": 1073741824,
    "segment_ms": 604800000,
    "segment_index_bytes": 10485760,
    "index_interval_bytes": 4096,
    "retention_ms": 604800000,
    "retention_bytes": -1,
    "max_message_bytes": 1048588,
    "message_timestamp_type": "CreateTime",
    "flush_messages": 2**63 - 1,
    "flush_ms": 2**63 - 1,
    "cleanup_policy": "delete",
    "delete_retention_ms": 86400000,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": 2**63 - 1,
    "min_cleanable_dirty_ratio": 0.5,
}


def fields(config: LogConfig) -> dict[str, object]:
    return {name: getattr(config, name) for name in KAFKA_DEFAULTS}


def test_defaults_are_kafkas() -> None:
    assert fields(LogConfig()) == KAFKA_DEFAULTS
    assert fields(LogConfig.from_properties({})) == KAFKA_DEFAULTS
    assert fields(LogConfig.from_broker_properties({})) == KAFKA_DEFAULTS
    assert not LogConfig().log_append_time
    assert LogConfig().delete and not LogConfig().compact


def test_from_properties_reads_kafkas_topic_property_names() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": "1024",
            "segment.ms": "60000",
            "segment.index.bytes": "4096",
            "index.interval.bytes": 100,
            "retention.ms": "-1",
            "retention.bytes": "5000",
            "max.message.bytes": "2000",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": "1",
            "flush.ms": "0",
            "cleanup.policy": "compact",
            "delete.retention.ms": "0",
            "min.compaction.lag.ms": "1000",
            "max.compaction.lag.ms": "60000",
            "min.cleanable.dirty.ratio": "0.25",
            "min.insync.replicas": "2",  # not a log property: ignored
        }
    )
    assert fields(config) == {
        "segment_bytes": 1024,
        "segment_ms": 60000,
        "segment_index_bytes": 4096,
        "index_interval_bytes": 100,
        "retention_ms": -1,
        "retention_bytes": 5000,
        "max_message_bytes": 2000,
        "message_timestamp_type": "LogAppendTime",
        "flush_messages": 1,
        "flush_ms": 0,
        "cleanup_policy": "compact",
        "delete_retention_ms": 0,
        "min_compaction_lag_ms": 1000,
        "max_compaction_lag_ms": 60000,
        "min_cleanable_dirty_ratio": 0.25,
    }
    assert config.log_append_time
    assert config.compact and not config.delete


@pytest.mark.parametrize(
    ("value", "policy", "compact", "delete"),
    [
        ("delete", "delete", False, True),
        ("compact", "compact", True, False),
        ("compact,delete", "compact,delete", True, True),
        (" delete , compact ", "delete,compact", True, True),  # Kafka's list: blanks trimmed
        ("compact,compact", "compact", True, False),
    ],
)
def test_cleanup_policy_is_kafkas_list(
    value: str, policy: str, compact: bool, delete: bool
) -> None:
    config = LogConfig.from_properties({"cleanup.policy": value})
    assert (config.cleanup_policy, config.compact, config.delete) == (policy, compact, delete)


def test_broker_cleaner_defaults_map_to_topic_settings() -> None:
    config = LogConfig.from_broker_properties(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.delete.retention.ms": "5",
            "log.cleaner.min.compaction.lag.ms": "6",
            "log.cleaner.max.compaction.lag.ms": "7",
            "log.cleaner.min.cleanable.ratio": "0.75",
        }
    )
    assert (
        config.cleanup_policy,
        config.delete_retention_ms,
        config.min_compaction_lag_ms,
        config.max_compaction_lag_ms,
        config.min_cleanable_dirty_ratio,
    ) == ("compact", 5, 6, 7, 0.75)
    with pytest.raises(ConfigError, match="log.cleaner.min.cleanable.ratio"):
        LogConfig.from_broker_properties({"log.cleaner.min.cleanable.ratio": "2"})


def test_from_properties_layers_over_a_base() -> None:
    base = LogConfig(segment_bytes=999, retention_ms=5)
    config = LogConfig.from_properties({"retention.ms": "7"}, base)
    assert (config.segment_bytes, config.retention_ms) == (999, 7)
    assert config.index_interval_bytes == 4096


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "-5"),
        ("segment.bytes", "13"),  # Kafka's minimum is 14
        ("segment.bytes", "1.5"),
        ("segment.bytes", ""),
        ("segment.ms", "0"),
        ("segment.index.bytes", "3"),
        ("index.interval.bytes", "-1"),
        ("retention.ms", "-2"),
        ("retention.bytes", "lots"),
        ("max.message.bytes", "-1"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("message.timestamp.type", "Foo"),
        ("message.timestamp.type", "createtime"),  # Kafka's check is case-sensitive
        ("cleanup.policy", ""),
        ("cleanup.policy", "compact,"),
        ("cleanup.policy", "Compact"),
        ("cleanup.policy", "retain"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("min.cleanable.dirty.ratio", "half"),
    ],
)
def test_bad_values_raise_config_error_naming_the_property(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(name)):
        LogConfig.from_properties({name: value})


def test_minimum_values_are_accepted() -> None:
    config = LogConfig.from_properties(
        {"segment.bytes": "14", "segment.ms": "1", "segment.index.bytes": "4"}
    )
    assert (config.segment_bytes, config.segment_ms, config.segment_index_bytes) == (14, 1, 4)


@pytest.mark.parametrize(
    ("props", "retention_ms"),
    [
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "3"}, 180_000),
        ({"log.retention.ms": "1234"}, 1234),
        ({"log.retention.hours": "1", "log.retention.minutes": "3"}, 180_000),
        ({"log.retention.hours": "1", "log.retention.ms": "1234"}, 1234),
        ({"log.retention.minutes": "3", "log.retention.ms": "1234"}, 1234),
        (
            {"log.retention.ms": "1234", "log.retention.minutes": "3", "log.retention.hours": "1"},
            1234,
        ),
        ({"log.retention.hours": "1", "log.retention.ms": "-1"}, -1),
        ({"log.retention.hours": "-1"}, -1),
    ],
)
def test_broker_retention_precedence_ms_over_minutes_over_hours(
    props: dict[str, str], retention_ms: int
) -> None:
    assert LogConfig.from_broker_properties(props).retention_ms == retention_ms


def test_broker_properties_map_to_topic_settings() -> None:
    config = LogConfig.from_broker_properties(
        {
            "log.segment.bytes": "2048",
            "message.max.bytes": "5000",
            "log.roll.hours": "2",
            "log.index.interval.bytes": "64",
            "log.retention.bytes": "100000",
            "log.message.timestamp.type": "LogAppendTime",
            "segment.bytes": "77",  # a topic-level name is not a broker property
        }
    )
    assert config.segment_bytes == 2048
    assert config.max_message_bytes == 5000
    assert config.segment_ms == 7_200_000
    assert config.index_interval_bytes == 64
    assert config.retention_bytes == 100000
    assert config.log_append_time
    assert (
        LogConfig.from_broker_properties({"log.roll.hours": "2", "log.roll.ms": "500"}).segment_ms
        == 500
    )


@pytest.mark.parametrize(
    "name", ["log.retention.hours", "log.retention.minutes", "log.retention.ms", "log.roll.ms"]
)
def test_bad_broker_time_values_raise_config_error_naming_the_property(name: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(name)):
        LogConfig.from_broker_properties({name: "abc"})


@pytest.mark.parametrize("name", ["log.segment.bytes", "message.max.bytes"])
def test_bad_broker_size_values_raise_config_error(name: str) -> None:
    with pytest.raises(ConfigError):
        LogConfig.from_broker_properties({name: "abc"})


@pytest.mark.parametrize("name", ["log.segment.bytes", "message.max.bytes"])
def test_bad_broker_size_values_name_the_broker_property(name: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(name)):
        LogConfig.from_broker_properties({name: "abc"})


@pytest.mark.parametrize("name", ["segment.bytes", "segment.index.bytes", "max.message.bytes"])
def test_int_properties_stop_at_int32_max_as_in_kafka(name: str) -> None:
    assert LogConfig.from_properties({name: str(2**31 - 1)})
    with pytest.raises(ConfigError, match=re.escape(name)):
        LogConfig.from_properties({name: str(2**31)})
