"""The metadata log, followed from the controllers and applied (Kafka's MetadataLoader).

Long-polled from any controller (they all serve committed records), starting from a
snapshot at first start or when our offset fell off the retained tail (410). Every
batch of records becomes one `MetadataDelta` and a new `MetadataImage`, handed to each
registered publisher in order (`metadata_publisher.py`); the next fetch waits for them
all, so updates never overlap. Only then does `image` move: what the loader reports is
what every publisher has applied.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import msgspec

from broker.controller_channel import (
    BACKOFF_MAX_S,
    BACKOFF_MIN_S,
    ControllerChannel,
    ControllerUnavailable,
)
from broker.metadata_publisher import LoaderManifest, MetadataPublisher
from broker.shutdownable import ShutdownableTask
from common.clock import SYSTEM_CLOCK, Clock
from metadata_log.controller_api import LogResponse
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.snapshot import SnapshotError, decode_snapshot, snapshot_records

log = logging.getLogger("broker.metadata_loader")

LONG_POLL_WAIT_MS = 5_000
# A long-poll answer later than its wait plus this is not coming: the controller died or
# was cut off while the connection stayed open in our kernel (no FIN or RST reached us),
# or it is paused. Waiting out the request timeout (30 s) instead left a broker serving
# a stale image as a deposed leader long after the faults healed (fault campaign seed
# 3751298459). Kafka's observers bound a fetch by controller.quorum.request.timeout.ms.
LONG_POLL_MARGIN_MS = 5_000
MAX_RECORDS = 5_000
# The active controller writes a NoOpRecord every 5 s when idle: a controller that has
# sent us nothing for this long is probably cut off from the quorum. Try another.
STALE_AFTER_MS = 15_000


class MetadataLoader:
    def __init__(self, channel: ControllerChannel, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._channel = channel
        self._clock = clock
        # Spread brokers' reads over the controllers.
        self._reader = channel.broker_id % len(channel.controllers)
        self.publishers: list[MetadataPublisher] = []  # in the order they see each update
        self.image = MetadataImage()
        self._loop = ShutdownableTask("metadata-loader", self._follow_metadata)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _follow_metadata(self) -> None:
        need_snapshot = True  # first start: the snapshot is the quickest way to the present
        backoff = BACKOFF_MIN_S
        clock = self._clock
        last_records = clock.monotonic_ms()
        while not self._loop.stopping:
            base = self._channel.controllers[self._reader]
            try:
                if need_snapshot:
                    await self._load_snapshot(base)
                    need_snapshot = False
                    last_records = clock.monotonic_ms()
                    continue
                status, body, _ = await self._channel.get(
                    f"{base}/v1/metadata/log?from={self.image.offset + 1}"
                    f"&wait_ms={LONG_POLL_WAIT_MS}&max_records={MAX_RECORDS}&format=msgpack",
                    (LONG_POLL_WAIT_MS + LONG_POLL_MARGIN_MS) / 1000,
                )
                if status == 410:
                    log.info(
                        "metadata offset %d fell off the log; loading a snapshot",
                        self.image.offset + 1,
                    )
                    need_snapshot = True
                    continue
                if status != 200:
                    raise ControllerUnavailable(f"GET metadata log from {base}: HTTP {status}")
                resp = msgspec.msgpack.decode(body, type=LogResponse)
                if resp.records:
                    await self._apply_records(resp)
                    last_records = clock.monotonic_ms()
                elif clock.monotonic_ms() - last_records > STALE_AFTER_MS:
                    log.info(
                        "no metadata from %s for %.0fs; trying another controller",
                        base,
                        STALE_AFTER_MS / 1000,
                    )
                    self._rotate_reader()
                    last_records = clock.monotonic_ms()
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, OSError, ControllerUnavailable) as exc:
                log.debug("metadata fetch from %s failed: %r", base, exc)
                self._rotate_reader()
                await clock.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
            except Exception as exc:
                # A bad answer, a record we cannot replay, or a failure applying it (a
                # full disk): never skip records. Start over from a snapshot, elsewhere.
                if isinstance(exc, msgspec.DecodeError | SnapshotError | ValueError):
                    log.error("bad metadata from %s: %s", base, exc)
                else:
                    log.exception("applying metadata failed; retrying from a snapshot")
                self._rotate_reader()
                need_snapshot = True
                await clock.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _rotate_reader(self) -> None:
        self._reader = (self._reader + 1) % len(self._channel.controllers)

    async def _load_snapshot(self, base: str) -> None:
        status, body, headers = await self._channel.get(
            f"{base}/v1/metadata/snapshot", self._channel.request_timeout_s
        )
        if status != 200:
            raise ControllerUnavailable(f"GET snapshot from {base}: HTTP {status}")
        next_offset = int(headers.get("X-Next-Offset", "-1"))
        image = await asyncio.to_thread(decode_snapshot, body)
        if next_offset > 0:
            image = msgspec.structs.replace(image, offset=max(image.offset, next_offset - 1))
        if image.offset < self.image.offset:
            # A controller behind the one we read before: keep what we have.
            log.info(
                "snapshot at %d is behind our offset %d; ignored", image.offset, self.image.offset
            )
            return
        delta = MetadataDelta(MetadataImage())
        for i, record in enumerate(snapshot_records(image)):
            delta.replay(record, i)  # positions only order the replay
        await self._publish(delta, image, snapshot=True)

    async def _apply_records(self, resp: LogResponse) -> None:
        delta = MetadataDelta(self.image)
        for entry in resp.records:
            if entry.offset <= self.image.offset:
                continue  # overlap after a rotation: already applied
            delta.replay(entry.record, entry.offset)
        new = delta.apply()
        if new.offset == self.image.offset:
            return
        await self._publish(delta, new, snapshot=False)

    async def _publish(self, delta: MetadataDelta, image: MetadataImage, snapshot: bool) -> None:
        manifest = LoaderManifest(self.image, snapshot)
        for publisher in self.publishers:
            await publisher.on_metadata_update(delta, image, manifest)
        self.image = image
