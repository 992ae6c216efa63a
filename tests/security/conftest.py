"""Certificates for the security tests: one CA, a server certificate for 127.0.0.1 and
localhost, and client certificates (their subjects are the principals `User:CN=...`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kraft.tools.certs import issue, make_ca
from tests.harness.spark_session import spark  # noqa: F401 - Spark tests here share it


@dataclass(frozen=True)
class Certs:
    ca: Path  # ssl.truststore.location for everyone
    server: Path  # key + chain: ssl.keystore.location of brokers and controllers
    client: Path  # CN=client
    other_client: Path  # CN=intruder, signed by another CA
    other_ca: Path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    ca = make_ca(d)
    other = make_ca(d / "other", "other-ca")
    return Certs(
        ca=ca.cert_path,
        server=issue(ca, d / "server.pem", "broker", hosts=("127.0.0.1", "localhost"), server=True),
        client=issue(ca, d / "client.pem", "client"),
        other_client=issue(other, d / "intruder.pem", "intruder"),
        other_ca=other.cert_path,
    )
