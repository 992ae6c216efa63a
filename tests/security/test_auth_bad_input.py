"""Bad input on a real broker's secured listeners: malformed SASL frames, SASL that
stalls, TLS garbage, plaintext on the TLS port, a TLS handshake that stalls, and 200
concurrent failed logins. Each gets an error answer or a closed connection; meanwhile a
client that logged in before keeps producing, and a fresh login works at the end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.api_keys import ApiKey
from common.errors import Errors
from tests.harness.raw_protocol import RawClient, decode_response, encode_request, request
from tests.security.secure_cluster import (
    ALICE,
    ALICE_PASSWORD,
    SecureCluster,
    confluent_roundtrip,
    librdkafka_config,
    sasl_test_cluster,
    values,
)

CONF = librdkafka_config("SASL_PLAINTEXT", mechanism="PLAIN", username=ALICE,
                         password=ALICE_PASSWORD)  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[SecureCluster]:
    with sasl_test_cluster(
        tmp_path_factory.mktemp("auth-bad-input"), certs, **{"connections.max.idle.ms": "2000"}
    ) as c:
        c.start()
        yield c


@pytest.fixture(scope="module")
def producer(cluster: SecureCluster) -> Iterator[Any]:
    """A client logged in before the bad input starts; each test checks it still works."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, **CONF, "acks": "all"})
    yield p
    p.flush(10)


def still_serving(producer: Any) -> None:
    delivered: list[Any] = []
    producer.produce("bad-input-canary", b"alive", on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0 and delivered == [None], delivered


def sasl_address(cluster: SecureCluster) -> tuple[str, int]:
    return cluster.brokers[0].host, cluster.brokers[0].port


def tls_address(cluster: SecureCluster) -> tuple[str, int]:
    return cluster.brokers[0].host, cluster.internal_ports[0]


def frame(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    return encode_request(api_key, version, request(api_key, version, body), 3)


def raw(api_key: int, version: int, body: bytes, flexible: bool = False) -> bytes:
    head = struct.pack(">hhih", api_key, version, 3, 1) + b"x" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


HANDSHAKE = frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
SCRAM_HANDSHAKE = frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})


def authenticate(token: bytes) -> bytes:
    return frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})


def outcome(address: tuple[str, int], data: bytes) -> int | None:
    """What the broker does with `data` (after a good handshake if it starts with one):
    the SaslAuthenticate error code if it answers one, None if it just closes."""
    c = RawClient(*address, timeout=10)
    try:
        c.send(data)
        if data.startswith(HANDSHAKE) or data.startswith(SCRAM_HANDSHAKE):
            (size,) = struct.unpack(">i", c.recv_exactly(4))
            c.recv_exactly(size)
        try:
            (size,) = struct.unpack(">i", c.recv_exactly(4))
            _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, c.recv_exactly(size))
        except ConnectionError:
            return None
        assert c.is_closed_by_peer(), "answered, but not closed"
        return int(answer.error_code)
    finally:
        c.close()


@pytest.mark.parametrize(
    ("data", "answer"),
    [
        (raw(ApiKey.SASL_HANDSHAKE, 1, b"\x7f\xff"), None),  # a string past the frame
        (raw(ApiKey.SASL_HANDSHAKE, 1, b""), None),  # no body at all
        (raw(ApiKey.SASL_HANDSHAKE, 1, b"\x00\x05PL\xffIN"), None),  # not UTF-8
        (raw(ApiKey.SASL_HANDSHAKE, 7, b"\x00\x05PLAIN"), None),  # no such version
        (struct.pack(">i", 1 << 20) + b"\x00" * 16, None),  # > sasl.server.max.receive.size
        (struct.pack(">i", -1), None),
        (b"\x00\x00\x00\x03\x00\x11\x00", None),  # shorter than a header
        (HANDSHAKE + raw(ApiKey.SASL_AUTHENTICATE, 2, b"\xff\xff\xff\x7f", True), None),
        (HANDSHAKE + raw(ApiKey.SASL_AUTHENTICATE, 2, b"", True), None),
        (HANDSHAKE + raw(ApiKey.METADATA, 1, b"\xff\xff\xff\xff"), None),
        (HANDSHAKE + authenticate(b""), Errors.SASL_AUTHENTICATION_FAILED),
        (HANDSHAKE + authenticate(b"\0" * 5000), Errors.SASL_AUTHENTICATION_FAILED),
        (HANDSHAKE + authenticate(os.urandom(300)), Errors.SASL_AUTHENTICATION_FAILED),
        (HANDSHAKE + authenticate(b"x\0alice\0alice-secret"), Errors.SASL_AUTHENTICATION_FAILED),
        (SCRAM_HANDSHAKE + authenticate(b"n,,n=,r="), Errors.SASL_AUTHENTICATION_FAILED),
        (SCRAM_HANDSHAKE + authenticate(os.urandom(64)), Errors.SASL_AUTHENTICATION_FAILED),
        (frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}) + b"\x00\x00\x00\x02\xff\xfe",
         None),  # v0: a raw token that is no PLAIN message: closed without an answer
    ],
)  # fmt: skip
def test_malformed_sasl_frames(
    cluster: SecureCluster, producer: Any, data: bytes, answer: int | None
) -> None:
    if data.startswith(frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})):
        c = RawClient(*sasl_address(cluster), timeout=10)
        try:
            c.send(data)
            (size,) = struct.unpack(">i", c.recv_exactly(4))
            c.recv_exactly(size)  # the handshake's answer, then nothing: closed
            assert c.is_closed_by_peer()
        finally:
            c.close()
    else:
        assert outcome(sasl_address(cluster), data) == answer
    still_serving(producer)


