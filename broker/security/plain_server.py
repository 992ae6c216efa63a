"""The server side of SASL PLAIN (RFC 4616), sans-I/O: one client token,
`[authzid] NUL authcid NUL passwd`, checked against the listener's JAAS users.

As Kafka's PlainSaslServer: an authorization id, if given, must equal the user name,
and every failure answers the same message, so an unknown user and a wrong password
look alike (the comparison does not stop at the first differing byte either).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from broker.security.sasl_mechanism import SaslAuthenticationError

FAILED = "Authentication failed: Invalid username or password"


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None  # set once authenticated

    def evaluate(self, token: bytes) -> bytes:
        """The (empty) answer to the client's token; SaslAuthenticationError if refused."""
        if self.complete:
            raise SaslAuthenticationError("Authentication failed: PLAIN takes one message")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("Authentication failed: invalid PLAIN message")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Authentication failed: invalid PLAIN message") from None
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        expected = self._users.get(user)
        # Compare against something even for an unknown user: the same work either way.
        same = hmac.compare_digest(
            password.encode(), (expected if expected is not None else "\0" + password).encode()
        )
        if expected is None or not same:
            raise SaslAuthenticationError(FAILED)
        self.username = user
        self.complete = True
        return b""
