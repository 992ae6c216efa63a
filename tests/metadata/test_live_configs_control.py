"""The controller's side of live configs, sans-I/O: IncrementalAlterConfigs (SET, DELETE,
APPEND, SUBTRACT) and AlterConfigs (replace) become config records, checked whole with
Kafka's rules and messages; validate_only writes nothing; the cluster default of
`unclean.leader.election.enable` is what elections read."""

from __future__ import annotations

import pytest

from common.broker_config_defs import invalid_dynamic_broker_config
from common.config_def import ConfigKey, ConfigType
from common.errors import Errors
from common.topic_config_defs import effective_topic_value, invalid_topic_config
from kraft.service import ControllerApiError
from metadata_log.controller_api import (
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from metadata_log.records import BROKER_RESOURCE, TOPIC_RESOURCE
from tests.metadata.test_controller_managers import Cluster


def alter(cluster: Cluster, rtype: int, name: str, **kw: object) -> None:
    assert cluster.run(IncrementalAlterConfigsRequest(rtype, name, **kw)) is None  # type: ignore[arg-type]


def refused(cluster: Cluster, rtype: int, name: str, **kw: object) -> ControllerApiError:
    with pytest.raises(ControllerApiError) as info:
        cluster.run(IncrementalAlterConfigsRequest(rtype, name, **kw))  # type: ignore[arg-type]
    return info.value


@pytest.fixture
def cluster() -> Cluster:
    c = Cluster()
    c.start_broker(0)
    c.run(CreateTopicsRequest([CreatableTopic("t", 1, 1, configs={"retention.ms": "9"})]))
    return c


def test_incremental_operations(cluster: Cluster) -> None:
    alter(
        cluster,
        TOPIC_RESOURCE,
        "t",
        set={"segment.ms": "1000"},
        append={"cleanup.policy": "compact"},
    )
    assert cluster.sm.image.topic_config("t") == {
        "retention.ms": "9",
        "segment.ms": "1000",
        "cleanup.policy": "delete,compact",  # appended to Kafka's default
    }
    alter(
        cluster, TOPIC_RESOURCE, "t", subtract={"cleanup.policy": "delete"}, delete=["retention.ms"]
    )
    assert cluster.sm.image.topic_config("t") == {"segment.ms": "1000", "cleanup.policy": "compact"}
    alter(cluster, TOPIC_RESOURCE, "t", append={"cleanup.policy": "compact"})  # already there
    assert cluster.sm.image.topic_config("t")["cleanup.policy"] == "compact"


def test_alter_configs_replaces_and_validate_only_writes_nothing(cluster: Cluster) -> None:
    offset = cluster.sm.next_offset
    alter(cluster, TOPIC_RESOURCE, "t", set={"segment.ms": "5"}, validate_only=True)
    assert cluster.sm.next_offset == offset
    alter(cluster, TOPIC_RESOURCE, "t", set={"segment.ms": "5"}, replace=True)
    assert cluster.sm.image.topic_config("t") == {"segment.ms": "5"}


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"min.insync.replicas": "0"},
         "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        ({"retention.ms": "abc"},
         "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
        ({"cleanup.policy": "foo"},
         "Invalid value foo for configuration cleanup.policy: String must be one of: compact, "),
        ({"no.such": "1"}, "Unknown topic config name: no.such"),
        ({"segment.bytes": "3000000000"}, "Not a number of type INT"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"unclean.leader.election.enable": "yes"}, "Expected value to be either true or false"),
    ],
)  # fmt: skip
def test_bad_topic_values_are_invalid_config(
    cluster: Cluster, configs: dict[str, str], message: str
) -> None:
    err = refused(cluster, TOPIC_RESOURCE, "t", set=configs)
    assert err.error_code == Errors.INVALID_CONFIG
    assert message in err.message
    assert cluster.sm.image.topic_config("t") == {"retention.ms": "9"}


def test_resource_refusals(cluster: Cluster) -> None:
    assert refused(cluster, TOPIC_RESOURCE, "nope", set={"retention.ms": "1"}).error_code == (
        Errors.UNKNOWN_TOPIC_OR_PARTITION
    )
    assert refused(cluster, TOPIC_RESOURCE, "", set={}).error_code == Errors.INVALID_REQUEST
    err = refused(cluster, TOPIC_RESOURCE, "t", append={"retention.ms": "1"})
    assert (err.error_code, err.message) == (
        Errors.INVALID_CONFIG,
        "Can't APPEND to key retention.ms because its type is not LIST.",
    )
    err = refused(cluster, BROKER_RESOURCE, "x", set={"log.retention.ms": "1"})
    assert err.message == "Unable to parse broker name as a base 10 number."
    err = refused(cluster, BROKER_RESOURCE, "-1", set={"log.retention.ms": "1"})
    assert err.message == "Invalid negative broker ID."
    err = refused(cluster, BROKER_RESOURCE, "", set={"log.dirs": "/x"})
    assert err.error_code == Errors.INVALID_REQUEST
    assert err.message == "Cannot update these configs dynamically: Set(log.dirs)"


