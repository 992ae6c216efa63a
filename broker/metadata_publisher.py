"""What the metadata loader hands each publisher after every batch it applied (Kafka's
MetadataPublisher and LoaderManifest).

A publisher is anything on the broker whose state follows the metadata log: the dynamic
broker configs (broker/dynamic_config.py), the replica manager (become leader / follower
/ stop replica, topic configs), the authorizer (ACL records), the group coordinator (load
or drop the groups of the `__consumer_offsets` partitions we lead), the broker lifecycle
(tell the controller we caught up). Publishers run one at a time, in the order they were registered,
and the loader waits for each before the next and before fetching more: updates never
overlap, and a later publisher sees what an earlier one did with the same image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage


@dataclass(frozen=True, slots=True)
class LoaderManifest:
    """Where an update came from."""

    previous: MetadataImage  # the image publishers were given last time
    # The image came from a snapshot and replaced ours wholesale (the delta was replayed
    # onto an empty image): local state the image does not mention is stale.
    snapshot: bool


class MetadataPublisher(Protocol):
    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        """Apply one update. Raising stops this update (the publishers after this one do
        not see it) and makes the loader start over from a snapshot."""
        ...
