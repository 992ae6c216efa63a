"""The client side of SASL PLAIN and SCRAM-SHA-256/512, sans-I/O: the tokens a client
sends in SaslAuthenticate requests, and the check of the server's answers. Used by the
broker's inter-broker client (the follower fetcher), the Spark source and the tests;
whoever holds the socket sends `initial()`, then `step(server_token)` until `complete`.
"""

from __future__ import annotations

import base64
import hmac
import secrets

from common.scram import ScramMechanism, client_key, hmac_digest, salted_password, server_key

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslClientError(Exception):
    """The server's answer is not what the mechanism allows (or fails its proof)."""


class PlainClient:
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self.complete = False

    def initial(self) -> bytes:
        return self._token

    def step(self, challenge: bytes) -> bytes | None:
        self.complete = True  # the server's (empty) answer ends PLAIN
        return None


def _sasl_name(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def parse_attributes(message: bytes) -> dict[str, str]:
    """`a=1,b=2` (RFC 5802 attribute-value pairs) -> {"a": "1", "b": "2"}."""
    out: dict[str, str] = {}
    for part in message.decode("utf-8").split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise SaslClientError(f"malformed SCRAM message part {part[:20]!r}")
        out[key] = value
    return out


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.scram = ScramMechanism.from_mechanism_name(mechanism)
        if self.scram is ScramMechanism.UNKNOWN:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = self.scram.mechanism_name
        self._password = password.encode()
        self._nonce = base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        self._first_bare = f"n={_sasl_name(username)},r={self._nonce}"
        self._auth_message = b""
        self._server_key = b""
        self.complete = False

    def initial(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def step(self, challenge: bytes) -> bytes | None:
        if self._auth_message:
            return self._verify_final(challenge)
        attrs = parse_attributes(challenge)
        if "e" in attrs:
            raise SaslClientError(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or salt is None or not iterations.isdigit():
            raise SaslClientError("malformed server-first-message")
        salted = salted_password(
            self.scram, self._password, base64.b64decode(salt), int(iterations)
        )
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = ",".join(
            [self._first_bare, challenge.decode(), without_proof]
        ).encode()
        ckey = client_key(self.scram, salted)
        stored = _hash(self.scram, ckey)
        signature = hmac_digest(self.scram, stored, self._auth_message)
        proof = bytes(a ^ b for a, b in zip(ckey, signature, strict=True))
        self._server_key = server_key(self.scram, salted)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def _verify_final(self, challenge: bytes) -> None:
        attrs = parse_attributes(challenge)
        if "e" in attrs:
            raise SaslClientError(f"server refused: {attrs['e']}")
        expected = hmac_digest(self.scram, self._server_key, self._auth_message)
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), expected):
            raise SaslClientError("the server's signature is wrong (not the real server?)")
        self.complete = True
        return None


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    import hashlib

    return hashlib.new(mechanism.hash_name, data).digest()


def sasl_client(mechanism: str, username: str, password: str) -> PlainClient | ScramClient:
    """The client for `mechanism` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)."""
    if mechanism.upper() == "PLAIN":
        return PlainClient(username, password)
    return ScramClient(mechanism, username, password)
