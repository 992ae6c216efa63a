"""The server side of SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka's
ScramSaslServer does it, sans-I/O: the caller supplies the server nonce and the
credential lookup.

    client-first  n,[a=<authzid>],n=<user>,r=<client nonce>[,<extension>=<value>]*
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final  v=<base64 server signature>

Credentials are the salted ones of the metadata log (stored key, server key, salt,
iterations), never a password. An unknown user is answered with a salt derived from its
name and a secret of this broker (the same salt every time, as a real user's would be)
and Kafka's default iterations, and fails at the proof: the same messages, the same work
and the same error as a wrong password. Channel binding is not supported (gs2 flag `n`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable

from broker.security.sasl_mechanism import SaslAuthenticationError
from common.scram import MIN_ITERATIONS, ScramMechanism, hmac_digest
from metadata_log.image import ScramCredential

FAKE_SALT_BYTES = 32

CredentialLookup = Callable[[str], ScramCredential | None]


def failure_message(mechanism: ScramMechanism) -> str:
    """Kafka's message for any failed SCRAM login (unknown user, wrong password, bad
    message): nothing that tells them apart."""
    return (
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism.mechanism_name}"
    )


def decode_sasl_name(name: str) -> str | None:
    """RFC 5802 saslname: `=2C` is ',' and `=3D` is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "=":
            escape = name[i : i + 3]
            if escape not in ("=2C", "=3D"):
                return None
            out.append("," if escape == "=2C" else "=")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _valid_nonce(nonce: str) -> bool:
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


class ScramServer:
    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: CredentialLookup,
        server_nonce: str,
        fake_salt_secret: bytes,
    ) -> None:
        if mechanism is ScramMechanism.UNKNOWN:
            raise ValueError("not a SCRAM mechanism")
        self.scram = mechanism
        self.mechanism = mechanism.mechanism_name
        self._credentials = credentials
        self._server_nonce = server_nonce
        self._fake_salt_secret = fake_salt_secret
        self.complete = False
        self.username: str | None = None
        self._step = 0  # client messages seen
        self._user = ""
        self._gs2_header = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._known = False

    def evaluate(self, token: bytes) -> bytes:
        self._step += 1
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._failed() from None
        if self._step == 1:
            return self._client_first(text)
        if self._step == 2:
            return self._client_final(text)
        raise self._failed()  # SCRAM is two client messages: nothing may follow

    # -- the two client messages ---------------------------------------------------------

    def _client_first(self, text: str) -> bytes:
        flag, sep, rest = text.partition(",")
        authz, sep2, bare = rest.partition(",")
        if flag != "n" or not sep or not sep2 or (authz and not authz.startswith("a=")):
            raise self._failed()  # only "no channel binding" (Kafka's client sends n,,)
        parts = bare.split(",")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
            raise self._failed()
        user = decode_sasl_name(parts[0][2:])
        client_nonce = parts[1][2:]
        if not user or not _valid_nonce(client_nonce):
            raise self._failed()
        extensions = dict(p.partition("=")[::2] for p in parts[2:])
        if not all("=" in p and p[0] != "=" for p in parts[2:]):
            raise self._failed()
        if "m" in extensions or "tokenauth" in extensions:
            raise self._failed()  # mandatory extensions and delegation tokens: unsupported
        if authz and decode_sasl_name(authz[2:]) != user:
            raise self._failed()  # Kafka: the authorization id must be the user itself
        credential = self._credentials(user)
        self._known = credential is not None
        self._credential = credential if credential is not None else self._fake(user)
        self._user = user
        self._gs2_header = f"{flag},{authz},"
        self._first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        parts = without_proof.split(",")
        if not sep or len(parts) < 2 or not parts[0].startswith("c="):
            raise self._failed()
        try:
            binding = base64.b64decode(parts[0][2:], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._failed() from None
        # Kafka checks that the nonce *ends with* the one it sent, and librdkafka 2.0.0-2.0.2
        # (Debian's kcat) depends on it: it repeats its own nonce in front. The server's
        # random part is still there, so a replayed final message is still refused.
        nonce = parts[1][2:] if parts[1].startswith("r=") else ""
        if binding != self._gs2_header.encode() or not nonce.endswith(self._nonce):
            raise self._failed()
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        stored = self._credential.stored_key
        signature = hmac_digest(self.scram, stored, auth_message)
        if len(proof) != len(signature):
            raise self._failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(self.scram.hash_name, client_key).digest()
        if not hmac.compare_digest(computed, stored) or not self._known:
            raise self._failed()
        server_signature = hmac_digest(self.scram, self._credential.server_key, auth_message)
        self.username = self._user
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)

    # -- helpers --------------------------------------------------------------------------

    def _fake(self, user: str) -> ScramCredential:
        """A credential for a user that does not exist: its salt is stable per name, its
        keys are never matched (`_known` is False)."""
        digest = hmac.new(self._fake_salt_secret, user.encode(), "sha512").digest()
        size = hashlib.new(self.scram.hash_name).digest_size
        return ScramCredential(
            salt=digest[:FAKE_SALT_BYTES],
            stored_key=digest[-size:],
            server_key=digest[:size],
            iterations=MIN_ITERATIONS,
        )

    def _failed(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(failure_message(self.scram))
