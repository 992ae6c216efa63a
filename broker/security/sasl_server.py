"""The SASL exchange a connection to a SASL listener goes through before its requests
reach the API handlers (Kafka's SaslServerAuthenticator), sans-I/O: frames in, steps
out (what to write, whether to hand the frame to the API handlers, whether to close).

    ApiVersions*  ->  SaslHandshake(mechanism)  ->  SaslAuthenticate(token)*  ->  done
                                                v0:  raw size-prefixed tokens*   ->  done

- Before the handshake only ApiVersions (answered by the API handlers, so a client can
  learn the versions) and SaslHandshake v0-v1 are accepted; any other request closes
  the connection, as Kafka does ("Unexpected Kafka request ... during SASL handshake").
- SaslHandshake with a mechanism this listener does not enable is answered with
  UNSUPPORTED_SASL_MECHANISM and the enabled ones, then the connection closes.
- v1 (KIP-152): each token travels in a SaslAuthenticate request (v0-v2); nothing else
  is accepted until the mechanism completes. v0: the following frames are raw tokens
  and the answers raw size-prefixed tokens, as before KIP-152.
- A failed login answers SaslAuthenticate with SASL_AUTHENTICATION_FAILED and the
  mechanism's message (one message for an unknown user and a wrong password), then the
  connection closes (v0: it closes without an answer). The shell delays that answer by
  `connection.failed.authentication.delay.ms`, as Kafka does, to slow password guessing.
- Re-authentication (KIP-368) is not offered: the session lifetime is 0 (unbounded).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from broker.codec import (
    CloseConnection,
    RequestHeader,
    decode_body,
    encode_response,
    parse_header,
    peek_ids,
    request_class,
)
from broker.security.listener_security import ListenerSecurity
from broker.security.plain_server import PlainServer
from broker.security.sasl_mechanism import SaslAuthenticationError, SaslMechanismServer
from broker.security.scram_server import ScramServer
from common.api_keys import ApiKey
from common.errors import Errors
from common.scram import ScramMechanism
from metadata_log.image import ScramCredential

HANDSHAKE_VERSIONS = (0, 1)  # SaslHandshake
AUTHENTICATE_VERSIONS = (0, 2)  # SaslAuthenticate
_SIZE_BYTES = 4


class SaslState(Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests carry the tokens (KIP-152)
    RAW_TOKENS = "raw tokens"  # SaslHandshake v0: frames are the tokens themselves
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What the shell does with one frame received before authentication completes."""

    response: bytes | None = None  # a framed answer to write
    dispatch: bool = False  # hand the frame to the API handlers instead (ApiVersions)
    close: str | None = None  # after writing (if anything), close; why (for the log)
    failed_login: bool = False  # wait connection.failed.authentication.delay.ms first


