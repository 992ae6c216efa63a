"""The seam between the Kafka-protocol side of a broker (`network`, `codec`, `apis`) and
the rest of it (`controller_channel`, `replica_manager`, `partition`, the process main).

The protocol handlers see a broker only through `BrokerRuntime`: the latest metadata
image, the partitions hosted here, and the controller for admin requests. Errors are
Kafka error codes (ints), so handlers can answer without translating exceptions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.results import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from metadata_log.controller_api import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from metadata_log.image import MetadataImage

if TYPE_CHECKING:
    from broker.group.manager import GroupCoordinator


class BrokerRuntime(Protocol):
    broker_id: int
    cluster_id: str
    groups: GroupCoordinator  # the group coordinator (the group APIs go straight to it)

    def image(self) -> MetadataImage:
        """The latest metadata image this broker has applied."""
        ...

    def advertised_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) clients should use for `broker_id` on this listener."""
        ...

    # -- data path (per partition; work per batch, never per record) ------------------------
    async def produce(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> ProduceResult:
        """Append as leader. acks=0/1 answer after the local append; acks=-1 when the HW
        passes the batch (or NOT_ENOUGH_REPLICAS / REQUEST_TIMED_OUT). Idempotent
        producers: duplicates get their original offsets; gaps OUT_OF_ORDER_SEQUENCE."""
        ...

    def fetch(self, p: FetchPartition, replica_id: int, isolation_level: int) -> FetchResult:
        """Read from the log: consumers up to the HW, followers (replica_id >= 0) up to
        the LEO, recording the follower's fetch offset for ISR/HW."""
        ...

    async def wait_for_data(
        self,
        partitions: list[FetchPartition],
        min_bytes: int,
        max_wait_ms: int,
        replica_id: int = -1,
    ) -> None:
        """Return once appends (or HW moves) could satisfy `min_bytes`, or after
        `max_wait_ms`: woken by events, never by polling. A follower (`replica_id` >= 0)
        waits for data up to the LEO, a consumer up to the HW."""
        ...

    def list_offset(
        self, topic: str, partition: int, timestamp: int, current_leader_epoch: int
    ) -> ListOffsetResult:
        """timestamp -2 earliest, -1 latest (HW), -3 max timestamp, else by time."""
        ...

    def offset_for_leader_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        """(error code, epoch, end offset) from the leader epoch cache."""
        ...

    async def init_producer_id(self) -> tuple[int, int, int]:
        """(error code, producer id, producer epoch) from a block the controller handed out."""
        ...

    # -- admin (forwarded to the active controller) ------------------------------------------
    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse: ...
    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse: ...
    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse: ...

    def broker_configs(self) -> dict[str, tuple[str, bool]]:
        """This broker's configs: name -> (value, is_default), for DescribeConfigs."""
        ...

    def topic_configs(self, topic: str) -> dict[str, tuple[str, bool]] | None:
        """A topic's effective configs (None: unknown topic)."""
        ...
