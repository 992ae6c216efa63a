"""The controller API's authentication (kraft/http_auth.py through kraft/http_api.py's
middleware) over a fake ControllerService: every route of the app, found by walking its
router (a route added later is covered without editing this file), refuses a request
without credentials before its handler runs; the token and a verified client certificate
let it through; /healthz stays open. Real TLS on loopback, real certificates.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from common.errors import Errors
from common.tls import client_context, server_context
from kraft.http_api import make_app
from kraft.http_auth import ApiAuth
from metadata_log import controller_api as api
from tests.harness.fake_controller_service import WRITES, FakeService, async_test
from tests.security.conftest import Certs

TOKEN = "s3cret-token-0123456789abcdef"
BODIES = {path: body for path, _, body, _, _ in WRITES}


def routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, path) of every route (HEAD is GET's twin; a {variable} becomes `x`)."""
    return sorted(
        (route.method, re.sub(r"\{[^}]*\}", "x", route.resource.canonical))
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    )


ALL_ROUTES = routes(make_app(FakeService()))  # type: ignore[arg-type]
GUARDED = [r for r in ALL_ROUTES if r[1] != "/healthz"]


@asynccontextmanager
async def serve(
    fake: FakeService, auth: ApiAuth, tls: ssl.SSLContext | None = None
) -> AsyncIterator[TestClient]:
    server = TestServer(make_app(fake, auth=auth))  # type: ignore[arg-type]
    await server.start_server(ssl=tls)
    async with TestClient(server) as client:
        yield client


