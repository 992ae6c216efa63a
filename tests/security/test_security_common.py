"""common/jaas.py, common/tls.py and common/sasl_client.py: parsing, refusals that name
the property (never the secret), and the SCRAM client against RFC 7677's example."""

from __future__ import annotations

import base64
import ssl

import pytest

from common import sasl_client
from common.jaas import client_credentials, parse_jaas_config, plain_users
from common.properties import ConfigError
from common.tls import client_context, listener_properties, server_context

PLAIN = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="adm;in\\"pw" user_admin="adm;in\\"pw" user_alice=alice-pw;'
)


def test_jaas_parses_quoted_bare_and_escaped_values() -> None:
    entry = parse_jaas_config(PLAIN)
    assert entry.module.endswith("PlainLoginModule") and entry.flag == "required"
    assert client_credentials(PLAIN) == ("admin", 'adm;in"pw')
    assert plain_users(entry) == {"admin": 'adm;in"pw', "alice": "alice-pw"}
    assert "adm;in" not in repr(entry)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "PlainLoginModule",
        'PlainLoginModule required username="a"',  # no ';'
        'PlainLoginModule required username="a"; Other required;',
        "PlainLoginModule required username=;",
    ],
)
def test_jaas_refuses_malformed_entries(text: str) -> None:
    with pytest.raises(ConfigError, match="sasl.jaas.config"):
        parse_jaas_config(text)


def test_client_credentials_need_both() -> None:
    with pytest.raises(ConfigError, match="username and password"):
        client_credentials('X required username="a";')


def test_listener_properties_apply_overrides() -> None:
    values = {
        "ssl.client.auth": "none",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.other.ssl.key.password": "x",
    }
    assert listener_properties(values, "INTERNAL") == {"ssl.client.auth": "required"}
    assert listener_properties(values, "EXTERNAL") == {"ssl.client.auth": "none"}


def test_tls_contexts(certs) -> None:  # noqa: ANN001 - the fixture's dataclass
    ctx = server_context(
        {
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
        }
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    pem = certs.server.read_text()
    key = pem[: pem.index("-----END PRIVATE KEY-----") + 25]
    chain = pem[len(key) :]
    inline = client_context(
        {
            "ssl.keystore.certificate.chain": chain,
            "ssl.keystore.key": key,
            "ssl.truststore.certificates": certs.ca.read_text(),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert not inline.check_hostname


@pytest.mark.parametrize(
    ("props", "match"),
    [
        ({}, "ssl.keystore.location"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "no file"),
        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x"}, "JKS is not supported"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.2 and TLSv1.3"),
        ({"ssl.client.auth": "maybe", "SERVER": ""}, "ssl.client.auth"),
        ({"ssl.client.auth": "required", "SERVER": ""}, "truststore"),
    ],
)
def test_tls_refusals_name_the_property(certs, props: dict[str, str], match: str) -> None:  # noqa: ANN001
    if "SERVER" in props:
        props = {k: v for k, v in props.items() if k != "SERVER"}
        props["ssl.keystore.location"] = str(certs.server)
    with pytest.raises(ConfigError, match=match):
        server_context(props)


def test_wrong_key_password_never_shows_it(certs, tmp_path) -> None:  # noqa: ANN001
    from cryptography.hazmat.primitives import serialization

    pem = certs.client.read_bytes()
    key = serialization.load_pem_private_key(pem, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"right-password"),
    )
    path = tmp_path / "enc.pem"
    path.write_bytes(encrypted + pem[pem.index(b"-----BEGIN CERTIFICATE") :])
    client_context({"ssl.keystore.location": str(path), "ssl.key.password": "right-password"})
    with pytest.raises(ConfigError) as e:
        client_context({"ssl.keystore.location": str(path), "ssl.key.password": "wrong-secret"})
    assert "wrong-secret" not in str(e.value)


def test_scram_client_matches_rfc7677_example(monkeypatch: pytest.MonkeyPatch) -> None:
    # RFC 7677 section 3: user "user", password "pencil", the client nonce below.
    c = sasl_client.ScramClient("SCRAM-SHA-256", "user", "pencil")
    monkeypatch.setattr(c, "_nonce", "rOprNGfwEbeRWgbNEkqO")
    c._first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.initial() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = c.step(server_first)
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    with pytest.raises(sasl_client.SaslClientError, match="signature"):
        c.step(b"v=" + base64.b64encode(b"\0" * 32))
    assert c.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert c.complete


def test_scram_client_refuses_a_foreign_nonce() -> None:
    c = sasl_client.ScramClient("SCRAM-SHA-512", "u", "p")
    c.initial()
    with pytest.raises(sasl_client.SaslClientError, match="malformed"):
        c.step(b"r=someone-else,s=AAAA,i=4096")
    with pytest.raises(sasl_client.SaslClientError, match="refused"):
        sasl_client.ScramClient("SCRAM-SHA-512", "u", "p").step(b"e=invalid-proof")
