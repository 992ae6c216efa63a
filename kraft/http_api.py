"""The controller node's HTTP API: routes, body validation, redirects, long-poll, metrics.

A thin layer over `ControllerService` (kraft/service.py): it decides nothing. Its jobs are
to turn every client mistake into a 4xx with a Kafka error code (never a 500, never a
stuck or dead server), to send writes that reached a follower to the active controller
(307 keeps the method and the body, unlike 301/302), and to let brokers tail the
committed metadata log cheaply (long-poll, snapshot when they fell behind the tail).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from common.errors import Errors
from kraft.broker_connections import BrokerConnections
from kraft.http_auth import ApiAuth, Authenticator
from kraft.service import ControllerApiError, ControllerService, NotActiveController
from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterPartitionsRequest,
    AlterUserScramCredentialsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerUnreachableRequest,
    ClusterBroker,
    ClusterDescription,
    ClusterPartition,
    ClusterTopic,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    ErrorResponse,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    QuorumStatus,
)
from metadata_log.controller_api import LogResponse as LogResponse  # what the JSON log decodes as
from metadata_log.image import MetadataImage
from metadata_log.records import decode
from metadata_log.redactor import loggable_record
from metadata_log.snapshot import encode_snapshot

log = logging.getLogger(__name__)

MAX_WAIT_MS = 30_000  # a long-poll holds a connection and a task: keep it bounded
MAX_RECORDS = 10_000
DEFAULT_MAX_RECORDS = 1_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

T = TypeVar("T")

JSON = "application/json"
MSGPACK = "application/msgpack"
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"


# -- response bodies owned by this layer ---------------------------------------------------


class _RawLogEntry(msgspec.Struct, frozen=True):
    offset: int
    record: msgspec.Raw  # the stored msgpack record, spliced in verbatim: no re-encoding


class _RawLogResponse(msgspec.Struct, frozen=True):
    records: list[_RawLogEntry]
    next_offset: int


class _LoggableLogEntry(msgspec.Struct, frozen=True):
    offset: int
    record: dict[str, Any]  # the record's JSON with its secrets redacted


class _LoggableLogResponse(msgspec.Struct, frozen=True):
    """The JSON form of LogResponse, for people: SCRAM salts and keys are redacted."""

    records: list[_LoggableLogEntry]
    next_offset: int


def describe_cluster(image: MetadataImage, status: QuorumStatus) -> ClusterDescription:
    brokers = [
        ClusterBroker(
            b.broker_id,
            b.incarnation_id,
            b.broker_epoch,
            b.listeners,
            b.rack,
            b.fenced,
            b.in_controlled_shutdown,
        )
        for _, b in sorted(image.brokers.items())
    ]
    topics = [
        ClusterTopic(
            t.name,
            t.topic_id,
            [
                ClusterPartition(
                    p,
                    r.replicas,
                    r.isr,
                    r.leader,
                    r.leader_epoch,
                    r.partition_epoch,
                    r.is_offline,
                    r.removing_replicas,
                    r.adding_replicas,
                )
                for p, r in sorted(t.partitions.items())
            ],
            image.topic_config(t.name),
        )
        for t in sorted(image.topics.values(), key=lambda t: t.name)
    ]
    return ClusterDescription(
        image.controller_id,
        image.controller_epoch,
        image.offset,
        brokers,
        topics,
        sum(1 for b in brokers if b.fenced),
        image.offline_partitions(),
        status,
    )


# -- validation helpers ---------------------------------------------------------------------


class _BadRequest(Exception):
    """A client mistake found while parsing: 400 INVALID_REQUEST with this message."""


# msgspec accepts arbitrarily large JSON integers for unbounded `int` fields; such a value
# would pass the API and blow up later (msgpack cannot encode it: OverflowError deep in the
# controller). Only a run of 19+ digits can leave int64, so the walk below runs rarely.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _find_int64_overflow(obj: object, path: str) -> str | None:
    """Where an int outside int64 hides in a decoded body, in msgspec's wording."""
    if isinstance(obj, bool):
        return None
    if isinstance(obj, int):
        return None if INT64_MIN <= obj <= INT64_MAX else f"`{path}`"
    if isinstance(obj, msgspec.Struct):
        for name in obj.__struct_fields__:
            found = _find_int64_overflow(getattr(obj, name), f"{path}.{name}")
            if found:
                return found
    elif isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            found = _find_int64_overflow(item, f"{path}[{i}]")
            if found:
                return found
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if _find_int64_overflow(key, path):
                return f"`key` in `{path}`"
            found = _find_int64_overflow(value, f"{path}[...]")
            if found:
                return found
    return None


