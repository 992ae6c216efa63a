"""The broker as a client of another broker's inter-broker listener (the follower
fetchers): connect with that listener's TLS context, then log in with
`sasl.mechanism.inter.broker.protocol` and the listener's JAAS `username`/`password`
(SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes: KIP-152).
The tokens come from common/sasl_client.py; requests are encoded with kio.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker import wire_call
from broker.security.listener_security import InterBrokerClientSecurity
from common.api_keys import ApiKey
from common.errors import Errors
from common.sasl_client import SaslClientError, sasl_client

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 2
_MAX_FRAME = 1 << 20  # a SASL answer is a few hundred bytes


class SaslLoginError(ConnectionError):
    """The other broker refused our login (or its answers do not make sense)."""


async def connect(
    host: str,
    port: int,
    security: InterBrokerClientSecurity | None,
    client_id: str,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An open, authenticated connection to `host:port` (the caller bounds the time)."""
    context = None if security is None else security.ssl_context
    if context is not None:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=context, server_hostname=host
        )
    else:
        reader, writer = await asyncio.open_connection(host, port)
    if security is None or security.sasl_mechanism is None:
        return reader, writer
    try:
        await _login(reader, writer, security, client_id)
    except BaseException:
        writer.close()
        raise
    return reader, writer


async def _login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    security: InterBrokerClientSecurity,
    client_id: str,
) -> None:
    mechanism = security.sasl_mechanism
    assert mechanism is not None and security.username is not None
    assert security.password is not None
    handshake = await _call(
        reader, writer, ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, client_id, 1,
        mechanism=mechanism,
    )  # fmt: skip
    if handshake.error_code != Errors.NONE:
        raise SaslLoginError(
            f"SaslHandshake for {mechanism} refused (error {int(handshake.error_code)}; "
            f"enabled: {', '.join(handshake.mechanisms)})"
        )
    client = sasl_client(mechanism, security.username, security.password)
    token: bytes | None = client.initial()
    cid = 2
    while True:  # until the mechanism completes (PLAIN: one round, SCRAM: two)
        answer = await _call(
            reader, writer, ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, client_id, cid,
            auth_bytes=token or b"",
        )  # fmt: skip
        if answer.error_code != Errors.NONE:
            raise SaslLoginError(
                f"{mechanism} login as {security.username!r} refused "
                f"(error {int(answer.error_code)}: {answer.error_message})"
            )
        try:
            token = client.step(bytes(answer.auth_bytes))
        except SaslClientError as e:
            raise SaslLoginError(f"{mechanism} login: {e}") from None
        cid += 1
        if client.complete:
            return


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    client_id: str,
    correlation_id: int,
    **body: Any,
) -> Any:
    return await wire_call.call(
        reader, writer, api_key, version, client_id, correlation_id, body,
        max_frame=_MAX_FRAME, error=SaslLoginError, answer_of="to a SASL request",
    )  # fmt: skip
