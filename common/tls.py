"""TLS from Kafka's `ssl.*` properties (PEM keystores and truststores, KIP-651), for
every side that speaks TLS: the broker's listeners and its inter-broker client, the
controllers' HTTP API and the brokers' client of it, the tools and the Spark source.

Properties read (Kafka's names; only PEM is supported, and a JKS or PKCS12 store is
refused with a message saying so):
- `ssl.keystore.type` (PEM); `ssl.keystore.location` (a PEM file holding the private key
  and its certificate chain) or `ssl.keystore.certificate.chain` + `ssl.keystore.key`
  (the PEM text itself); `ssl.key.password` if the key is encrypted;
- `ssl.truststore.type` (PEM); `ssl.truststore.location` (a PEM file of CA certificates)
  or `ssl.truststore.certificates` (the PEM text);
- `ssl.client.auth` (servers): none, requested or required;
- `ssl.endpoint.identification.algorithm` (clients): `https` (the default, as in Kafka
  since 2.0) checks the server's host name; empty turns the check off;
- `ssl.enabled.protocols`: TLSv1.2 and/or TLSv1.3 (older versions are refused).

`listener_properties` resolves a listener's `listener.name.<name>.ssl.*` overrides.
The principal of a client certificate is Kafka's default: `User:` + its subject
distinguished name in RFC 2253 form (`User:CN=alice,O=Example`).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Mapping

from common.properties import ConfigError

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def listener_properties(values: Mapping[str, str], listener: str) -> dict[str, str]:
    """`values` with `listener.name.<listener>.` overrides applied (prefix removed)."""
    prefix = f"listener.name.{listener.lower()}."
    out = {k: v for k, v in values.items() if not k.startswith("listener.name.")}
    out.update({k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)})
    return out


def has_keystore(props: Mapping[str, str]) -> bool:
    return bool(props.get("ssl.keystore.location") or props.get("ssl.keystore.certificate.chain"))


def server_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A server's context: its key and certificate (required), the trust store that
    client certificates are checked against, and `ssl.client.auth`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, props)
    if not has_keystore(props):
        raise ConfigError(
            "ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key) "
            "is required for a TLS listener"
        )
    _load_keystore(ctx, props)
    auth = (props.get("ssl.client.auth") or "none").strip().lower()
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth must be none, requested or required, got {auth!r}")
    if auth != "none":
        if not _load_truststore(ctx, props):
            raise ConfigError(
                f"ssl.client.auth={auth} needs ssl.truststore.location or "
                "ssl.truststore.certificates (the CAs client certificates are checked against)"
            )
        ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def client_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client's context: the trust store (else the system's CAs), host name checking
    per `ssl.endpoint.identification.algorithm`, and a keystore for mutual TLS."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, props)
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigError(
            f"ssl.endpoint.identification.algorithm must be https or empty, got {algorithm!r}"
        )
    ctx.check_hostname = algorithm == "https"
    if not _load_truststore(ctx, props):
        ctx.load_default_certs()
    ctx.verify_mode = ssl.CERT_REQUIRED
    if has_keystore(props):
        _load_keystore(ctx, props)
    return ctx


def principal_from_certificate(der: bytes | None) -> str | None:
    """`User:<subject DN>` of a peer certificate (DER), as Kafka's default principal
    builder names it; None without a certificate."""
    if not der:
        return None
    from cryptography import x509  # imported here: only TLS listeners need it

    cert = x509.load_der_x509_certificate(der)
    return "User:" + cert.subject.rfc4514_string()


# -- loading --------------------------------------------------------------------------------


def _versions(ctx: ssl.SSLContext, props: Mapping[str, str]) -> None:
    raw = props.get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    names = [p.strip() for p in raw.split(",") if p.strip()]
    bad = [n for n in names if n not in _VERSIONS]
    if bad or not names:
        raise ConfigError(
            f"ssl.enabled.protocols: only TLSv1.2 and TLSv1.3 are supported, got {raw!r}"
        )
    versions = sorted(_VERSIONS[n] for n in names)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]


def _check_type(props: Mapping[str, str], name: str) -> None:
    kind = (props.get(name) or "PEM").strip().upper()
    if kind != "PEM":
        raise ConfigError(f"{name}={kind} is not supported; use PEM files (KIP-651)")


def _load_keystore(ctx: ssl.SSLContext, props: Mapping[str, str]) -> None:
    _check_type(props, "ssl.keystore.type")
    password = props.get("ssl.key.password") or props.get("ssl.keystore.password") or None
    location = props.get("ssl.keystore.location")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
            return
        chain = props.get("ssl.keystore.certificate.chain", "")
        key = props.get("ssl.keystore.key", "")
        if not key:
            raise ConfigError("ssl.keystore.certificate.chain needs ssl.keystore.key")
        # `ssl` loads keys only from files: a private temporary file, removed at once.
        fd, path = tempfile.mkstemp(prefix="kraft-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(key.strip() + "\n" + chain.strip() + "\n")
            ctx.load_cert_chain(path, password=password)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    except FileNotFoundError:
        raise ConfigError(f"ssl.keystore.location: no file {location!r}") from None
    except ssl.SSLError as exc:
        # Never the key or the password in the message: only which property failed.
        where = "ssl.keystore.location" if location else "ssl.keystore.certificate.chain/key"
        raise ConfigError(
            f"{where}: cannot load the private key and certificate ({exc.reason or 'bad PEM'};"
            " is ssl.key.password right?)"
        ) from None


def _load_truststore(ctx: ssl.SSLContext, props: Mapping[str, str]) -> bool:
    _check_type(props, "ssl.truststore.type")
    location = props.get("ssl.truststore.location")
    pem = props.get("ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        elif pem:
            ctx.load_verify_locations(cadata=pem)
        else:
            return False
    except FileNotFoundError:
        raise ConfigError(f"ssl.truststore.location: no file {location!r}") from None
    except ssl.SSLError as exc:
        where = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise ConfigError(f"{where}: not PEM certificates ({exc.reason})") from None
    return True