def decode_body(body: bytes, type_: type[T]) -> T:
    """Decode and validate a JSON request body; every failure is a _BadRequest whose
    message is msgspec's (it names the field: "Expected `int`, got `str` - at `$.x`")."""
    try:
        req = msgspec.json.decode(body, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _BadRequest(str(exc)) from None
    except UnicodeDecodeError as exc:  # msgspec raises it for invalid UTF-8 inside strings
        raise _BadRequest(f"body is not valid UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise _BadRequest("JSON is nested too deeply") from None
    if _LONG_DIGITS.search(body):
        where = _find_int64_overflow(req, "$")
        if where:
            raise _BadRequest(f"Integer out of range (int64) - at {where}")
    return req


_UINT = re.compile(r"[0-9]{1,19}")  # ASCII only: int() would also take " 7", "1_0", "٧"


def query_int(query: Any, name: str, default: int, lo: int, hi: int) -> int:
    raw = query.get(name)
    if raw is None:
        return default
    if not _UINT.fullmatch(raw) or not lo <= int(raw) <= hi:
        raise _BadRequest(
            f"query parameter `{name}` must be an integer in [{lo}, {hi}], got {raw[:40]!r}"
        )
    return int(raw)


# -- Prometheus exposition ------------------------------------------------------------------

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HELP = {
    "kraft_controller_active": "1 if this node is the active controller",
    "kraft_quorum_term": "current Raft term seen by this node",
    "kraft_metadata_offset": "next metadata offset to be written",
    "kraft_commit_latency_seconds": "latency of recent metadata commits",
    "kraft_fenced_brokers": "registered brokers that are fenced",
    "kraft_offline_partitions": "partitions without a leader",
    "kraft_under_replicated_partitions": "partitions whose ISR is smaller than their replicas",
}


def _prom_value(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def prometheus_text(metrics: dict[str, float], responses: Counter[int]) -> str:
    """Service gauges (a name without the `kraft_` prefix gets it; `*_total` is a counter),
    then this layer's response counts by status code, so 4xx/5xx rates are visible."""
    lines: list[str] = []
    for raw_name, value in sorted(metrics.items()):
        name = raw_name if raw_name.startswith("kraft_") else f"kraft_{raw_name}"
        if not _METRIC_NAME.fullmatch(name):
            log.warning("metric name %r is not valid for Prometheus; skipped", raw_name)
            continue
        if name in _HELP:
            lines.append(f"# HELP {name} {_HELP[name]}")
        lines.append(f"# TYPE {name} {'counter' if name.endswith('_total') else 'gauge'}")
        lines.append(f"{name} {_prom_value(value)}")
    lines.append("# HELP kraft_http_responses_total HTTP responses sent, by status code")
    lines.append("# TYPE kraft_http_responses_total counter")
    for code, count in sorted(responses.items()):
        lines.append(f'kraft_http_responses_total{{code="{code}"}} {count}')
    return "\n".join(lines) + "\n"


# -- the application ------------------------------------------------------------------------

_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()


def _json(obj: object, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_json_encoder.encode(obj), status=status, content_type=JSON, headers=headers
    )


def _error(
    status: int, error_code: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return _json(ErrorResponse(error_code, message), status, headers)


def _refused(status: int, message: str, token_presented: bool) -> web.Response:
    # 401: no or bad credentials (Kafka's code for a failed authentication); 403: an
    # authenticated principal without the right (as Kafka's ClusterAction refusal).
    if status == 401:
        challenge = 'Bearer realm="kraft-controller"'
        if token_presented:
            challenge += ', error="invalid_token"'  # RFC 6750 3.1
        return _error(
            401, Errors.SASL_AUTHENTICATION_FAILED, message, {"WWW-Authenticate": challenge}
        )
    return _error(status, Errors.CLUSTER_AUTHORIZATION_FAILED, message)


class _Api:
    def __init__(self, service: ControllerService, max_body_bytes: int, auth: ApiAuth) -> None:
        self.service = service
        self.max_body_bytes = max_body_bytes
        self.authenticator = Authenticator(auth)
        self.responses: Counter[int] = Counter()
        self.broker_connections = BrokerConnections(service)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        # Authentication first, before any handler (or 404/405) runs: a refused request
        # changes nothing and learns nothing about the routes.
        refusal = self.authenticator.check(request)
        if refusal is None:
            self.broker_connections.note(request)
            resp = await self._guarded(request, handler)
        else:
            resp = _refused(refusal.status, refusal.message, refusal.token_presented)
        self.responses[resp.status] += 1
        return resp

    async def _guarded(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            return await handler(request)
        except _BadRequest as exc:
            return _error(400, Errors.INVALID_REQUEST, str(exc))
        except NotActiveController as exc:
            if exc.leader_http is None:
                return _error(
                    503,
                    Errors.NOT_CONTROLLER,
                    "no active controller is known; retry shortly",
                    {"Retry-After": "1"},
                )
            # The voters share the listener's protocol: https here means https there.
            location = f"{request.scheme}://{exc.leader_http}{request.raw_path}"
            return _error(
                307,
                Errors.NOT_CONTROLLER,
                f"not the active controller; use {exc.leader_http}",
                {"Location": location},
            )
        except ControllerApiError as exc:
            return _error(400, exc.error_code, exc.message)
        except TimeoutError:  # the service bounds its own waits (Raft commit, leader)
            return _error(503, Errors.REQUEST_TIMED_OUT, "the controller timed out; retry")
        except web.HTTPException as exc:
            # aiohttp's own refusals (404, 405, 413, ...): same status, JSON like ours.
            if exc.status < 400:
                raise
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            resp = _error(exc.status, Errors.INVALID_REQUEST, exc.text or exc.reason, headers)
            if exc.status == 413:
                # Connection: close. aiohttp still drains the unread body for a bounded
                # time (discarding it) so the client can read this answer before the close.
                resp.force_close()
            return resp
        except Exception:  # (CancelledError is a BaseException: it passes through)
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return _error(500, Errors.UNKNOWN_SERVER_ERROR, "internal error (see controller log)")

    async def read_body(self, request: web.Request) -> bytes:
        # Refuse on the declared length before reading a byte; aiohttp's client_max_size
        # covers chunked and compressed bodies (it counts decompressed bytes).
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise web.HTTPRequestEntityTooLarge(self.max_body_bytes, request.content_length)
        body = await request.read()
        if len(body) > self.max_body_bytes:
            raise web.HTTPRequestEntityTooLarge(self.max_body_bytes, len(body))
        return body

    def write_route(
        self, req_type: type[Any], call: Callable[[Any], Awaitable[msgspec.Struct | None]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            req = decode_body(await self.read_body(request), req_type)
            resp = await call(req)
            return web.Response(status=204) if resp is None else _json(resp)

        return handler

    # -- reads ------------------------------------------------------------------------------

    async def metadata_log(self, request: web.Request) -> web.Response:
        start = query_int(request.query, "from", 0, 0, INT64_MAX)
        max_records = query_int(request.query, "max_records", DEFAULT_MAX_RECORDS, 1, MAX_RECORDS)
        wait_ms = query_int(request.query, "wait_ms", 0, 0, MAX_WAIT_MS)
        fmt = request.query.get("format", "json")
        if fmt not in ("json", "msgpack"):
            raise _BadRequest(f"query parameter `format` must be json or msgpack, got {fmt[:40]!r}")

        entries = self.service.records_from(start, max_records)
        if entries == [] and wait_ms > 0:
            timeout_s = wait_ms / 1000
            # Our own bound on top of the service's: a lost wake-up must not pin the
            # connection forever.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.service.wait_for_offset(start, timeout_s), timeout_s + 1.0
                )
            entries = self.service.records_from(start, max_records)
        if entries is None:
            return _error(
                410,
                Errors.OFFSET_OUT_OF_RANGE,
                f"offset {start} is no longer retained; fetch GET /v1/metadata/snapshot "
                "and continue from its X-Next-Offset",
            )
        next_offset = entries[-1][0] + 1 if entries else start
        if fmt == "msgpack":
            raw = _RawLogResponse(
                [_RawLogEntry(o, msgspec.Raw(b)) for o, b in entries], next_offset
            )
            return web.Response(body=_msgpack_encoder.encode(raw), content_type=MSGPACK)
        return _json(
            _LoggableLogResponse(
                [_LoggableLogEntry(o, loggable_record(decode(b))) for o, b in entries], next_offset
            )
        )

    async def metadata_snapshot(self, request: web.Request) -> web.Response:
        image, next_offset = self.service.snapshot()
        # CPU-bound for a big image; the image is immutable, so a thread may encode it.
        body = await asyncio.to_thread(encode_snapshot, image)
        return web.Response(
            body=body,
            content_type="application/octet-stream",
            headers={"X-Next-Offset": str(next_offset)},
        )

    async def cluster(self, request: web.Request) -> web.Response:
        return _json(describe_cluster(self.service.image(), self.service.status()))

    async def quorum_status(self, request: web.Request) -> web.Response:
        return _json(self.service.status())

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, request: web.Request) -> web.Response:
        text = prometheus_text(self.service.metrics(), self.responses)
        return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS})


def make_app(
    service: ControllerService, *, max_body_bytes: int = 1 << 20, auth: ApiAuth | None = None
) -> web.Application:
    """The API; `auth` (kraft/http_auth.py) says who may call it (None: anyone)."""
    api = _Api(service, max_body_bytes, auth or ApiAuth())
    app = web.Application(client_max_size=max_body_bytes, middlewares=[api.middleware])
    writes: list[tuple[str, type[Any], Callable[[Any], Awaitable[msgspec.Struct | None]]]] = [
        ("/v1/brokers/register", BrokerRegistrationRequest, service.register_broker),
        ("/v1/brokers/heartbeat", BrokerHeartbeatRequest, service.heartbeat),
        ("/v1/brokers/unreachable", BrokerUnreachableRequest, service.broker_unreachable),
        ("/v1/partitions/alter", AlterPartitionRequest, service.alter_partition),
        ("/v1/partitions/alter-many", AlterPartitionsRequest, service.alter_partitions),
        ("/v1/producer-ids", AllocateProducerIdsRequest, service.allocate_producer_ids),
        ("/v1/topics", CreateTopicsRequest, service.create_topics),
        ("/v1/topics/delete", DeleteTopicsRequest, service.delete_topics),
        ("/v1/partitions/create", CreatePartitionsRequest, service.create_partitions),
        ("/v1/leaders/elect", ElectLeadersRequest, service.elect_leaders),
        (
            "/v1/partitions/reassign",
            AlterPartitionReassignmentsRequest,
            service.alter_partition_reassignments,
        ),
        (
            "/v1/partitions/reassignments",
            ListPartitionReassignmentsRequest,
            service.list_partition_reassignments,
        ),
        ("/v1/configs", IncrementalAlterConfigsRequest, service.alter_configs),
        ("/v1/acls", CreateAclsRequest, service.create_acls),
        ("/v1/acls/delete", DeleteAclsRequest, service.delete_acls),
        (
            "/v1/scram-credentials",
            AlterUserScramCredentialsRequest,
            service.alter_user_scram_credentials,
        ),
    ]
    for path, req_type, call in writes:
        app.router.add_post(path, api.write_route(req_type, call))
    app.router.add_get("/v1/metadata/log", api.metadata_log)
    app.router.add_get("/v1/metadata/snapshot", api.metadata_snapshot)
    app.router.add_get("/v1/cluster", api.cluster)
    app.router.add_get("/v1/quorum/status", api.quorum_status)
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/metrics", api.metrics)
    app.cleanup_ctx.append(_watching(api.broker_connections))
    return app


def _watching(
    connections: BrokerConnections,
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(connections.watch(), name="broker-connections")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx
