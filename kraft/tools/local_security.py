"""The security of a local secured cluster (`kraft dev --secure`; kraft/tools/local_cluster.py
plans and starts it): its certificates and secrets, the properties it adds to each node,
its SCRAM user, and the client configs it hands out.

What a secured local cluster is (Kafka's property names; the token is ours):
- one CA; one server certificate (127.0.0.1, localhost) for every broker and controller;
  one client certificate, the brokers' identity towards the controllers;
- brokers: clients on a `SASL_SSL` listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512);
  replication on an `INTERNAL` SASL_SSL listener with PLAIN as the super user
  `User:admin`, whose password is in the listeners' JAAS configs; the authorizer on
  (`StandardAuthorizer`, `super.users=User:admin`);
- the controller plane over TLS: every request carries `controller.quorum.http.token`,
  and the brokers also present the client certificate (`ssl.client.auth=requested`,
  the only certificate admitted: `super.users=User:CN=kraft-dev-client`);
- one SCRAM-SHA-512 user (`alice`, a random password) made through the admin's
  AdminClient once the brokers are up, and two client configs in the data dir:
  `client.properties` (alice) and `admin.properties` (the super user), in Java's names,
  for `--command-config` and any Kafka client.

Everything lives in `<data dir>/security/` (certificates; `secrets.properties` with the
passwords and the token) and is reused when the cluster restarts. Secret files are 0600
and their contents never reach the output.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.client_config import translate
from common.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE
from common.properties import ConfigError, read_properties
from kraft.tools.certs import issue, make_ca
from kraft.tools.launcher import LauncherError

SECURITY_DIR = "security"
SECRETS_FILE = "secrets.properties"
CLIENT_CONFIG = "client.properties"
ADMIN_CONFIG = "admin.properties"
CLIENT_LISTENER = "SASL_SSL"
INTERNAL_LISTENER = "INTERNAL"
CONTROLLER_LISTENER = "CONTROLLER"
SUPER_USER = "admin"
USER = "alice"
USER_MECHANISM = "SCRAM-SHA-512"
CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_CN = "kraft-dev-client"  # the brokers' certificate towards the controllers
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SERVER_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Security:
    """A secured cluster's material: file paths and the secrets (never in a repr)."""

    directory: Path
    admin_password: str = field(repr=False)
    http_token: str = field(repr=False)
    user: str
    user_password: str = field(repr=False)

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_keystore(self) -> Path:
        return self.directory / "server.pem"

    @property
    def client_keystore(self) -> Path:
        return self.directory / "client.pem"


def load_or_create(data_dir: Path) -> Security:
    """The security of the cluster in `data_dir`: what is there, else new certificates
    and secrets (certificates are remade together if one is missing)."""
    directory = data_dir / SECURITY_DIR
    path = directory / SECRETS_FILE
    if path.exists():
        try:
            values = read_properties(path)
            sec = Security(
                directory,
                values["admin.password"],
                values["controller.quorum.http.token"],
                values["user.name"],
                values["user.password"],
            )
        except (ConfigError, KeyError) as exc:
            raise LauncherError(f"{path} is not a kraft dev secrets file ({exc})") from None
    else:
        sec = Security(
            directory,
            secrets.token_urlsafe(18),
            secrets.token_urlsafe(32),
            USER,
            secrets.token_urlsafe(18),
        )
        _write_private(
            path,
            {
                "admin.password": sec.admin_password,
                "controller.quorum.http.token": sec.http_token,
                "user.name": sec.user,
                "user.password": sec.user_password,
            },
        )
    if not all(p.exists() for p in (sec.ca, sec.server_keystore, sec.client_keystore)):
        ca = make_ca(directory, "kraft-dev-ca")
        issue(ca, sec.server_keystore, "kraft-dev-server", hosts=SERVER_HOSTS, server=True)
        issue(ca, sec.client_keystore, CLIENT_CN)
    return sec


