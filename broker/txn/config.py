"""The transaction coordinator's settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TxnConfig:
    """Kafka's transaction coordinator properties, with Kafka's defaults."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_check_interval_ms: int = 10_000  # ...abort.timed.out.transaction.cleanup.interval.ms
    remove_check_interval_ms: int = 3_600_000  # ...remove.expired.transaction.cleanup.interval.ms
