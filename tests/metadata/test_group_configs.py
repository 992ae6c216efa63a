"""Group configs (KIP-848's GroupConfig, ConfigResource type 32), sans-I/O: Kafka 4.0's
names and checks with its messages, the controller's records for a group that need not
exist, and what DescribeConfigs shows of them."""

from __future__ import annotations

import pytest

from broker.config_describe import DEFAULT_CONFIG, DYNAMIC_GROUP_CONFIG, describe_group
from common.errors import Errors
from common.group_config_defs import (
    GROUP_RESOURCE,
    group_config_defaults,
    invalid_group_config,
)
from kraft.service import ControllerApiError
from metadata_log.controller_api import IncrementalAlterConfigsRequest
from tests.metadata.test_controller_managers import Cluster


@pytest.mark.parametrize(
    ("configs", "why"),
    [
        ({"consumer.session.timeout.ms": "50000"}, None),
        ({"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "15000"}, None),
        ({"session.timeout.ms": "50000"}, "Unknown group config name: session.timeout.ms"),
        (
            {"consumer.session.timeout.ms": "abc"},
            "Invalid value abc for configuration consumer.session.timeout.ms: "
            "Not a number of type INT",
        ),
        (
            {"consumer.session.timeout.ms": "0"},
            "Invalid value 0 for configuration consumer.session.timeout.ms: "
            "Value must be at least 1",
        ),
        (
            {"consumer.session.timeout.ms": "44999"},
            "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms",
        ),
        (
            {"consumer.session.timeout.ms": "60001"},
            "consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "4999"},
            "consumer.heartbeat.interval.ms must be greater than or equal to "
            "group.consumer.min.heartbeat.interval.ms",
        ),
        (
            {"consumer.heartbeat.interval.ms": "15001"},
            "consumer.heartbeat.interval.ms must be less than or equal to "
            "group.consumer.max.heartbeat.interval.ms",
        ),
        (
            {"share.record.lock.duration.ms": "60001"},
            "share.record.lock.duration.ms must be less than or equal to "
            "group.share.max.record.lock.duration.ms",
        ),
        (
            {"share.auto.offset.reset": "none"},
            "Invalid value none for configuration share.auto.offset.reset: "
            "String must be one of: latest, earliest",
        ),
    ],
)
def test_kafka_group_config_checks(configs: dict[str, str], why: str | None) -> None:
    assert invalid_group_config(configs) == why


def test_session_timeout_must_exceed_heartbeat_under_wider_bounds() -> None:
    broker = {
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.max.heartbeat.interval.ms": "50000",
    }
    assert invalid_group_config(
        {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "6000"}, broker
    ) == ("consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert (
        group_config_defaults({"group.consumer.session.timeout.ms": "50000"})[
            "consumer.session.timeout.ms"
        ]
        == "50000"
    )


def _alter(cluster: Cluster, name: str, **kw: object) -> None:
    req = IncrementalAlterConfigsRequest(GROUP_RESOURCE, name, **kw)  # type: ignore[arg-type]
    assert cluster.run(req) is None


def _refused(cluster: Cluster, name: str, **kw: object) -> ControllerApiError:
    req = IncrementalAlterConfigsRequest(GROUP_RESOURCE, name, **kw)  # type: ignore[arg-type]
    with pytest.raises(ControllerApiError) as info:
        cluster.run(req)
    return info.value


def test_controller_stores_group_configs_of_any_group() -> None:
    cluster = Cluster()
    cluster.start_broker(0)
    _alter(cluster, "no-such-group", set={"consumer.session.timeout.ms": "50000"})
    key = (GROUP_RESOURCE, "no-such-group")
    assert cluster.sm.image.configs[key] == {"consumer.session.timeout.ms": "50000"}
    bad = _refused(cluster, "no-such-group", set={"consumer.heartbeat.interval.ms": "1"})
    assert bad.error_code == Errors.INVALID_CONFIG
    assert "group.consumer.min.heartbeat.interval.ms" in str(bad.message)
    unknown = _refused(cluster, "g", set={"nope": "1"})
    assert (unknown.error_code, unknown.message) == (
        Errors.INVALID_CONFIG,
        "Unknown group config name: nope",
    )
    assert _refused(cluster, "", set={}).error_code == Errors.INVALID_REQUEST
    _alter(cluster, "no-such-group", set={"share.session.timeout.ms": "50000"}, validate_only=True)
    assert cluster.sm.image.configs[key] == {"consumer.session.timeout.ms": "50000"}
    _alter(cluster, "no-such-group", delete=["consumer.session.timeout.ms"])
    assert key not in cluster.sm.image.configs


def test_describe_group_sources() -> None:
    entries = {e.name: e for e in describe_group({"consumer.session.timeout.ms": "50000"}, {})}
    assert len(entries) == 6
    session = entries["consumer.session.timeout.ms"]
    assert (session.value, session.source) == ("50000", DYNAMIC_GROUP_CONFIG)
    heartbeat = entries["consumer.heartbeat.interval.ms"]
    assert (heartbeat.value, heartbeat.source) == ("5000", DEFAULT_CONFIG)
    assert entries["share.auto.offset.reset"].value == "latest"
    assert not any(e.read_only or e.sensitive for e in entries.values())
