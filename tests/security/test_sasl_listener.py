"""A SASL_SSL listener (broker/network.py + the SASL exchange) with real clients over
real TLS sockets: confluent-kafka, kafka-python, aiokafka and kcat log in with
SCRAM-SHA-512 (and PLAIN), produce and consume. The API handlers run over the fake
runtime of tests/harness/fake_broker.py (real logs); credentials are salted ones as the
metadata log holds them. Then the pre-KIP-152 path (SaslHandshake v0, raw tokens), the
session's principal, and the failure delay.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.security.inter_broker_login import SaslLoginError, connect
from broker.security.listener_security import InterBrokerClientSecurity, ListenerSecurity
from broker.security.sasl_server import SaslServerFactory
from common.api_keys import ApiKey
from common.errors import Errors
from common.sasl_client import sasl_client
from common.scram import ScramMechanism, salted_password, server_key, stored_key
from common.tls import client_context, server_context
from metadata_log.image import ScramCredential
from tests.harness.fake_broker import BrokerThread
from tests.harness.raw_protocol import RawClient, decode_response, encode_request, request
from tests.security.secure_cluster import (
    aiokafka_config,
    aiokafka_roundtrip,
    confluent_roundtrip,
    kafka_python_config,
    kafka_python_roundtrip,
    kcat_roundtrip,
    librdkafka_config,
    values,
)

USER, PASSWORD = "carol", "scram-secret"
PLAIN_USERS = {"dave": "plain-secret"}
N = 100


def scram_credentials() -> dict[tuple[str, int], ScramCredential]:
    out = {}
    for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        salt, iterations = b"salt-of-" + m.name.encode(), 4096
        salted = salted_password(m, PASSWORD.encode(), salt, iterations)
        out[(USER, int(m))] = ScramCredential(
            salt, stored_key(m, salted), server_key(m, salted), iterations
        )
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[BrokerThread]:
    creds = scram_credentials()
    security = ListenerSecurity(
        "PLAINTEXT",  # the fake runtime advertises its endpoint under this listener name
        "SASL_SSL",
        server_context({"ssl.keystore.location": str(certs.server)}),
        ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"),
        PLAIN_USERS,
    )
    factory = SaslServerFactory(security, lambda user, m: creds.get((user, int(m))))
    b = BrokerThread(
        tmp_path_factory.mktemp("sasl-listener"),
        security_protocol="SASL_SSL",
        ssl_context=security.ssl_context,
        authenticator=factory.authenticator,
        failed_authentication_delay_ms=300,
    )
    for name in ("ck", "kp", "aio", "kcat", "plain"):
        b.runtime.add_topic(f"scram-{name}", 3)
    yield b
    b.stop()


ROUNDTRIPS = {
    "ck": (confluent_roundtrip, librdkafka_config),
    "kp": (kafka_python_roundtrip, kafka_python_config),
    "aio": (aiokafka_roundtrip, aiokafka_config),
    "kcat": (kcat_roundtrip, librdkafka_config),
}


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_scram_sha_512_over_sasl_ssl(broker: BrokerThread, certs: Any, client: str) -> None:
    roundtrip, config = ROUNDTRIPS[client]
    conf = config("SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=USER, password=PASSWORD)
    assert roundtrip(broker.bootstrap, conf, f"scram-{client}", N) == values(client, N)


def test_plain_over_sasl_ssl(broker: BrokerThread, certs: Any) -> None:
    conf = librdkafka_config("SASL_SSL", certs, mechanism="PLAIN", username="dave",
                             password="plain-secret")  # fmt: skip
    assert confluent_roundtrip(broker.bootstrap, conf, "scram-plain", N) == values("ck", N)


# -- by hand -------------------------------------------------------------------------------------


class TlsClient:
    def __init__(self, broker: BrokerThread, certs: Any) -> None:
        context = ssl.create_default_context(cafile=str(certs.ca))
        raw = socket.create_connection((broker.host, broker.port), timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname=broker.host)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send(encode_request(api_key, version, request(api_key, version, body), 9))
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        cid, answer = decode_response(api_key, version, self.recv_exactly(size))
        assert cid == 9
        return answer

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True

    def close(self) -> None:
        self.sock.close()


def test_handshake_v0_then_raw_scram_tokens(broker: BrokerThread, certs: Any) -> None:
    c = TlsClient(broker, certs)
    try:
        assert c.call(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        client = sasl_client("SCRAM-SHA-256", USER, PASSWORD)
        token: bytes | None = client.initial()
        while not client.complete:
            assert token is not None
            c.send(struct.pack(">i", len(token)) + token)
            (size,) = struct.unpack(">i", c.recv_exactly(4))
            token = client.step(c.recv_exactly(size))
        # Logged in: the API handlers answer now (and refuse a second handshake).
        assert c.call(ApiKey.METADATA, 1, {"topics": None}).brokers
        again = c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert again.error_code == Errors.ILLEGAL_SASL_STATE
        late = c.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b""})
        assert late.error_code == Errors.ILLEGAL_SASL_STATE
    finally:
        c.close()


def test_a_failed_login_is_answered_after_the_delay_then_closed(
    broker: BrokerThread, certs: Any
) -> None:
    c = TlsClient(broker, certs)
    try:
        assert c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
        started = time.monotonic()
        answer = c.call(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0dave\0guess"})
        assert time.monotonic() - started >= 0.3  # connection.failed.authentication.delay.ms
        assert answer.error_code == Errors.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert c.closed()
    finally:
        c.close()


# -- the broker's own login (the follower fetchers' connections) ---------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_the_inter_broker_client_logs_in(broker: BrokerThread, certs: Any, mechanism: str) -> None:
    user, password = ("dave", "plain-secret") if mechanism == "PLAIN" else (USER, PASSWORD)
    context = client_context({"ssl.truststore.location": str(certs.ca)})

    async def login(password: str) -> Any:
        security = InterBrokerClientSecurity("PLAINTEXT", "SASL_SSL", context, mechanism, user,
                                             password)  # fmt: skip
        reader, writer = await connect(broker.host, broker.port, security, "broker-9-fetcher")
        metadata = request(ApiKey.METADATA, 1, {"topics": None})
        try:  # logged in: a Metadata request is answered
            writer.write(encode_request(ApiKey.METADATA, 1, metadata, 9))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            return decode_response(ApiKey.METADATA, 1, await reader.readexactly(size))[1]
        finally:
            writer.close()

    assert asyncio.run(login(password)).brokers
    with pytest.raises(SaslLoginError, match="error 58") as info:
        asyncio.run(login("guess"))
    assert "guess" not in str(info.value)


def test_sasl_requests_on_a_listener_without_sasl_are_illegal(tmp_path: Any) -> None:
    plain = BrokerThread(tmp_path)
    c = RawClient(plain.host, plain.port)
    try:
        shake = c.call(ApiKey.SASL_HANDSHAKE, 1,
                       request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))  # fmt: skip
        assert shake.error_code == Errors.ILLEGAL_SASL_STATE and list(shake.mechanisms) == []
        login = c.call(ApiKey.SASL_AUTHENTICATE, 0,
                       request(ApiKey.SASL_AUTHENTICATE, 0, {"auth_bytes": b"\0a\0b"}))  # fmt: skip
        assert login.error_code == Errors.ILLEGAL_SASL_STATE
        assert c.call(ApiKey.METADATA, 1, request(ApiKey.METADATA, 1, {"topics": None})).brokers
    finally:
        c.close()
        plain.stop()
