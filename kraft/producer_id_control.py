"""The producer id control manager (Kafka's ProducerIdControlManager): hands out blocks
of producer ids to brokers (KIP-730). The next free id is part of the image, so a block
is never handed out twice: the state machine refuses a ProducerIdsRecord that does not
move it forward. Sans-I/O: an image and a request in; a record out.
"""

from __future__ import annotations

from common.errors import Errors
from kraft.decision import ControllerConfig, Decision
from metadata_log.controller_api import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from metadata_log.image import MetadataImage
from metadata_log.records import ProducerIdsRecord


class ProducerIdControlManager:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config

    def allocate_producer_ids(
        self, image: MetadataImage, req: AllocateProducerIdsRequest, now_ms: int
    ) -> Decision:
        b = image.brokers.get(req.broker_id)
        if b is None or b.broker_epoch != req.broker_epoch:
            return Decision.answer(AllocateProducerIdsResponse(Errors.STALE_BROKER_EPOCH))
        start = image.next_producer_id
        size = self.config.producer_id_block_size
        return Decision(
            (ProducerIdsRecord(b.broker_id, b.broker_epoch, start + size),),
            AllocateProducerIdsResponse(Errors.NONE, start, size),
            AllocateProducerIdsResponse(Errors.UNKNOWN_SERVER_ERROR),
        )
