"""The `kafka.security.protocol`, `kafka.sasl.*` and `kafka.ssl.*` options of the
`kraft` source, as Spark's Kafka source takes them (they are the Java client's), and
what the source's blocking client does with them: wrap each broker socket in TLS and
log in with SASL PLAIN or SCRAM before the first request.

`ClientSecurity` is what travels to executors in the source's options: plain strings
(a password included, as in Spark's own options), never shown by its repr.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.jaas import client_credentials
from common.properties import ConfigError
from common.sasl_client import MECHANISMS
from common.tls import client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class SecurityOptionError(ValueError):
    """A security option that cannot be used (the message never holds a secret)."""


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None  # SASL only
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_props: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # ssl.* options

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def context(self) -> ssl.SSLContext:
        try:
            return client_context(dict(self.ssl_props))
        except ConfigError as e:
            raise SecurityOptionError(f"kafka.{e}") from None

    def wrap(self, sock: socket.socket, host: str, ctx: ssl.SSLContext) -> socket.socket:
        """TLS over `sock` (the handshake runs here, under the socket's timeout)."""
        return ctx.wrap_socket(sock, server_hostname=host)


def parse_security(opts: Mapping[str, str]) -> ClientSecurity:
    """From the source's options (keys lower-cased, `kafka.` prefixed)."""
    protocol = opts.get("kafka.security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise SecurityOptionError(
            f"kafka.security.protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}"
        )
    ssl_props = tuple(
        sorted((k[len("kafka.") :], v) for k, v in opts.items() if k.startswith("kafka.ssl."))
    )
    mechanism = username = password = None
    if protocol.startswith("SASL_"):
        mechanism = opts.get("kafka.sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise SecurityOptionError(
                f"kafka.sasl.mechanism {mechanism} is not supported; use one of "
                f"{', '.join(MECHANISMS)}"
            )
        jaas = opts.get("kafka.sasl.jaas.config")
        if not jaas:
            raise SecurityOptionError(
                "kafka.sasl.jaas.config is required with a SASL kafka.security.protocol"
            )
        try:
            username, password = client_credentials(jaas, "kafka.sasl.jaas.config")
        except ConfigError as e:
            raise SecurityOptionError(str(e)) from None
    security = ClientSecurity(protocol, mechanism, username, password, ssl_props)
    if security.tls:
        security.context()  # a bad trust store or key fails at planning, not in a task
    return security
