"""Before a client has authenticated on a SASL listener, only ApiVersions and the SASL
APIs are answered. On a real broker: every API key it advertises, at every version it
advertises, sent as a well-formed request on a fresh connection, first before the
SaslHandshake and then between the handshake and a completed login; anything else
than ApiVersions, SaslHandshake (and, after the handshake, SaslAuthenticate) closes the
connection without an answer. After the login the same connection is served.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema

from broker.codec_schema import build
from common.api_keys import ApiKey
from tests.harness.raw_protocol import RawClient, encode_request, request
from tests.security.secure_cluster import ALICE, ALICE_PASSWORD, SecureCluster, sasl_test_cluster

_ZERO = {"bool": False, "bytes": b"", "float64": 0.0, "string": "", "records": b"",
         "uuid": uuid.UUID(int=0)}  # fmt: skip


def minimal(cls: type) -> dict[str, Any]:
    """The smallest well-formed value of a kio entity: zeros, empty strings and arrays,
    None where a field is nullable."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if typing.get_origin(t) in (types.UnionType, typing.Union):
            out[f.name] = None
        elif typing.get_origin(t) is tuple:
            out[f.name] = []
        elif dataclasses.is_dataclass(t):
            out[f.name] = minimal(t)  # type: ignore[arg-type]
        else:
            out[f.name] = _ZERO.get(f.metadata["kafka_type"], 0)
    return out


def request_frame(api_key: int, version: int, correlation_id: int = 5) -> bytes:
    cls = load_request_schema(api_key, version)
    return encode_request(api_key, version, build(cls, minimal(cls)), correlation_id)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[SecureCluster]:
    with sasl_test_cluster(tmp_path_factory.mktemp("pre-auth"), certs) as c:
        c.start()
        yield c


@pytest.fixture(scope="module")
def advertised(cluster: SecureCluster) -> dict[int, tuple[int, int]]:
    """What the broker advertises, asked before authenticating (that much is allowed)."""
    host, port = cluster.brokers[0].host, cluster.brokers[0].port
    c = RawClient(host, port)
    try:
        data = {"client_software_name": "gating", "client_software_version": "1"}
        answer = c.call(ApiKey.API_VERSIONS, 3, request(ApiKey.API_VERSIONS, 3, data))
    finally:
        c.close()
    assert answer.error_code == 0
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}


def answered_or_closed(client: RawClient, frame: bytes) -> bytes | None:
    """The answer's bytes, or None if the broker closed the connection without one."""
    client.send(frame)
    try:
        (size,) = struct.unpack(">i", client.recv_exactly(4))
        return client.recv_exactly(size)
    except (TimeoutError, ConnectionError):
        assert client.is_closed_by_peer()
        return None


def handshake(client: RawClient, mechanism: str = "PLAIN") -> None:
    answer = client.call(
        ApiKey.SASL_HANDSHAKE, 1, request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    )
    assert answer.error_code == 0


def test_the_broker_advertises_the_sasl_apis(advertised: dict[int, tuple[int, int]]) -> None:
    assert advertised[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert advertised[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    assert len(advertised) > 20  # the data, admin and group APIs are all advertised


@pytest.mark.parametrize("after_handshake", [False, True])
def test_only_api_versions_and_sasl_are_answered_before_login(
    cluster: SecureCluster, advertised: dict[int, tuple[int, int]], after_handshake: bool
) -> None:
    host, port = cluster.brokers[0].host, cluster.brokers[0].port
    answered: list[tuple[int, int]] = []
    closed: list[tuple[int, int]] = []
    for api_key, (low, high) in sorted(advertised.items()):
        for version in range(low, high + 1):
            client = RawClient(host, port, timeout=5)
            try:
                if after_handshake:
                    handshake(client)
                got = answered_or_closed(client, request_frame(api_key, version))
                (answered if got is not None else closed).append((api_key, version))
            finally:
                client.close()
    # After the handshake only SaslAuthenticate is expected (Kafka: not even ApiVersions).
    allowed = (
        {ApiKey.SASL_AUTHENTICATE}
        if after_handshake
        else {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}
    )
    assert {k for k, _ in answered} == allowed, answered
    for api_key, (low, high) in advertised.items():
        want = allowed if api_key in allowed else ()
        for version in range(low, high + 1):
            assert ((api_key, version) in answered) == (api_key in want)
    assert len(closed) > 100


def test_after_the_login_the_same_connection_is_served(cluster: SecureCluster) -> None:
    c = RawClient(cluster.brokers[0].host, cluster.brokers[0].port)
    try:
        handshake(c)
        token = f"\0{ALICE}\0{ALICE_PASSWORD}".encode()
        login = c.call(
            ApiKey.SASL_AUTHENTICATE, 2, request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        )
        assert login.error_code == 0
        metadata = c.call(ApiKey.METADATA, 1, request(ApiKey.METADATA, 1, {"topics": None}))
        assert [b.port for b in metadata.brokers] == [cluster.brokers[0].port]  # CLIENT's
    finally:
        c.close()
