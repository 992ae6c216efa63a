"""The broker's HTTP link to the controller quorum (Kafka's
NodeToControllerChannelManager): one aiohttp session shared by the broker lifecycle,
the metadata loader and every write the broker sends.

- Reads (the metadata log and snapshots) may go to any controller: they all serve
  committed records. The loader picks which (`get`).
- Writes (registration, heartbeats, admin, AlterPartition, producer ids) go to the
  active controller: followers answer 307 with its address, or 503 while there is
  none; `post` retries across controllers until a deadline.
Controller failover needs nothing from the broker but these retries and rotations.

Once registered, every request names the broker's incarnation in an `X-Kraft-Broker:
<id>:<epoch>` header: the active controller watches those connections, and when all of
them close (the process died) it may fence the broker early (kraft/cluster_control.py).

Security (common/controller_plane.py): https with the broker's TLS client context when
the controller listener is SSL, and `Authorization: Bearer <token>` on every request when
a token is configured; both set once, on the session.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import msgspec

from common.clock import SYSTEM_CLOCK, Clock
from common.controller_plane import ControllerPlaneClient
from common.errors import Errors
from metadata_log.controller_api import (  # elections and quorum status
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    BrokerUnreachableRequest,
    BrokerUnreachableResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ErrorResponse,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    QuorumStatus,
)

log = logging.getLogger("broker.controller_channel")

R = TypeVar("R")
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 1.0


class ControllerError(Exception):
    """A controller refused a request (4xx with a Kafka error code)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(f"{message} (error {error_code})")
        self.error_code = error_code
        self.message = message


class ControllerUnavailable(TimeoutError):
    """No controller answered the request before its deadline."""


