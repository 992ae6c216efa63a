"""A secured controller plane on real processes: three controllers
(kraft/tools/local_cluster.py) serving their HTTP API over TLS, with a bearer token and
client certificates (`ssl.client.auth=requested`).

Every route of the app (found by walking its router, so a new route is covered without
editing this file), on every controller, without credentials: 401, and the metadata log
does not move. With the token, or with a client certificate, the same requests work.
/healthz stays open; plain http on the TLS port gets nothing; followers redirect to
https; `kraft metadata --command-config` reads a secured controller. The Raft port binds
the voter's address only. Every wait is a condition under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from common.errors import Errors
from common.tls import client_context
from kraft.http_api import make_app
from kraft.quorum import Quorum
from kraft.tools.cli import main as kraft_main
from kraft.tools.launcher import NodeProcess, stop_nodes, wait_for_active
from kraft.tools.local_cluster import start_controllers
from tests.harness.cluster_procs import wait_for
from tests.harness.fake_controller_service import WRITES
from tests.harness.quorum_wait import PASSWORD
from tests.security.conftest import Certs

TOKEN = "plane-token-0123456789abcdef"
BODIES = {path: body for path, _, body, _, _ in WRITES}
REGISTER = json.dumps(
    {
        "broker_id": 1,
        "incarnation_id": "plane-test-broker-1",
        "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
    }
).encode()


class _AnyService:
    """Enough of a ControllerService for make_app to build its routes (never called)."""

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any) -> None:
            raise AssertionError("not called")

        return call


def guarded_routes() -> list[tuple[str, str]]:
    app: web.Application = make_app(_AnyService())  # type: ignore[arg-type]
    routes = sorted(
        (r.method, re.sub(r"\{[^}]*\}", "x", r.resource.canonical))
        for r in app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    )
    assert ("POST", "/v1/brokers/register") in routes and ("GET", "/v1/cluster") in routes
    return [r for r in routes if r[1] != "/healthz"]


def plane_props(certs: Certs) -> dict[str, str]:
    return {
        "listener.security.protocol.map": "CONTROLLER:SSL",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "requested",
        "controller.quorum.http.token": TOKEN,
        "broker.session.timeout.ms": "600000",  # the broker registered below never returns
    }


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[list[NodeProcess]]:
    controllers = start_controllers(
        3, tmp_path_factory.mktemp("plane"), properties=plane_props(certs), timeout_s=60
    )
    try:
        yield controllers
    finally:
        stop_nodes(controllers)


def request(
    node: NodeProcess,
    method: str,
    path: str,
    *,
    context: ssl.SSLContext | None,
    token: str | None = None,
    body: bytes | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    """(status, body, headers); redirects are not followed."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(
        f"https://{node.address}{path}", data=body, headers=headers, method=method
    )
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _NoRedirect()
    )
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def body_for(method: str, path: str) -> bytes | None:
    """A body the route would accept (with credentials), else `{}`."""
    if method != "POST":
        return None
    return REGISTER if path == "/v1/brokers/register" else BODIES.get(path, b"{}")


def metadata_offset(controllers: list[NodeProcess]) -> int:
    """The active controller's metadata offset, once every controller reports the same."""

    def probe() -> int | None:
        offsets = {(c.status() or {}).get("metadata_offset") for c in controllers}
        return offsets.pop() if len(offsets) == 1 and None not in offsets else None

    return wait_for(probe, 30, "the controllers to agree on the metadata offset")


def test_every_route_without_credentials_is_refused_and_changes_nothing(
    quorum: list[NodeProcess], certs: Certs
) -> None:
    ca_only = client_context({"ssl.truststore.location": str(certs.ca)})
    before = metadata_offset(quorum)
    for method, path in guarded_routes():
        body = body_for(method, path)
        for node in quorum:
            for token in (None, "not-the-token-0123456789"):
                status, raw, headers = request(
                    node, method, path, context=ca_only, token=token, body=body
                )
                assert status == 401, (method, path, node.node_id, raw)
                assert headers["WWW-Authenticate"].startswith("Bearer")
                assert json.loads(raw)["error_code"] == Errors.SASL_AUTHENTICATION_FAILED
    assert metadata_offset(quorum) == before
    # The refused registration, sent with the token, goes through: the check above could
    # have failed.
    active = wait_for_active(quorum, 30)
    status, raw, _ = request(
        active, "POST", "/v1/brokers/register", context=ca_only, token=TOKEN, body=REGISTER
    )
    assert status == 200 and json.loads(raw)["error_code"] == 0, raw
    assert metadata_offset(quorum) > before


