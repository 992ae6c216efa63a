"""The broker's side of eligible leader replicas (KIP-966): DescribeTopicPartitions
names them, and registration says whether the last shutdown was clean."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis_describe import _partition
from broker.lifecycle import BrokerLifecycleManager
from metadata_log.controller_api import BrokerRegistrationRequest, BrokerRegistrationResponse
from metadata_log.image import PartitionRegistration
from metadata_log.records import Endpoint


def test_describe_topic_partitions_fills_the_elr_and_last_known_elr() -> None:
    reg = PartitionRegistration((1, 2, 3), (), -1, 4, 9, elr=(2, 3), last_known_elr=(1,))
    out = _partition(reg, 0, live={2})
    assert out["eligible_leader_replicas"] == [2, 3] and out["last_known_elr"] == [1]
    assert out["isr_nodes"] == [] and out["leader_id"] == -1
    assert out["offline_replicas"] == [1, 3]


def test_registration_names_the_epoch_of_the_last_clean_shutdown() -> None:
    """KIP-966: the lifecycle sends what the log manager read from its clean-shutdown
    markers as previous_broker_epoch (-1 after a crash)."""

    class Channel:
        broker_id = 4
        controllers = ["http://c"]

        def __init__(self) -> None:
            self.sent: list[Any] = []

        def set_broker_epoch(self, epoch: int) -> None:
            pass

        async def post(self, path: str, req: Any, resp_type: Any, **kw: Any) -> Any:
            self.sent.append(req)
            return BrokerRegistrationResponse(0, broker_epoch=77)

    async def main() -> None:
        for marker in (41, -1):
            channel = Channel()
            lm = BrokerLifecycleManager(
                channel,  # type: ignore[arg-type]
                [Endpoint("PLAINTEXT", "127.0.0.1", 9092)],
                previous_broker_epoch=lambda marker=marker: marker,  # type: ignore[misc]
            )
            await lm._register()
            (req,) = channel.sent
            assert isinstance(req, BrokerRegistrationRequest)
            assert req.previous_broker_epoch == marker and lm.broker_epoch == 77

    asyncio.run(main())
