"""The client side of the controller plane's settings (common/controller_plane.py), as a
broker, a tool's client properties file or a controller's own file give them, and a
broker refusing to start on a bad one with a message naming the property.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker.main import main as broker_main
from common.controller_plane import plane_client
from common.properties import ConfigError
from tests.security.conftest import Certs

TOKEN = "tok-0123456789abcdef-xyz"


def test_plain_http_without_a_token_by_default() -> None:
    client = plane_client({})
    assert client.scheme == "http" and client.ssl_context is None and client.headers() == {}
    assert client.base_url("127.0.0.1", 9) == "http://127.0.0.1:9"
    assert client.base_url("::1", 9) == "http://[::1]:9"


def test_a_broker_with_the_controller_listener_on_ssl(certs: Certs) -> None:
    client = plane_client(
        {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT, CONTROLLER:SSL",
            "ssl.truststore.location": str(certs.other_ca),  # the Kafka listener's
            "listener.name.controller.ssl.truststore.location": str(certs.ca),
            "listener.name.controller.ssl.keystore.location": str(certs.server),
            "controller.quorum.http.token": TOKEN,
        }
    )
    assert client.scheme == "https" and client.base_url("h", 1) == "https://h:1"
    ctx = client.ssl_context
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    # The listener override won: the controllers' CA, not the other one.
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "kraft-dev-ca"),),)]
    assert client.headers() == {"Authorization": f"Bearer {TOKEN}"}
    assert TOKEN not in repr(client)


def test_a_tools_client_file_names_the_protocol_directly(certs: Certs) -> None:
    client = plane_client({"security.protocol": "ssl", "ssl.truststore.location": str(certs.ca)})
    assert client.scheme == "https"
    named = plane_client(
        {"controller.listener.names": "CTL,OTHER", "listener.security.protocol.map": "CTL:SSL"}
    )
    assert named.scheme == "https"


@pytest.mark.parametrize(
    ("props", "names"),
    [
        (
            {"listener.security.protocol.map": "CONTROLLER:SASL_SSL"},
            "listener.security.protocol.map",
        ),
        ({"security.protocol": "SASL_PLAINTEXT"}, "security.protocol"),
        ({"listener.security.protocol.map": "CONTROLLER"}, "listener.security.protocol.map"),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/no/such/ca.pem"},
            "ssl.truststore.location",
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.keystore.type": "JKS",
                "ssl.keystore.location": "/x.jks",
            },
            "ssl.keystore.type",
        ),
        ({"controller.quorum.http.token": "0123456789"}, "controller.quorum.http.token"),
        (
            {"controller.quorum.http.token": "0123456789\x07abcdefgh"},
            "controller.quorum.http.token",
        ),
    ],
)
def test_bad_settings_name_the_property(props: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")) as err:
        plane_client(props)
    assert "0123456789" not in str(err.value)  # a token is never echoed


def test_a_broker_with_a_bad_plane_setting_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broker.properties"
    path.write_text(
        "\n".join(
            [
                "process.roles=broker",
                "node.id=4",
                "controller.quorum.http.endpoints=1@127.0.0.1:1",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "advertised.listeners=PLAINTEXT://127.0.0.1:9092",
                f"log.dirs={tmp_path / 'logs'}",
                "controller.quorum.http.token=too-short",
            ]
        )
    )
    assert broker_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "controller.quorum.http.token" in err and "too-short" not in err