async def call(client: TestClient, method: str, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
    body = BODIES.get(path.split("?")[0], b"{}") if method == "POST" else None
    resp = await client.request(method, path, data=body, allow_redirects=False, **kwargs)
    await resp.read()
    return resp


def assert_refused(resp: aiohttp.ClientResponse, body: bytes, invalid_token: bool) -> None:
    assert resp.status == 401, body
    challenge = resp.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert ('error="invalid_token"' in challenge) == invalid_token
    err = msgspec.json.decode(body, type=api.ErrorResponse)
    assert err.error_code == Errors.SASL_AUTHENTICATION_FAILED
    assert TOKEN not in body.decode() and TOKEN not in str(resp.headers)


def test_the_router_walk_finds_the_routes() -> None:
    # The enumeration itself must work, or the tests below would pass on nothing.
    assert ("POST", "/v1/brokers/register") in ALL_ROUTES
    assert ("GET", "/v1/metadata/log") in ALL_ROUTES
    assert ("GET", "/healthz") in ALL_ROUTES
    assert len(GUARDED) >= 14


@pytest.mark.parametrize(("method", "path"), GUARDED)
@async_test
async def test_every_route_refuses_without_credentials_and_runs_nothing(
    method: str, path: str
) -> None:
    fake = FakeService()
    async with serve(fake, ApiAuth(token=TOKEN)) as client:
        for headers, invalid in (
            ({}, False),
            ({"Authorization": "Bearer wrong-token-0123456789"}, True),
            ({"Authorization": f"Basic {TOKEN}"}, False),  # the token, wrong scheme
            ({"Authorization": f"Bearer {TOKEN}x"}, True),
            ({"Authorization": "Bearer"}, False),
        ):
            resp = await call(client, method, path, headers=headers)
            assert_refused(resp, await resp.read(), invalid)
        assert fake.calls == [] and fake.wait_calls == []
        # The same request with the token reaches the handler.
        resp = await call(client, method, path, headers={"Authorization": f"bearer {TOKEN}"})
        assert resp.status not in (401, 403), await resp.read()
    if path in BODIES:  # a body the route accepts: the write reached the service
        assert len(fake.calls) == 1


@async_test
async def test_unknown_paths_are_refused_too_and_healthz_stays_open() -> None:
    async with serve(FakeService(), ApiAuth(token=TOKEN)) as client:
        resp = await call(client, "GET", "/v1/no-such-route")
        assert resp.status == 401  # no credentials: nothing learnt about the routes
        resp = await call(client, "GET", "/healthz")
        assert resp.status == 200 and await resp.text() == "ok"
        resp = await call(client, "GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert 'kraft_http_responses_total{code="401"} 1' in await resp.text()


@async_test
async def test_without_security_everything_is_open() -> None:
    fake = FakeService()
    async with serve(fake, ApiAuth()) as client:
        resp = await call(client, "POST", "/v1/brokers/heartbeat")
        assert resp.status == 200 and len(fake.calls) == 1


def tls_server(certs: Certs, client_auth: str) -> ssl.SSLContext:
    return server_context(
        {
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": client_auth,
        }
    )


def tls_client(certs: Certs, keystore: object = None) -> ssl.SSLContext:
    props = {"ssl.truststore.location": str(certs.ca)}
    if keystore is not None:
        props["ssl.keystore.location"] = str(keystore)
    return client_context(props)


@async_test
async def test_client_certificate_or_token_over_tls_with_client_auth_requested(
    certs: Certs,
) -> None:
    fake = FakeService()
    auth = ApiAuth(token=TOKEN, client_certificates=True)
    async with serve(fake, auth, tls_server(certs, "requested")) as client:
        assert client.make_url("/").scheme == "https"
        with_cert = tls_client(certs, certs.client)
        without = tls_client(certs)
        resp = await call(client, "POST", "/v1/brokers/heartbeat", ssl=with_cert)
        assert resp.status == 200, await resp.read()
        resp = await call(client, "POST", "/v1/brokers/heartbeat", ssl=without)
        assert_refused(resp, await resp.read(), False)
        assert "a client certificate or Authorization: Bearer" in (await resp.text())
        resp = await call(
            client,
            "POST",
            "/v1/brokers/heartbeat",
            ssl=without,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert resp.status == 200
        assert len(fake.calls) == 2
        # A certificate from a CA the server does not trust: no handshake at all.
        with pytest.raises(aiohttp.ClientError):
            await call(client, "GET", "/healthz", ssl=tls_client(certs, certs.other_client))


@async_test
async def test_client_auth_required_refuses_the_handshake_without_a_certificate(
    certs: Certs,
) -> None:
    fake = FakeService()
    async with serve(fake, ApiAuth(client_certificates=True), tls_server(certs, "required")) as c:
        with pytest.raises(aiohttp.ClientError):
            await call(c, "POST", "/v1/brokers/heartbeat", ssl=tls_client(certs))
        resp = await call(c, "POST", "/v1/brokers/heartbeat", ssl=tls_client(certs, certs.client))
        assert resp.status == 200
        assert len(fake.calls) == 1


@async_test
async def test_super_users_narrow_which_certificates_are_admitted(certs: Certs) -> None:
    fake = FakeService()
    auth = ApiAuth(client_certificates=True, super_users=frozenset({"User:CN=broker"}))
    async with serve(fake, auth, tls_server(certs, "required")) as client:
        resp = await call(client, "POST", "/v1/topics", ssl=tls_client(certs, certs.client))
        assert resp.status == 403
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        assert "User:CN=client" in err.error_message
        assert fake.calls == []
        # The broker's certificate (CN=broker) is a super user.
        resp = await call(client, "POST", "/v1/topics", ssl=tls_client(certs, certs.server))
        assert resp.status == 200, await resp.read()


@async_test
async def test_a_follower_redirects_to_https_when_serving_tls(certs: Certs) -> None:
    fake = FakeService()
    fake.active, fake.leader_http = False, "127.0.0.1:8443"
    async with serve(fake, ApiAuth(token=TOKEN), tls_server(certs, "none")) as client:
        resp = await call(
            client,
            "POST",
            "/v1/topics?x=1",
            ssl=tls_client(certs),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert resp.status == 307
        assert resp.headers["Location"] == "https://127.0.0.1:8443/v1/topics?x=1"


@async_test
async def test_refusals_are_logged_rate_limited_and_without_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kraft.http_auth")
    async with serve(FakeService(), ApiAuth(token=TOKEN)) as client:
        for _ in range(5):
            await call(client, "GET", "/v1/cluster", headers={"Authorization": f"Bearer {TOKEN}!"})
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    assert "invalid bearer token" in refused[0].getMessage()
    assert TOKEN not in caplog.text


def test_the_policy_never_shows_the_token() -> None:
    assert TOKEN not in repr(ApiAuth(token=TOKEN))