def test_a_stalled_sasl_exchange_is_cut_by_the_idle_bound(
    cluster: SecureCluster, producer: Any
) -> None:
    c = RawClient(*sasl_address(cluster), timeout=15)
    try:
        c.send(HANDSHAKE)
        (size,) = struct.unpack(">i", c.recv_exactly(4))
        c.recv_exactly(size)
        c.send(authenticate(b"\0alice\0")[:9])  # part of a frame, then nothing
        started = time.monotonic()
        assert c.is_closed_by_peer()
        assert time.monotonic() - started < 10  # connections.max.idle.ms=2000
    finally:
        c.close()
    still_serving(producer)


@pytest.mark.parametrize(
    "data",
    [
        b"",  # connects, never says anything
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 20,  # a cut ClientHello
        frame(ApiKey.API_VERSIONS, 0, {}),  # plaintext Kafka on the TLS port
        b"\x16\x03\x03" + os.urandom(2000),  # garbage that starts like TLS
        os.urandom(2000),
    ],
)
def test_garbage_plaintext_and_stalls_on_the_tls_port(
    cluster: SecureCluster, producer: Any, data: bytes
) -> None:
    with socket.create_connection(tls_address(cluster), timeout=15) as s:
        started = time.monotonic()
        s.sendall(data)
        try:
            while s.recv(4096):  # whatever alert the TLS layer sends, then EOF
                pass
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 10  # ssl.handshake.timeout.ms=1000 or sooner
    still_serving(producer)


def test_garbage_after_a_good_tls_handshake(
    cluster: SecureCluster, producer: Any, certs: Any
) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    with context.wrap_socket(
        socket.create_connection(tls_address(cluster), timeout=10), server_hostname="127.0.0.1"
    ) as s:
        under = socket.socket(fileno=os.dup(s.fileno()))
        under.sendall(b"\x17\x03\x03\x00\x40" + os.urandom(64))
        try:
            closed = s.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            closed = True
        under.close()
        assert closed
    still_serving(producer)


def test_200_concurrent_failed_logins(cluster: SecureCluster, producer: Any) -> None:
    host, port = sasl_address(cluster)

    async def one(i: int) -> int | None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            mechanism = "PLAIN" if i % 2 else "SCRAM-SHA-256"
            writer.write(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            token = b"\0alice\0wrong-%d" % i if i % 2 else b"n,,n=user-%d,r=nonce%d" % (i, i)
            writer.write(authenticate(token))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            _, answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, await reader.readexactly(size))
            if answer.error_code == 0:  # SCRAM's first round: the (fake) salt; now a proof
                nonce = bytes(answer.auth_bytes).split(b",")[0][2:]
                writer.write(authenticate(b"c=biws,r=" + nonce + b",p=AAAA"))
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                _, answer = decode_response(
                    ApiKey.SASL_AUTHENTICATE, 2, await reader.readexactly(size)
                )
            assert await reader.read(1) == b""  # closed after the failure
            return int(answer.error_code)
        except (ConnectionError, asyncio.IncompleteReadError):
            return None
        finally:
            writer.close()

    async def all_of_them() -> list[int | None]:
        async with asyncio.timeout(60):
            return await asyncio.gather(*(one(i) for i in range(200)))

    outcomes = asyncio.run(all_of_them())
    assert set(outcomes) <= {Errors.SASL_AUTHENTICATION_FAILED, None}
    assert outcomes.count(Errors.SASL_AUTHENTICATION_FAILED) >= 150, outcomes
    still_serving(producer)


def test_a_fresh_login_works_after_all_that(cluster: SecureCluster, producer: Any) -> None:
    still_serving(producer)
    assert confluent_roundtrip(cluster.bootstrap, CONF, "after-bad-input", 50) == values("ck", 50)
    log = cluster.brokers[0].log_tail(2000)
    assert ALICE_PASSWORD not in log and "Traceback" not in log
    assert cluster.brokers[0].running
