"""SCRAM (RFC 5802, with SHA-256 and SHA-512 as RFC 7677 and Kafka use them): the
mechanisms, their codes on the wire (DescribeUserScramCredentials and
AlterUserScramCredentials, KIP-554) and the key derivations every side shares.

The broker turns an AlterUserScramCredentials upsertion (salt + salted password) into
the stored key and server key kept in the metadata log; the server side of a login
checks a client proof against them; clients derive the same keys from a password.
"""

from __future__ import annotations

import hashlib
import hmac
from enum import IntEnum

MIN_ITERATIONS = 4096  # Kafka refuses fewer (ScramMechanism.minIterations)
MAX_ITERATIONS = 16384  # and more (ScramMechanism.maxIterations, KIP-554)


class ScramMechanism(IntEnum):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL name: SCRAM-SHA-256 or SCRAM-SHA-512."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return {1: "sha256", 2: "sha512"}[self.value]

    @classmethod
    def from_mechanism_name(cls, name: str) -> ScramMechanism:
        """UNKNOWN for anything but SCRAM-SHA-256 / SCRAM-SHA-512."""
        for m in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            if m.mechanism_name == name.upper():
                return m
        return cls.UNKNOWN


def salted_password(
    mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int
) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def hmac_digest(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    """H(ClientKey): what the server keeps to check a client proof."""
    return hashlib.new(mechanism.hash_name, client_key(mechanism, salted)).digest()


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")