def test_a_client_certificate_works_without_the_token(
    quorum: list[NodeProcess], certs: Certs
) -> None:
    with_cert = client_context(
        {"ssl.truststore.location": str(certs.ca), "ssl.keystore.location": str(certs.client)}
    )
    for node in quorum:
        status, raw, _ = request(node, "GET", "/v1/quorum/status", context=with_cert)
        assert status == 200 and json.loads(raw)["node_id"] == node.node_id, raw
    intruder = client_context(
        {
            "ssl.truststore.location": str(certs.ca),
            "ssl.keystore.location": str(certs.other_client),
        }
    )
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        request(quorum[0], "GET", "/v1/quorum/status", context=intruder)


def test_healthz_is_open_and_plain_http_gets_nothing(
    quorum: list[NodeProcess], certs: Certs
) -> None:
    ca_only = client_context({"ssl.truststore.location": str(certs.ca)})
    status, raw, _ = request(quorum[0], "GET", "/healthz", context=ca_only)
    assert (status, raw) == (200, b"ok")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://{quorum[0].address}/v1/cluster", timeout=5)  # noqa: S310


def test_a_follower_redirects_to_https(quorum: list[NodeProcess], certs: Certs) -> None:
    ca_only = client_context({"ssl.truststore.location": str(certs.ca)})
    active = wait_for_active(quorum, 30)
    follower = next(c for c in quorum if c is not active)
    body = BODIES["/v1/brokers/heartbeat"]
    status, _, headers = request(
        follower, "POST", "/v1/brokers/heartbeat", context=ca_only, token=TOKEN, body=body
    )
    assert status == 307
    assert headers["Location"] == f"https://{active.address}/v1/brokers/heartbeat"


def test_kraft_metadata_reads_a_secured_controller(
    quorum: list[NodeProcess],
    certs: Certs,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        f"security.protocol=SSL\nssl.truststore.location={certs.ca}\n"
        f"controller.quorum.http.token={TOKEN}\n"
    )
    args = ["metadata", "--controller", quorum[0].address]
    assert kraft_main([*args, "--command-config", str(config)]) == 0
    assert "controller_id" in json.loads(capsys.readouterr().out)
    no_token = tmp_path / "tls-only.properties"
    no_token.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.ca}\n")
    assert kraft_main([*args, "--command-config", str(no_token)]) == 1
    err = capsys.readouterr().err
    assert "HTTP 401" in err and f'"error_code":{int(Errors.SASL_AUTHENTICATION_FAILED)}' in err


def test_the_raft_port_binds_only_the_voters_address(tmp_path: Path) -> None:
    # 127.0.0.2 is loopback too (Linux routes 127/8 to lo): bound there, the port must
    # not answer on 127.0.0.1, as it would if pysyncobj bound 0.0.0.0.
    # Our own port on 127.0.0.1, held (bound, not listening) for the whole test so no
    # other process listens there: a connection to it can only reach a wildcard bind.
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    port = holder.getsockname()[1]

    def connects(host: str) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex((host, port)) == 0

    async def main() -> None:
        quorum = Quorum(1, {1: ("127.0.0.2", port)}, tmp_path / "q", PASSWORD)
        await quorum.start()
        try:
            await asyncio.to_thread(
                wait_for, lambda: connects("127.0.0.2"), 10, "the Raft port to listen"
            )
            assert not connects("127.0.0.1")
        finally:
            await quorum.stop()

    try:
        asyncio.run(main())
    finally:
        holder.close()
