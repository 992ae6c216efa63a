"""The inter-broker client against a broker's listener (the protocol layer on its own
loop): concurrent requests on pooled connections that are reused, a broker with no
known endpoint refused as a ConnectionError."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.inter_broker_client import InterBrokerClient
from common.api_keys import ApiKey
from common.errors import Errors
from tests.harness.fake_broker import BrokerThread


def test_requests_on_one_connection(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path)
    try:

        async def main() -> None:
            client = InterBrokerClient(5, {1: (b.host, b.port)}.get, None, 5000)
            try:
                sw = {"client_software_name": "x", "client_software_version": "1"}
                r = await client.send(1, ApiKey.API_VERSIONS, 3, **sw)
                assert r.error_code == Errors.NONE
                assert ApiKey.END_TXN in [int(k.api_key) for k in r.api_keys]
                # no __transaction_state on this broker: not the coordinator
                answers = await asyncio.gather(*(
                    client.send(1, ApiKey.LIST_TRANSACTIONS, 1, state_filters=(),
                                producer_id_filters=(), duration_filter=-1)
                    for _ in range(3)
                ))  # fmt: skip
                assert [a.error_code for a in answers] == [Errors.NONE] * 3
                assert len(client._pools[1].idle) == 3  # three at once: three connections
                await client.send(1, ApiKey.API_VERSIONS, 3, **sw)
                assert len(client._pools[1].idle) == 3  # reused
                with pytest.raises(ConnectionError):
                    await client.send(2, ApiKey.API_VERSIONS, 0)
            finally:
                await client.close()

        asyncio.run(main())
    finally:
        b.stop()
