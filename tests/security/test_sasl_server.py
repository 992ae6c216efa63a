"""The server side of SASL, sans-I/O: PLAIN and SCRAM against the client side of
common/sasl_client.py and RFC 7677's test vector, and the per-connection exchange
(SaslHandshake / SaslAuthenticate / raw v0 tokens) frame by frame."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.security.listener_security import ListenerSecurity
from broker.security.plain_server import FAILED as PLAIN_FAILED
from broker.security.plain_server import PlainServer
from broker.security.sasl_mechanism import SaslAuthenticationError
from broker.security.sasl_server import SaslServerFactory, SaslState
from broker.security.scram_server import ScramServer, decode_sasl_name, failure_message
from common.api_keys import ApiKey
from common.errors import Errors
from common.sasl_client import SaslClientError, sasl_client
from common.scram import (
    ScramMechanism,
    client_key,
    hmac_digest,
    salted_password,
    server_key,
    stored_key,
)
from metadata_log.image import ScramCredential
from tests.harness.raw_protocol import decode_response, encode_request, request

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SECRET = b"k" * 32


def credential(
    mechanism: ScramMechanism, password: str, salt: bytes = b"salt-1234", iterations: int = 4096
) -> ScramCredential:
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    return ScramCredential(
        salt, stored_key(mechanism, salted), server_key(mechanism, salted), iterations
    )


def scram_server(mechanism: ScramMechanism, users: dict[str, str]) -> ScramServer:
    creds = {u: credential(mechanism, p) for u, p in users.items()}
    return ScramServer(mechanism, creds.get, "server-nonce", SECRET)


def login(server: Any, mechanism: str, user: str, password: str) -> None:
    """Run the client against the server until the client completes (or either refuses)."""
    client = sasl_client(mechanism, user, password)
    token: bytes | None = client.initial()
    while not client.complete:
        assert token is not None
        token = client.step(server.evaluate(token))


# -- SCRAM --------------------------------------------------------------------------------------


def test_scram_sha_256_matches_the_rfc_7677_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    creds = {"user": credential(SHA256, "pencil", salt, 4096)}
    server = ScramServer(SHA256, creds.get, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", SECRET)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.username == "user"


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_scram_login_with_the_client_side(mechanism: ScramMechanism) -> None:
    server = scram_server(mechanism, {"alice": "wonderland", "b,o=b": "x"})
    login(server, mechanism.mechanism_name, "alice", "wonderland")  # the client checks v=
    assert server.complete and server.username == "alice"
    other = scram_server(mechanism, {"b,o=b": "x"})
    login(other, mechanism.mechanism_name, "b,o=b", "x")  # saslname escapes =2C and =3D
    assert other.username == "b,o=b"


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_an_unknown_user_and_a_wrong_password_look_the_same(mechanism: ScramMechanism) -> None:
    def attempt(user: str) -> tuple[bytes, str]:
        server = scram_server(mechanism, {"alice": "wonderland"})
        client = sasl_client(mechanism.mechanism_name, user, "guess")
        first = server.evaluate(client.initial())
        final = client.step(first)
        assert final is not None
        with pytest.raises(SaslAuthenticationError) as info:
            server.evaluate(final)
        assert not server.complete and server.username is None
        return first, str(info.value)

    known_first, known_error = attempt("alice")
    unknown_first, unknown_error = attempt("mallory")
    assert known_error == unknown_error == failure_message(mechanism)
    known = dict(p.split("=", 1) for p in known_first.decode().split(","))
    unknown = dict(p.split("=", 1) for p in unknown_first.decode().split(","))
    assert known.keys() == unknown.keys() and unknown["i"] == "4096"
    assert len(base64.b64decode(unknown["s"])) > 0
    assert attempt("mallory")[0].split(b",")[1] == unknown_first.split(b",")[1]  # stable salt
    assert attempt("trudy")[0].split(b",")[1] != unknown_first.split(b",")[1]


def test_scram_refuses_tampered_and_unsupported_messages() -> None:
    def first_then(final_of: Any, first: bytes = b"n,,n=alice,r=abc") -> None:
        server = scram_server(SHA256, {"alice": "pw"})
        server_first = server.evaluate(first)
        with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
            server.evaluate(final_of(server_first))

    def honest(server_first: bytes) -> bytes:
        client = sasl_client("SCRAM-SHA-256", "alice", "pw")
        client._nonce = "abc"  # type: ignore[union-attr]  # the nonce sent above
        client._first_bare = "n=alice,r=abc"  # type: ignore[union-attr]
        final = client.step(server_first)
        assert final is not None
        return final

    server = scram_server(SHA256, {"alice": "pw"})
    assert server.evaluate(honest(server.evaluate(b"n,,n=alice,r=abc"))).startswith(b"v=")
    first_then(lambda sf: honest(sf).replace(b"c=biws", b"c=eSws"))  # channel binding "y,,"
    first_then(lambda sf: honest(sf).replace(b"r=abc", b"r=abd"))  # another nonce
    first_then(lambda sf: honest(sf)[:-8] + b"AAAAAAA=")  # a forged proof
    first_then(lambda sf: honest(sf).split(b",p=")[0])  # no proof
    first_then(lambda sf: b"\xff\xfe")  # not UTF-8
    for bad_first in [
        b"p=tls-unique,,n=alice,r=abc",  # channel binding requested
        b"n,,n=alice",  # no nonce
        b"n,,r=abc,n=alice",  # wrong order
        b"n,a=bob,n=alice,r=abc",  # authorization id of someone else
        b"n,,n=al=ice,r=abc",  # a bare '=' in the name
        b"n,,n=alice,r=a,c",  # a nonce with a comma (or an extension without a value)
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens: unsupported
        b"n,,n=alice,r=abc,m=x",  # a mandatory extension
        b"n,,n=,r=abc",
        b"",
    ]:
        with pytest.raises(SaslAuthenticationError):
            scram_server(SHA256, {"alice": "pw"}).evaluate(bad_first)
    server = scram_server(SHA256, {"alice": "pw"})
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")  # authzid = user
    login(scram_server(SHA256, {"alice": "pw"}), "SCRAM-SHA-256", "alice", "pw")


def test_a_final_nonce_with_the_client_part_repeated_is_accepted_as_kafka_does() -> None:
    """librdkafka 2.0.0-2.0.2 sends r=<client nonce><client nonce><server nonce>; Kafka
    only checks that the nonce ends with the one it sent."""
    server = scram_server(SHA256, {"alice": "pw"})
    server_first = server.evaluate(b"n,,n=alice,r=abc").decode()
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r=abc{nonce}"
    auth_message = f"n=alice,r=abc,{server_first},{without_proof}".encode()
    salted = salted_password(SHA256, b"pw", b"salt-1234", 4096)
    signature = hmac_digest(SHA256, stored_key(SHA256, salted), auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key(SHA256, salted), signature, strict=True))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    assert server.evaluate(final).startswith(b"v=") and server.username == "alice"


def test_scram_takes_two_messages_only() -> None:
    server = scram_server(SHA512, {"alice": "pw"})
    login(server, "SCRAM-SHA-512", "alice", "pw")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"c=biws,r=x,p=AAAA")


def test_the_client_notices_a_server_that_does_not_know_the_password() -> None:
    creds = {"alice": credential(SHA256, "not-what-alice-thinks")}
    server = ScramServer(SHA256, creds.get, "n", SECRET)
    client = sasl_client("SCRAM-SHA-256", "alice", "pw")
    final = client.step(server.evaluate(client.initial()))
    assert final is not None
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final)
    with pytest.raises(SaslClientError):
        client.step(b"v=" + base64.b64encode(b"\0" * 32))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_scram_answers_garbage_with_an_authentication_error_only(a: bytes, b: bytes) -> None:
    server = scram_server(SHA512, {"alice": "pw"})
    for token in (a, b):
        try:
            server.evaluate(token)
        except SaslAuthenticationError:
            return
    assert not server.complete


def test_sasl_names() -> None:
    assert decode_sasl_name("a=2Cb=3Dc") == "a,b=c"
    assert decode_sasl_name("a=2") is None and decode_sasl_name("a=41") is None


# -- PLAIN --------------------------------------------------------------------------------------


def test_plain_logins() -> None:
    server = PlainServer({"alice": "wonderland"})
    login(server, "PLAIN", "alice", "wonderland")
    assert server.complete and server.username == "alice"
    assert PlainServer({"a": "b"}).evaluate(b"a\0a\0b") == b""  # authzid = user is fine


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0guess", PLAIN_FAILED),
        (b"\0mallory\0guess", PLAIN_FAILED),
        (b"\0alice\0wonderland\0", "invalid PLAIN message"),
        (b"alice\0wonderland", "invalid PLAIN message"),
        (b"\0\xff\0wonderland", "invalid PLAIN message"),
        (b"\0\0wonderland", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"bob\0alice\0wonderland", "authorization id"),
    ],
)
def test_plain_refusals(token: bytes, message: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=message):
        PlainServer({"alice": "wonderland"}).evaluate(token)


def test_plain_takes_one_message() -> None:
    server = PlainServer({"alice": "wonderland"})
    server.evaluate(b"\0alice\0wonderland")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\0alice\0wonderland")


# -- the exchange, frame by frame ------------------------------------------------------------


def factory(*mechanisms: str) -> SaslServerFactory:
    listener = ListenerSecurity(
        "SASL_PLAINTEXT", "SASL_PLAINTEXT", None, mechanisms, {"alice": "wonderland"}
    )
    creds = {("alice", m): credential(m, "scram-pw") for m in (SHA256, SHA512)}
    return SaslServerFactory(listener, lambda user, m: creds.get((user, m)), SECRET)


def frame(api_key: int, version: int, body: dict[str, Any], cid: int = 7) -> bytes:
    return encode_request(api_key, version, request(api_key, version, body), cid)[4:]


def answer(api_key: int, version: int, framed: bytes | None) -> Any:
    assert framed is not None
    cid, body = decode_response(api_key, version, framed[4:])
    assert cid == 7
    return body


@pytest.mark.parametrize("version", [0, 1, 2])
def test_handshake_then_authenticate_requests(version: int) -> None:
    auth = factory("PLAIN", "SCRAM-SHA-512").authenticator()
    assert auth.receive(frame(ApiKey.API_VERSIONS, 0, {})).dispatch
    step = auth.receive(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}))
    shake = answer(ApiKey.SASL_HANDSHAKE, 1, step.response)
    assert shake.error_code == 0 and list(shake.mechanisms) == ["PLAIN", "SCRAM-SHA-512"]
    client = sasl_client("SCRAM-SHA-512", "alice", "scram-pw")
    token: bytes | None = client.initial()
    while not client.complete:
        assert token is not None and not auth.complete
        step = auth.receive(frame(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}))
        assert step.close is None
        got = answer(ApiKey.SASL_AUTHENTICATE, version, step.response)
        assert got.error_code == 0
        token = client.step(bytes(got.auth_bytes))
    assert auth.complete and auth.principal == "User:alice"


def test_a_failed_login_answers_authentication_failed_then_closes() -> None:
    auth = factory("PLAIN").authenticator()
    auth.receive(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    step = auth.receive(frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0no"}))
    got = answer(ApiKey.SASL_AUTHENTICATE, 2, step.response)
    assert got.error_code == Errors.SASL_AUTHENTICATION_FAILED
    assert got.error_message == PLAIN_FAILED
    assert step.close and step.failed_login and not auth.complete
    assert auth.receive(frame(ApiKey.API_VERSIONS, 0, {})).close  # nothing after that


def test_handshake_v0_then_raw_tokens() -> None:
    auth = factory("PLAIN").authenticator()
    step = auth.receive(frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert answer(ApiKey.SASL_HANDSHAKE, 0, step.response).error_code == 0
    assert auth.state is SaslState.RAW_TOKENS
    step = auth.receive(b"\0alice\0wonderland")
    assert step.response == b"\0\0\0\0" and auth.principal == "User:alice"
    bad = factory("PLAIN").authenticator()
    bad.receive(frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    step = bad.receive(b"\0alice\0guess")
    assert step.response is None and step.close and step.failed_login


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_then_closed() -> None:
    auth = factory("SCRAM-SHA-256").authenticator()
    step = auth.receive(frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
    got = answer(ApiKey.SASL_HANDSHAKE, 1, step.response)
    assert got.error_code == Errors.UNSUPPORTED_SASL_MECHANISM
    assert list(got.mechanisms) == ["SCRAM-SHA-256"] and step.close


@pytest.mark.parametrize(
    "frames",
    [
        [frame(ApiKey.METADATA, 1, {"topics": None})],
        [frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0wonderland"})],
        [frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
         frame(ApiKey.METADATA, 1, {"topics": None})],
        [frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
         frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})],
        [frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
         frame(ApiKey.API_VERSIONS, 0, {})],
        [b"\x00\x11\x00\x02" + b"\0" * 8],  # SaslHandshake v2 does not exist
        [b"\x00\x11\x00\x01\x00\x00\x00\x07\x00\x00\x7f\xff"],  # a string past the frame
        [b"\x00\x11"],  # shorter than a header
        [frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}),
         b"\x00\x24\x00\x02\x00\x00\x00\x07\xff\xff\x00\xff"],  # a bad SaslAuthenticate
    ],
)  # fmt: skip
def test_anything_out_of_place_closes_the_connection(frames: list[bytes]) -> None:
    auth = factory("PLAIN").authenticator()
    steps = [auth.receive(f) for f in frames]
    assert all(s.close is None for s in steps[:-1])
    assert steps[-1].close is not None and steps[-1].response is None
    assert not auth.complete and auth.state is SaslState.FAILED