def test_broker_configs_and_the_cluster_default_of_unclean_election(cluster: Cluster) -> None:
    manager = cluster.controller.configuration
    assert not manager.unclean_leader_election(cluster.sm.image, "t")
    alter(cluster, BROKER_RESOURCE, "", set={"unclean.leader.election.enable": "true"})
    assert manager.unclean_leader_election(cluster.sm.image, "t")
    alter(cluster, TOPIC_RESOURCE, "t", set={"unclean.leader.election.enable": "false"})
    assert not manager.unclean_leader_election(cluster.sm.image, "t")  # the topic decides
    alter(cluster, BROKER_RESOURCE, "0", set={"log.retention.ms": "60000", "custom.x": "1"})
    assert cluster.sm.image.configs[(BROKER_RESOURCE, "0")] == {
        "log.retention.ms": "60000",
        "custom.x": "1",  # names Kafka does not know are kept, as Kafka's
    }


def test_validation_helpers() -> None:
    assert invalid_topic_config({"retention.ms": "-1", "cleanup.policy": "compact, delete"}) is None
    assert (
        invalid_dynamic_broker_config(
            {"num.io.threads": "16"}, True, current={"num.io.threads": "8"}
        )
        is None
    )
    why = invalid_dynamic_broker_config(
        {"num.io.threads": "17"}, True, current={"num.io.threads": "8"}
    )
    assert why and "not be greater than double the current value 8" in why
    why = invalid_dynamic_broker_config({"listeners": "x", "log.dirs": "y"}, False)
    assert why == "Cannot update these configs dynamically: Set(listeners, log.dirs)"
    key = ConfigKey("k", ConfigType.SHORT, "1", at_least=0)
    with pytest.raises(ValueError, match="Not a number of type SHORT"):
        key.check("40000")


def test_effective_topic_value_follows_kafka_precedence() -> None:
    broker = {"log.retention.hours": "2", "log.retention.minutes": "3"}
    assert effective_topic_value("retention.ms", {}, broker) == "180000"  # minutes win
    assert effective_topic_value("retention.ms", {}, {**broker, "log.retention.ms": "7"}) == "7"
    assert effective_topic_value("retention.ms", {"retention.ms": "1"}, broker) == "1"
    assert effective_topic_value("retention.ms", {}, {"log.retention.hours": "-1"}) == "-1"
    assert effective_topic_value("max.message.bytes", {}, {"message.max.bytes": "10"}) == "10"
    assert effective_topic_value("segment.bytes", {}, {}) == "1073741824"


def test_a_dynamic_default_of_unclean_election_elects_at_the_next_tick() -> None:
    from metadata_log.controller_api import AlterPartitionRequest, BrokerHeartbeatRequest
    from tests.metadata.test_controller_managers import SESSION_MS

    c = Cluster()
    epochs = {b: c.start_broker(b) for b in (0, 1)}
    created = c.run(CreateTopicsRequest([CreatableTopic("u", -1, -1, assignments={0: [0, 1]})]))
    assert created.topics[0].error_code == Errors.NONE, created
    topic = c.sm.image.topic_by_name("u")
    reg = topic.partitions[0]
    assert reg.leader == 0
    # The ISR shrinks to the leader; then the leader's session runs out.
    c.run(AlterPartitionRequest(0, epochs[0], topic.topic_id, 0, reg.leader_epoch,
                                reg.partition_epoch, [0]))  # fmt: skip
    c.run(BrokerHeartbeatRequest(1, epochs[1], c.sm.next_offset), SESSION_MS)
    c.append(c.controller.tick(c.sm.image, SESSION_MS + 1))
    assert c.sm.image.topic_by_name("u").partitions[0].leader == -1  # no clean choice
    assert c.controller.tick(c.sm.image, SESSION_MS + 2) == []
    alter(c, BROKER_RESOURCE, "", set={"unclean.leader.election.enable": "true"})
    c.run(BrokerHeartbeatRequest(1, epochs[1], c.sm.next_offset), SESSION_MS + 3)
    c.append(c.controller.tick(c.sm.image, SESSION_MS + 4))
    assert c.sm.image.topic_by_name("u").partitions[0].leader == 1


def test_secret_config_values_are_redacted_in_dumps() -> None:
    from metadata_log.records import ConfigRecord
    from metadata_log.redactor import REDACTED, loggable_record

    secret = ConfigRecord(BROKER_RESOURCE, "", "listener.name.x.ssl.key.password", "pw")
    assert loggable_record(secret)["value"] == REDACTED
    plain = ConfigRecord(TOPIC_RESOURCE, "t", "retention.ms", "5")
    assert loggable_record(plain)["value"] == "5"