def _write_private(path: Path, props: Mapping[str, str]) -> None:
    """A properties file only its owner can read (it holds secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _jaas(module: str, **options: str) -> str:
    body = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"{module} required {body};" if body else f"{module} required;"


def _tls(sec: Security) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(sec.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(sec.ca),
    }


def broker_properties(sec: Security, host: str, port: int, internal_port: int) -> dict[str, str]:
    """What a secured broker adds to its properties: listeners, TLS, SASL, the
    authorizer and the controller plane's credentials."""
    admin_user = {f"user_{SUPER_USER}": sec.admin_password}
    client, internal = CLIENT_LISTENER.lower(), INTERNAL_LISTENER.lower()
    props = {
        "listeners": f"{CLIENT_LISTENER}://{host}:{port},{INTERNAL_LISTENER}://{host}:{internal_port}",
        "listener.security.protocol.map": f"{CLIENT_LISTENER}:SASL_SSL,"
        f"{INTERNAL_LISTENER}:SASL_SSL,{CONTROLLER_LISTENER}:SSL",
        "inter.broker.listener.name": INTERNAL_LISTENER,
        "sasl.enabled.mechanisms": ",".join(CLIENT_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        f"listener.name.{client}.plain.sasl.jaas.config": _jaas(PLAIN_LOGIN_MODULE, **admin_user),
        f"listener.name.{internal}.sasl.enabled.mechanisms": "PLAIN",
        # The broker's own login (username/password) and the users it accepts.
        f"listener.name.{internal}.plain.sasl.jaas.config": _jaas(
            PLAIN_LOGIN_MODULE, username=SUPER_USER, password=sec.admin_password, **admin_user
        ),
        **_tls(sec),
        "authorizer.class.name": AUTHORIZER,
        "super.users": f"User:{SUPER_USER}",
        "controller.listener.names": CONTROLLER_LISTENER,
        "controller.quorum.http.token": sec.http_token,
        # Towards the controllers the broker is a client: its client certificate.
        f"listener.name.{CONTROLLER_LISTENER.lower()}.ssl.keystore.location": str(
            sec.client_keystore
        ),
    }
    for mechanism in CLIENT_MECHANISMS[1:]:
        # SCRAM users live in the metadata log: the login module takes no options.
        props[f"listener.name.{client}.{mechanism.lower()}.sasl.jaas.config"] = _jaas(
            SCRAM_LOGIN_MODULE
        )
    return props


def controller_properties(sec: Security) -> dict[str, str]:
    """What a secured controller adds: its HTTP API over TLS, and on every request the
    token or the brokers' client certificate (the only one admitted)."""
    return {
        "controller.listener.names": CONTROLLER_LISTENER,
        "listener.security.protocol.map": f"{CONTROLLER_LISTENER}:SSL",
        **_tls(sec),
        "ssl.client.auth": "requested",
        "super.users": f"User:CN={CLIENT_CN}",
        "controller.quorum.http.token": sec.http_token,
    }


def _client_tls(sec: Security) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(sec.ca),
    }


def client_properties(sec: Security, bootstrap: str) -> dict[str, str]:
    """alice's client config (Java names): SCRAM-SHA-512 over TLS."""
    return {
        "bootstrap.servers": bootstrap,
        **_client_tls(sec),
        "sasl.mechanism": USER_MECHANISM,
        "sasl.jaas.config": _jaas(
            SCRAM_LOGIN_MODULE, username=sec.user, password=sec.user_password
        ),
    }


def admin_properties(sec: Security, bootstrap: str) -> dict[str, str]:
    """The super user's client config (Java names): PLAIN over TLS."""
    return {
        "bootstrap.servers": bootstrap,
        **_client_tls(sec),
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": _jaas(
            PLAIN_LOGIN_MODULE, username=SUPER_USER, password=sec.admin_password
        ),
    }


def write_client_configs(sec: Security, data_dir: Path, bootstrap: str) -> tuple[Path, Path]:
    """`client.properties` (alice) and `admin.properties` in `data_dir`."""
    client, admin = data_dir / CLIENT_CONFIG, data_dir / ADMIN_CONFIG
    _write_private(client, client_properties(sec, bootstrap))
    _write_private(admin, admin_properties(sec, bootstrap))
    return client, admin


# -- the user, once the brokers are up ------------------------------------------------------


def _librdkafka(props: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    return {
        **translate(props),
        "log_level": 0,
        "error_cb": lambda err: None,  # failures are retried below, then reported once
        # A refused login is retried soon, not after librdkafka's backoff of up to 10 s.
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        **extra,
    }


def create_user(sec: Security, brokers: list[str], timeout_s: float) -> None:
    """Upsert the SCRAM user through the super user's AdminClient, then wait until it can
    log in on every broker (the credential reaches each through the metadata log)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    bootstrap = ",".join(brokers)
    deadline = time.monotonic() + timeout_s
    admin = AdminClient(_librdkafka(admin_properties(sec, bootstrap)))
    upsert = UserScramCredentialUpsertion(
        sec.user,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        sec.user_password.encode(),
    )
    last = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LauncherError(f"could not create the SCRAM user {sec.user}: {last}")
        fut = admin.alter_user_scram_credentials([upsert], request_timeout=min(remaining, 10))
        try:
            fut[sec.user].result(timeout=min(remaining, 10) + 1)
            break
        except KafkaException as exc:
            last = _error_text(exc)
        except TimeoutError:
            last = "no answer"
        time.sleep(0.2)
    for broker in brokers:
        _wait_login(sec, broker, deadline)


def _wait_login(sec: Security, broker: str, deadline: float) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    client = AdminClient(_librdkafka(client_properties(sec, broker)))
    last = ""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LauncherError(f"{sec.user} cannot log in on {broker}: {last or 'no answer'}")
        try:
            client.list_topics(timeout=min(remaining, 2.0))
            return
        except KafkaException as exc:
            last = _error_text(exc)


def _error_text(exc: Exception) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)
