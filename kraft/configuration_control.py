"""The configuration control manager (Kafka's ConfigurationControlManager): topic and
broker config records, their validation, and the config-derived settings other managers
read (unclean leader election). Sans-I/O: an image and a request in; records out.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.errors import Errors
from kraft.decision import ControllerConfig, Decision
from kraft.service import ControllerApiError
from metadata_log.controller_api import IncrementalAlterConfigsRequest
from metadata_log.image import MetadataImage
from metadata_log.records import TOPIC_RESOURCE, ConfigRecord, Record
from storage.config import ConfigError, LogConfig

# Topic configs this cluster understands (values checked where a parser exists).
TOPIC_CONFIGS = {
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
}


def _unknown_topic_configs(names: set[str]) -> str | None:
    unknown = sorted(names - TOPIC_CONFIGS)
    return f"unknown topic configs: {', '.join(unknown)}" if unknown else None


class ConfigurationControlManager:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config

    # -- reads for other managers ----------------------------------------------------------

    def unclean_leader_election(self, image: MetadataImage, topic_name: str) -> bool:
        """`unclean.leader.election.enable` of the topic, else the cluster default."""
        value = image.topic_config(topic_name).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election
        return value.lower() == "true"

    # -- topic creation (called by the replication manager) --------------------------------

    def validate_new_topic_configs(self, configs: Mapping[str, str]) -> str | None:
        """Why the configs of a topic being created are refused (INVALID_CONFIG), or None."""
        unknown = _unknown_topic_configs(set(configs))
        if unknown:
            return unknown
        try:
            LogConfig.from_properties(configs)
            mir = configs.get("min.insync.replicas")
            if mir is not None and int(mir) < 1:
                raise ConfigError("min.insync.replicas must be >= 1")
        except (ConfigError, ValueError) as exc:
            return str(exc)
        return None

    def new_topic_config_records(self, name: str, configs: Mapping[str, str]) -> list[Record]:
        return [
            ConfigRecord(TOPIC_RESOURCE, name, key, value) for key, value in sorted(configs.items())
        ]

    # -- IncrementalAlterConfigs -------------------------------------------------------------

    def alter_configs(
        self, image: MetadataImage, req: IncrementalAlterConfigsRequest, now_ms: int
    ) -> Decision:
        """Its response has no error field: a refusal is a ControllerApiError."""
        if req.resource_type == TOPIC_RESOURCE:
            if req.resource_name not in image.topic_ids:
                raise ControllerApiError(
                    Errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {req.resource_name}"
                )
            unknown = _unknown_topic_configs(set(req.set) | set(req.delete))
            if unknown:
                raise ControllerApiError(Errors.INVALID_CONFIG, unknown)
            try:
                LogConfig.from_properties(req.set)
            except ValueError as exc:  # ConfigError is a ValueError
                raise ControllerApiError(Errors.INVALID_CONFIG, str(exc)) from None
        records: list[Record] = [
            ConfigRecord(req.resource_type, req.resource_name, k, v)
            for k, v in sorted(req.set.items())
        ] + [
            ConfigRecord(req.resource_type, req.resource_name, k, None) for k in sorted(req.delete)
        ]
        return Decision(tuple(records))
