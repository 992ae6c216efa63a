"""A broker's configuration as it is now: `server.properties` with the dynamic broker
configs of the metadata log on top (Kafka's DynamicBrokerConfig), and the publisher that
keeps it current.

Layers, most specific first: this broker's dynamic configs (`--entity-name <id>`), the
cluster-wide dynamic default (`--entity-default`, resource name ""), the static
properties, Kafka's defaults. A topic's effective config is its own overrides over the
log defaults these layers give (`log.retention.ms`, `log.segment.bytes`, ...), as Kafka's
LogConfig over KafkaConfig.extractLogConfigMap.

The layering is plain data in, data out; `DynamicConfigPublisher` only swaps in the new
layers and pushes what changed into the parts that read them live (the log manager's
cleaner back-off, and through the replica manager every log's config).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from common.config_def import is_sensitive_config
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import BROKER_RESOURCE
from storage.config import ConfigError, LogConfig
from storage.log_manager import LogManagerConfig

log = logging.getLogger(__name__)

CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide broker default


@dataclass(frozen=True)
class ConfigLayers:
    """The broker config layers: name -> value text."""

    static: Mapping[str, str]
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, static: Mapping[str, str], image: MetadataImage, node_id: int) -> ConfigLayers:
        return cls(
            static,
            image.configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), {}),
            image.configs.get((BROKER_RESOURCE, str(node_id)), {}),
        )

    def merged(self) -> dict[str, str]:
        """The broker's properties now (what KafkaConfig is rebuilt from)."""
        return {**self.static, **self.dynamic_default, **self.dynamic_broker}

    def log_config(self, fallback: LogConfig) -> LogConfig:
        """The log defaults of every topic without an override. A bad layered value (the
        controller checks them, a static file may disagree) leaves `fallback`."""
        try:
            return LogConfig.from_broker_properties(self.merged())
        except (ConfigError, ValueError) as exc:
            log.warning("dynamic broker configs give a bad log config, keeping the last: %s", exc)
            return fallback

    def get_int(self, name: str, fallback: int) -> int:
        raw = self.merged().get(name)
        try:
            return int(raw.strip()) if raw is not None else fallback
        except ValueError:
            return fallback


class DynamicBrokerConfig:
    """The current layers of one broker, and what follows from them."""

    def __init__(self, node_id: int, static: Mapping[str, str], static_log: LogConfig) -> None:
        self.node_id = node_id
        self.layers = ConfigLayers(dict(static))
        self.log_config = static_log  # the log defaults now
        self._static_min_isr = ConfigLayers(dict(static)).get_int("min.insync.replicas", 1)
        self.min_insync_replicas = self._static_min_isr

    def update(self, image: MetadataImage) -> bool:
        """Take the image's dynamic broker configs; True when anything changed."""
        layers = ConfigLayers.of(self.layers.static, image, self.node_id)
        if layers == self.layers:
            return False
        self.layers = layers
        self.log_config = layers.log_config(self.log_config)
        self.min_insync_replicas = max(1, layers.get_int("min.insync.replicas", 1))
        return True

    def topic_log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's effective log config: its overrides over the broker's log defaults."""
        return LogConfig.from_properties(overrides, self.log_config)


class DynamicConfigPublisher:
    """MetadataPublisher: keeps `DynamicBrokerConfig` current and applies the settings
    read outside the logs (the log cleaner's back-off)."""

    def __init__(
        self,
        dynamic: DynamicBrokerConfig,
        on_change: Callable[[DynamicBrokerConfig], None] | None = None,
    ) -> None:
        self.dynamic = dynamic
        self._on_change = on_change

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: object
    ) -> None:
        if self.dynamic.update(image):
            layers = self.dynamic.layers
            log.info(
                "dynamic broker configs now: default %s, broker %s",
                _loggable(layers.dynamic_default),
                _loggable(layers.dynamic_broker),
            )
            if self._on_change is not None:
                self._on_change(self.dynamic)


def _loggable(configs: Mapping[str, str]) -> dict[str, str]:
    return {k: "(redacted)" if is_sensitive_config(k) else v for k, v in configs.items()}


def with_cleaner_backoff(config: LogManagerConfig, layers: ConfigLayers) -> LogManagerConfig:
    """The log manager's settings with `log.cleaner.backoff.ms` from the layers."""
    backoff = layers.get_int("log.cleaner.backoff.ms", config.cleaner_backoff_ms)
    return dataclasses.replace(config, cleaner_backoff_ms=max(0, backoff))
