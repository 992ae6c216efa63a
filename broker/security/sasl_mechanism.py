"""What every server-side SASL mechanism is (PLAIN, SCRAM): a sans-I/O exchange of
tokens that ends with an authenticated user name, or an error whose message the client
may see (it never tells an unknown user from a wrong password)."""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationError(Exception):
    """The login failed; `str(self)` is the message sent in SaslAuthenticate."""


class SaslMechanismServer(Protocol):
    mechanism: str
    complete: bool  # True once the client has proved who it is
    username: str | None  # who (set when complete)

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token (SaslAuthenticationError if refused)."""
        ...
