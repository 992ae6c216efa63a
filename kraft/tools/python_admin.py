"""kafka-python's admin client for the tools whose calls confluent-kafka lacks
(DescribeLogDirs, DescribeQuorum), built from the same `--bootstrap-server` and
`--command-config` (whose librdkafka settings are mapped to kafka-python's names).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from kraft.tools.client_common import CliError

# librdkafka setting -> kafka-python argument
_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}


def _pem_file(pem: str) -> str:
    """kafka-python takes PEM files only: inline PEM goes to a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="kraft-", suffix=".pem")
    with os.fdopen(fd, "w") as f:
        f.write(pem)
    return path


def kafka_python_config(args: argparse.Namespace) -> dict[str, Any]:
    """kafka-python KafkaAdminClient arguments for `args` (after resolve_connection)."""
    conf: dict[str, Any] = {
        "bootstrap_servers": args.bootstrap_server.split(","),
        "request_timeout_ms": args.timeout_ms,
    }
    for name, value in args.client_settings.items():
        if name in _NAMES:
            conf[_NAMES[name]] = value
        elif name == "ssl.ca.pem":
            conf["ssl_cafile"] = _pem_file(value)
        elif name in ("ssl.certificate.pem", "ssl.key.pem"):
            key = "ssl_certfile" if name == "ssl.certificate.pem" else "ssl_keyfile"
            conf[key] = _pem_file(value)
        elif name == "ssl.endpoint.identification.algorithm":
            conf["ssl_check_hostname"] = value.lower() == "https"
        else:
            raise CliError(f"--command-config: {name} is not supported by this tool")
    return conf


def admin_client(args: argparse.Namespace) -> Any:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        return KafkaAdminClient(**kafka_python_config(args))
    except KafkaError as exc:
        raise CliError(f"cannot reach {args.bootstrap_server}: {exc}") from None


def send_any(admin: Any, request: Any, node_id: int | None = None) -> Any:
    """Send one request to broker `node_id` (None: any) over the admin client's
    connections and return the response. For requests kafka-python's admin refuses to
    route (a BROKER config resource named "", Kafka's cluster default) or answers only in
    part (its synonyms); uses its internal connection manager (kafka-python 3.0)."""
    from kafka.errors import KafkaError

    async def send() -> Any:
        if node_id is None:
            return await admin._manager.send(request)
        return await admin._manager.send(request, node_id=node_id)

    try:
        return admin._manager.run(send)
    except KafkaError as exc:
        raise CliError(f"request failed: {exc}") from None
