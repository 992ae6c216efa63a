"""One request and its response on a connection to a broker, framed as the Kafka
protocol frames them (int32 size, request header v1/v2, body; response header, body).

Defined once for the broker's own client side: the inter-broker client's requests
(`inter_broker_client.py`) and the SASL login before them
(`security/inter_broker_login.py`). One request at a time per connection, so a response
answers the request just written; its correlation id is checked all the same.
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

_SIZE = struct.Struct(">i")


async def call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    api_key: int,
    version: int,
    client_id: str,
    correlation_id: int,
    body: dict[str, Any],
    *,
    max_frame: int,
    error: type[Exception] = ConnectionError,
    answer_of: str = "from a broker",
) -> Any:
    """The response entity of one request. A response larger than `max_frame` or of
    another correlation id raises `error` (the connection is no longer usable);
    `answer_of` says in that message what the answer was for."""
    request = load_request_schema(api_key, version)
    header_cls = request.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")  # the size, once known
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(request)(buf, request(**body))
    frame = buf.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    writer.write(bytes(frame))
    del frame  # releases buf's buffer
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if not 0 <= size <= max_frame:
        raise error(f"a {size}-byte answer {answer_of}")
    data = await reader.readexactly(size)
    response = load_response_schema(api_key, version)
    header, n = entity_reader(response.__header_schema__)(data, 0)
    if header.correlation_id != correlation_id:
        raise error(f"correlation id {header.correlation_id} != {correlation_id}")
    return entity_reader(response)(data, n)[0]
