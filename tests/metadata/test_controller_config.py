"""The controller's configuration file: overrides and defaults, errors that name the
property, and `controller_main` exiting 2 on a bad config.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest

from kraft.controller_config import ConfigError, load_config
from kraft.controller_main import main as controller_main
from kraft.tools.certs import issue, make_ca

BASE = [
    "process.roles=controller",
    "node.id=1",
    "controller.quorum.voters=1@127.0.0.1:19091,2@127.0.0.1:19092",
    "controller.quorum.http.endpoints=1@127.0.0.1:19191,2@127.0.0.1:19192",
    "metadata.log.dir=/tmp/unused",
    "controller.quorum.password=p",
]


def test_config_overrides_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text(
        "\n".join(BASE) + "\nnum.partitions = 3\nlisteners=CONTROLLER://0.0.0.0:19191\n"
    )
    cfg = load_config(path, ["num.partitions=6", "broker.session.timeout.ms=1000"])
    assert (cfg.num_partitions, cfg.session_timeout_ms, cfg.default_replication_factor) == (
        6,
        1000,
        1,
    )
    assert cfg.listener == ("0.0.0.0", 19191) and cfg.http_address(2) == "127.0.0.1:19192"
    assert cfg.max_retained_records == 50_000
    assert cfg.controller_config().num_partitions == 6


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("node.id=x", "node.id"),
        ("process.roles=broker", "process.roles"),
        ("controller.quorum.voters=1@nohost", "controller.quorum.voters"),
        ("controller.quorum.http.endpoints=1@127.0.0.1:1", "controller.quorum.http.endpoints"),
        ("controller.quorum.password=", "controller.quorum.password"),
        ("listeners=CONTROLLER://127.0.0.1:1", "listeners"),
        ("num.partitions=0", "num.partitions"),
        ("metadata.max.retained.records=many", "metadata.max.retained.records"),
    ],
)
def test_config_errors_name_the_property(override: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [*BASE, override])


def test_main_reports_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.properties"
    path.write_text("\n".join(BASE[1:]))  # no process.roles
    assert controller_main(["--config", str(path)]) == 2
    assert "process.roles is required" in capsys.readouterr().err


# -- the HTTP API's security ------------------------------------------------------------------

TOKEN = "tok-0123456789abcdef"


@dataclass(frozen=True)
class Certs:
    ca: Path
    server: Path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    ca = make_ca(d)
    return Certs(ca.cert_path, issue(ca, d / "server.pem", "controller", server=True))


def test_plain_http_without_credentials_by_default() -> None:
    cfg = load_config(None, BASE)
    assert cfg.ssl_context is None and not cfg.auth.enabled


def test_tls_token_and_client_auth(certs: Certs) -> None:
    cfg = load_config(
        None,
        [
            *BASE,
            "listeners=CONTROLLER://127.0.0.1:19191",
            "listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT",
            f"ssl.keystore.location={certs.server}",
            f"listener.name.controller.ssl.truststore.location={certs.ca}",
            "listener.name.controller.ssl.client.auth=requested",
            f"controller.quorum.http.token={TOKEN}",
            "super.users=User:CN=broker;User:CN=admin",
        ],
    )
    assert cfg.ssl_context is not None and cfg.ssl_context.verify_mode == ssl.CERT_OPTIONAL
    assert cfg.auth.token == TOKEN and cfg.auth.client_certificates
    assert cfg.auth.super_users == {"User:CN=broker", "User:CN=admin"}
    assert TOKEN not in repr(cfg)


def test_the_listener_named_by_controller_listener_names_decides_the_protocol(
    certs: Certs,
) -> None:
    cfg = load_config(
        None,
        [
            *BASE,
            "controller.listener.names=CTL",
            "listeners=CTL://127.0.0.1:19191",
            "listener.security.protocol.map=CTL:SSL",
            f"ssl.keystore.location={certs.server}",
        ],
    )
    assert cfg.ssl_context is not None and not cfg.auth.client_certificates


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        (["controller.quorum.http.token=short"], "controller.quorum.http.token"),
        (["controller.quorum.http.token=has a space in it!!"], "controller.quorum.http.token"),
        (["listener.security.protocol.map=CONTROLLER:SASL_SSL"], "listener.security.protocol.map"),
        (["listener.security.protocol.map=CONTROLLER"], "listener.security.protocol.map"),
        (["listener.security.protocol.map=CONTROLLER:SSL"], "ssl.keystore.location"),
        (
            ["listener.security.protocol.map=CONTROLLER:SSL", "ssl.keystore.location=/nope.pem"],
            "ssl.keystore.location",
        ),
        (["super.users=alice"], "super.users"),
    ],
)
def test_security_errors_name_the_property(overrides: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")) as err:
        load_config(None, [*BASE, *overrides])
    assert "space in it" not in str(err.value)  # a bad token is never echoed


def test_client_auth_without_a_truststore_is_refused(certs: Certs) -> None:
    with pytest.raises(ConfigError, match=r"ssl\.truststore"):
        load_config(
            None,
            [
                *BASE,
                "listener.security.protocol.map=CONTROLLER:SSL",
                f"ssl.keystore.location={certs.server}",
                "ssl.client.auth=required",
            ],
        )