class SaslServerAuthenticator:
    """One connection's SASL exchange. `new_mechanism(name)` makes the server side of
    an enabled mechanism for this connection."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        new_mechanism: Callable[[str], SaslMechanismServer],
    ) -> None:
        self.mechanisms = mechanisms
        self._new_mechanism = new_mechanism
        self.state = SaslState.HANDSHAKE
        self.mechanism: SaslMechanismServer | None = None
        self.principal: str | None = None  # "User:<name>" once complete

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def receive(self, frame: bytes) -> AuthStep:
        try:
            if self.state is SaslState.HANDSHAKE:
                return self._handshake(frame)
            if self.state is SaslState.AUTHENTICATE:
                return self._authenticate(frame)
            if self.state is SaslState.RAW_TOKENS:
                return self._raw_token(frame)
        except CloseConnection as e:  # a frame that does not decode
            self.state = SaslState.FAILED
            return AuthStep(close=f"malformed SASL request: {e}")
        why = f"request after the SASL exchange ended ({self.state.value})"
        self.state = SaslState.FAILED
        return AuthStep(close=why)

    # -- states ------------------------------------------------------------------------------

    def _handshake(self, frame: bytes) -> AuthStep:
        api_key, version, _ = peek_ids(frame)
        if api_key == ApiKey.API_VERSIONS:
            return AuthStep(dispatch=True)
        if api_key != ApiKey.SASL_HANDSHAKE:
            return self._fail_closed(f"unexpected request (api key {api_key}) before SASL")
        if not HANDSHAKE_VERSIONS[0] <= version <= HANDSHAKE_VERSIONS[1]:
            return self._fail_closed(f"SaslHandshake v{version} is not supported")
        header, body = _decode(frame)
        wanted = body.mechanism
        answer = {"mechanisms": list(self.mechanisms)}
        if wanted not in self.mechanisms:
            self.state = SaslState.FAILED
            return AuthStep(
                response=encode_response(
                    ApiKey.SASL_HANDSHAKE,
                    version,
                    header.correlation_id,
                    {**answer, "error_code": Errors.UNSUPPORTED_SASL_MECHANISM},
                ),
                close=f"unsupported SASL mechanism {wanted[:40]!r}",
            )
        self.mechanism = self._new_mechanism(wanted)
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.RAW_TOKENS
        return AuthStep(
            response=encode_response(
                ApiKey.SASL_HANDSHAKE,
                version,
                header.correlation_id,
                {**answer, "error_code": Errors.NONE},
            )
        )

    def _authenticate(self, frame: bytes) -> AuthStep:
        api_key, version, _ = peek_ids(frame)
        if api_key != ApiKey.SASL_AUTHENTICATE:
            return self._fail_closed(f"unexpected request (api key {api_key}) during SASL")
        if not AUTHENTICATE_VERSIONS[0] <= version <= AUTHENTICATE_VERSIONS[1]:
            return self._fail_closed(f"SaslAuthenticate v{version} is not supported")
        header, body = _decode(frame)
        assert self.mechanism is not None
        try:
            token = self.mechanism.evaluate(bytes(body.auth_bytes))
        except SaslAuthenticationError as e:
            self.state = SaslState.FAILED
            response = encode_response(
                ApiKey.SASL_AUTHENTICATE,
                version,
                header.correlation_id,
                {
                    "error_code": Errors.SASL_AUTHENTICATION_FAILED,
                    "error_message": str(e),
                    "auth_bytes": b"",
                    "session_lifetime": 0,
                },
            )
            return AuthStep(response=response, close="authentication failed", failed_login=True)
        self._maybe_complete()
        response = encode_response(
            ApiKey.SASL_AUTHENTICATE,
            version,
            header.correlation_id,
            {"error_code": Errors.NONE, "error_message": None, "auth_bytes": token},
        )
        return AuthStep(response=response)

    def _raw_token(self, frame: bytes) -> AuthStep:
        assert self.mechanism is not None
        try:
            token = self.mechanism.evaluate(frame)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            return AuthStep(close="authentication failed", failed_login=True)
        self._maybe_complete()
        return AuthStep(response=len(token).to_bytes(_SIZE_BYTES, "big") + token)

    # -- helpers ---------------------------------------------------------------------------

    def _maybe_complete(self) -> None:
        assert self.mechanism is not None
        if self.mechanism.complete:
            self.principal = f"User:{self.mechanism.username}"
            self.state = SaslState.COMPLETE

    def _fail_closed(self, why: str) -> AuthStep:
        self.state = SaslState.FAILED
        return AuthStep(close=why)


def _decode(frame: bytes) -> tuple[RequestHeader, Any]:
    api_key, version, _ = peek_ids(frame)
    header = parse_header(frame, request_class(api_key, version).__flexible__)
    return header, decode_body(api_key, version, frame, header.body_offset)


# -- the mechanisms of one listener ---------------------------------------------------------

ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class SaslServerFactory:
    """Makes each connection's authenticator for one SASL listener: its enabled
    mechanisms, its PLAIN users, SCRAM credentials from `scram_credentials` (the
    broker's current metadata image) and this broker's secret for unknown users."""

    def __init__(
        self,
        listener: ListenerSecurity,
        scram_credentials: ScramLookup,
        fake_salt_secret: bytes | None = None,
    ) -> None:
        self.listener = listener
        self._scram_credentials = scram_credentials
        self._secret = fake_salt_secret or secrets.token_bytes(32)

    def authenticator(self) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(self.listener.sasl_mechanisms, self._mechanism)

    def _mechanism(self, name: str) -> SaslMechanismServer:
        if name == "PLAIN":
            return PlainServer(self.listener.plain_users)
        scram = ScramMechanism.from_mechanism_name(name)
        nonce = base64.b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        return ScramServer(
            scram, lambda user: self._scram_credentials(user, scram), nonce, self._secret
        )
