"""The controller plane's security settings, read the same way by the controllers (the
server side), the brokers and the tools (the client side): which protocol the controller
listener speaks, the bearer token, and a client's TLS context and headers.

Properties:
- `controller.listener.names` (Kafka's; default CONTROLLER): the first name is the
  listener of the controllers' HTTP API.
- `listener.security.protocol.map` (Kafka's): that listener's protocol, PLAINTEXT (http)
  or SSL (https, with the `ssl.*` and `listener.name.<listener>.ssl.*` properties of
  common/tls.py). SASL protocols are refused: the plane authenticates with a client
  certificate or the token. A listener absent from the map uses its own name if that is
  a protocol (Kafka's default map), else PLAINTEXT (ours: Kafka refuses an unmapped
  controller listener, and configs written before the plane had security have no map).
- `security.protocol` (Kafka's client name): in a tool's client properties file it
  names the protocol directly and wins over the map.
- `controller.quorum.http.token` (ours): the shared secret clients send as
  `Authorization: Bearer <token>`. Never logged, never shown in an error or a repr.

Shared here (not in broker/ or kraft/) because the controllers, the brokers and the
tools must agree on every one of these rules.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.properties import ConfigError
from common.tls import client_context, listener_properties

DEFAULT_CONTROLLER_LISTENER = "CONTROLLER"
PLAINTEXT, SSL = "PLAINTEXT", "SSL"
_KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TOKEN_PROPERTY = "controller.quorum.http.token"
MIN_TOKEN_CHARS, MAX_TOKEN_CHARS = 16, 1024
# Visible ASCII only: the token travels in an HTTP header, where a space or a line break
# would end it (or inject another header).
_TOKEN_CHARS = re.compile(r"[!-~]+")


def controller_listener_name(values: Mapping[str, str]) -> str:
    """The first of `controller.listener.names` (upper case, as listener names are)."""
    names = [n.strip() for n in values.get("controller.listener.names", "").split(",")]
    names = [n for n in names if n]
    return (names[0] if names else DEFAULT_CONTROLLER_LISTENER).upper()


def listener_protocol(values: Mapping[str, str], listener: str) -> str:
    """The security protocol of `listener` per `listener.security.protocol.map`."""
    name = "listener.security.protocol.map"
    for item in values.get(name, "").split(","):
        if not item.strip():
            continue
        lname, sep, protocol = item.partition(":")
        if not sep:
            raise ConfigError(f"{name}: expected NAME:PROTOCOL, got {item.strip()!r}")
        if lname.strip().upper() == listener.upper():
            return protocol.strip().upper()
    return listener.upper() if listener.upper() in _KAFKA_PROTOCOLS else PLAINTEXT


def plane_protocol(values: Mapping[str, str], listener: str) -> str:
    """PLAINTEXT or SSL: the controller listener's entry in the protocol map."""
    return _plane(listener_protocol(values, listener), "listener.security.protocol.map")


def _client_protocol(values: Mapping[str, str], listener: str) -> str:
    """A client's protocol: `security.protocol` if given (a tool's client properties
    file), else the controller listener's entry in the protocol map (a node's file)."""
    given = values.get("security.protocol", "").strip().upper()
    return _plane(given, "security.protocol") if given else plane_protocol(values, listener)


def _plane(protocol: str, where: str) -> str:
    if protocol not in (PLAINTEXT, SSL):
        raise ConfigError(
            f"{where}: the controller plane speaks PLAINTEXT or SSL (https), got {protocol}; "
            f"it authenticates with a client certificate or {TOKEN_PROPERTY}"
        )
    return protocol


def http_token(values: Mapping[str, str]) -> str | None:
    """`controller.quorum.http.token`, checked (the message never shows it); None if unset."""
    token = values.get(TOKEN_PROPERTY, "").strip()
    if not token:
        return None
    if not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
        raise ConfigError(
            f"{TOKEN_PROPERTY} must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters long "
            f"(got {len(token)}); e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if not _TOKEN_CHARS.fullmatch(token):
        raise ConfigError(
            f"{TOKEN_PROPERTY} may hold only visible ASCII characters (no spaces or line breaks)"
        )
    return token


@dataclass(frozen=True)
class ControllerPlaneClient:
    """How a client reaches the controllers: http or https (with this context) and the
    headers every request carries."""

    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def base_url(self, host: str, port: int) -> str:
        host = f"[{host}]" if ":" in host else host
        return f"{self.scheme}://{host}:{port}"

    def headers(self) -> dict[str, str]:
        return {} if self.token is None else {"Authorization": f"Bearer {self.token}"}

    def __repr__(self) -> str:
        return f"ControllerPlaneClient(scheme={self.scheme}, token={'set' if self.token else None})"


def plane_client(values: Mapping[str, str]) -> ControllerPlaneClient:
    """A client of the controller plane from a broker's (or a controller's, or a tool's
    client) properties: TLS from the controller listener's `ssl.*` (its keystore, if
    any, is the client certificate for mutual TLS) and the token."""
    listener = controller_listener_name(values)
    context = None
    if _client_protocol(values, listener) == SSL:
        context = client_context(listener_properties(values, listener))
    return ControllerPlaneClient(context, http_token(values))
