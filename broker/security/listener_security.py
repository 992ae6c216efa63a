"""Each listener's security, read from the broker's properties and checked at start-up:
a TLS context for SSL and SASL_SSL listeners, the SASL mechanisms and PLAIN users for
SASL_PLAINTEXT and SASL_SSL ones, and what the broker itself presents as a client on the
inter-broker listener (the follower fetchers).

Kafka's property names, each resolvable per listener with a `listener.name.<name>.`
prefix (common/tls.listener_properties):
- TLS: the `ssl.*` names of common/tls.py;
- `sasl.enabled.mechanisms` (Kafka's default GSSAPI is refused, as is anything but
  PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512);
- `listener.name.<name>.<mechanism lower-case>.sasl.jaas.config`, falling back to
  `sasl.jaas.config`: PLAIN users as `user_<name>="<password>"`, and the broker's own
  inter-broker `username` / `password`;
- `sasl.mechanism.inter.broker.protocol` (Kafka's default GSSAPI is refused too).

Every error names the property; no error, repr or log line carries a password.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasEntry,
    parse_jaas_config,
    plain_users,
)
from common.properties import ConfigError
from common.tls import client_context, listener_properties, server_context

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_SASL_MECHANISM = "GSSAPI"  # Kafka's default for both mechanism properties


def uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ListenerSecurity:
    """How one listener authenticates its clients."""

    name: str  # the listener's name, upper-case
    security_protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    sasl_mechanisms: tuple[str, ...] = ()  # enabled, in the order given
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)  # name -> password


@dataclass(frozen=True)
class InterBrokerClientSecurity:
    """What the broker presents when it connects to another broker's inter-broker listener."""

    listener: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def listener_security(values: Mapping[str, str], name: str, protocol: str) -> ListenerSecurity:
    """The listener `name`'s security from the broker's properties (ConfigError if wrong)."""
    props = listener_properties(values, name)
    context = None
    if uses_tls(protocol):
        try:
            context = server_context(props)
        except ConfigError as exc:
            raise ConfigError(f"listener {name} ({protocol}): {exc}") from None
    if not uses_sasl(protocol):
        return ListenerSecurity(name, protocol, context)
    mechanisms = _enabled_mechanisms(props, name)
    users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        entry = _jaas_entry(props, name, "PLAIN")
        if entry is None:
            raise ConfigError(
                f"{_jaas_property(name, 'PLAIN')} is required: the PLAIN users of listener "
                f'{name} (user_<name>="<password>")'
            )
        users = plain_users(entry)
    return ListenerSecurity(name, protocol, context, mechanisms, users)


def inter_broker_client_security(
    values: Mapping[str, str], server: ListenerSecurity
) -> InterBrokerClientSecurity:
    """The client side of the inter-broker listener `server` (whose checks already ran)."""
    name, protocol = server.name, server.security_protocol
    props = listener_properties(values, name)
    context = None
    if uses_tls(protocol):
        try:
            context = client_context(props)
        except ConfigError as exc:
            raise ConfigError(f"inter-broker listener {name} ({protocol}): {exc}") from None
    if not uses_sasl(protocol):
        return InterBrokerClientSecurity(name, protocol, context)
    prop = "sasl.mechanism.inter.broker.protocol"
    mechanism = (values.get(prop) or DEFAULT_SASL_MECHANISM).strip().upper()
    _check_mechanism(prop, mechanism)
    if mechanism not in server.sasl_mechanisms:
        raise ConfigError(
            f"{prop}={mechanism} must be one of the sasl.enabled.mechanisms of the "
            f"inter-broker listener {name} ({', '.join(server.sasl_mechanisms)})"
        )
    entry = _jaas_entry(props, name, mechanism)
    user = None if entry is None else entry.options.get("username")
    password = None if entry is None else entry.options.get("password")
    if user is None or password is None:
        raise ConfigError(
            f"{_jaas_property(name, mechanism)}: username and password are required (this "
            f"broker logs in with them on the inter-broker listener {name})"
        )
    return InterBrokerClientSecurity(name, protocol, context, mechanism, user, password)


def _enabled_mechanisms(props: Mapping[str, str], listener: str) -> tuple[str, ...]:
    prop = "sasl.enabled.mechanisms"
    raw = props.get(prop) or DEFAULT_SASL_MECHANISM
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in raw.split(",") if m.strip()))
    if not mechanisms:
        raise ConfigError(f"{prop}: listener {listener} needs at least one mechanism")
    for m in mechanisms:
        _check_mechanism(f"{prop} (listener {listener})", m)
    return mechanisms


def _check_mechanism(prop: str, mechanism: str) -> None:
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            f"{prop}: SASL mechanism {mechanism} is not supported; use {', '.join(SASL_MECHANISMS)}"
        )


def _jaas_property(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def _jaas_entry(props: Mapping[str, str], listener: str, mechanism: str) -> JaasEntry | None:
    """The listener's JAAS entry for `mechanism`, checked against the mechanism's module."""
    specific = props.get(f"{mechanism.lower()}.sasl.jaas.config")
    name = _jaas_property(listener, mechanism) if specific else "sasl.jaas.config"
    text = specific or props.get("sasl.jaas.config")
    if text is None:
        return None
    entry = parse_jaas_config(text, name)
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    if entry.module != module:
        raise ConfigError(f"{name}: {mechanism} needs the login module {module}")
    return entry
