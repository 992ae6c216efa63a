"""The broker's controller channel (broker/controller_channel.py) against small TLS
servers on loopback: it speaks https with the broker's client context, sends the token on
every request, follows a redirect without ever dropping to http, and turns a 401 into a
ControllerError (with one warning naming what to check, never the token).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from broker.controller_channel import ControllerChannel, ControllerError
from common.controller_plane import plane_client
from common.errors import Errors
from common.tls import server_context
from metadata_log.controller_api import AllocateProducerIdsResponse
from tests.harness.fake_controller_service import async_test
from tests.security.conftest import Certs

TOKEN = "channel-token-0123456789abcdef"


@asynccontextmanager
async def tls_server(certs: Certs, app: web.Application) -> AsyncIterator[TestServer]:
    server = TestServer(app)
    await server.start_server(ssl=server_context({"ssl.keystore.location": str(certs.server)}))
    try:
        yield server
    finally:
        await server.close()


def channel(certs: Certs, *servers: TestServer, token: str = TOKEN) -> ControllerChannel:
    security = plane_client(
        {
            "listener.security.protocol.map": "CONTROLLER:SSL",
            "ssl.truststore.location": str(certs.ca),
            "controller.quorum.http.token": token,
        }
    )
    ends = [(s.host, s.port) for s in servers]
    return ControllerChannel(1, ends, request_timeout_ms=3000, security=security)


@async_test
async def test_https_with_the_token_and_redirects_never_drop_to_http(certs: Certs) -> None:
    seen: list[tuple[str, str | None]] = []
    leaked: list[str | None] = []

    async def leader(request: web.Request) -> web.Response:
        seen.append((request.scheme, request.headers.get("Authorization")))
        return web.json_response({"error_code": 0, "producer_id_start": 5, "producer_id_len": 9})

    async def plain(request: web.Request) -> web.Response:
        leaked.append(request.headers.get("Authorization"))
        return web.json_response({"error_code": 0, "producer_id_start": 0, "producer_id_len": 1})

    leader_app, plain_app = web.Application(), web.Application()
    leader_app.router.add_post("/v1/producer-ids", leader)
    plain_app.router.add_post("/v1/producer-ids", plain)
    async with tls_server(certs, leader_app) as active, TestServer(plain_app) as http_only:

        async def follower(request: web.Request) -> web.Response:
            seen.append((request.scheme, request.headers.get("Authorization")))
            # An http Location (to a plain listener that would take the token): the
            # channel keeps its own https, fails the handshake there, and moves on.
            location = f"http://{http_only.host}:{http_only.port}/v1/producer-ids"
            return web.json_response({"error_code": 41}, status=307, headers={"Location": location})

        follower_app = web.Application()
        follower_app.router.add_post("/v1/producer-ids", follower)
        async with tls_server(certs, follower_app) as standby:
            ch = channel(certs, active, standby)  # broker 1 writes to controllers[1] first
            await ch.start()
            try:
                resp = await ch.allocate_producer_ids(3)
            finally:
                await ch.close()
    assert resp == AllocateProducerIdsResponse(0, 5, 9)
    assert leaked == []
    assert seen == [("https", f"Bearer {TOKEN}")] * 2


@async_test
async def test_a_refusal_raises_and_warns_once_without_the_token(
    certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(
            {"error_code": 58, "error_message": "authentication failed: invalid bearer token"},
            status=401,
        )

    app = web.Application()
    app.router.add_post("/v1/producer-ids", refuse)
    app.router.add_get("/v1/metadata/snapshot", refuse)
    caplog.set_level(logging.WARNING, logger="broker.controller_channel")
    async with tls_server(certs, app) as server:
        ch = channel(certs, server)
        await ch.start()
        try:
            for _ in range(3):
                with pytest.raises(ControllerError) as err:
                    await ch.allocate_producer_ids(3)
                assert err.value.error_code == Errors.SASL_AUTHENTICATION_FAILED
            status, _, _ = await ch.get(f"{ch.controllers[0]}/v1/metadata/snapshot", 3)
            assert status == 401
        finally:
            await ch.close()
    warnings = [r.getMessage() for r in caplog.records if "refused this broker" in r.getMessage()]
    assert len(warnings) == 1 and "controller.quorum.http.token" in warnings[0]
    assert TOKEN not in caplog.text
