"""SaslHandshake and SaslAuthenticate as the API handlers see them: only after a
connection has authenticated (the SASL exchange itself happens before dispatch, in
broker/security/sasl_server.py) or on a listener without SASL. Both are then out of
place and answer ILLEGAL_SASL_STATE, as Kafka's KafkaApis does (re-authentication,
KIP-368, is not offered). Their rows are here so ApiVersions advertises them."""

from __future__ import annotations

from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer
from broker.codec import RequestHeader
from broker.security.sasl_server import AUTHENTICATE_VERSIONS, HANDSHAKE_VERSIONS
from common.api_keys import ApiKey
from common.errors import Errors


async def handle_sasl_handshake(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    return sasl_handshake_error(header, body, Errors.ILLEGAL_SASL_STATE)


def sasl_handshake_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(ApiKey.SASL_HANDSHAKE, header, {"error_code": code, "mechanisms": []})


async def handle_sasl_authenticate(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    return sasl_authenticate_error(header, body, Errors.ILLEGAL_SASL_STATE)


def sasl_authenticate_error(header: RequestHeader, body: Any, code: int) -> Response:
    message = (
        "SaslAuthenticate request received after successful authentication"
        if code == Errors.ILLEGAL_SASL_STATE
        else None
    )
    return answer(
        ApiKey.SASL_AUTHENTICATE,
        header,
        {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0},
    )


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.SASL_HANDSHAKE, *HANDSHAKE_VERSIONS, handle_sasl_handshake,
               sasl_handshake_error),
    ApiHandler(ApiKey.SASL_AUTHENTICATE, *AUTHENTICATE_VERSIONS, handle_sasl_authenticate,
               sasl_authenticate_error),
)  # fmt: skip
