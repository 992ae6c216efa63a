"""A Java Kafka client's properties turned into librdkafka's settings: what
`--command-config client.properties` gives every client tool (kafka-topics.sh and
friends take such files; the tools are confluent-kafka clients), and what the Spark
sink does with its `kafka.*` options (Spark's Kafka sink takes the Java producer's).

Translated (Java name -> librdkafka name):
- `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) and `sasl.mechanism`
  (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) keep their names;
- `sasl.jaas.config` -> `sasl.username` + `sasl.password` (its `username`/`password`);
- `ssl.truststore.location` -> `ssl.ca.location`, `ssl.truststore.certificates` ->
  `ssl.ca.pem`;
- `ssl.keystore.location` (one PEM file with the key and its chain) ->
  `ssl.certificate.location` + `ssl.key.location` (both read the same file);
  `ssl.keystore.certificate.chain` + `ssl.keystore.key` -> `ssl.certificate.pem` +
  `ssl.key.pem`; `ssl.key.password` keeps its name;
- `ssl.endpoint.identification.algorithm`: `https` stays, empty -> `none`;
- `ssl.truststore.type` / `ssl.keystore.type` must be PEM (KIP-651), and
  `ssl.enabled.protocols` / `ssl.protocol` may only name TLSv1.2 and TLSv1.3 (the
  brokers accept nothing older); those are checked, then dropped.

Any other property passes through as a librdkafka setting (so librdkafka's own names
work too); librdkafka refuses a name it does not know when the client is made. A JKS or
PKCS12 store, or a Java property with no librdkafka meaning, is refused here with one
line naming the property. Values never appear in messages: they may be secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from common.jaas import client_credentials
from common.properties import ConfigError, read_properties

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
# put(librdkafka name, value, the Java name it came from)
_Put = Callable[[str, str, str], None]

# Java client properties librdkafka has no counterpart for: refused rather than ignored,
# since the user expects them to do something.
_JAVA_ONLY = frozenset(
    {
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "sasl.login.class",
        "sasl.kerberos.service.name.class",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.provider",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "security.providers",
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
    }
)


def load_command_config(path: str | Path) -> dict[str, str]:
    """librdkafka settings from a Java client properties file; ConfigError if unusable."""
    source = str(path)
    if not Path(path).is_file():
        raise ConfigError(f"--command-config: no file {source!r}")
    return translate(read_properties(path), source)


def translate(props: Mapping[str, str], source: str = "command config") -> dict[str, str]:
    """librdkafka settings for Java client `props` (see the module docstring)."""
    rest = {k.strip(): v.strip() for k, v in props.items()}
    out: dict[str, str] = {}

    def put(name: str, value: str, java: str) -> None:
        if name in rest or name in out:
            raise ConfigError(f"{source}: {java} and {name} both set; keep one")
        out[name] = value

    protocol = rest.pop("security.protocol", None)
    if protocol is not None:
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{source}: security.protocol={protocol!r}: one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        out["security.protocol"] = protocol.upper()
    mechanism = rest.pop("sasl.mechanism", None) or rest.pop("sasl.mechanisms", None)
    if mechanism is not None:
        if mechanism.upper() not in SASL_MECHANISMS:
            raise ConfigError(
                f"{source}: sasl.mechanism={mechanism!r} is not supported; "
                f"use one of {', '.join(SASL_MECHANISMS)}"
            )
        out["sasl.mechanism"] = mechanism.upper()
    elif (protocol or "").upper().startswith("SASL_"):
        # Java's and librdkafka's default, GSSAPI, is not one the brokers offer.
        raise ConfigError(
            f"{source}: security.protocol={protocol} needs sasl.mechanism "
            f"({', '.join(SASL_MECHANISMS)})"
        )
    jaas = rest.pop("sasl.jaas.config", None)
    if jaas is not None:
        user, password = client_credentials(jaas, f"{source}: sasl.jaas.config")
        put("sasl.username", user, "sasl.jaas.config")
        put("sasl.password", password, "sasl.jaas.config")
    _translate_ssl(rest, put, source)
    for name in sorted(rest):
        if name in _JAVA_ONLY:
            raise ConfigError(
                f"{source}: {name} is a Java client setting with no equivalent in librdkafka "
                "(the kraft tools' client); remove it"
            )
    out.update(rest)
    return out


def _translate_ssl(rest: dict[str, str], put: _Put, source: str) -> None:
    """Move the `ssl.*` Java properties out of `rest` into librdkafka names via `put`."""
    for name in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = rest.pop(name, "")
        if kind and kind.upper() != "PEM":
            raise ConfigError(
                f"{source}: {name}={kind} is not supported; use PEM files (KIP-651): "
                "convert the store with keytool -importkeystore and openssl"
            )
    for name in ("ssl.truststore.password", "ssl.keystore.password"):
        if rest.pop(name, None) is not None:
            # Kafka refuses these for PEM stores too: only a key can be encrypted.
            raise ConfigError(
                f"{source}: {name} cannot be used with PEM files; "
                "set ssl.key.password if the private key is encrypted"
            )
    for name in ("ssl.enabled.protocols", "ssl.protocol"):
        value = rest.pop(name, None)
        if value is None:
            continue
        versions = [v.strip() for v in value.split(",") if v.strip()]
        if not versions or any(v not in TLS_VERSIONS for v in versions):
            raise ConfigError(f"{source}: {name}={value!r}: only TLSv1.2 and TLSv1.3 are allowed")
    location = rest.pop("ssl.truststore.location", None)
    if location is not None:
        _check_pem(location, "ssl.truststore.location", source, key=False)
        put("ssl.ca.location", location, "ssl.truststore.location")
    pem = rest.pop("ssl.truststore.certificates", None)
    if pem is not None:
        put("ssl.ca.pem", pem, "ssl.truststore.certificates")
    keystore = rest.pop("ssl.keystore.location", None)
    if keystore is not None:
        _check_pem(keystore, "ssl.keystore.location", source, key=True)
        put("ssl.certificate.location", keystore, "ssl.keystore.location")
        put("ssl.key.location", keystore, "ssl.keystore.location")
    chain = rest.pop("ssl.keystore.certificate.chain", None)
    key = rest.pop("ssl.keystore.key", None)
    if (chain is None) != (key is None):
        raise ConfigError(
            f"{source}: ssl.keystore.certificate.chain and ssl.keystore.key go together"
        )
    if chain is not None and key is not None:
        put("ssl.certificate.pem", chain, "ssl.keystore.certificate.chain")
        put("ssl.key.pem", key, "ssl.keystore.key")
    algorithm = rest.pop("ssl.endpoint.identification.algorithm", None)
    if algorithm is not None:
        if algorithm.lower() not in ("", "https", "none"):
            raise ConfigError(
                f"{source}: ssl.endpoint.identification.algorithm={algorithm!r}: "
                "https, or empty to skip the host name check"
            )
        rest["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"


def _check_pem(path: str, name: str, source: str, *, key: bool) -> None:
    """A readable PEM file (with a private key and a certificate when `key`); a JKS or
    PKCS12 store is named as such."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: {name}: cannot read {path!r} ({exc.strerror})") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(
            f"{source}: {name}: {path!r} is not a PEM file (a JKS or PKCS12 store?); "
            "only PEM is supported (KIP-651): convert it with keytool and openssl"
        )
    if b"CERTIFICATE-----" not in data:
        raise ConfigError(f"{source}: {name}: {path!r} holds no PEM certificate")
    if key and b"PRIVATE KEY-----" not in data:
        raise ConfigError(
            f"{source}: {name}: {path!r} holds no private key (a keystore is the key and "
            "its certificate chain in one PEM file)"
        )