class ControllerChannel:
    def __init__(
        self,
        broker_id: int,
        controllers: list[tuple[str, int]],
        *,
        request_timeout_ms: int = 30_000,
        clock: Clock = SYSTEM_CLOCK,
        security: ControllerPlaneClient | None = None,
    ) -> None:
        if not controllers:
            raise ValueError("at least one controller endpoint is needed")
        self.broker_id = broker_id
        self.security = security or ControllerPlaneClient()
        self.controllers = [self.security.base_url(h, p) for h, p in controllers]
        self.request_timeout_s = request_timeout_ms / 1000
        self._clock = clock
        # Writes start where reads start (spread by broker id), then follow the active.
        self._writer = broker_id % len(self.controllers)
        self._session: aiohttp.ClientSession | None = None
        self._refusal_logged = False
        self._identity: dict[str, str] = {}  # the X-Kraft-Broker header once registered

    def set_broker_epoch(self, broker_epoch: int) -> None:
        """Name our incarnation on every request from now on (-1: no longer registered)."""
        self._identity = (
            {"X-Kraft-Broker": f"{self.broker_id}:{broker_epoch}"} if broker_epoch >= 0 else {}
        )

    async def start(self) -> None:
        # Each call sets its own timeout (a long-poll needs longer than a write).
        ssl_context = self.security.ssl_context
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            headers=self.security.headers(),
            connector=aiohttp.TCPConnector(ssl=ssl_context if ssl_context is not None else True),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(self, url: str, timeout_s: float) -> tuple[int, bytes, Mapping[str, str]]:
        """(status, body, headers) of one GET; network errors raise."""
        if self._session is None:
            raise ControllerUnavailable("the controller channel is not started")
        try:
            async with self._session.get(
                url, headers=self._identity, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                status, body = resp.status, await resp.read()
                self._check_refusal(url, status, body)
                return status, body, resp.headers.copy()
        except aiohttp.ClientSSLError as exc:
            self._log_refusal(url, f"TLS handshake failed: {exc}")
            raise

    async def post(
        self,
        path: str,
        body: msgspec.Struct,
        resp_type: type[R],
        *,
        timeout_s: float | None = None,
        attempt_timeout_s: float | None = None,
    ) -> R:
        """POST to the active controller: follow 307 to it, on 503 or a network error
        try the next controller after a short backoff, until `timeout_s` has passed.
        4xx answers raise ControllerError (never retried). `attempt_timeout_s` bounds
        each try: a controller that accepts the connection and never answers (paused,
        or deposed without knowing it) then costs that long, not the whole deadline."""
        if self._session is None:
            raise ControllerUnavailable("the controller channel is not started")
        payload = msgspec.json.encode(body)
        clock = self._clock
        deadline_ms = clock.monotonic_ms() + (timeout_s or self.request_timeout_s) * 1000
        backoff = BACKOFF_MIN_S
        target: str | None = None  # a redirect's target, tried next
        for attempt in itertools.count():
            remaining = (deadline_ms - clock.monotonic_ms()) / 1000
            if remaining <= 0:
                raise ControllerUnavailable(f"POST {path}: no controller answered in time")
            base = target or self.controllers[self._writer]
            target = None
            try:
                async with self._session.post(
                    f"{base}{path}",
                    data=payload,
                    headers={"Content-Type": "application/json", **self._identity},
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(
                        total=min(remaining, attempt_timeout_s or self.request_timeout_s)
                    ),
                ) as resp:
                    status, data = resp.status, await resp.read()
                    location = resp.headers.get("Location")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if isinstance(exc, aiohttp.ClientSSLError):
                    self._log_refusal(base, f"TLS handshake failed: {exc}")
                log.debug("POST %s%s failed: %r", base, path, exc)
                status, data, location = 0, b"", None
            self._check_refusal(base, status, data)
            if status == 200:
                self._remember_writer(base)
                return msgspec.json.decode(data, type=resp_type)
            if status == 204:
                self._remember_writer(base)
                return None  # type: ignore[return-value]
            if status == 307 and location:
                # Our own scheme, whatever the Location says: never send the token over
                # http because an answer said so.
                target = f"{self.security.scheme}://{urlsplit(location).netloc}"
                if attempt < 3 * len(self.controllers):
                    continue  # straight to the active controller, no backoff
            elif 400 <= status < 500:
                err = _error(data, status)
                raise ControllerError(err.error_code, err.error_message)
            else:  # 503 (no active controller yet), 5xx or a network error
                self._writer = (self._writer + 1) % len(self.controllers)
            await clock.sleep(min(backoff, max(0.0, (deadline_ms - clock.monotonic_ms()) / 1000)))
            backoff = min(BACKOFF_MAX_S, backoff * 2)
        raise AssertionError("unreachable")

    def _check_refusal(self, where: str, status: int, body: bytes) -> None:
        if status in (401, 403):
            self._log_refusal(where, f"HTTP {status}: {_error(body, status).error_message}")

    def _log_refusal(self, where: str, why: str) -> None:
        """A credentials problem is a configuration error that retries cannot fix: say so
        once at WARNING (the callers retry and log at lower levels)."""
        if not self._refusal_logged:
            self._refusal_logged = True
            log.warning(
                "the controller at %s refused this broker (%s); check "
                "controller.quorum.http.token and the controller listener's ssl.* settings",
                urlsplit(where).netloc,
                why,
            )

    def _remember_writer(self, base: str) -> None:
        if base in self.controllers:
            self._writer = self.controllers.index(base)

    # -- writes used by the broker ----------------------------------------------------------------

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        return await self.post("/v1/topics", req, CreateTopicsResponse)

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return await self.post("/v1/topics/delete", req, DeleteTopicsResponse)

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return await self.post("/v1/partitions/create", req, CreatePartitionsResponse)

    async def broker_unreachable(
        self, req: BrokerUnreachableRequest, timeout_s: float
    ) -> BrokerUnreachableResponse:
        return await self.post(
            "/v1/brokers/unreachable", req, BrokerUnreachableResponse, timeout_s=timeout_s
        )

    async def alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        return await self.post("/v1/partitions/alter", req, AlterPartitionResponse)

    async def alter_partitions(self, req: AlterPartitionsRequest) -> AlterPartitionsResponse:
        """Many partitions' ISR changes in one request (what the broker sends)."""
        return await self.post("/v1/partitions/alter-many", req, AlterPartitionsResponse)

    async def allocate_producer_ids(self, broker_epoch: int) -> AllocateProducerIdsResponse:
        req = AllocateProducerIdsRequest(self.broker_id, max(0, broker_epoch))
        return await self.post("/v1/producer-ids", req, AllocateProducerIdsResponse)

    async def create_acls(self, req: CreateAclsRequest) -> CreateAclsResponse:
        return await self.post("/v1/acls", req, CreateAclsResponse)

    async def delete_acls(self, req: DeleteAclsRequest) -> DeleteAclsResponse:
        return await self.post("/v1/acls/delete", req, DeleteAclsResponse)

    async def alter_user_scram_credentials(
        self, req: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        return await self.post("/v1/scram-credentials", req, AlterUserScramCredentialsResponse)

    # -- elections and quorum status (issue 14) ------------------------------------------------

    async def elect_leaders(self, req: ElectLeadersRequest) -> ElectLeadersResponse:
        return await self.post("/v1/leaders/elect", req, ElectLeadersResponse)

    async def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        return await self.post("/v1/partitions/reassign", req, AlterPartitionReassignmentsResponse)

    async def list_partition_reassignments(
        self, req: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        return await self.post(
            "/v1/partitions/reassignments", req, ListPartitionReassignmentsResponse
        )

    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> None:
        """One resource's config change; a refusal raises ControllerError."""
        await self.post("/v1/configs", req, type(None))

    async def quorum_status(self) -> QuorumStatus:
        """The status of the active controller: ask any controller, then the leader it
        names (only the Raft leader knows its followers' progress)."""
        last: Exception | None = None
        for base in self.controllers[self._writer :] + self.controllers[: self._writer]:
            try:
                status = await self._status(base)
                if status.role != "leader" and status.leader_http:
                    leader = f"{self.security.scheme}://{status.leader_http}"
                    status = await self._status(leader)
                if status.role == "leader":
                    return status
                last = ControllerUnavailable(f"{base} knows no active controller")
            except (aiohttp.ClientError, TimeoutError, OSError, msgspec.DecodeError) as exc:
                last = exc
        raise ControllerUnavailable(f"no controller answered with the quorum status: {last}")

    async def _status(self, base: str) -> QuorumStatus:
        status, body, _ = await self.get(f"{base}/v1/quorum/status", self.request_timeout_s)
        if status != 200:
            err = _error(body, status)
            raise ControllerError(err.error_code, err.error_message)
        return msgspec.json.decode(body, type=QuorumStatus)


def _error(data: bytes, status: int) -> ErrorResponse:
    try:
        return msgspec.json.decode(data, type=ErrorResponse)
    except msgspec.DecodeError:
        text: Any = data[:200].decode("utf-8", "replace")
        return ErrorResponse(Errors.INVALID_REQUEST, f"HTTP {status}: {text}")
