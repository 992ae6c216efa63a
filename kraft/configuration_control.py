"""The configuration control manager (Kafka's ConfigurationControlManager): topic, broker
and group (KIP-848's GroupConfig, resource type 32) config records, their validation, and
the config-derived settings other managers read (unclean leader election). Sans-I/O: an
image and a request in; records out.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.broker_config_defs import config_key, invalid_dynamic_broker_config
from common.config_def import ConfigType, split_list
from common.errors import Errors
from common.group_config_defs import GROUP_CONFIG_KEYS, GROUP_RESOURCE, invalid_group_config
from common.topic_config_defs import TOPIC_CONFIG_KEYS, invalid_topic_config
from kraft.decision import ControllerConfig, Decision
from kraft.election import ELR_OFF, ElrPolicy
from kraft.service import ControllerApiError
from metadata_log.controller_api import IncrementalAlterConfigsRequest
from metadata_log.image import MetadataImage
from metadata_log.records import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigRecord, Record
from storage.config import ConfigError, LogConfig

# Topic configs this cluster understands: Kafka's (common/topic_config_defs.py).
TOPIC_CONFIGS = frozenset(TOPIC_CONFIG_KEYS)


def _unknown_topic_configs(names: set[str]) -> str | None:
    unknown = sorted(names - TOPIC_CONFIGS)
    return f"Unknown topic config name: {unknown[0]}" if unknown else None


class ConfigurationControlManager:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config

    # -- reads for other managers ----------------------------------------------------------

    def unclean_leader_election(self, image: MetadataImage, topic_name: str) -> bool:
        """`unclean.leader.election.enable` as Kafka's controller reads it: the topic's
        override, else the cluster-wide dynamic default (`--entity-default`), else this
        controller's static config."""
        value = image.topic_config(topic_name).get("unclean.leader.election.enable")
        if value is None:
            value = image.configs.get((BROKER_RESOURCE, ""), {}).get(
                "unclean.leader.election.enable"
            )
        if value is None:
            return self.config.unclean_leader_election
        return value.strip().lower() == "true"

    def elr_policy(self, image: MetadataImage, topic_name: str) -> ElrPolicy:
        """How the topic's ELR is kept (KIP-966): the controller's
        `eligible.leader.replicas.enable` and the topic's `min.insync.replicas` (its
        override, else the cluster-wide dynamic default, else this controller's)."""
        if not self.config.eligible_leader_replicas_enable:
            return ELR_OFF
        value = image.topic_config(topic_name).get("min.insync.replicas")
        if value is None:
            value = image.configs.get((BROKER_RESOURCE, ""), {}).get("min.insync.replicas")
        try:
            min_isr = int(value) if value is not None else self.config.min_insync_replicas
        except ValueError:
            min_isr = self.config.min_insync_replicas
        return ElrPolicy(True, max(1, min_isr))

    # -- topic creation (called by the replication manager) --------------------------------

    def validate_new_topic_configs(self, configs: Mapping[str, str]) -> str | None:
        """Why the configs of a topic being created are refused (INVALID_CONFIG), or None."""
        why = invalid_topic_config(configs)
        if why is not None:
            return why
        try:  # what our logs need beyond Kafka's checks
            LogConfig.from_properties(configs)
        except (ConfigError, ValueError) as exc:
            return str(exc)
        return None

    def new_topic_config_records(self, name: str, configs: Mapping[str, str]) -> list[Record]:
        return [
            ConfigRecord(TOPIC_RESOURCE, name, key, value) for key, value in sorted(configs.items())
        ]

    # -- IncrementalAlterConfigs and AlterConfigs -------------------------------------------

    def alter_configs(
        self, image: MetadataImage, req: IncrementalAlterConfigsRequest, now_ms: int
    ) -> Decision:
        """Kafka's ConfigurationControlManager: the resource's new config, checked whole,
        becomes one ConfigRecord per changed name (none with validate_only). Its response
        has no error field: a refusal is a ControllerApiError."""
        key = (req.resource_type, req.resource_name)
        current = image.configs.get(key, {})
        if req.resource_type == TOPIC_RESOURCE:
            if not req.resource_name:
                raise ControllerApiError(
                    Errors.INVALID_REQUEST, "Default topic resources are not allowed."
                )
            if req.resource_name not in image.topic_ids:
                raise ControllerApiError(
                    Errors.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                )
        elif req.resource_type == GROUP_RESOURCE:
            # ControllerConfigurationValidator.validateGroupName; the group need not exist.
            if not req.resource_name:
                raise ControllerApiError(
                    Errors.INVALID_REQUEST, "Default group resources are not allowed."
                )
        else:
            _check_broker_name(req.resource_name)
        new = _apply(req, current)
        changed = {k: v for k, v in new.items() if current.get(k) != v}
        if req.resource_type == TOPIC_RESOURCE:
            why = self.validate_new_topic_configs(new)
            if why is not None:
                raise ControllerApiError(Errors.INVALID_CONFIG, why)
        elif req.resource_type == GROUP_RESOURCE:
            # Bounded by Kafka's default coordinator settings: the controller has no
            # group.consumer.* settings of its own.
            why = invalid_group_config(new)
            if why is not None:
                raise ControllerApiError(Errors.INVALID_CONFIG, why)
        else:
            why = invalid_dynamic_broker_config(changed, req.resource_name != "")
            if why is not None:
                raise ControllerApiError(Errors.INVALID_REQUEST, why)
        if req.validate_only:
            return Decision()
        records: list[Record] = [
            ConfigRecord(req.resource_type, req.resource_name, k, v)
            for k, v in sorted(changed.items())
        ] + [
            ConfigRecord(req.resource_type, req.resource_name, k, None)
            for k in sorted(current.keys() - new.keys())
        ]
        return Decision(tuple(records))


def _check_broker_name(name: str) -> None:
    """ControllerConfigurationValidator.validateBrokerName: "" or a broker id."""
    if not name:
        return
    if not (name.isascii() and name.lstrip("-").isdigit()):
        raise ControllerApiError(
            Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number."
        )
    if int(name) < 0:
        raise ControllerApiError(Errors.INVALID_REQUEST, "Invalid negative broker ID.")


def _apply(req: IncrementalAlterConfigsRequest, current: Mapping[str, str]) -> dict[str, str]:
    """The resource's config after the request: AlterConfigs replaces it; incremental
    operations SET, DELETE, APPEND and SUBTRACT change it name by name."""
    if req.replace:
        return dict(req.set)
    new = dict(current)
    new.update(req.set)
    for name in req.delete:
        new.pop(name, None)
    for name, items, adding in [(n, v, True) for n, v in req.append.items()] + [
        (n, v, False) for n, v in req.subtract.items()
    ]:
        key = (
            GROUP_CONFIG_KEYS.get(name)
            if req.resource_type == GROUP_RESOURCE
            else config_key(req.resource_type, name)
        )
        if key is None or key.type != ConfigType.LIST:
            op = "APPEND" if adding else "SUBTRACT"
            raise ControllerApiError(
                Errors.INVALID_CONFIG, f"Can't {op} to key {name} because its type is not LIST."
            )
        old = split_list(new.get(name, key.default or ""))
        given = split_list(items)
        if adding:
            old += [x for x in given if x not in old]
        else:
            old = [x for x in old if x not in given]
        new[name] = ",".join(old)
    return new
